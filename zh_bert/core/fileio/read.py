"""Readers that turn a missing, undecodable or broken file into one line naming it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zh_bert.core.errors import ZhBertError


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """A whole text file, or a one-line ZhBertError saying it is missing or not valid `encoding`."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: no such file")
    try:
        return path.read_text(encoding=encoding)
    except UnicodeDecodeError as e:
        raise ZhBertError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


_MISSING = object()


def read_json(path: str | os.PathLike, default: Any = _MISSING) -> Any:
    """A whole JSON file; a missing, unreadable or broken file is a one-line ZhBertError naming the file
    and the line, or `default` when one is given (for optional files: a run's summary, a card's metrics)."""
    path = Path(path)
    try:
        return json.loads(read_text(path))
    except (ZhBertError, OSError) as e:
        if default is not _MISSING:
            return default
        if isinstance(e, ZhBertError):
            raise
        raise ZhBertError(f"{path}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        if default is not _MISSING:
            return default
        raise ZhBertError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def read_vocab_txt(path: str | os.PathLike) -> list[str]:
    """Tokens of a BERT vocab.txt, one per line. Split on '\\n' only: Google's vocab has U+2028 inside
    two entries, and str.splitlines() would shift every later id."""
    text = Path(path).read_text(encoding="utf-8")
    if text.endswith("\n"):
        text = text[:-1]
    return [t.rstrip("\r") for t in text.split("\n")] if text else []
