"""Reading a task's files: where the bundled task data is, the examples of a classification file (JSON lines
by named fields, or TSV with its columns detected), and the test text of a JSON-lines test file. Pure reading
(the reading layer, no model), at the corpus stage because the task declarations (`task_registry`) name these
readers and `clean --decontaminate` reads the test text.

Bundled task data lives in `corpora/tasks/<folder>/` of a source checkout (each folder with its SOURCE.md), not in
the wheel: ChnSentiCorp is research-use only and FewCLUE has no published licence, so they are not redistributed
inside the package. `ZH_BERT_TASK_DATA=DIR` (a folder holding the same subfolders) points elsewhere.

What "test text" is, for a JSON-lines test file (`RecordText`): every string value of a record, found recursively
through lists and objects, except under keys that name an id, a label, an answer, a position, a genre or a level
(`_NOT_TEXT`): what a model reads, not what it is scored against. TNEWS's `keywords` are not text either: they are
the news site's tags, which no task reads (the title is the input), and a title copied into a corpus comes without
them. ChID's blank `#idiom#` is not text: the original passage had an idiom there. Each string value is its own
segment (segments are joined by "\\n"): an n-gram never spans two fields, which are not adjacent in any real
document.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, read_text
from zh_bert.corpus.corpus_io import read_jsonl

LABEL_NAMES = ("label", "labels", "y", "class", "category", "sentiment", "target")
TEXT_NAMES = ("text", "text_a", "sentence", "sentence1", "review", "content", "query", "title", "text1")
TEXT_B_NAMES = ("text_b", "sentence2", "text2", "pair")
MAX_TEXT = 100_000      # characters of one text field read from a task file
_NOT_TEXT = re.compile(r"(?:id|idx|.*_id|label.*|answer.*|.*_index|genre|level|keywords)")
_CHID_BLANK = "#idiom#"


def task_roots() -> list[Path]:
    """Where bundled task folders are looked for, in order: $ZH_BERT_TASK_DATA, the source checkout's
    corpora/tasks (zh_bert/corpus/ is two below it), the current directory's corpora/tasks."""
    roots = [Path(os.environ["ZH_BERT_TASK_DATA"])] if os.environ.get("ZH_BERT_TASK_DATA") else []
    return roots + [Path(__file__).resolve().parents[2] / "corpora" / "tasks", Path.cwd() / "corpora" / "tasks"]


def task_data_dir(name: str) -> Path:
    """The task folder `name` (a path under the roots of `task_roots`, or an absolute folder)."""
    if Path(name).is_absolute():
        if Path(name).is_dir():
            return Path(name)
        raise ZhBertError(f"task data folder {name}: no such folder")
    candidates = [root / name for root in task_roots()]
    for c in candidates:
        if c.is_dir():
            return c
    raise ZhBertError(f"task data '{name}' not found (looked in {', '.join(map(str, candidates))}); it ships with "
                      f"the source checkout, not the wheel: set ZH_BERT_TASK_DATA=DIR (DIR/{name}/...) or use "
                      f"--task tsv:TRAIN,DEV[,TEST]")


@dataclass
class Example:
    text_a: str
    label: str
    text_b: str | None = None


@dataclass(frozen=True)
class BenchmarkExample:
    """One test example: its test set ("fewclue/tnews", "cmrc2018": the task's folder), its id in that file,
    its text (one segment per field, joined by "\\n") and the split it is from ("test_public", "dev")."""
    task: str
    id: str
    text: str
    split: str = "test_public"


def label_of(rec: Record, key: str) -> str:
    """A label field read from a task file: text or an integer code (TNEWS's `label`), as text."""
    value = rec.raw(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(rec.integer(key))
    label = rec.text(key, max_len=1000)
    if not label.strip():
        raise rec.error(key, "an empty label")
    return label


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


# --------------------------------------------------------------------------- readers a task declares

def text_field(name: str) -> Callable[[Record], str]:
    """A text read from field `name` of a record."""
    return lambda row: row.text(name, max_len=MAX_TEXT)


def joined_field(name: str, sep: str) -> Callable[[Record], str]:
    """A text made of the list of strings in field `name`, joined by `sep` (CSL's keywords)."""
    return lambda row: sep.join(row.texts(name))


def marked_spans(row: Record) -> str:
    """CLUEWSC's text with the candidate marked `_…_` and the pronoun `[…]` (the CLUE baselines' markers), so
    a sentence classifier sees which two spans the label is about."""
    text, t = row.text("text", max_len=MAX_TEXT), row.record("target")
    spans = sorted([(t.integer("span1_index", lo=0), t.text("span1_text"), "_", "_"),
                    (t.integer("span2_index", lo=0), t.text("span2_text"), "[", "]")], reverse=True)
    for start, span, left, right in spans:   # the later span first: the earlier index stays valid
        if text[start:start + len(span)] != span:
            raise t.error("span1_index" if left == "_" else "span2_index",
                          f"span {span!r} is not at index {start} of {text[:40]!r}...")
        text = text[:start] + left + span + right + text[start + len(span):]
    return text


@dataclass(frozen=True)
class Fields:
    """A JSON-lines classification file: the texts each record gives (`text_a`, optional `text_b`), the field
    holding the label the classifier learns, and the field the official prediction file writes (`code`: TNEWS
    and IFLYTEK classify by the label's name and are scored by its code)."""
    text_a: Callable[[Record], str]
    label: str = "label"
    text_b: Callable[[Record], str] | None = None
    code: str = "label"
    what: str = "a task record"

    def read(self, path: Path) -> list[Example]:
        """A split's records as examples; a record missing a field, or holding one of the wrong type, is one line
        naming `file:line` and the field."""
        out = []
        for where, row in read_jsonl(path):
            rec = Record.of(row, where, f"{self.what} (a JSON object)")
            out.append(Example(self.text_a(rec), label_of(rec, self.label),
                               self.text_b(rec) if self.text_b else None))
        if not out:
            raise ZhBertError(f"{path}: no records")
        return out

    def with_columns(self, columns: str | None) -> "Fields":
        """`--columns` names TSV columns: a JSON-lines file is read by its fields whatever it says."""
        return self


@dataclass(frozen=True)
class TsvFile:
    """A TSV classification file (`read_tsv`): `columns` as `--columns` takes them, None to detect them. Its
    examples have no ids: a prediction file numbers them (`numbered`)."""
    columns: str | None = None
    numbered = True

    def read(self, path: Path) -> list[Example]:
        return read_tsv(path, self.columns)

    def with_columns(self, columns: str | None) -> "TsvFile":
        return replace(self, columns=columns) if columns else self


# --------------------------------------------------------------------------- test text

def record_segments(obj, key: str = "") -> Iterator[str]:
    """The test text of a JSON value (the rule in the module docstring), one segment per string."""
    if key and _NOT_TEXT.fullmatch(key):
        return
    if isinstance(obj, str):
        yield from (s for s in obj.split(_CHID_BLANK) if s.strip())
    elif isinstance(obj, list):
        for v in obj:
            yield from record_segments(v)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from record_segments(v, str(k))


class RecordText:
    """The test text of a JSON-lines test file: every record, its text by `record_segments`."""

    def examples(self, task: str, path: Path, split: str) -> Iterator[BenchmarkExample]:
        seen: set[str] = set()
        for where, obj in read_jsonl(path):
            if not isinstance(obj, dict):
                raise ZhBertError(f"{where}: expected a JSON object per line")
            ident = str(obj.get("id", obj.get("idx", where.rsplit(":", 1)[1])))
            if ident in seen:   # csldcp repeats 49 ids for other records: each record is its own example
                ident = f"{ident}@line{where.rsplit(':', 1)[1]}"
            seen.add(ident)
            yield BenchmarkExample(task, ident, "\n".join(record_segments(obj)), split)
