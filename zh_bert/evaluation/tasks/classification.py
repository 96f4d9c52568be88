"""A classification task's data as one fine-tuning run reads it: the examples of its train, choosing and reporting
splits, kept apart, with the labels the classifier predicts; what `zh-bert finetune --task` names (a declared task
of the registry, `zh_bert.corpus.task_registry`, or `tsv:TRAIN,DEV[,TEST]`, a user's files); and the reported
split's records as the official prediction files name them.

ChnSentiCorp's ERNIE/HFL split has exact duplicate reviews inside train (1,351) and across splits
(335 train∩dev, 330 train∩test, 39 dev∩test). We keep test as published (so figures stay comparable with
papers), drop from dev the 39 texts of test (nothing is chosen on the split it is reported on) and from train
its internal repeats and every text that also occurs in dev or test, so that no held-out sentence is trained
on (`splits.keep_apart`: the same rule for a user's TSV files). A few-shot pair (FewCLUE's train_k, dev_k) keeps
train_k's own repeats, as the sample was drawn. The counts are reported in `TaskData.notes`, and `TaskData.roles`
names the file that trains, chooses and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record
from zh_bert.corpus.corpus_io import read_jsonl
from zh_bert.corpus.task_files import Example, Fields, TsvFile, label_of, task_data_dir
from zh_bert.corpus.task_registry import task_named, tasks
from zh_bert.corpus.task_spec import Splits, Task
from zh_bert.evaluation.tasks.splits import keep_apart, roles_of

TSV_PREFIX = "tsv:"
#: `zh-bert ablate`'s `finetune: suite:TASK` — a task under its suite's protocol as a downstream column
SUITE_PREFIX = "suite:"
ID_KEYS = ("id", "idx")     # a record's id in FewCLUE's files (CLUEWSC: idx), what a prediction line names


@dataclass
class TaskData:
    name: str
    train: list[Example]
    dev: list[Example]
    test: list[Example] | None
    labels: list[str]                      # sorted label names; the class index is the position here
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)   # legal but probably not what the user meant
    roles: dict[str, str] = field(default_factory=dict)  # the file that trains, chooses, reports (splits.ROLES)

    @property
    def pair(self) -> bool:
        return any(e.text_b is not None for e in self.train)


def _pair_key(e: Example) -> tuple[str, str | None]:
    return (e.text_a, e.text_b)


def _finish(name, train, dev, test, sources) -> TaskData:
    """The task with its roles kept apart (`splits.keep_apart`); `sources` names the file of each split.

    Errors (the figures would mean nothing): an empty split, or a train split with fewer than two classes
    (a constant predictor scores the majority share on dev and reports it as learned). A warning (legal,
    e.g. a few-shot split): dev/test labels never seen in train, which the model can only get wrong."""
    for split, examples, where in zip(("train", "dev", "test"), (train, dev, test), sources):
        if examples is not None and not examples:
            raise ZhBertError(f"{where}: the {split} split of task {name} has no examples")
    files = list(sources) + [None] * (3 - len(sources))
    train, dev, notes = keep_apart(name, (train, dev, test), files, _pair_key)
    if test is None:
        notes.append("no test file: the dev figure is reported on the split the best state was chosen on "
                     "(optimistic); give tsv:TRAIN,DEV,TEST for a held-out figure")
    classes = sorted({e.label for e in train})
    if len(classes) < 2:
        raise ZhBertError(f"{sources[0]}: the train split of task {name} holds only one class ({classes[0]!r}); "
                          f"a classifier needs at least two")
    labels = sorted({e.label for split in (train, dev, test or []) for e in split},
                    key=lambda s: (not s.lstrip("-").isdigit(), int(s) if s.lstrip("-").isdigit() else 0, s))
    warnings = []
    for split, examples in (("dev", dev), ("test", test or [])):
        unseen = {e.label for e in examples} - set(classes)
        if unseen:
            n = sum(e.label in unseen for e in examples)
            warnings.append(f"{split} labels never seen in train: {sorted(unseen)} ({n} of {len(examples)} "
                            f"{split} examples, which the model can only get wrong)")
    return TaskData(name, train, dev, test, labels, notes, warnings, roles_of(files))


def finetune_task_names() -> list[str]:
    """The declared classification tasks a classifier fine-tunes on: one set of train/dev/test files read as
    labelled examples (a JSON-lines or TSV classification reader)."""
    return [t.name for t in tasks() if t.splits is not None and t.splits.choose is not None
            and isinstance(t.reader, (Fields, TsvFile))]


def files_of(task: Task, split: Splits) -> list[Path]:
    """The files of a set of splits, in role order (train, choose, report; a split that chooses nothing has none)."""
    folder = task_data_dir(task.folder)
    return [folder / f for f in (split.train, split.choose, split.report) if f is not None]


def load_task(spec: str, columns: str | None = None) -> TaskData:
    """A declared task's train/dev/test files (`finetune_task_names`), or `tsv:TRAIN,DEV[,TEST]`."""
    if spec.startswith(TSV_PREFIX):
        paths = [p for p in spec[len(TSV_PREFIX):].split(",") if p]
        if len(paths) not in (2, 3):
            raise ZhBertError(f"--task {spec}: expected tsv:TRAIN,DEV[,TEST]")
        reader = TsvFile(columns)
        splits = [reader.read(Path(p)) for p in paths]
        return _finish(Path(paths[0]).parent.name or "tsv", splits[0], splits[1],
                       splits[2] if len(splits) == 3 else None, paths)
    task = task_named(spec)
    if spec not in finetune_task_names():
        raise ZhBertError(f"--task {spec}: {task.title} has no train/dev/test files to fine-tune a classifier on "
                          f"(it runs under its suite: zh-bert eval suite MODEL --only {spec}); use "
                          f"{', '.join(finetune_task_names())} or tsv:TRAIN,DEV[,TEST]")
    files = files_of(task, task.splits)
    reader = task.reader.with_columns(columns)
    return _finish(task.name, *(reader.read(f) for f in files), files)


def load_pair(task: Task, k: int | None) -> TaskData:
    """A suite task as (train, choose, report) examples: pair k of a few-shot task (`Pairs`), kept apart
    (`splits.keep_apart`: a dev_k text that is in test_public is not chosen on; a train_k text in either is not
    trained on; train_k's own repeats are kept, as the few-shot sample was drawn), labels every label name of the
    three splits; a task of one set of splits (k None) as `finetune --task` reads it."""
    if task.pairs is None:
        return load_task(task.name)
    if not 0 <= (k or 0) < task.pairs.count:
        raise ZhBertError(f"{task.dataset_name} pair {k}: the pairs are 0..{task.pairs.count - 1}")
    split = task.pairs.split(k)
    files = files_of(task, split)
    train, dev, test = (task.reader.read(f) for f in files)
    train, dev, notes = keep_apart(task.dataset[0], (train, dev, test), files, _pair_key, drop_repeats=False)
    labels = sorted({e.label for e in train + dev + test})
    train_name, dev_name, test_name = split.names
    return TaskData(task.dataset[0], train, dev, test, labels,
                    notes=[f"{task.dataset_name} ({task.description}): {train_name} {len(train)}, {dev_name} "
                           f"{len(dev)}, {test_name} {len(test)}; the checkpoint is chosen on {dev_name}, reported on "
                           f"{test_name}", *notes], roles=roles_of(files))


def report_file(task: Task) -> Path:
    """The file every figure of a suite task is reported on (test_public, CMRC's dev)."""
    return task_data_dir(task.folder) / task.layout.report


def public_records(task: Task) -> tuple[list[dict], str]:
    """The reported split's records as written, and their id field, each record checked for what its line of the
    prediction file needs: the id (a number or text, in every record), and the official label field where the
    task classifies by another one (TNEWS, IFLYTEK: the code). Read before any training, so a record that
    cannot be written is one line naming `file:line` and the field, not an error after hours of training."""
    path = report_file(task)
    if getattr(task.reader, "numbered", False):     # a file without ids (TSV): its lines are numbered from 0
        return [{"id": i} for i in range(len(task.reader.read(path)))], "id"
    code, label = getattr(task.reader, "code", None), getattr(task.reader, "label", None)
    rows, key = [], None
    for where, row in read_jsonl(path):
        rec = Record.of(row, where, f"{task.reader.what if code else 'a task record'} (a JSON object)")
        key = key or next((k for k in ID_KEYS if k in rec), ID_KEYS[0])
        if not isinstance(rec.raw(key), (int, str)) or isinstance(rec.raw(key), bool) or rec.raw(key) == "":
            raise rec.error(key, f"{'missing' if key not in rec else 'not a number or text'}: the id each line of "
                                 f"the prediction file names (every record of {task.report_name} needs one)")
        if code and code != label:
            label_of(rec, code)
        rows.append(row)
    if not rows:
        raise ZhBertError(f"{path}: no records")
    return rows, key


def train_subset(task: TaskData, cfg, rng: np.random.Generator) -> list:
    """The training examples one seed trains on: all of them, or `max_train` drawn with the seed's rng."""
    if cfg.max_train and cfg.max_train < len(task.train):
        return [task.train[i] for i in sorted(rng.permutation(len(task.train))[:cfg.max_train])]
    return task.train
