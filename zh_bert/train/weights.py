"""Loading a model folder with one-line errors.

A user's folder can be broken in many ways that transformers reports as a deep traceback: a truncated or
corrupt `model.safetensors` (a killed copy, a full disk), a `config.json` with a non-numeric size, missing
weights. Every command that loads a model goes through `load_pretrained`, so each of these is one line naming
the folder, and a real bug elsewhere still keeps its traceback.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from zh_bert.core.errors import ZhBertError


def _load_errors() -> tuple[type[BaseException], ...]:
    from safetensors import SafetensorError

    return (OSError, ValueError, TypeError, KeyError, AttributeError, json.JSONDecodeError, SafetensorError)


@contextmanager
def _one_line(path: str | Path, what: str) -> Iterator[None]:
    """Any of the ways a model folder can be broken, as a ZhBertError naming the folder."""
    try:
        yield
    except _load_errors() as e:
        raise ZhBertError(f"{path}: cannot load {what}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    return (str(e).strip().split("\n")[0] or type(e).__name__)[:300]


def load_pretrained(cls: Any, path: str | Path, what: str = "a model", **kwargs: Any) -> Any:
    """`cls.from_pretrained(path, **kwargs)` (a model or config class); a broken folder is a ZhBertError."""
    with _one_line(path, what):
        return cls.from_pretrained(str(path), **kwargs)


def init_from_config(cls: Any, path: str | Path, what: str = "a model", **kwargs: Any) -> Any:
    """`cls.from_config(config of path)`: random weights of the folder's architecture. A config that loads
    but cannot build a model (hidden size not divisible by the heads...) is the same one-line error."""
    from transformers import AutoConfig

    config = load_pretrained(AutoConfig, path, "a config", **kwargs)
    with _one_line(path, what):
        return cls.from_config(config)


def check_weights(files: Iterable[str | Path]) -> None:
    """Each safetensors file opens (its header parses and the file is as long as the header says): a copy
    cut short by a kill or a full disk is one line naming it, before any command relies on it."""
    from safetensors import safe_open

    for path in files:
        try:
            with safe_open(str(path), framework="numpy"):
                pass
        except _load_errors() as e:
            raise ZhBertError(f"{path}: cannot open the weights ({_reason(e)}); truncated or corrupt?") from None
