"""`zh-bert finetune CKPT --task TASK|tsv:TRAIN,DEV[,TEST]`: sentence(-pair) classification.

The usual BERT recipe, nothing clever: AdamW (no decay on biases/LayerNorm), linear warmup then linear
decay, dev evaluation every epoch (or `--eval-every` steps), early stop when dev accuracy has not improved
for `--patience` evaluations, the best dev state restored before the test set is scored (the one loop every
head trains on, `loop`; the classifier, `classify`). The seed is a setting; `--seeds 3` runs seeds S, S+1, S+2
and reports mean ± sample std (ddof=1), because a single fine-tuning run of a small model varies by more than
most differences people try to measure. `--random-init` trains the same architecture from random weights: the
baseline pretraining must beat. TASK is a declared classification task with train/dev/test files
(`zh_bert.corpus.task_registry`: chnsenticorp, tnews) or a user's TSV files.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional

from zh_bert.core.config import (
    at_least,
    check_choices,
    check_finite,
    config_from_args,
    option,
    option_of,
)
from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import Precision
from zh_bert.core.options import Shared
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.corpus.task_registry import ACCURACY, MACRO_F1, task_named
from zh_bert.corpus.task_spec import CLASSIFY, FINETUNE_PROTOCOL
from zh_bert.evaluation.classify import (  # noqa: F401 (tokenizer_for, train_batches: re-exported)
    ClassifyHead,
    announce,
    check_trainable,
    tokenizer_for,
    train_batches,
)
from zh_bert.evaluation.eval_results import CheckpointArgs, entry, record_for_checkpoint
from zh_bert.evaluation.loop import run_seed, snapshot  # noqa: F401 (snapshot: re-exported)
from zh_bert.evaluation.ner_tasks import NerFiles, finetune_ner, tagging_task
from zh_bert.evaluation.task_distill import (
    HARD_LABELS,
    TaskDistillOptions,
    claim_save,
    distilled_entries,
    refuse_unteachable,
    save_finetuned,
    teacher_for,
)
from zh_bert.evaluation.tasks import SUITE_PREFIX, TSV_PREFIX, TaskData, finetune_task_names, load_task
from zh_bert.train.recipe import check_seed
from zh_bert.train.recipe_keys import OptimizerKeys, PrecisionKeys
from zh_bert.train.rundir import model_dir


@dataclass
class FinetuneConfig:
    """How one fine-tuning run trains; `zh-bert ablate` keys its cached evaluations on the whole value."""
    epochs: int = option(3, help="passes over the training set (early stop on dev may end sooner)")
    lr: float = option_of(OptimizerKeys, "lr", default=5e-5, help="peak learning rate")
    seq_len: int = option_of(ShardConfig, "seq_len", help="max tokens per example (longer ones are truncated)")
    batch_size: int = option_of(Shared, "batch_size", help="examples per step")
    warmup: float = option(0.1, help="warmup fraction of all steps")
    weight_decay: float = option_of(OptimizerKeys, "weight_decay")
    patience: int = option(2, help="early stop after N dev evals without gain")
    eval_every: int = option(0, help="steps between dev evals (0: per epoch)")
    max_train: int = option(0, help="use N training examples (0: all)")
    random_init: bool = option(False, help="same architecture, random weights (baseline)")
    precision: Precision = option_of(PrecisionKeys, "precision", default="fp32", help="auto = what pretrain picks here (bf16 on CPUs with avx512_bf16); fp16 with dynamic loss scaling; bf16 autocast")
    pooling: Literal["cls", "mean"] = option("cls", help="cls: stock pooler on [CLS]; mean: masked mean of the "
                                                         "last layer (MLM-only checkpoints never trained [CLS] "
                                                         "or the pooler)")

    def __post_init__(self):
        check_finite(self)   # nan passes every `<` test: refuse it (and inf) before any comparison
        check_choices(self)
        at_least(self, 1, "epochs", "batch_size")
        at_least(self, 0, "patience", "eval_every", "max_train")
        if not 8 <= self.seq_len <= 4096:
            raise ZhBertError(f"--seq-len must be between 8 and 4096, got {self.seq_len}")
        if not (0 < self.lr < 1):
            raise ZhBertError(f"--lr must be in (0, 1), got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise ZhBertError(f"--warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.weight_decay < 0:
            raise ZhBertError(f"--weight-decay must be >= 0, got {self.weight_decay}")


@dataclass
class FinetuneJob:
    """What to fine-tune on, and with which seeds."""
    task: str = option(help=f"{' | '.join(finetune_task_names())} | tsv:TRAIN,DEV[,TEST] (TRAIN trains, DEV chooses the "
                            "best state, TEST reports; no text of a later one is trained or chosen on) | ner with "
                            "--train, --dev, --test (your NER files) | a declared NER task (resume_ner, msra_ner)")
    columns: Optional[str] = option(None, help="TSV columns, e.g. label,text or text,label or label,text_a,text_b "
                                               "(default: detected from the header or the values)")
    seed: int = option_of(Shared, "seed", help="first seed")
    seeds: int = option(1, help="number of seeds (S, S+1, ...); reports mean ± std")

    def __post_init__(self):
        at_least(self, 1, "seeds")
        check_seed("--seed", self.seed, self.seed + self.seeds - 1)   # seeds S..S+N-1 (--seeds N)

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


def mean_std(xs: list[float]) -> tuple[float, float]:
    return float(statistics.fmean(xs)), float(statistics.stdev(xs)) if len(xs) > 1 else 0.0


def percent(mean: float | None, std: float | None = None) -> str:
    """A fraction as a table cell: 86.5 ± 0.3 (percent), "–" when there is none; no ± without a spread."""
    if mean is None:
        return "–"
    return f"{mean * 100:.1f} ± {std * 100:.1f}" if std is not None else f"{mean * 100:.1f}"


def train_one(ckpt_dir: Path, task: TaskData, cfg: FinetuneConfig, seed: int, tok=None, log=print) -> dict:
    """Fine-tune once with `seed` (the classifier on the one loop); dev/test accuracy and macro-F1 of the
    best-on-dev state, and the predicted test labels."""
    return run_seed(ClassifyHead(ckpt_dir, task, cfg, tok or tokenizer_for(ckpt_dir)), cfg, seed, log=log)


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key in ("dev_acc", "dev_macro_f1", "test_acc", "test_macro_f1"):
        vals = [r[key] for r in runs if key in r]
        if not vals:
            out[key] = None
            continue
        out[key], std = mean_std(vals)
        if len(vals) > 1:
            out[f"{key}_std"] = std
    return out


def run(ckpt: str | Path, task: TaskData, cfg: FinetuneConfig, seeds: list[int], log=print, tok=None,
        objective=HARD_LABELS, keep=None) -> dict:
    """Fine-tune once per seed; the summary dict is what the JSON line and ablate use. `tok`: the checkpoint's
    tokenizer when the caller has it (default: `tokenizer_for`, shared by every run on the checkpoint);
    `objective`: gold labels, or a teacher's soft labels beside (`task_distill`); `keep(model)`: the first seed's
    chosen model (`--save`)."""
    check_trainable(task, cfg, seeds)
    ckpt_dir = model_dir(ckpt)
    head = ClassifyHead(ckpt_dir, task, cfg, tok or tokenizer_for(ckpt_dir), objective)
    runs = []
    for seed in seeds:
        r = run_seed(head, cfg, seed, log=log, keep=None if runs else keep)
        log(f"seed {seed}: dev acc {r['dev_acc']:.4f} macro-F1 {r['dev_macro_f1']:.4f}"
            + (f" | test acc {r['test_acc']:.4f} macro-F1 {r['test_macro_f1']:.4f}" if "test_acc" in r else "")
            + f" (best step {r['best_step']}, {r['train_s']} s)")
        runs.append(r)
    gold = [e.label for e in task.dev]
    majority = max(set(gold), key=gold.count)
    return {"task": task.name, "checkpoint": str(ckpt_dir), "init": "random" if cfg.random_init else "pretrained",
            "seeds": seeds, **objective.facts(), **summarize(runs), "majority_dev_acc": gold.count(majority) / len(gold),
            "n_train": min(len(task.train), cfg.max_train or len(task.train)), "n_dev": len(task.dev),
            "n_test": len(task.test) if task.test else 0, "splits": task.roles, "config": asdict(cfg),
            "per_seed": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in runs]}


def eval_entries(summary: dict, task_spec: str) -> list[dict]:
    """eval_results entries of a `finetune` summary (or of `ablate`'s `suite:TASK` column, under its suite's
    protocol): the dev accuracy that chose, and the task's metrics on the split it reports (a declared task's
    dataset and split names; a TSV task's folder name, "dev" and "test")."""
    n = len(summary["seeds"])
    task_name = "Text classification" + (f" (mean of {n} seeds)" if n > 1 else "")
    protocol = FINETUNE_PROTOCOL
    if task_spec.startswith(TSV_PREFIX):
        (dtype, name), names, metrics = ("tsv", summary["task"]), ("dev", "test"), (ACCURACY, MACRO_F1)
    elif task_spec.startswith(SUITE_PREFIX):
        task = task_named(task_spec[len(SUITE_PREFIX):])
        (dtype, name), metrics, protocol = task.dataset, task.metrics, task.protocol
        names = ("dev_k" if task.pairs else task.splits.names[1], task.report_name)
    else:
        task = task_named(task_spec)
        (dtype, name), names, metrics = task.dataset, task.splits.names[1:], task.metrics
    figures = [(names[0], "dev_acc", ACCURACY)] + [(names[1], m.key, m) for m in metrics]
    return distilled_entries([entry("text-classification", task_name, dtype, name, m.type, f"{split} {m.name}",
                                    summary[key], protocol=protocol, split=split)
                              for split, key, m in figures if summary.get(key) is not None], summary)


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert finetune", __doc__.split("\n\n")[0], CheckpointArgs, FinetuneJob, FinetuneConfig,
                         NerFiles, TaskDistillOptions)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    target, job, cfg, files, distill = (config_from_args(c, args) for c in (
        CheckpointArgs, FinetuneJob, FinetuneConfig, NerFiles, TaskDistillOptions))
    refuse_unteachable(distill, job.task)
    if tagging_task(job.task):      # NER: a token classifier, entity F1 (ner_tasks)
        return finetune_ner(target, job, cfg, files, distill)
    if files.crf:
        raise ZhBertError(f"--crf: task {job.task} has no tags to decode; the CRF is a layer of the tag (NER) head")
    if files.decode:
        raise ZhBertError(f"--decode: task {job.task} has no tags to decode; it chooses how the tag (NER) head reads "
                          f"its tags")
    task = load_task(job.task, job.columns)
    announce(f"task {task.name}: {len(task.train)} train / {len(task.dev)} dev / {len(task.test or [])} test, "
             f"{len(task.labels)} labels{' (sentence pairs)' if task.pair else ''}", task.notes, task.warnings)
    ckpt_dir = model_dir(target.ckpt)
    tok = tokenizer_for(ckpt_dir)
    objective = teacher_for(distill, CLASSIFY, task.labels, tok, f"task {task.name}")
    out = claim_save(distill, ckpt_dir, cfg.pooling)
    keep = (lambda m: save_finetuned(m, tok, ckpt_dir, out)) if out else None
    summary = run(ckpt_dir, task, cfg, job.seed_list(), log=lambda m: print(m, flush=True), tok=tok,
                  objective=objective, keep=keep)
    for r in summary["per_seed"]:
        r.pop("test_pred", None)       # one label per test example: not for the JSON line
    summary["notes"] = task.notes
    summary["warnings"] = task.warnings
    if not target.no_record and not cfg.random_init:
        where = record_for_checkpoint(target.ckpt, eval_entries(summary, job.task))
        if where:
            print(f"recorded in {where}", flush=True)
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    return 0
