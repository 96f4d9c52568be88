"""What a head kind is asked for (`HeadKind`): by `zh-bert finetune` (which task specs it reads, how it loads and
checks them before any model, how it runs its seeds into one `result.Result`, what it records and how it saves) and
by `eval suite` (whether it chooses on a split, how one setting runs, what chance is, its official prediction
format). One subclass per kind, under `heads/`, registered in `heads.HEAD_KINDS`; a task declaration names its kind
(`Task.head`) and no code outside the registry compares kind names.

A kind's command-line options are dataclasses it declares (`finetune_options`, `suite_options`): both commands
derive their flags from every kind's, and an option of one kind given for a task of another is one line
(`refuse_foreign`), so `--crf` on a classification task cannot be silently ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import write_text
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_registry import task_named, tasks
from zh_bert.corpus.task_spec import Task
from zh_bert.evaluation.tasks.classification import files_of, public_records


def sha256_of(paths: list[Path]) -> str:
    """One digest over the data files a figure was computed from (names and bytes, in order)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def data_files(task: Task, pairs: int) -> list[Path]:
    """The files a suite figure of `task` is computed from: train_k and dev_k of the pairs used and the reported
    split (a task of one set of splits: its three files)."""
    if task.pairs is None:
        return files_of(task, task.splits)
    folder = task_data_dir(task.folder)
    return [folder / f.format(k=k) for k in range(pairs) for f in (task.pairs.train, task.pairs.choose)] + \
        [folder / task.pairs.report]


def check_count(task: Task, predicted: list, rows: list) -> None:
    if len(predicted) != len(rows):
        raise ZhBertError(f"{task.dataset_name}: {len(predicted)} predictions for {len(rows)} reported records")


def quiet_transformers() -> None:
    """transformers' load reports, "newly initialised" notices and progress bars off: what they say (a fresh
    head, an unused pooler) is expected here, and what is not is checked and said in one line by zh-bert."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def announce(header: str, notes: list[str], warnings: list[str]) -> None:
    """What a fine-tuning command says before it trains: the task in one line, its notes on stdout, its warnings
    on stderr; transformers' expected messages silenced (`quiet_transformers`)."""
    quiet_transformers()
    print(header, flush=True)
    for note in notes:
        print(f"note: {note}", flush=True)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)


def set_options(obj) -> list[str]:
    """The flags of dataclass `obj` that differ from their defaults (what the user gave)."""
    out = []
    for f in dataclasses.fields(obj):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if getattr(obj, f.name) != default:
            out.append("--" + f.name.replace("_", "-"))
    return out


class HeadKind:
    """A head kind: what `finetune` and `eval suite` ask of it. Subclasses set the class attributes and implement
    what their commands reach: `load`, `run`, `entries` for `finetune`; `check`, `setting` (a kind that chooses)
    or `data` + `fixed` (one that does not), `chance`, `official` for `eval suite`."""
    #: the name a task declaration gives (`Task.head`)
    name = ""
    #: what it is, in messages ("a classifier", "a token classifier")
    what = ""
    #: whether `eval suite` runs it under the choosing protocol (a grid of rates, kept by the choosing split)
    chooses = True
    #: the figure of its choosing split that the best state maximises
    choose_key = "dev_acc"
    #: its options of `zh-bert finetune` and of `zh-bert eval suite` (dataclasses of `config.option` fields)
    finetune_options: tuple[type, ...] = ()
    suite_options: tuple[type, ...] = ()
    #: the transformers auto class of a fine-tuned teacher whose class logits it learns from (None: none)
    teacher_class: str | None = None
    #: `--task PREFIX...` specs of the user's own files it reads (tsv:, pairs:, simcse:)
    prefixes: tuple[str, ...] = ()

    # --------------------------------------------------------------- finetune
    def finetunable(self, task: Task) -> bool:
        """Whether `finetune --task NAME` runs this declared task (one set of train/choose/report files)."""
        return task.splits is not None

    def declared(self, spec: str) -> Task | None:
        """The declared task `spec` names (None for a spec of the user's files)."""
        return task_named(spec) if any(t.name == spec for t in tasks()) else None

    def load(self, spec: str, job, opts: dict):
        """The task's data, every file read and checked before any model loads (`opts`: option class -> value)."""
        raise NotImplementedError

    def header(self, data) -> tuple[str, list[str], list[str]]:
        """(the task in one line, notes, warnings) that `finetune` says before training."""
        return f"task {data.name}", data.notes, data.warnings

    def teacher_labels(self, data, opts: dict) -> tuple[list[str], str]:
        """(the label names a teacher must predict, in order; what they are, for messages)."""
        raise ZhBertError(f"--teacher: the {self.name} head cannot learn from a teacher's soft labels")

    def check_data(self, data, cfg) -> None:
        """Refuse, before any model loads, data that cannot train under `cfg` (one line)."""

    def check_save(self, ckpt_dir: Path, cfg, opts: dict):
        """Refuse, before training, a `--save` the kind's folder could not honour; `cfg` as the folder needs it."""
        return cfg

    def save(self, model, tok, ckpt_dir: Path, out: Path, cfg, data, opts: dict, result=None) -> None:
        """Write the chosen model (the first seed's) to `out`, claimed before training: a stock model folder."""
        from zh_bert.evaluation.heads.distill import save_finetuned

        save_finetuned(model, tok, ckpt_dir, out)

    def run(self, ckpt_dir: Path, data, cfg, opts: dict, seeds: list[int], log=print, tok=None, objective=None,
            keep=None):
        """Fine-tune once per seed: a `result.Result`."""
        raise NotImplementedError

    def entries(self, result, spec: str, data, opts: dict) -> list[dict]:
        """eval_results entries of a `finetune` result."""
        raise NotImplementedError

    def json_summary(self, result, data) -> dict:
        """The summary `finetune` prints as its last line."""
        return result.summary()

    # --------------------------------------------------------------- eval suite
    def method(self, method: str) -> str:
        """The method it runs for the suite's `--method` (a span head only fine-tunes)."""
        return method

    def recorded_method(self, method: str) -> str:
        """The method its suite figures are recorded under for the suite's `--method` (what a board column of
        that method compares); the suite's own unless the kind's figures are of another kind (zero-shot STS)."""
        return method

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id", "label"} per reported record in file order."""
        rows, key = public_records(task)
        check_count(task, predicted, rows)
        return [{"id": r[key], "label": p} for r, p in zip(rows, predicted)]

    def write_official(self, task: Task, predicted: list, folder: Path) -> Path:
        """`folder/TASK_predict.json`: its official lines (JSON lines, the benchmark's scorer's format)."""
        path = Path(folder) / f"{task.name}_predict.json"
        write_text(path, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in self.official(task, predicted)))
        return path

    def suite_facts(self, result) -> dict:
        """What its suite result carries beside the figures (the CRF and decoding of a tagger)."""
        return {}

    def pooling_note(self, ckpt_dir: Path, cfg) -> str | None:
        """The run's first-lines note of how the head pools this checkpoint under `cfg` (None: nothing to say)."""
        return None

    def mark_entries(self, entries: list[dict], summary: dict) -> list[dict]:
        """eval_results entries of a variant of the head (a CRF) under a task name of their own."""
        return entries

    # a kind that does not choose (`chooses` False): its suite data, its fixed run, its report's words
    def data(self, task: Task, opts: dict):
        """The task's files read and checked before any model loads, for `fixed`."""
        raise NotImplementedError

    def fixed(self, ckpt, task: Task, cfg, opts: dict, data, seeds: list[int], log=print):
        """The task's one protocol run (nothing chosen on the reported split): a `result.Result`."""
        raise NotImplementedError

    def ran(self, task: Task, summary: dict) -> str:
        """What the fixed run did, in the words of the suite's table."""
        return f"reported on {task.report_name}"

    def floors(self, task: Task) -> list[tuple[str, str]]:
        """(row label, summary key) of figures any model must beat, shown beside random init."""
        return []

    def caveats(self, task: Task, summary: dict) -> list[str]:
        """Lines under the table saying what makes the figure not comparable (a stand-in train set)."""
        return []


def refuse_foreign(kind: HeadKind, opts: dict, every: list[HeadKind], what: str) -> None:
    """One line for an option of another kind given for `what` (a task of `kind`): it would change nothing."""
    own = set(kind.finetune_options) | set(kind.suite_options)
    for other in every:
        for cls in (*other.finetune_options, *other.suite_options):
            if cls in own or cls not in opts:
                continue
            given = set_options(opts[cls])
            if given:
                raise ZhBertError(f"{given[0]}: an option of the {other.name} head; {what} has "
                                  f"{'an' if kind.name[0] in 'aeiou' else 'a'} {kind.name} head ({kind.what})")
