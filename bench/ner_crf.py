"""Does a CRF layer help NER on Resume? The stock token classifier (a softmax per character, what `zh-bert
finetune --task ner` and `eval suite --suite ner` train) against the same model with a linear-chain CRF on its
emissions (transition scores learned with it, Viterbi decoding), same rows, seeds, schedule and dev-chosen state.

The CRF is `zh_bert.evaluation.heads.tag.crf` (what `--crf` trains); its side is decoded two ways from one training
run, plain Viterbi and Viterbi kept to the transitions the tag scheme allows (no `O` -> `M-X`, no `B-X` -> `E-Y`,
no span left open), each choosing its own best dev state. A control decodes the softmax head's chosen state by
the same constrained Viterbi with no learned scores: what the constraint alone gives. Both sides: `tagging.encode` rows (`--seq-len 256`: no Resume sentence is windowed), `finetune.train_batches`,
`step.stepping` (AdamW, warmup, linear decay; the CRF's transitions at the same rate), dev entity F1 every epoch,
the best dev state scored on test (entity-level micro F1, seqeval's default). The CRF's negative log-likelihood is
summed over rows and divided by the labelled characters of the step, as the softmax side's cross-entropy.

    python -m bench.ner_crf --checkpoint runs/tiny-cpu/final --seeds 3
    python -m bench.ner_crf --checkpoint runs/tiny-cpu/final --seeds 2 --epochs 5 --crf-only   # the decodings
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
DECODINGS = ("free", "constrained")


@dataclass
class Options:
    checkpoint: str | None = option(None, help="the model folder (default: a random `tiny` model)")
    seeds: int = option(3, help="seeds per side (42, 43, ...)")
    epochs: int = option(10, help="fine-tuning epochs")
    lr: float = option(2e-3, help="peak learning rate")
    seq_len: int = option(256, help="sub-tokens per row")
    threads: int = option(2, help="torch threads")
    quick: bool = option(False, help="a random tiny model, 64 train / 32 dev / 32 test sentences, 1 epoch, 1 seed")
    crf_only: bool = option(False, help="the CRF side alone (its two decodings), not the softmax head")

    def __post_init__(self):
        at_least(self, 1, "seeds", "epochs", "seq_len", "threads")


def crf_run(ckpt: Path, tok, task, cfg, seed: int) -> dict[str, tuple[float, float]]:
    """{decoding: (best dev F1, test F1 of that state)}, in percent, of the token classifier with a CRF on top
    (`zh_bert.evaluation.heads.tag.crf`), for two decodings of the same training run: plain Viterbi (`free`) and
    Viterbi kept to the paths the tag scheme allows (`constrained`); each keeps its own best dev state."""
    import torch

    from zh_bert.evaluation.heads.classify import train_batches
    from zh_bert.evaluation.loop import snapshot
    from zh_bert.evaluation.heads.tag.crf import attach_crf, crf_loss, crf_tags, scheme_constraint
    from zh_bert.evaluation.metrics.entities import entity_scores
    from zh_bert.evaluation.step import optimizer_step, stepping
    from zh_bert.evaluation.heads.tag.tagging import IGNORED, collate_rows, encode, load_tagger

    labels = task.labels
    rows = encode(tok, task.train, {t: i for i, t in enumerate(labels)}, cfg.seq_len, 0)
    dev, test = (encode(tok, s, None, cfg.seq_len, 0) for s in (task.dev, task.test))
    torch.manual_seed(seed)
    model = load_tagger(ckpt, labels, False, tok, cfg.seq_len).train()
    crf = attach_crf(model, len(labels))      # a submodule: one optimizer, one schedule, one snapshot for both
    crf.constrain(scheme_constraint(labels, task.scheme))
    rng = np.random.default_rng(seed)
    total = math.ceil(len(rows.lengths) / cfg.batch_size) * cfg.epochs
    opt, scaler, sched, _ = stepping(model, cfg, total)
    best = {d: (-1.0, None) for d in DECODINGS}

    def f1(split, split_rows, decoding: str) -> float:
        pred = crf_tags(model, split_rows, labels, 64, tok.pad_token_id, "fp32", decoding == "constrained")
        return 100 * entity_scores([s.tags for s in split], pred, task.scheme)["f1"]

    for _ in range(cfg.epochs):
        for idx in train_batches(rows.lengths, cfg.batch_size, rng):
            batch = collate_rows(rows, idx, tok.pad_token_id)
            denominator = int(sum(int((rows.labels[i] != IGNORED).sum()) for i in idx))
            optimizer_step(crf_loss(model, batch, denominator), model, opt, scaler, sched)
        for d in DECODINGS:
            dev_f1 = f1(task.dev, dev, d)
            if dev_f1 > best[d][0]:
                best[d] = (dev_f1, snapshot(model, best[d][1]))
    out = {}
    for d in DECODINGS:
        model.load_state_dict(best[d][1])
        out[d] = (best[d][0], f1(task.test, test, d))
    return out


def softmax_run(ckpt: Path, tok, task, cfg, seed: int) -> dict:
    """The stock head's run (`train_tagger`: dev F1 chose, test F1), and its chosen state's dev and test F1 when
    decoded by Viterbi kept to the scheme with no learned scores (`constrained_dev_f1`, `constrained_test_f1`):
    the control that says how much of the CRF's gain the constraint alone gives."""
    from zh_bert.evaluation.heads.tag.crf import CRF_ATTR, attach_crf, crf_tags, scheme_constraint
    from zh_bert.evaluation.heads.tag.head import TaggingConfig, train_tagger
    from zh_bert.evaluation.metrics.entities import entity_scores
    from zh_bert.evaluation.heads.tag.tagging import encode

    constrained = {}

    def decode_constrained(model) -> None:      # `keep`: the dev-chosen model, before test is predicted
        attach_crf(model, len(task.labels)).constrain(scheme_constraint(task.labels, task.scheme))
        for split, sentences in (("dev", task.dev), ("test", task.test)):
            rows = encode(tok, sentences, None, cfg.seq_len, 0)
            pred = crf_tags(model, rows, task.labels, 64, tok.pad_token_id, "fp32")
            constrained[f"constrained_{split}_f1"] = 100 * entity_scores([x.tags for x in sentences], pred,
                                                                         task.scheme)["f1"]
        delattr(model, CRF_ATTR)

    r = train_tagger(ckpt, task, cfg, TaggingConfig(window_stride=0), seed, tok=tok, log=lambda m: None,
                     keep=decode_constrained)
    return {"dev_f1": 100 * r["dev_f1"], "test_f1": 100 * r["test_f1"], **constrained}   # the run's are fractions


def mean_pm(xs: list[float]) -> str:
    """Percent figures as mean ± sample std (one figure alone)."""
    return f"{statistics.fmean(xs):.2f} ± {statistics.stdev(xs):.2f}" if len(xs) > 1 else f"{xs[0]:.2f}"


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "ner_crf", __doc__, argv)
    import torch
    from transformers.utils import logging as hf_logging

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.tasks.ner import load_ner

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
        soft = [] if args.crf_only else [softmax_run(ckpt, tok, task, cfg, s) for s in seeds]
        crf = [crf_run(ckpt, tok, task, cfg, s) for s in seeds]
    print("| head | dev entity F1 (chose) | test entity F1 |\n|---|---|---|")
    if soft:
        print(f"| softmax (stock) | {mean_pm([r['dev_f1'] for r in soft])} | "
              f"{mean_pm([r['test_f1'] for r in soft])} |")
        print(f"| softmax, its state decoded by scheme-constrained Viterbi | "
              f"{mean_pm([r['constrained_dev_f1'] for r in soft])} | "
              f"{mean_pm([r['constrained_test_f1'] for r in soft])} |")
    for d, name in zip(DECODINGS, ("CRF", "CRF, scheme-constrained Viterbi")):
        print(f"| {name} | {mean_pm([r[d][0] for r in crf])} | {mean_pm([r[d][1] for r in crf])} |")
    per_seed = ", ".join(f"{s}: {r['free'][1]:.2f} / {r['constrained'][1]:.2f}" for s, r in zip(seeds, crf))
    print(f"\ntest F1 per seed (free / constrained): {per_seed}")
    test = {d: statistics.fmean(r[d][1] for r in crf) for d in DECODINGS}
    print(f"constrained - free Viterbi: {test['constrained'] - test['free']:+.2f} test F1 points")
    if soft:
        diff = test["free"] - statistics.fmean(r["test_f1"] for r in soft)
        print(f"CRF - softmax: {diff:+.2f} test F1 points")


if __name__ == "__main__":
    main()
