"""Reading corpora: cleaned JSONL (`{"text", "source"}` per line, as `zh-bert clean` writes) or plain text
(one document per line).

One line reader and one JSONL-line parser for every stage (vocab, shard, eval), so a broken corpus is
reported the same way everywhere: `path:line: what is wrong`. Files are streamed line by line; nothing
here holds a corpus in memory unless the caller asks for a list.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from zh_bert.errors import ZhBertError

JSONL_SUFFIXES = (".jsonl", ".json")
_EXPECTED = 'expected `zh-bert clean` output: {"text": ..., "source": ...} per line'


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """What is wrong with the first lone surrogate in `text` (JSON's "\\ud800" decodes to one: it is not a
    Unicode character and cannot be written as UTF-8), or None when there is none."""
    m = _SURROGATE_RE.search(text)
    if m is None:
        return None
    return f"lone surrogate \\u{ord(m.group()):04x} at character {m.start() + 1} (not a Unicode character)"


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) for the non-blank lines of a UTF-8 file. Decoded line by
    line, so a missing file or a byte that is not UTF-8 is a one-line error naming the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: no such file")
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ZhBertError(f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
            if n == 1:
                line = line.removeprefix("\ufeff")
            if line.strip():
                yield n, line.rstrip("\n")


def _json(line: str, path: str | os.PathLike, lineno: int, hint: str = "") -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ZhBertError(f"{path}:{lineno}: not JSON ({e.msg} at column {e.colno}){hint}") from None


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[str, Any]]:
    """("file:line", parsed value) for each non-blank line of any JSON-lines file (task data, cloze items)."""
    for n, line in iter_lines(path):
        yield f"{path}:{n}", _json(line, path, n)


def document_text(line: str, path: str | os.PathLike, lineno: int) -> str:
    """The "text" of one cleaned-JSONL line; anything else is a ZhBertError `path:line: ...`."""
    obj = _json(line, path, lineno, f"; {_EXPECTED}")
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise ZhBertError(f'{path}:{lineno}: no "text" string; {_EXPECTED}')
    bad = lone_surrogate(obj["text"])
    if bad:
        raise ZhBertError(f"{path}:{lineno}: {bad} in \"text\"")
    return obj["text"]


def is_jsonl(path: str | os.PathLike) -> bool:
    """A `.jsonl`/`.json` file, or any file whose first non-blank line is a JSON object."""
    path = Path(path)
    if path.suffix.lower() in JSONL_SUFFIXES:
        return True
    first = next(iter_lines(path), (0, ""))[1]
    return first.lstrip().startswith("{")


def iter_documents(paths: Iterable[str | os.PathLike]) -> Iterator[str]:
    """The documents of every file, stripped, blank ones skipped: cleaned JSONL or one document per line."""
    for path in paths:
        jsonl = is_jsonl(path)
        for n, line in iter_lines(path):
            text = (document_text(line, path, n) if jsonl else line).strip()
            if text:
                yield text


def read_documents(paths: Iterable[str | os.PathLike], max_docs: int | None = None) -> list[str]:
    """All documents of `paths` (the first `max_docs` if given); an empty corpus is an error naming the files."""
    paths = list(paths)
    docs = []
    for doc in iter_documents(paths):
        docs.append(doc)
        if max_docs and len(docs) >= max_docs:
            break
    if not docs:
        raise ZhBertError(f"{', '.join(map(str, paths))}: empty corpus (no text to evaluate or learn from)")
    return docs
