"""Cloze items: a passage with one blank, its candidates and the answer, read from JSON lines (ChID's `content`
with its `#idiom#` blank, or a `text` with a [MASK] run). Pure reading, at the corpus stage beside the other task
readers (`task_files`): `eval cloze` reads a user's file with it, and CHID's declaration names it as its reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record
from zh_bert.corpus.corpus_io import read_jsonl

BLANK = re.compile(r"#idiom\d*#")
MAX_ITEM_TEXT = 100_000     # characters of one cloze item's passage (CHID's are under 200)


@dataclass
class ClozeItem:
    where: str                  # file:line
    prefix: str
    suffix: str
    candidates: list[str] | None
    answer: str


def _item(obj, where: str, mask_token: str) -> ClozeItem:
    """One cloze line, its fields asked for by type through `Record`: a wrong one is `file:line: field: ...`."""
    rec = Record.of(obj, where)
    cands = rec.texts("candidates", default=None)
    if cands is not None and (not cands or not all(cands)):
        raise rec.error("candidates", "must be a non-empty list of non-empty strings")
    if "content" in rec:                      # ChID style: "...#idiom#..." + candidates + answer
        text = rec.text("content", max_len=MAX_ITEM_TEXT)
        blanks = BLANK.findall(text)
        if len(blanks) != 1:
            raise rec.error("content", f"must contain exactly one #idiom# blank, found {len(blanks)}")
        if not cands:
            raise rec.error("candidates", "missing: a #idiom# item needs them")
        prefix, suffix = BLANK.split(text)
    elif "text" in rec:                       # plain: "...[MASK]..." + answer (+ candidates)
        text = rec.text("text", max_len=MAX_ITEM_TEXT)
        runs = list(re.finditer(rf"(?:{re.escape(mask_token)})+", text))
        if len(runs) != 1:
            raise rec.error("text", f"must contain exactly one {mask_token} blank (a run of {mask_token}), "
                                    f"found {len(runs)}")
        prefix, suffix = text[:runs[0].start()], text[runs[0].end():]
    else:
        raise ZhBertError(f"{where}: expected 'content' (with #idiom#) or 'text' (with [MASK])")
    return ClozeItem(where, prefix, suffix, cands, _answer(rec, cands))


def _answer(rec: Record, cands: list[str] | None) -> str:
    """The answer's text: a candidate index (checked in range) or the text itself (among the candidates)."""
    ans = rec.raw("answer")
    if isinstance(ans, bool) or ans is None:
        raise rec.error("answer", "missing (a candidate index or the answer text)")
    if isinstance(ans, (int, float)):
        index = rec.integer("answer")
        if not cands or not 0 <= index < len(cands):
            raise rec.error("answer", f"index {index} is out of range for {len(cands or [])} candidates")
        return cands[index]
    ans = rec.text("answer", max_len=MAX_ITEM_TEXT)
    if not ans:
        raise rec.error("answer", "must be a candidate index or a non-empty string")
    if cands and ans not in cands:
        raise rec.error("answer", f"{ans!r} is not among the candidates")
    return ans


def read_cloze(path: str | Path, mask_token: str = "[MASK]") -> list[ClozeItem]:
    items = [_item(obj, where, mask_token) for where, obj in read_jsonl(path)]
    if not items:
        raise ZhBertError(f"{path}: no cloze items")
    return items


@dataclass(frozen=True)
class ClozeFile:
    """A task's files are cloze items (`read_cloze`): each item brings its own candidates."""

    def read(self, path: Path) -> list[ClozeItem]:
        return read_cloze(path)
