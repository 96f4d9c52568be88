"""Sentence embeddings: zh-bert's embed head against sentence-transformers, in the same process, on the same model.

Training: CoSENT on STS-B train (the bundled pairs `finetune --task stsb` trains on), zh-bert's embed head on the
one loop (`EmbedKind.run`: pre-tokenized pairs, each batch's rows run as groups of similar length) against
`SentenceTransformerTrainer` with `CoSENTLoss` (its scale 20, as ours): the same start, pairs, epochs, batch size,
learning rate, warmup (10%), weight decay (0.01), gradient clip (1.0), fp32, mean pooling, length cut. Nothing is
chosen on a dev split on either side (both keep their last state), so both do the same work; each side's wall time
covers building the model through the last step. Speed is real (unpadded) training tokens per second, the same
count on both sides; quality is each side's STS-B test Spearman, scored by the same code (`kind.score_pairs`), over
`--seeds` (mean ± std).

Encoding: `zh-bert embed`'s encoder (`vectors.Encoder`: tokenized once per chunk, sorted by length, batches of
about 8,192 padded tokens) against `SentenceTransformer.encode` (its defaults: batch 32, sorted by length) on the
trained folder and `--lines` lines of the bundled sample corpus, fp32 on both sides; sentences per second and the
largest difference between the two sides' vectors. Memory: the peak RSS of `zh-bert embed` as a command on the
first quarter of the lines and on all of them (streamed: the same).

    python -m bench.embed_speed                      # the main command's checkpoint (random tiny if absent)
    python -m bench.embed_speed --seeds 3            # the quality comparison of docs/results.md
    python -m bench.embed_speed --quick              # 64 pairs, 400 lines: a smoke test
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import REPO
from bench.cli import parse
from bench.timing import machine
from zh_bert.core.config import at_least, option
from zh_bert.core.fileio import atomic_dir, copy_file, save_pretrained, write_text

MAIN = REPO / "runs" / "tiny-cpu" / "final"
VOCAB = REPO / "tests" / "data" / "bert_base_chinese_vocab" / "vocab.txt"
LINES = (REPO / "corpora" / "sample" / "zhwiki_sampled.txt", REPO / "corpora" / "sample" / "CLUECorpusSmall_sampled.txt")


@dataclass
class Options:
    checkpoint: str | None = option(None, help="the model both sides start from (default: the main command's "
                                               "runs/tiny-cpu/final, else a random tiny BERT with Google's vocab)")
    train_pairs: int = option(0, help="STS-B train pairs to train on (0: all)")
    epochs: int = option(2, help="training epochs, both sides")
    batch_size: int = option(32, help="pairs per step, both sides")
    lr: float = option(1e-3, help="peak learning rate, both sides")
    seq_len: int = option(64, help="max tokens of a sentence, both sides")
    seeds: int = option(1, help="training seeds per side (the quality comparison: mean ± std)")
    lines: int = option(20000, help="lines of the sample corpus to encode")
    repeat: int = option(2, help="encoding runs per side (alternating; medians compared)")
    threads: int = option(0, help="torch threads (0: torch's default)")
    quick: bool = option(False, help="64 pairs, 1 epoch, 400 lines: a smoke test whose figures mean nothing")

    def __post_init__(self):
        at_least(self, 1, "epochs", "batch_size", "seq_len", "seeds", "lines", "repeat")
        at_least(self, 0, "train_pairs", "threads")
        if self.quick:
            self.train_pairs, self.epochs, self.lines, self.repeat = 64, 1, 400, 1


def start_model(opts: Options, scratch: Path) -> Path:
    """The checkpoint both sides start from."""
    if opts.checkpoint:
        return Path(opts.checkpoint)
    if MAIN.is_dir() and not opts.quick:
        return MAIN
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    out = scratch / "tiny"
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=21128, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=512))
    with atomic_dir(out) as tmp:
        save_pretrained(model, tmp)
        save_pretrained(BertTokenizer(vocab=str(VOCAB)), tmp)
        copy_file(VOCAB, tmp / "vocab.txt")
    return out


def train_pairs(opts: Options):
    """STS-B's train pairs as `finetune --task stsb` reads them (roles kept apart), the first `train_pairs`."""
    from zh_bert.corpus.task_registry import task_named
    from zh_bert.evaluation.tasks.pairs import load_declared_pairs

    data = load_declared_pairs(task_named("stsb"))
    return data, (data.train[:opts.train_pairs] if opts.train_pairs else data.train)


def ours_train(ckpt: Path, pairs, opts: Options, seed: int, out: Path) -> float:
    """zh-bert's CoSENT run (no dev: the last state kept, as the Trainer keeps it), saved to `out`; wall seconds."""
    from zh_bert.evaluation.heads.embed.kind import EMBED_HEAD, EmbedOptions
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.tasks.pairs import PairTask

    cfg = FinetuneConfig(epochs=opts.epochs, lr=opts.lr, seq_len=opts.seq_len, batch_size=opts.batch_size,
                         pooling="mean")
    data = PairTask("stsb", pairs, None, None, "grades", loss="cosent")
    kept = []
    t0 = time.perf_counter()
    res = EMBED_HEAD.run(ckpt, data, cfg, {EmbedOptions: EmbedOptions(loss="cosent")}, [seed], log=lambda m: None,
                         keep=kept.append)
    wall = time.perf_counter() - t0
    EMBED_HEAD.save(kept[0], _tok(ckpt), ckpt, out, cfg, data, {}, res)
    return wall


def _tok(ckpt: Path):
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    return load_tokenizer(ckpt)


def theirs_train(ckpt: Path, pairs, opts: Options, seed: int, out: Path) -> float:
    """`SentenceTransformerTrainer` + `CoSENTLoss` on the same pairs and settings; wall seconds."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments, losses, models

    t0 = time.perf_counter()
    word = models.Transformer(str(ckpt), max_seq_length=opts.seq_len)
    model = SentenceTransformer(modules=[word, models.Pooling(word.get_embedding_dimension(), "mean")],
                                device="cpu")
    data = Dataset.from_dict({"sentence1": [p.a for p in pairs], "sentence2": [p.b for p in pairs],
                              "score": [float(p.label) for p in pairs]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out.parent / f"{out.name}-trainer"), num_train_epochs=opts.epochs,
        per_device_train_batch_size=opts.batch_size, learning_rate=opts.lr, warmup_steps=0.1, weight_decay=0.01,
        max_grad_norm=1.0, seed=seed, save_strategy="no", report_to="none", logging_strategy="no",
        use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                                         loss=losses.CoSENTLoss(model, scale=20.0))
    trainer.train()
    wall = time.perf_counter() - t0
    model.save(str(out))
    return wall


def test_spearman(folder: Path, test, seq_len: int) -> float:
    """STS-B test Spearman of a saved folder (either side's), by zh-bert's scorer on its vectors."""
    from zh_bert.evaluation.heads.embed.kind import score_pairs
    from zh_bert.evaluation.heads.embed.vectors import Encoder

    enc = Encoder(str(folder), "mean", seq_len, "fp32")
    return score_pairs(enc.model, enc.tok, test, enc.pooling, seq_len, "fp32")[0]


def training_rows(ckpt: Path, opts: Options, scratch: Path) -> Path:
    data, pairs = train_pairs(opts)
    tok = _tok(ckpt)
    enc = tok([p.a for p in pairs] + [p.b for p in pairs], truncation=True, max_length=opts.seq_len)
    tokens = sum(len(x) for x in enc["input_ids"]) * opts.epochs
    rows, last = {"zh-bert": [], "sentence-transformers": []}, None
    for seed in range(opts.seeds):
        for name, fn in (("zh-bert", ours_train), ("sentence-transformers", theirs_train)):
            out = scratch / f"{name}-{seed}"
            wall = fn(ckpt, pairs, opts, seed, out)
            rows[name].append((wall, test_spearman(out, data.test, opts.seq_len)))
            last = out if name == "zh-bert" else last
    speed = {k: tokens / statistics.median(w for w, _ in v) for k, v in rows.items()}
    for k, v in rows.items():
        rho = [100 * r for _, r in v]
        spread = f" ± {statistics.stdev(rho):.2f}" if len(rho) > 1 else ""
        print(f"| CoSENT on STS-B train, {len(pairs):,} pairs × {opts.epochs} epochs | {k} | {speed[k]:,.0f} tokens/s "
              f"| STS-B test {statistics.fmean(rho):.2f}{spread} ({len(rho)} seeds) |")
    print(f"training tokens/s zh-bert / sentence-transformers: {speed['zh-bert'] / speed['sentence-transformers']:.2f}x")
    return last


def corpus_lines(n: int, scratch: Path) -> Path:
    """The first `n` lines of the sample corpus (repeated when it has fewer), as a file in `scratch`."""
    out = scratch / f"lines-{n}.txt"
    if out.is_file():
        return out
    lines: list[str] = []
    for path in LINES:
        lines += [x.strip() for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]
    while len(lines) < n:
        lines += lines
    write_text(out, "\n".join(lines[:n]) + "\n")
    return out


def encoding_rows(folder: Path, opts: Options, scratch: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from zh_bert.evaluation.heads.embed.vectors import Encoder

    path = corpus_lines(opts.lines, scratch)
    texts = path.read_text(encoding="utf-8").split("\n")[:-1]
    st = SentenceTransformer(str(folder), device="cpu")
    enc = Encoder(str(folder), None, opts.seq_len, "fp32")
    walls = {"zh-bert": [], "sentence-transformers": []}
    ours = theirs = None
    for _ in range(opts.repeat):
        t0 = time.perf_counter()
        ours = np.concatenate(list(enc.stream(texts)))
        walls["zh-bert"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        theirs = st.encode(texts, convert_to_numpy=True)
        walls["sentence-transformers"].append(time.perf_counter() - t0)
    rate = {k: len(texts) / statistics.median(v) for k, v in walls.items()}
    for k, r in rate.items():
        print(f"| encode {len(texts):,} lines (seq-len {opts.seq_len}) | {k} | {r:,.0f} sentences/s |")
    print(f"encode sentences/s zh-bert / SentenceTransformer.encode: {rate['zh-bert'] / rate['sentence-transformers']:.2f}x "
          f"(largest |difference| of the vectors {np.abs(ours - theirs).max():.1e})")
    rss = [peak_rss(folder, corpus_lines(n, scratch), scratch) for n in (max(1, opts.lines // 4), opts.lines)]
    print(f"zh-bert embed peak RSS: {rss[0]:.0f} MB at {max(1, opts.lines // 4):,} lines, {rss[1]:.0f} MB at "
          f"{opts.lines:,} lines ({rss[1] / rss[0]:.2f}x for {opts.lines / max(1, opts.lines // 4):.0f}x the lines)")


def peak_rss(folder: Path, lines: Path, scratch: Path) -> float:
    """Peak RSS in MB of `zh-bert embed FOLDER LINES -o X.npy` run as a command of its own."""
    code = ("import resource, sys; from zh_bert import cli; rc = cli.main(sys.argv[1:]); "
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)")
    out = scratch / f"{lines.stem}.npy"
    proc = subprocess.run([sys.executable, "-c", code, "embed", str(folder), str(lines), "-o", str(out),
                           "--precision", "fp32", "--seq-len", "128"], capture_output=True, text=True,
                          cwd=REPO, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"embed_speed: zh-bert embed failed: {proc.stderr.strip().splitlines()[-1:]}")
    return int(proc.stdout.split("RSS")[-1]) / 1024


def main(argv: list[str] | None = None) -> None:
    opts = parse(Options, "embed_speed", __doc__, argv)
    if opts.threads:
        import torch

        torch.set_num_threads(opts.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from zh_bert.evaluation.heads.base import quiet_transformers

    quiet_transformers()
    print(f"# {machine()}; {time.strftime('%Y-%m-%d')}; python -m bench.embed_speed {' '.join(sys.argv[1:])}")
    with tempfile.TemporaryDirectory(prefix="zh-bert-embed-bench-") as tmp:
        scratch = Path(tmp)
        ckpt = start_model(opts, scratch)
        print(f"start: {ckpt}")
        folder = training_rows(ckpt, opts, scratch)
        encoding_rows(folder, opts, scratch)
    print(json.dumps({"options": vars(opts)}))


if __name__ == "__main__":
    main()
