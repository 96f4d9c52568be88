"""Reading corpora: cleaned JSONL (`{"text", "source"}` per line, as `zh-bert clean` writes) or plain text
(one document per line). One reader, so every stage reports a broken line the same way."""

from __future__ import annotations

import json
from pathlib import Path

from zh_bert.errors import ZhBertError
from zh_bert.fileio import read_text


def read_documents(paths: list[str]) -> list[str]:
    """Documents from `zh-bert clean` JSONL ({"text": ...}) or plain text (one document per line)."""
    docs = []
    for p in map(Path, paths):
        lines = read_text(p).split("\n")
        first = next((l for l in lines if l.strip()), "")
        is_jsonl = first.lstrip().startswith("{")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if is_jsonl:
                try:
                    text = json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ZhBertError(f"{p}:{n}: expected a JSON object with a \"text\" field") from None
            else:
                text = line
            if text.strip():
                docs.append(text.strip())
    if not docs:
        raise ZhBertError(f"{', '.join(paths)}: no text to evaluate on")
    return docs
