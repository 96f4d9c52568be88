"""`zh-bert finetune CKPT --task TASK`: fine-tune a checkpoint on one task, the head its kind says.

The usual recipe, nothing clever: AdamW (no decay on biases/LayerNorm), linear warmup then linear decay, evaluation
on the choosing split every epoch (or `--eval-every` steps), early stop after `--patience` evaluations without gain,
the best state restored before the reported split is scored (the one loop every head trains on, `loop`). The seed
is a setting; `--seeds 3` runs seeds S, S+1, S+2 and reports mean ± sample std (ddof=1), because a single
fine-tuning run of a small model varies by more than most differences people try to measure. `--random-init`
trains the same architecture from random weights: the baseline pretraining must beat.

TASK is a declared task (`zh_bert.corpus.task_registry`) or the user's files: `tsv:TRAIN,DEV[,TEST]`
(classification), `ner` with `--train/--dev/--test` (tagging), `pairs:TRAIN,DEV[,TEST]` and `simcse:FILE`
(sentence embeddings). Everything that differs by head is asked of its kind (`heads`): the files it reads and
checks before any model loads, its options, its runs, its eval_results entries, how `--save` writes it.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import dataclass

from zh_bert.core.config import config_from_args, option
from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.errors import ZhBertError
from zh_bert.evaluation.eval_results import CheckpointArgs, record_for_checkpoint
from zh_bert.evaluation.heads import HEAD_KINDS, finetune_specs, kind_for, option_classes
from zh_bert.evaluation.heads.base import announce, refuse_foreign
from zh_bert.evaluation.heads.classify import tokenizer_for
from zh_bert.evaluation.heads.distill import TaskDistillOptions, claim_save, teacher_for
from zh_bert.evaluation.loop import FinetuneConfig, Seeds
from zh_bert.train.rundir import model_dir


@dataclass(kw_only=True)
class FinetuneJob(Seeds):
    """What to fine-tune on, and with which seeds."""
    task: str = option(help=f"{' | '.join(finetune_specs())} | tsv:TRAIN,DEV[,TEST] (classification: TRAIN trains, "
                            "DEV chooses the best state, TEST reports; no text of a later one is trained or chosen on) "
                            "| ner with --train, --dev, --test (your NER files) | pairs:TRAIN,DEV[,TEST] (sentence "
                            "pairs, TAB-separated, a grade or 1/0: an embedder) | simcse:FILE[,FILE...] (your text: "
                            "an embedder by unsupervised SimCSE)")


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert finetune", __doc__.split("\n\n")[0], CheckpointArgs, FinetuneJob, FinetuneConfig,
                         TaskDistillOptions, *option_classes("finetune"))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    target, job, cfg, distill = (config_from_args(c, args) for c in (
        CheckpointArgs, FinetuneJob, FinetuneConfig, TaskDistillOptions))
    opts = {cls: config_from_args(cls, args) for cls in option_classes("finetune")}
    kind = kind_for(job.task)
    refuse_foreign(kind, opts, list(HEAD_KINDS.values()), f"task {job.task}")
    if distill.teacher and kind.teacher_class is None:
        raise ZhBertError(f"--teacher: task {job.task} has a {kind.name} head, which cannot learn from a teacher's "
                          f"soft labels; the heads that can: "
                          f"{', '.join(k.name for k in HEAD_KINDS.values() if k.teacher_class)}")
    data = kind.load(job.task, job, opts)          # every file read and checked before any model
    kind.check_data(data, cfg)
    ckpt_dir = model_dir(target.ckpt)
    tok = tokenizer_for(ckpt_dir)
    objective = None
    if distill.teacher:           # checked against the task's labels and the student's vocabulary, loaded frozen
        labels, what = kind.teacher_labels(data, opts)
        objective = teacher_for(distill, kind.teacher_class, labels, tok, what)
    if distill.save:
        cfg = kind.check_save(ckpt_dir, cfg, opts)
    out = claim_save(distill, ckpt_dir)
    kept = []      # the first seed's chosen model, saved once its figures are known (an embedder's card shows them)
    keep = (lambda m: kept.append(copy.deepcopy(m).cpu())) if out else None
    announce(*kind.header(data))
    result = kind.run(ckpt_dir, data, cfg, opts, job.seed_list(), log=lambda m: print(m, flush=True), tok=tok,
                      objective=objective, keep=keep)
    if kept:
        kind.save(kept[0], tok, ckpt_dir, out, cfg, data, opts, result)
    entries = [] if target.no_record or cfg.random_init else kind.entries(result, job.task, data, opts)
    if entries:
        where = record_for_checkpoint(target.ckpt, entries)
        if where:
            print(f"recorded in {where}", flush=True)
    print(json.dumps(kind.json_summary(result, data), ensure_ascii=False), flush=True)
    return 0
