"""NER tasks in the commands: the suite's tag kind (`TagKind`, `heads.HEAD_KINDS`) for the declared NER tasks
(Resume NER, MSRA NER), and `zh-bert finetune MODEL --task ner --train F --dev F [--test F]` on the user's own
files (or `--task resume_ner`, a declared one, whose files `--train/--dev/--test` may replace).

A declared task reads its files through its declaration: train trains, choose chooses, report reports; a task
whose train and choose name the same file (MSRA NER, whose train split is not bundled) trains on a fixed 90% of
it and chooses on the other 10% (`ner_data.carve_choose`), said in the notes, unless the user gives the official
train file (`eval suite --msra-train`, `finetune --train`). Test is never trained or chosen on.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_registry import ENTITY_METRICS, task_named, tasks, user_file_head
from zh_bert.corpus.task_spec import FINETUNE_PROTOCOL, TAG, Task
from zh_bert.evaluation.eval_results import entry, record_for_checkpoint
from zh_bert.evaluation.ner_data import NerTask, load_ner
from zh_bert.evaluation.ner_finetune import Decoding, TaggingConfig, head_entries, run_tagger
from zh_bert.evaluation.classify import announce, tokenizer_for
from zh_bert.evaluation.task_distill import (
    TaskDistillOptions,
    claim_save,
    distilled_entries,
    save_finetuned,
    teacher_for,
)
from zh_bert.evaluation.tagging import write_tag_predictions
from zh_bert.train.rundir import model_dir


@dataclass
class NerFiles:
    """`finetune --task ner`: the user's files (or replacements for a declared NER task's), and predictions."""
    train: Optional[str] = option(None, metavar="PATH", help="NER: the train file (CoNLL: a character and its tag per "
                                                             "line; or UER's TSV text_a/label)")
    dev: Optional[str] = option(None, metavar="PATH", help="NER: the dev file, on which the best state is chosen")
    test: Optional[str] = option(None, metavar="PATH", help="NER: the test file the figure is reported on (without "
                                                            "tags: predicted, not scored)")
    predictions: Optional[str] = option_of(Shared, "predictions", help="NER: write test's predictions to "
                                                                       "DIR/TASK.conll (character, gold, predicted "
                                                                       "tag), which conlleval and seqeval re-score")
    tag_scheme: str = option_of(TaggingConfig, "tag_scheme")
    window_stride: int = option_of(TaggingConfig, "window_stride")
    crf: bool = option_of(TaggingConfig, "crf")
    decode: Optional[Decoding] = option_of(TaggingConfig, "decode")

    def __post_init__(self):
        self.tagging()          # --decode argmax with --crf refused before any file is read

    def tagging(self) -> TaggingConfig:
        return TaggingConfig(window_stride=self.window_stride, tag_scheme=self.tag_scheme, crf=self.crf,
                             decode=self.decode)


def tagging_task(spec: str) -> bool:
    """Whether `finetune --task SPEC` trains a tagger: the user-files name of the tag kind, or a declared tag task."""
    return user_file_head(spec) == TAG or any(t.name == spec and t.head == TAG for t in tasks())


def declared_files(task: Task) -> tuple[Path | None, Path, Path]:
    """(train or None: carve it from choose, choose, report) of a declared task; a train file the user gave stands
    as an absolute path in the declaration (`with_train`)."""
    folder = task_data_dir(task.folder)
    train, choose, report = (folder / f for f in (task.splits.train, task.splits.choose, task.splits.report))
    return (None if train == choose else train), choose, report


def load_declared(task: Task, scheme: str | None = None) -> NerTask:
    return load_ner(task.name, *declared_files(task), scheme)


def with_train(task: Task, given: str | None) -> Task:
    """`task` with the user's official train file (a file, or a folder holding one of `official_train`'s names)
    in place of its bundled stand-in; unchanged for None or a task that declares no official train file."""
    if given is None or not task.splits or not task.splits.official_train or task.head != TAG:
        return task
    p = Path(given)
    if p.is_dir():
        found = [p / n for n in task.splits.official_train if (p / n).is_file()]
        if not found:
            raise ZhBertError(f"{given}: no {' or '.join(task.splits.official_train)} in this folder")
        p = found[0]
    if not p.is_file():
        raise ZhBertError(f"{given}: no such file or folder")
    names = ("train", task.splits.names[1].split(" ")[0], task.splits.names[2])
    return dataclasses.replace(task, splits=dataclasses.replace(task.splits, train=str(p.resolve()), names=names))


class TagKind:
    """NER under the suite's choosing protocol: each learning rate of the grid trains a token classifier (the tag
    head on the one loop), chosen on dev by entity F1; entity F1 on test, in percent."""
    chooses = True
    choose_key = "dev_f1"

    def __init__(self):
        self._said: set[str] = set()

    def method(self, method: str) -> str:
        return "finetune"

    def check(self, task: Task, method: str, k: int | None) -> None:
        load_declared(task)

    def setting(self, ckpt, task: Task, k: int | None, method: str, cfg, seeds: list[int], log, args) -> dict:
        data = load_declared(task)
        if task.name not in self._said:        # the notes once per task, not once per learning rate
            self._said.add(task.name)
            for line in [f"note: {n}" for n in data.notes] + [f"warning: {w}" for w in data.warnings]:
                log(line)
        summary = run_tagger(ckpt, data, cfg, TaggingConfig(crf=args.crf, decode=args.decode), seeds, log=log)
        summary["test_predictions"] = summary.pop("test_pred_first", None)
        return summary

    def chance(self, task: Task) -> tuple[float, str]:
        return 0.0, "all O"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id": FILE:LINE, "tags": [...]} per test sentence (the CoNLL file is `write_official`'s)."""
        sentences = load_declared(task).test or []
        return [{"id": s.where.rsplit("/", 1)[-1], "tags": p} for s, p in zip(sentences, predicted)]

    def write_official(self, task: Task, predicted: list, folder: Path) -> Path:
        """`folder/TASK.conll`: character, gold and predicted tag per line, as conlleval and seqeval read it."""
        data = load_declared(task)
        path = Path(folder) / f"{task.name}.conll"
        write_tag_predictions(path, data.test, predicted, data.scheme)
        return path


def _user_task(spec: str, files: NerFiles, scheme: str) -> NerTask:
    """The task `finetune --task SPEC` trains: a declared NER task (its files, or those given in their place) or
    the user's files (--train and --dev required)."""
    if user_file_head(spec) == TAG:
        missing = [f"--{n}" for n in ("train", "dev") if getattr(files, n) is None]
        if missing:
            raise ZhBertError(f"--task {spec}: give {' and '.join(missing)} (and --test for a reported figure): "
                              f"CoNLL files (a character and its tag per line) or UER's TSV")
        return load_ner(Path(files.train).parent.name or spec, files.train, files.dev, files.test, scheme)
    task = task_named(spec)
    train, dev, test = declared_files(task)
    given = [files.train or train, files.dev or dev, files.test or test]
    return load_ner(task.name, *given, scheme)


def ner_entries(summary: dict, task: Task | None) -> list[dict]:
    """eval_results entries: entity P/R/F1 on test (a declared task's dataset and metrics; the user's: `conll`)."""
    n = len(summary["seeds"])
    name = "Named-entity recognition" + (f" (mean of {n} seeds)" if n > 1 else "")
    dtype, dname = task.dataset if task else ("conll", summary["task"])
    protocol = FINETUNE_PROTOCOL
    return [entry("token-classification", name, dtype, dname, m.type, f"test {m.name}", summary[m.key],
                  protocol=protocol, split="test")
            for m in ENTITY_METRICS if summary.get(m.key) is not None]


def finetune_ner(target, job, cfg, files: NerFiles, distill: TaskDistillOptions) -> int:
    """`zh-bert finetune MODEL --task ner|TASK ...`: read and check every file (and a teacher), train once per
    seed, print the notes and the JSON summary, record the figures with the checkpoint."""
    task = _user_task(job.task, files, files.tag_scheme)
    ckpt_dir = model_dir(target.ckpt)
    tok = tokenizer_for(ckpt_dir)
    learned = files.tagging().learned(task)
    objective = teacher_for(distill, TAG, learned.tags(task.types), tok,
                            f"task {task.name} ({learned.name.upper()} tags)")
    out = claim_save(distill, ckpt_dir)
    keep = (lambda m: save_finetuned(m, tok, ckpt_dir, out)) if out else None
    announce(f"task {task.name}: {len(task.train)} train / {len(task.dev)} dev / {len(task.test or [])} test "
             f"sentences, {task.scheme.name.upper()} tags, {len(task.types)} entity types ({', '.join(task.types)})",
             task.notes, task.warnings)
    summary = run_tagger(ckpt_dir, task, cfg, files.tagging(), job.seed_list(), log=lambda m: print(m, flush=True),
                         tok=tok, predictions=files.predictions, objective=objective, keep=keep)
    summary.pop("test_pred_first", None)
    if files.predictions:
        print(f"predictions: {Path(files.predictions) / (task.name + '.conll')}", flush=True)
    declared = None if user_file_head(job.task) == TAG or any([files.train, files.dev, files.test]) else \
        task_named(job.task)
    if not target.no_record and not cfg.random_init and task.scored:
        entries = head_entries(ner_entries(summary, declared), summary)
        where = record_for_checkpoint(target.ckpt, distilled_entries(entries, summary))
        if where:
            print(f"recorded in {where}", flush=True)
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    return 0
