"""Atomic outputs: every artifact is written under a temporary name and renamed when complete,
so a killed run or a full disk never leaves a file that looks finished."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import IO, Iterator

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio.claims import (
    _ACTIVE,
    MANIFEST,
    _check_replace_file,
    check_dir_ours,
)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


# errnos that mean "the disk or the file system said no", not a bug: one line naming the path.
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM}


def fault_point(point: str, step: int | None = None) -> None:
    """The one test hook for faults: SIGKILL this process right after `point` when ZH_BERT_FAULT names it
    (`POINT`, or `POINT@STEP` to pick one training step), so a kill at that exact moment is reproducible.
    Points: `written:NAME` (output complete under its temp name), `replaced:NAME` (renamed into place),
    `between:NAME` (between the two renames of `replace_dir`), `after:POINT` of a checkpoint save
    (`zh_bert.train.checkpoint`), `after:staged` (publish)."""
    want, _, at = os.environ.get("ZH_BERT_FAULT", "").partition("@")
    if want == point and (not at or step is None or int(at) == step):
        os.kill(os.getpid(), signal.SIGKILL)


def _make_parents(path: Path) -> list[Path]:
    """Create the missing folders above `path`; returns them, deepest first, so that a failed write can
    take them away again (`_remove_made`) and leave nothing new behind."""
    made, d = [], path.parent
    while not d.exists() and d != d.parent:
        made.append(d)
        d = d.parent
    path.parent.mkdir(parents=True, exist_ok=True)
    return made


def _remove_made(made: list[Path]) -> None:
    for d in made:
        with contextlib.suppress(OSError):
            d.rmdir()  # only if still empty


class DiskError(ZhBertError):
    """A full or read-only disk, as one line naming the output; `cause` is the OSError."""

    def __init__(self, path: Path, cause: OSError):
        super().__init__(f"{path}: cannot write ({cause.strerror or cause}); nothing was changed")
        self.cause = cause


def _disk_error(path: Path, e: OSError) -> ZhBertError:
    return DiskError(path, e)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file beside `path`; rename it onto `path` only if the block finishes without error.
    An existing `path` is replaced only where zh-bert owns it (`may_replace`). A full disk or a read-only
    folder is a one-line ZhBertError naming `path`; `path` is then unchanged and no temp file is left."""
    path = Path(path)
    if path.is_dir():
        raise ZhBertError(f"{path}: is a directory; give a file name")
    _check_replace_file(path)
    tmp, made = _tmp_name(path), []
    try:
        made = _make_parents(path)
        f = open(tmp, mode, encoding=None if "b" in mode else encoding)
    except OSError as e:
        _remove_made(made)
        if e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise
    try:
        yield f
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        fault_point(f"written:{path.name}")
        os.replace(tmp, path)
        fault_point(f"replaced:{path.name}")
    except BaseException as e:
        with contextlib.suppress(OSError):
            f.close()   # a full disk makes close() flush and fail again: the temp file goes all the same
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _remove_made(made)
        if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise


def write_json(path: str | os.PathLike, obj, indent: int | None = 2) -> None:
    with atomic_write(path) as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (on this machine): its leftovers must not be touched."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftover_pid(name: str, prefix: str) -> int | None:
    """The pid in `.NAME.tmp-PID-xxxx` / `.NAME.old-PID`, or None for a name not made that way."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _stale(p: Path, pid: int) -> bool:
    return p not in _ACTIVE and (pid == os.getpid() or not pid_alive(pid))


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def recover(path: str | os.PathLike) -> None:
    """Undo what an interrupted replace of `path` (file or directory) left beside it, before anything looks
    at `path`: if `path` is missing and an old copy `.NAME.old-PID` of a dead process exists, that copy is
    put back (the replace never finished, so the previous complete output stands); every other leftover of
    a dead process (`.NAME.old-PID` beside a present `path`, `.NAME.tmp-PID...`) is deleted."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    olds, tmps = [], []
    for p in path.parent.iterdir():
        for prefix, bucket in ((f".{path.name}.old-", olds), (f".{path.name}.tmp-", tmps)):
            pid = _leftover_pid(p.name, prefix)
            if pid is not None and _stale(p, pid):
                bucket.append(p)
    if olds and not os.path.lexists(path):
        olds.sort(key=lambda p: p.stat().st_mtime_ns)
        os.replace(olds.pop(), path)
    for p in olds + tmps:
        _remove(p)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one system call (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(a))


def replace_dir(tmp: Path, path: Path) -> None:
    """Put the complete directory `tmp` at `path`, replacing what is there, so that `path` is never
    missing: one atomic exchange where the file system has it; otherwise `path` -> `.NAME.old-PID`, then
    `tmp` -> `path`, and a kill between the two renames is undone by the next `recover(path)`."""
    if not path.exists():
        os.replace(tmp, path)
        fault_point(f"replaced:{path.name}")
        return
    if not os.environ.get("ZH_BERT_FAULT", "").startswith("between:") and _exchange(tmp, path):
        fault_point(f"replaced:{path.name}")
        _remove(tmp)  # now holds the previous copy
        return
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    _ACTIVE.add(old)
    try:
        os.replace(path, old)
        fault_point(f"between:{path.name}")
        os.replace(tmp, path)
        fault_point(f"replaced:{path.name}")
        _remove(old)
    finally:
        _ACTIVE.discard(old)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, overwrite: bool = False, legacy=None) -> Iterator[Path]:
    """Yield a fresh temp directory beside `path`; on success it replaces `path` (see `replace_dir`) and
    carries `MANIFEST` (every file in it), the proof a later replace or delete asks for.

    Leftovers of interrupted earlier runs are recovered first (`recover`). If `path` exists and `overwrite`
    is False, FileExistsError is raised before anything is written; with `overwrite`, a `path` holding an
    entry that neither its manifest nor `legacy` (name, is_dir) -> bool of a writer's older outputs
    lists is refused in one line (`check_dir_ours`). A full disk is a one-line ZhBertError.
    """
    path = Path(path)
    recover(path)
    if path.exists() and not overwrite:
        raise FileExistsError(path)
    if os.path.lexists(path):
        check_dir_ours(path, legacy)
    made = []
    try:
        made = _make_parents(path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent))
    except OSError as e:
        _remove_made(made)
        if e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise
    _ACTIVE.add(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a published dir should read like any other
    try:
        yield tmp
        write_dir_manifest(tmp)
        fault_point(f"written:{path.name}")
        replace_dir(tmp, path)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(made)
        if isinstance(e, DiskError):   # a file inside the temp dir: the user knows the output, not the temp name
            raise _disk_error(path, e.cause) from None
        if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise
    finally:
        _ACTIVE.discard(tmp)


def write_dir_manifest(folder: str | os.PathLike) -> None:
    """`MANIFEST`: the relative path of every file under `folder`, sorted; written last, by the layer only.
    Names only, so that an output reproducible byte for byte stays so."""
    folder = Path(folder)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and not p.is_symlink() and p.name != MANIFEST)
    write_json(folder / MANIFEST, {"written_by": "zh-bert", "files": files}, indent=1)


def write_vocab_txt(path: str | os.PathLike, tokens: list[str]) -> None:
    with atomic_write(path) as f:
        f.write("\n".join(tokens) + "\n")
