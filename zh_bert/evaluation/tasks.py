"""Sentence(-pair) classification datasets for `zh-bert finetune`: ChnSentiCorp, TNEWS and user TSV files.

Bundled task data lives in `corpora/tasks/<name>/` of a source checkout (with its SOURCE.md), not in the
wheel: ChnSentiCorp is research-use only and TNEWS has no published licence, so we do not redistribute them
inside the package. `ZH_BERT_TASK_DATA=DIR` (a folder holding `chnsenticorp/`, `tnews/`) points elsewhere.

ChnSentiCorp's ERNIE/HFL split has exact duplicate reviews inside train (1,351) and across splits
(335 train∩dev, 330 train∩test, 39 dev∩test). We keep test as published (so figures stay comparable with
papers), drop from dev the 39 texts of test (nothing is chosen on the split it is reported on) and from train
its internal repeats and every text that also occurs in dev or test, so that no held-out sentence is trained
on (`splits.keep_apart`: the same rule for a user's TSV files). The counts are reported in `TaskData.notes`, and
`TaskData.roles` names the file that trains, chooses and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import Record, read_text
from zh_bert.corpus.benchmark_text import task_data_dir
from zh_bert.corpus.corpus_io import read_jsonl
from zh_bert.evaluation.splits import keep_apart, roles_of

TASKS = ("chnsenticorp", "tnews")
LABEL_NAMES = ("label", "labels", "y", "class", "category", "sentiment", "target")
TEXT_NAMES = ("text", "text_a", "sentence", "sentence1", "review", "content", "query", "title", "text1")
TEXT_B_NAMES = ("text_b", "sentence2", "text2", "pair")
MAX_TEXT = 100_000      # characters of one text field read from a task file


@dataclass
class Example:
    text_a: str
    label: str
    text_b: str | None = None


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


# --------------------------------------------------------------------------- TSV

@dataclass(frozen=True)
class Columns:
    label: int
    text_a: int
    text_b: int | None = None


def parse_columns(spec: str) -> Columns:
    """`--columns label,text` / `text,label` / `label,text_a,text_b` (names or 0-based indices)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if all(p.isdigit() for p in parts):
        if len(parts) not in (2, 3):
            raise ZhBertError(f"--columns {spec}: give LABEL,TEXT[,TEXT_B] column indices")
        idx = [int(p) for p in parts]
        return Columns(idx[0], idx[1], idx[2] if len(idx) == 3 else None)
    roles = {}
    for i, p in enumerate(parts):
        role = ("label" if p in LABEL_NAMES else "text_b" if p in TEXT_B_NAMES
                else "text_a" if p in TEXT_NAMES or p == "text" else None)
        if role is None:
            raise ZhBertError(f"--columns {spec}: unknown column role '{p}' (use label, text, text_b)")
        roles[role] = i
    if "label" not in roles or "text_a" not in roles:
        raise ZhBertError(f"--columns {spec}: needs both 'label' and 'text'")
    return Columns(roles["label"], roles["text_a"], roles.get("text_b"))


def _detect_columns(header: list[str] | None, first_rows: list[list[str]], path: Path) -> Columns:
    """From the header names, or else from the values: the label column holds short, repeated values."""
    if header:
        names = [h.strip().lower() for h in header]
        lab = next((i for i, n in enumerate(names) if n in LABEL_NAMES), None)
        txt = [i for i, n in enumerate(names) if n in TEXT_NAMES]
        txt_b = [i for i, n in enumerate(names) if n in TEXT_B_NAMES]
        if lab is not None and txt:
            return Columns(lab, txt[0], txt_b[0] if txt_b else (txt[1] if len(txt) > 1 else None))
    ncol = len(first_rows[0]) if first_rows else 0
    if ncol not in (2, 3):
        raise ZhBertError(f"{path}: cannot tell which column is the label ({ncol} columns); pass --columns "
                          f"label,text or text,label")
    distinct = [len({r[i] for r in first_rows}) for i in range(ncol)]
    mean_len = [sum(len(r[i]) for r in first_rows) / len(first_rows) for i in range(ncol)]
    lab = min(range(ncol), key=lambda i: (mean_len[i], distinct[i]))
    if mean_len[lab] > 20 or (len(first_rows) >= 20 and distinct[lab] > len(first_rows) // 2):
        raise ZhBertError(f"{path}: cannot tell which column is the label; pass --columns label,text or text,label")
    texts = [i for i in range(ncol) if i != lab]
    return Columns(lab, texts[0], texts[1] if len(texts) > 1 else None)


def _looks_like_header(row: list[str]) -> bool:
    names = {c.strip().lower() for c in row}
    return bool(names & set(LABEL_NAMES)) and bool(names & set(TEXT_NAMES + TEXT_B_NAMES))


def read_tsv(path: str | Path, columns: str | None = None) -> list[Example]:
    """Read a `label<TAB>text` / `text<TAB>label` (/ pair) TSV, header optional, no quoting.

    A line with the wrong number of fields or an empty text is an error naming `file:line`.
    """
    path = Path(path)
    lines = read_text(path, encoding="utf-8-sig").split("\n")
    rows = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise ZhBertError(f"{path}: empty file")
    header = rows[0][1] if _looks_like_header(rows[0][1]) else None
    if header:
        rows = rows[1:]
    if not rows:
        raise ZhBertError(f"{path}: header only, no examples")
    ncol = len(header) if header else len(rows[0][1])
    for n, r in rows:
        if len(r) != ncol:
            raise ZhBertError(f"{path}:{n}: expected {ncol} tab-separated fields, found {len(r)}"
                              f"{' (a tab inside the text?)' if len(r) > ncol else ' (missing tab?)'}")
    cols = parse_columns(columns) if columns else _detect_columns(header, [r for _, r in rows[:200]], path)
    if max(c for c in (cols.label, cols.text_a, cols.text_b) if c is not None) >= ncol:
        raise ZhBertError(f"{path}: --columns {columns} names a column beyond the {ncol} in the file")
    out = []
    for n, r in rows:
        label, text = r[cols.label].strip(), r[cols.text_a].strip()
        if not label:
            raise ZhBertError(f"{path}:{n}: empty label")
        if not text:
            raise ZhBertError(f"{path}:{n}: empty text")
        out.append(Example(text, label, r[cols.text_b].strip() if cols.text_b is not None else None))
    return out


# --------------------------------------------------------------------------- bundled tasks

def _read_examples(path: Path, text_key: str, label_key: str) -> list[Example]:
    out = []
    for where, obj in read_jsonl(path):
        rec = Record.of(obj, where)
        out.append(Example(rec.text(text_key, max_len=MAX_TEXT).strip(), label_of(rec, label_key)))
    return out


def label_of(rec: Record, key: str) -> str:
    """A label field read from a task file: text or an integer code (TNEWS's `label`), as text."""
    value = rec.raw(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(rec.integer(key))
    label = rec.text(key, max_len=1000)
    if not label.strip():
        raise rec.error(key, "an empty label")
    return label


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


def load_task(spec: str, columns: str | None = None) -> TaskData:
    """`chnsenticorp`, `tnews`, or `tsv:TRAIN,DEV[,TEST]`."""
    if spec.startswith("tsv:"):
        paths = [p for p in spec[4:].split(",") if p]
        if len(paths) not in (2, 3):
            raise ZhBertError(f"--task {spec}: expected tsv:TRAIN,DEV[,TEST]")
        splits = [read_tsv(p, columns) for p in paths]
        return _finish(Path(paths[0]).parent.name or "tsv", splits[0], splits[1],
                       splits[2] if len(splits) == 3 else None, paths)
    if spec == "chnsenticorp":
        files = [task_data_dir("chnsenticorp") / f"{s}.tsv" for s in ("train", "dev", "test")]
        return _finish("chnsenticorp", *(read_tsv(f, columns or "label,text_a") for f in files), files)
    if spec == "tnews":
        d = task_data_dir("tnews")
        files = [d / f for f in ("train_few_all.json", "dev_few_all.json", "test_public.json")]
        return _finish("tnews", *(_read_examples(f, "sentence", "label_desc") for f in files), files)
    raise ZhBertError(f"--task {spec}: unknown task{suggest(spec, TASKS)}; use {', '.join(TASKS)} or "
                      f"tsv:TRAIN,DEV[,TEST]")


DATASET_NAMES = {"chnsenticorp": ("ChnSentiCorp", "seamew/ChnSentiCorp"), "tnews": ("TNEWS (FewCLUE)", "fewclue")}
