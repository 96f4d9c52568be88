"""Does a CRF layer help NER on Resume? The stock token classifier (a softmax per character, what `zh-bert
finetune --task ner` and `eval suite --suite ner` train) against the same model with a linear-chain CRF on its
emissions (transition scores learned with it, Viterbi decoding), same rows, seeds, schedule and dev-chosen state.

Both sides: `tagging.encode` rows (`--seq-len 256`: no Resume sentence is windowed), `finetune.train_batches`,
`step.stepping` (AdamW, warmup, linear decay; the CRF's transitions at the same rate), dev entity F1 every epoch,
the best dev state scored on test (entity-level micro F1, seqeval's default). The CRF's negative log-likelihood is
summed over rows and divided by the labelled characters of the step, as the softmax side's cross-entropy.

    python -m bench.ner_crf --checkpoint runs/tiny-cpu/final --seeds 3
    python -m bench.ner_crf --quick          # a random tiny model, 64 sentences, 1 epoch (a smoke test)
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench import REPO
from bench.cli import parse
from bench.finetune_speed import make_model_dir
from bench.timing import machine
from zh_bert.core.config import at_least, option

RESUME = REPO / "corpora" / "tasks" / "resume_ner"


@dataclass
class Options:
    checkpoint: str | None = option(None, help="the model folder (default: a random `tiny` model)")
    seeds: int = option(3, help="seeds per side (42, 43, ...)")
    epochs: int = option(10, help="fine-tuning epochs")
    lr: float = option(2e-3, help="peak learning rate")
    seq_len: int = option(256, help="sub-tokens per row")
    threads: int = option(2, help="torch threads")
    quick: bool = option(False, help="a random tiny model, 64 train / 32 dev / 32 test sentences, 1 epoch, 1 seed")

    def __post_init__(self):
        at_least(self, 1, "seeds", "epochs", "seq_len", "threads")


def crf_module(n_tags: int):
    """A linear-chain CRF: start, transition and end scores, the log-partition by the forward algorithm,
    Viterbi decoding; rows are [B, L, C] emissions with a [B, L] mask of real positions (left-aligned)."""
    import torch

    class CRF(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.start = torch.nn.Parameter(torch.zeros(n_tags))
            self.trans = torch.nn.Parameter(torch.zeros(n_tags, n_tags))
            self.end = torch.nn.Parameter(torch.zeros(n_tags))

        def nll(self, em, tags, mask):
            b = torch.arange(em.shape[0])
            score = self.start[tags[:, 0]] + em[b, 0, tags[:, 0]]
            alpha = self.start + em[:, 0]
            for t in range(1, em.shape[1]):
                m = mask[:, t]
                step = self.trans[tags[:, t - 1], tags[:, t]] + em[b, t, tags[:, t]]
                score = score + step * m
                nxt = torch.logsumexp(alpha.unsqueeze(2) + self.trans + em[:, t].unsqueeze(1), dim=1)
                alpha = torch.where(m.unsqueeze(1).bool(), nxt, alpha)
            last = tags[b, mask.sum(1).long() - 1]
            return (torch.logsumexp(alpha + self.end, 1) - score - self.end[last]).sum()

        def decode(self, em, mask) -> list[list[int]]:
            score, back = self.start + em[:, 0], []
            for t in range(1, em.shape[1]):
                best, idx = (score.unsqueeze(2) + self.trans).max(1)
                back.append(idx)
                score = torch.where(mask[:, t].unsqueeze(1).bool(), best + em[:, t], score)
            score = score + self.end
            out = []
            for i in range(em.shape[0]):
                n, tag = int(mask[i].sum()), int(score[i].argmax())
                path = [tag]
                for t in range(n - 1, 0, -1):
                    tag = int(back[t - 1][i, tag])
                    path.append(tag)
                out.append(path[::-1])
            return out

    return CRF()


def emissions(model, batch: dict, positions: list[np.ndarray]):
    """[B, L, C] emissions at each row's labelled (or predicted) positions, left-aligned, and their mask."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    width = max(len(p) for p in positions)
    em = logits.new_zeros(len(positions), width, logits.shape[-1])
    mask = torch.zeros(len(positions), width)
    for r, p in enumerate(positions):
        em[r, :len(p)] = logits[r, torch.as_tensor(p)]
        mask[r, :len(p)] = 1
    return em, mask


def crf_predict(model, crf, rows, batch_size: int, pad_id: int, labels: list[str]) -> list[list[str]]:
    """Each sentence's tags by Viterbi over its rows' predicted positions."""
    import torch

    from zh_bert.evaluation.tagging import collate_rows, tags_of

    per_row: list[list[int]] = [[] for _ in rows.input_ids]
    for where in rows.where:
        for w, p in where:
            if w >= 0:
                per_row[w].append(int(p))
    preds = [np.zeros(n, dtype=np.int64) for n in rows.lengths]
    model.eval()
    with torch.inference_mode():
        for s in range(0, len(per_row), batch_size):
            idx = [i for i in range(s, min(s + batch_size, len(per_row))) if per_row[i]]
            if not idx:
                continue
            batch = collate_rows(rows, np.asarray(idx), pad_id)
            em, mask = emissions(model, batch, [np.asarray(sorted(per_row[i])) for i in idx])
            for i, path in zip(idx, crf.decode(em, mask)):
                preds[i][sorted(per_row[i])] = path
    model.train()
    return tags_of(rows, preds, labels)


def crf_run(ckpt: Path, tok, task, cfg, seed: int) -> tuple[float, float]:
    """(best dev F1, test F1 of that state), in percent, of the token classifier with a CRF on top."""
    import torch

    from zh_bert.evaluation.finetune import snapshot, train_batches
    from zh_bert.evaluation.ner_metric import entity_scores
    from zh_bert.evaluation.step import optimizer_step, stepping
    from zh_bert.evaluation.tagging import IGNORED, collate_rows, encode, load_tagger

    labels = task.labels
    rows = encode(tok, task.train, {t: i for i, t in enumerate(labels)}, cfg.seq_len, 0)
    dev, test = (encode(tok, s, None, cfg.seq_len, 0) for s in (task.dev, task.test))
    torch.manual_seed(seed)
    model = load_tagger(ckpt, labels, False, tok, cfg.seq_len).train()
    crf = crf_module(len(labels))
    model.add_module("crf", crf)      # one optimizer, one schedule, one snapshot for both
    rng = np.random.default_rng(seed)
    total = math.ceil(len(rows.lengths) / cfg.batch_size) * cfg.epochs
    opt, scaler, sched, _ = stepping(model, cfg, total)
    best, state = (-1.0, 0.0), None

    def f1(split, split_rows) -> float:
        pred = crf_predict(model, crf, split_rows, 64, tok.pad_token_id, labels)
        return 100 * entity_scores([s.tags for s in split], pred, task.scheme)["f1"]

    for _ in range(cfg.epochs):
        for idx in train_batches(rows.lengths, cfg.batch_size, rng):
            batch = collate_rows(rows, idx, tok.pad_token_id)
            positions = [np.flatnonzero(rows.labels[i] != IGNORED) for i in idx]
            keep = [r for r, p in enumerate(positions) if len(p)]
            em, mask = emissions(model, {k: v[keep] for k, v in batch.items()}, [positions[r] for r in keep])
            gold = torch.zeros(mask.shape, dtype=torch.long)
            for j, r in enumerate(keep):
                gold[j, :len(positions[r])] = torch.as_tensor(rows.labels[idx[r]][positions[r]])
            optimizer_step(crf.nll(em, gold, mask) / mask.sum(), model, opt, scaler, sched)
        dev_f1 = f1(task.dev, dev)
        if dev_f1 > best[0]:
            best, state = (dev_f1, 0.0), snapshot(model, state)
    model.load_state_dict(state)
    return best[0], f1(task.test, test)


def mean_pm(xs: list[float]) -> str:
    """Percent figures as mean ± sample std (one figure alone)."""
    return f"{statistics.fmean(xs):.2f} ± {statistics.stdev(xs):.2f}" if len(xs) > 1 else f"{xs[0]:.2f}"


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "ner_crf", __doc__, argv)
    import torch
    from transformers.utils import logging as hf_logging

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.evaluation.finetune import FinetuneConfig
    from zh_bert.evaluation.ner_data import load_ner
    from zh_bert.evaluation.ner_finetune import TaggingConfig, train_tagger

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    task = load_ner("resume_ner", *(RESUME / f"{s}.char.bmes" for s in ("train", "dev", "test")))
    if args.quick:
        task = replace(task, train=task.train[:64], dev=task.dev[:32], test=task.test[:32])
    cfg = FinetuneConfig(epochs=1 if args.quick else args.epochs, lr=args.lr, seq_len=args.seq_len, batch_size=32,
                         patience=10**6)
    seeds = [42] if args.quick else list(range(42, 42 + args.seeds))
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; torch {torch.__version__}, "
          f"{args.threads} threads")
    print(f"Resume NER {len(task.train):,} / {len(task.dev):,} / {len(task.test):,} sentences; lr {cfg.lr}, "
          f"{cfg.epochs} epochs, batch 32, seq_len {cfg.seq_len}, seeds {seeds}\n")
    with scratch_dir("zh-bert-bench-crf-") as scratch:
        ckpt = Path(args.checkpoint) if args.checkpoint else make_model_dir("tiny", scratch)
        tok = load_tokenizer(ckpt)
        soft = [train_tagger(ckpt, task, cfg, TaggingConfig(window_stride=0), s, tok=tok, log=lambda m: None)
                for s in seeds]
        crf = [crf_run(ckpt, tok, task, cfg, s) for s in seeds]
    print("| head | dev entity F1 (chose) | test entity F1 |\n|---|---|---|")
    print(f"| softmax (stock) | {mean_pm([r['dev_f1'] for r in soft])} | {mean_pm([r['test_f1'] for r in soft])} |")
    print(f"| CRF | {mean_pm([r[0] for r in crf])} | {mean_pm([r[1] for r in crf])} |")
    diff = statistics.fmean(r[1] for r in crf) - statistics.fmean(r["test_f1"] for r in soft)
    print(f"\nCRF - softmax: {diff:+.2f} test F1 points")


if __name__ == "__main__":
    main()
