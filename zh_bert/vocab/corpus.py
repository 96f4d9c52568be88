"""Reading training/report text: `zh-bert clean` JSONL (`{"text", "source"}` per line) or plain .txt
(one document per line). Pure generators, so a corpus is never held in memory twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

from zh_bert.errors import ZhBertError


def iter_docs(paths: Iterable[str | Path]) -> Iterator[str]:
    """Yield the non-blank documents of every file; `.jsonl`/`.json` lines must be objects with a "text"."""
    for path in map(Path, paths):
        if not path.is_file():
            raise ZhBertError(f"{path}: no such file")
        jsonl = path.suffix.lower() in (".jsonl", ".json")
        try:
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    if not jsonl:
                        yield line.rstrip("\n")
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ZhBertError(f"{path}:{lineno}: not valid JSON ({e.msg}); expected "
                                          '{"text": ..., "source": ...} per line (zh-bert clean output)') from None
                    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                        raise ZhBertError(f'{path}:{lineno}: expected an object with a string "text" field')
                    if obj["text"].strip():
                        yield obj["text"]
        except UnicodeDecodeError:
            raise ZhBertError(f"{path}: not UTF-8 text") from None


def read_docs(paths: Iterable[str | Path], max_docs: int | None = None) -> list[str]:
    """All documents (up to `max_docs`) as a list; an empty corpus is an error naming the files."""
    paths = list(paths)
    docs = []
    for doc in iter_docs(paths):
        docs.append(doc)
        if max_docs and len(docs) >= max_docs:
            break
    if not docs:
        raise ZhBertError(f"{', '.join(map(str, paths))}: empty corpus (no non-blank documents)")
    return docs
