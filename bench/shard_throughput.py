"""Throughput of `zh-bert shard` and of the loader, against baselines run in the same process.

1. Sharding speed in MB/s of text (corpora/sample, zhwiki + CLUECorpusSmall, Google's 21,128 vocab):
   baseline = the transformers tokenizer's batch encoding (`tok(texts)`, no word boundaries), versus
   zh-bert's encoder (char lookup + tokenizer for non-CJK runs) with segmenter none / rjieba / jieba,
   and the whole `zh-bert shard` command (reading JSONL, rjieba, packing, writing) with --workers N.
   MB per CPU-second is printed too: on a machine shared with other jobs it is steadier than wall-clock.
2. rjieba vs jieba: agreement on word-start positions (fraction of characters, and F1 of word starts).
3. Loader: time per batch (ShardLoader: memmap read + wwm masking + torch tensors) against one training
   step (forward + backward + AdamW) of the "mini" model (L4/H256/A4/I1024) via zh-bert's PretrainModel,
   batch 32 x 128, fp32.

    python -m bench.shard_throughput [--repeat 3] [--workers 2] [--jieba-mb 1] [--corpus-copies 3]
    python -m bench.shard_throughput --quick    # every section on 300 lines per sample file, once (a smoke test)
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import REPO
from bench.cli import parse
from bench.timing import machine, timed
from zh_bert.core.config import option
from zh_bert.core.fileio import atomic_write, claim_dir, remove_scratch, save_pretrained


@dataclass
class Options:
    repeat: int = option(3, help="timed runs per line (median)")
    workers: int = option(2, help="workers of the second `zh-bert shard` run")
    jieba_mb: float = option(1.0, metavar="MB", help="text for the (slow) jieba runs")
    corpus_copies: int = option(3, help="the whole-command runs shard the sample this many times over")
    steps: int = option(5, help="training steps to time for the loader ratio")
    batches: int = option(200, help="loader batches to time per strategy")
    quick: bool = option(False, help="300 lines per sample file, one repeat: a smoke test")


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "shard_throughput", __doc__, argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")   # the baseline's batch encoding on every core
    lines = None
    if args.quick:
        lines, args.repeat, args.jieba_mb, args.corpus_copies, args.steps, args.batches = 300, 1, 0.05, 1, 1, 5

    from transformers import BertTokenizer

    from zh_bert.corpus.segment import Segmenter
    from zh_bert.corpus.shard import TextEncoder
    from zh_bert.corpus.shard import main as shard_main

    texts = []
    for name in ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt"):
        texts += [t for t in (REPO / "corpora/sample" / name).read_text(encoding="utf-8").split("\n") if t.strip()][:lines]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    tmp = Path(tempfile.mkdtemp(prefix="zhbert-bench-"))
    claim_dir(tmp)   # the bench's own scratch folder
    tokdir = tmp / "tok"
    tok = BertTokenizer(vocab=str(REPO / "tests/data/bert_base_chinese_vocab/vocab.txt"))
    assert tok.convert_tokens_to_ids("中") == 704
    save_pretrained(tok, tokdir)
    corpus = tmp / "docs.jsonl"
    with atomic_write(corpus) as f:
        for copy in range(args.corpus_copies):
            for i, t in enumerate(texts):
                f.write(json.dumps({"text": t, "source": f"sample:{copy}:{i}"}, ensure_ascii=False) + "\n")
    print(f"text: {len(texts)} documents, {mb:.1f} MB; {machine()}; median of {args.repeat}")

    rows = []

    def report(name, t, size=mb):
        wall, cpu = t.wall, t.cpu
        rows.append((name, size / wall, size / cpu))
        base_w, base_c = rows[0][1], rows[0][2]
        print(f"  {name:<44} {size / wall:6.2f} MB/s  {size / cpu:6.2f} MB/cpu-s   "
              f"x{size / wall / base_w:5.2f} wall  x{size / cpu / base_c:5.2f} cpu", flush=True)

    print("1. sharding speed (ratios against the first line)")
    report("transformers BertTokenizer batch encode", timed(lambda: tok(texts), args.repeat))
    for seg in ("none", "rjieba"):
        enc = TextEncoder(tok, Segmenter(seg))
        report(f"zh-bert encoder, segmenter {seg}", timed(lambda: enc.encode(texts), args.repeat))
    small, size = [], 0
    for t in texts:
        if size > args.jieba_mb * 1e6:
            break
        small.append(t)
        size += len(t.encode("utf-8"))
    enc = TextEncoder(tok, Segmenter("jieba"))
    enc.encode(small[:10])  # jieba builds its dictionary on first use
    report(f"zh-bert encoder, segmenter jieba ({size / 1e6:.1f} MB)", timed(lambda: enc.encode(small), 1),
           size=size / 1e6)
    for workers in sorted({1, args.workers}):
        out = tmp / f"shards{workers}"
        argv = [str(corpus), "--tokenizer", str(tokdir), "-o", str(out), "--workers", str(workers),
                "--valid-docs", "50"]

        def run():
            remove_scratch(out)
            shard_main(argv)

        report(f"zh-bert shard --workers {workers} ({args.corpus_copies * mb:.1f} MB, rjieba)",
               timed(run, args.repeat), size=args.corpus_copies * mb)

    print("2. rjieba vs jieba word starts")
    joined = "\n".join(small)
    a, b = Segmenter("jieba").word_start_mask(joined), Segmenter("rjieba").word_start_mask(joined)
    tp = (a & b).sum()
    print(f"  characters with the same start/no-start decision: {(a == b).mean():.4%}; word-start F1 "
          f"{2 * tp / (a.sum() + b.sum()):.4f} ({a.sum()} jieba words, {b.sum()} rjieba words)")

    print("3. loader + masking per step vs one mini-model training step (batch 32 x 128, fp32)")
    import torch

    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig
    from zh_bert.train.arch import BERT
    from zh_bert.train.arch.bert import build_config
    from zh_bert.train.model import PretrainModel

    ds = ShardDataset(tmp / f"shards{args.workers}")
    for strategy in ("wwm", "ngram", "unigram-noise"):
        it = iter(ShardLoader(ds, 32, MaskingConfig(strategy=strategy), seed=0))
        next(it)
        n = args.batches
        t0 = time.perf_counter()
        for _ in range(n):
            batch = next(it)
        load_s = (time.perf_counter() - t0) / n
        print(f"  loader ({strategy}): {load_s * 1e3:.2f} ms per batch")
    torch.manual_seed(0)
    hf = BERT.model_class("mlm")(build_config("mini", len(tok)))
    model = PretrainModel(hf)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        out = model(**batch)
        (out["mlm_loss_sum"] / out["mlm_count"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    step_s = (time.perf_counter() - t0) / args.steps
    print(f"  mini model step: {step_s * 1e3:.0f} ms (zh-bert PretrainModel, sparse MLM head, "
          f"{torch.get_num_threads()} threads)")
    print(f"  loader / step = {load_s / step_s:.2%} (target < 5%)")
    remove_scratch(tmp)


if __name__ == "__main__":
    main()
