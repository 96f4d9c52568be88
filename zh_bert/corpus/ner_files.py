"""NER files: one character (or word) and its tag per line (CoNLL, Resume NER) or one sentence per line (UER's
TSV, MSRA NER), read into sentences; and the test text of a NER test file, for `eval contamination`.

The two layouts are told apart by their content: CoNLL's token and tag per line, tab- or space-separated, a blank
line between sentences (CRLF and a byte-order mark read as LF); UER's TSV of one sentence per line, `text_a` of
space-separated characters TAB `label` of as many tags, header optional. A line with more or fewer fields than
that is one line naming the file and the line; a tag that is not O or PREFIX-TYPE likewise; a file without any tag
is read as untagged (a test file to predict: the task decides whether that is allowed). Tag schemes, entities and
the checks across files are the evaluation stage's (`zh_bert.evaluation.tasks.ner`); this module is at the corpus
stage because the task registry names its reader and `clean --decontaminate` reads NER test text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_text
from zh_bert.corpus.task_files import BenchmarkExample

#: the prefixes a tag of any scheme may have (BIO, BIOES, BMES)
TAG_PREFIXES = frozenset("BIMES")
MAX_NER_BYTES = 512 << 20      # the largest NER file read (MSRA's full train split is ~15 MB)
TSV_HEADER = ("text_a", "label")
_TAG_FIELDS = re.compile(r"[ \t]+")


@dataclass
class Sentence:
    """Characters (or words) and their tags (None: the file has no tags), `where` the file:line it starts at."""
    tokens: list[str]
    tags: list[str] | None
    where: str

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def _lines(path: Path) -> list[str]:
    return read_text(path, encoding="utf-8-sig", max_bytes=MAX_NER_BYTES).replace("\r\n", "\n").split("\n")


def is_tsv(lines: list[str]) -> bool:
    """UER's layout: a `text_a` header, or a first line whose text field holds several space-separated tokens."""
    first = next((line for line in lines if line.strip(" \t\r")), "")
    head = first.split("\t")
    return head[0].strip() == TSV_HEADER[0] or (len(head) == 2 and len(head[0].strip().split(" ")) > 1)


def read_conll(path: Path, lines: list[str]) -> list[Sentence]:
    """One token and its tag per line, a blank line between sentences; all lines one field: an untagged file."""
    rows: list[tuple[int, list[str]]] = []
    for n, line in enumerate(lines, 1):
        line = line.strip(" \t\r")
        rows.append((n, line.split("\t") if "\t" in line else _TAG_FIELDS.split(line)) if line else (n, []))
    widths = {len(r) for _, r in rows if r}
    tagged = widths != {1}
    out, tokens, tags, start = [], [], [], 0
    for n, r in rows + [(len(rows) + 1, [])]:
        if not r:
            if tokens:
                out.append(Sentence(tokens, tags if tagged else None, f"{path}:{start}"))
            tokens, tags = [], []
            continue
        if tagged and len(r) != 2:
            raise ZhBertError(f"{path}:{n}: {len(r)} field{'s' * (len(r) != 1)}, expected 2 (a character and its "
                              f"tag, separated by a tab or spaces)")
        if tagged:
            check_tag(r[1], f"{path}:{n}")
        tokens.append(r[0])
        tags.append(r[1] if tagged else None)
        start = start if len(tokens) > 1 else n
    return out


def read_ner_tsv(path: Path, lines: list[str]) -> list[Sentence]:
    """`text_a<TAB>label` per line, characters and tags separated by single spaces; one column: untagged."""
    rows = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(lines, 1) if line.strip(" \t\r")]
    if rows and tuple(c.strip() for c in rows[0][1]) in (TSV_HEADER, TSV_HEADER[:1]):
        rows = rows[1:]
    tagged = any(len(r) > 1 for _, r in rows)
    out = []
    for n, r in rows:
        if len(r) != (2 if tagged else 1):
            raise ZhBertError(f"{path}:{n}: {len(r)} tab-separated fields, expected {2 if tagged else 1} "
                              f"(text_a of space-separated characters{', TAB label of their tags' * tagged})")
        tokens = r[0].strip(" ").split(" ")
        if "" in tokens:
            raise ZhBertError(f"{path}:{n}: two spaces in a row in text_a (characters are separated by one space)")
        if not tagged:
            out.append(Sentence(tokens, None, f"{path}:{n}"))
            continue
        tags = r[1].split()
        if not tags:
            raise ZhBertError(f"{path}:{n}: a sentence without tags ({len(tokens)} characters, an empty label)")
        if len(tags) != len(tokens):
            raise ZhBertError(f"{path}:{n}: {len(tokens)} characters but {len(tags)} tags")
        for tag in tags:
            check_tag(tag, f"{path}:{n}")
        out.append(Sentence(tokens, tags, f"{path}:{n}"))
    return out


def read_ner(path: str | Path) -> list[Sentence]:
    """A NER file in either layout; one line when it holds no sentence."""
    path = Path(path)
    lines = _lines(path)
    sentences = read_ner_tsv(path, lines) if is_tsv(lines) else read_conll(path, lines)
    if not sentences:
        raise ZhBertError(f"{path}: no sentences")
    return sentences


def check_tag(tag: str, where: str) -> None:
    """A tag is O or PREFIX-TYPE with a prefix of some scheme and a type; one line naming `where` otherwise."""
    prefix, _, kind = tag.partition("-")
    if tag != "O" and (prefix not in TAG_PREFIXES or not kind):
        hint = " (tags are O or B-/I-/M-/E-/S- + a type, e.g. B-PER; suffix styles like PER-B are not read)"
        raise ZhBertError(f"{where}: tag {tag!r} belongs to no known tag scheme{hint}")


class NerFile:
    """The reader a NER task declares: `.read(path)` -> its sentences (either layout)."""
    numbered = True     # sentences have no ids: the prediction files number them from 0

    def read(self, path: Path) -> list[Sentence]:
        return read_ner(path)


class NerText:
    """The test text of a NER test file: each sentence's characters joined, its id the line it starts at."""

    def examples(self, task: str, path: Path, split: str) -> Iterator[BenchmarkExample]:
        for s in read_ner(path):
            yield BenchmarkExample(task, s.where.rsplit(":", 1)[1], s.text, split)
