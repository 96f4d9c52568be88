"""What every input reader shares: the document record, the tally of unusable lines (or rows), and the names
of compressed files (opened by `zh_bert.corpus.corpus_io.open_binary`). A module of its own so that the format readers
(readers.py, wikitext.py) depend on it and not on each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.corpus.corpus_io import COMPRESSED  # the endings open_binary decompresses

MAX_RECORDED = 100  # file:line entries kept per problem kind in the report (counts are always exact)


@dataclass
class RawDoc:
    text: str
    source: str
    markup: str = ""  # "wikitext": converted to plain text in the worker process (it is the slow part)


@dataclass
class Problems:
    """Lines (Parquet rows) the readers could not use, by kind ('undecodable', 'bad_json', 'no_text_field',
    'bad_text', 'too_long': a line over `corpus_io.MAX_LINE_BYTES`), with file:line (file#row)."""
    counts: dict = field(default_factory=dict)
    where: dict = field(default_factory=dict)
    encodings: dict = field(default_factory=dict)  # path -> encoding used (detected or given)

    def add(self, kind: str, path, line: int, detail: str = "") -> None:
        self.note(kind, f"{path}:{line}" + (f": {detail}" if detail else ""))

    def note(self, kind: str, entry: str) -> None:
        """One more record of `kind`, at `entry` (`file:line: what`, `file#row: what`)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        entries = self.where.setdefault(kind, [])
        if len(entries) < MAX_RECORDED:
            entries.append(entry)


def inner_name(path: Path) -> str:
    """The lower-cased file name without a .gz/.bz2/.xz/.zst ending (`wiki.xml.bz2` -> `wiki.xml`)."""
    name = path.name.lower()
    for ext in COMPRESSED:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name
