"""Sentence-pair files, the format of the STS sets C-MTEB scores (STS-B, LCQMC, PAWS-X) and of a user's own pairs:
one pair a line, `sentence1 TAB sentence2 TAB label`, UTF-8, no header, the label a similarity grade (STS-B: 0-5)
or 1/0 (same meaning or not). Under a loss that learns from positive pairs (MNRL), a line may instead hold
`anchor TAB positive TAB hard negative`: a third field that is text throughout the file.

Every line is checked as it is read: a line of two or four fields, an empty sentence, a label that is not a number,
a grade outside the task's declared range, a grade in a binary task: one line naming `file:line`. At the corpus
stage because the task registry names this reader and `clean --decontaminate` reads the sets' test sentences.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.corpus_io import iter_lines
from zh_bert.corpus.task_files import MAX_TEXT, BenchmarkExample

FIELDS = 3      # sentence1, sentence2, label (or hard negative)


@dataclass(frozen=True)
class Pair:
    """One line: two sentences and their label (None on a triplet line, whose third field is `negative`)."""
    a: str
    b: str
    label: float | None
    negative: str | None = None
    where: str = ""


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class PairFile:
    """The reader a pair task declares: `grades` the range a graded label must lie in (STS-B: 0 to 5), `binary`
    labels 1/0 only (LCQMC, PAWS-X), `triplets` whether a third field of text (a hard negative) is read."""
    grades: tuple[float, float] | None = None
    binary: bool = False
    triplets: bool = False
    numbered = True         # its lines have no ids: a prediction file numbers them

    def read(self, path: Path) -> list[Pair]:
        pairs = list(self.lines(Path(path)))
        if not pairs:
            raise ZhBertError(f"{path}: empty file: no sentence pairs (one a line: sentence1 TAB sentence2 TAB label)")
        kinds = {p.label is None for p in pairs}
        if len(kinds) > 1:
            first = next(p for p in pairs if p.label is None)
            raise ZhBertError(f"{first.where}: a hard negative where the file's other lines hold labels; one file "
                              f"holds labelled pairs or triplets, not both")
        return pairs

    def lines(self, path: Path) -> Iterator[Pair]:
        for n, line in iter_lines(path):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != FIELDS:
                raise ZhBertError(f"{where}: {len(fields)} tab-separated field{'s' * (len(fields) != 1)}; a pair line "
                                  f"is sentence1 TAB sentence2 TAB label")
            a, b, third = (f.strip() for f in fields)
            for name, text in (("sentence1", a), ("sentence2", b)):
                if not text:
                    raise ZhBertError(f"{where}: empty {name}")
                if len(text) > MAX_TEXT:
                    raise ZhBertError(f"{where}: {name} of {len(text):,} characters (at most {MAX_TEXT:,})")
            yield Pair(a, b, *self.label(third, where), where=where)

    def label(self, text: str, where: str) -> tuple[float | None, str | None]:
        """(label, None), or (None, hard negative) on a triplet line."""
        value = _finite(text)
        if value is None:
            if self.triplets and text and not self.binary and self.grades is None:
                return None, text
            raise ZhBertError(f"{where}: label {text[:40]!r} is not a number (a grade, or 1/0)")
        if self.binary and value not in (0.0, 1.0):
            raise ZhBertError(f"{where}: label {text}: this task's labels are 1/0 (same meaning or not), not grades")
        if self.grades and not self.grades[0] <= value <= self.grades[1]:
            raise ZhBertError(f"{where}: grade {text} outside this task's range {self.grades[0]:g}-{self.grades[1]:g}")
        return value, None


class PairText:
    """The test text of a pair file: each line's two sentences, one segment each, the line number its id."""

    def examples(self, task: str, path: Path, split: str) -> Iterator[BenchmarkExample]:
        for i, pair in enumerate(PairFile(triplets=True).lines(path)):
            yield BenchmarkExample(task, str(i), "\n".join(s for s in (pair.a, pair.b, pair.negative) if s), split)
