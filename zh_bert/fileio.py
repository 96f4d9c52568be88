"""Atomic outputs: every artifact is written under a temporary name and renamed when complete,
so a killed run or a full disk never leaves a file that looks finished."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator

from zh_bert.errors import ZhBertError


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file beside `path`; rename it onto `path` only if the block finishes without error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    f = open(tmp, mode, encoding=None if "b" in mode else encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj, indent: int | None = 2) -> None:
    with atomic_write(path) as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temp directory beside `path`; on success it replaces `path` in one rename.

    If `path` exists and `overwrite` is False, FileExistsError is raised before anything is written.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a published dir should read like any other
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """A whole text file, or a one-line ZhBertError saying it is missing or not valid `encoding`."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: no such file")
    try:
        return path.read_text(encoding=encoding)
    except UnicodeDecodeError as e:
        raise ZhBertError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_vocab_txt(path: str | os.PathLike) -> list[str]:
    """Tokens of a BERT vocab.txt, one per line. Split on '\\n' only: Google's vocab has U+2028 inside
    two entries, and str.splitlines() would shift every later id."""
    text = Path(path).read_text(encoding="utf-8")
    if text.endswith("\n"):
        text = text[:-1]
    return [t.rstrip("\r") for t in text.split("\n")] if text else []


def write_vocab_txt(path: str | os.PathLike, tokens: list[str]) -> None:
    with atomic_write(path) as f:
        f.write("\n".join(tokens) + "\n")
