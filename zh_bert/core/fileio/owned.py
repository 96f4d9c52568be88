"""Ownership: zh-bert replaces or deletes only what a manifest of its own proves it wrote."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio.atomic import (
    _DISK_ERRNOS,
    _disk_error,
    _make_parents,
    _remove,
    atomic_write,
    pid_alive,
)
from zh_bert.core.fileio.claims import (
    MANIFEST,
    _add_claim,
    _check_replace_file,
    _inside,
    _listing,
    foreign_entries,
    is_claimed,
    manifest_files,
)
from zh_bert.core.fileio.read import inside, name_problem

# ---------------------------------------------------------------------------------------------------------
# Ownership: zh-bert replaces or deletes only what a manifest of its own proves it wrote.
#
# A *claim* is the one check before a command writes: the target is not the cwd (or above it), not an
# input, not around or inside one, and every entry it already holds is listed by a manifest of ours (or,
# for outputs of older versions, recognised by the writer's `legacy` rule). A claimed path is recorded in
# the environment, so the command's worker processes inherit it; `atomic_write` replaces an existing file
# only under a claimed path or inside a temp dir of this process, and `atomic_dir` / `remove_owned` touch
# a folder's entries only when its own manifest lists them. `--force` lets a claim replace our own
# finished output; it never widens what counts as ours.
# ---------------------------------------------------------------------------------------------------------


def refuse_overlap(path: str | os.PathLike, inputs=(), flag: str = "-o", allow_inside=()) -> None:
    """The targets zh-bert never writes: the current directory or one above it, an input, a folder holding
    an input, a path inside an input directory (whose walk would read the output back as input). Inputs
    lying under one of `allow_inside` are exempt (pretrain's data cache inside its out_dir)."""
    path = Path(path)
    real, cwd = path.resolve(), Path.cwd().resolve()
    where = f"{flag} {path}"
    if _inside(cwd, real):
        raise ZhBertError(f"{where}: is the current directory{' or above it' if real != cwd else ''}; give the "
                          f"output a folder of its own")
    allowed = [Path(a).resolve() for a in allow_inside if a]
    for name in inputs:
        if not name:
            continue
        p = Path(name).resolve()
        if any(_inside(p, a) for a in allowed):
            continue
        if p == real or (os.path.lexists(path) and os.path.lexists(p) and os.path.samefile(p, path)):
            raise ZhBertError(f"{where}: is the input {name} (output and input overlap); give an output apart "
                              f"from the inputs")
        if _inside(p, real):
            raise ZhBertError(f"{where}: holds the input {name} (output and input overlap); give an output "
                              f"apart from the inputs")
        if _inside(real, p) and (p.is_dir() or not os.path.lexists(p)):   # a folder still to be made too
            raise ZhBertError(f"{where}: is inside the input directory {name} (output and input overlap: its "
                              f"walk would read the output back as input); give an output outside it")


def claim_file(path: str | os.PathLike, *, inputs=(), ours=None, force: bool = False, need_force: bool = False,
               flag: str = "-o", what: str = "") -> Path:
    """Claim a single output file: not the cwd's parent chain, not an input (nor inside an input directory);
    an existing one only if `ours(path)` proves zh-bert wrote it (and, with `need_force`, only with --force).
    Returns the path; `atomic_write` may then replace it."""
    path = Path(path)
    refuse_overlap(path, inputs, flag)
    if os.path.lexists(path):
        if path.is_dir() and not path.is_symlink():
            raise ZhBertError(f"{flag} {path}: is a directory; give a file name")
        if path.is_symlink() or ours is None or not ours(path):
            raise ZhBertError(f"{flag} {path}: exists and is not {what or 'a file zh-bert wrote'}; refusing to "
                              f"overwrite it: choose another name")
        if need_force and not force:
            raise ZhBertError(f"{flag} {path}: already exists (add --force to replace it, or choose another name)")
    _add_claim(path)
    return path


def claim_dir(path: str | os.PathLike, *, inputs=(), legacy=None, proof=None, force: bool = False,
              need_force: bool = False, flag: str = "-o", what: str = "", allow_inside=()) -> bool:
    """Claim an output folder before any work: `refuse_overlap`, then an existing folder only when it is
    empty or every entry is ours (`foreign_entries`; `proof(path)`: the writer's marker that a folder
    without a manifest is its own). Returns whether the folder is new or empty."""
    path = Path(path)
    refuse_overlap(path, inputs, flag, allow_inside)
    if not os.path.lexists(path):
        _add_claim(path)
        return True
    what = what or "a folder zh-bert wrote"
    if not path.is_dir() or path.is_symlink():
        raise ZhBertError(f"{flag} {path}: exists and is not {what}: it is not a directory; refusing to "
                          f"overwrite it")
    entries = list(path.iterdir())
    if entries:
        foreign = foreign_entries(path, legacy)
        if foreign:
            raise ZhBertError(f"{flag} {path}: exists and is not {what} (it holds {_listing(foreign)}); refusing to "
                              f"overwrite it: zh-bert did not write {'them' if len(foreign) > 1 else 'it'}")
        if manifest_files(path) is None and proof is not None and not proof(path):
            raise ZhBertError(f"{flag} {path}: exists and is not {what} (it holds {_listing(sorted(p.name for p in entries))} "
                              f"but no marker of zh-bert's); refusing to overwrite it")
    if need_force and not force:
        raise ZhBertError(f"{flag} {path}: already exists (use --force to replace it, or another {flag})")
    _add_claim(path)
    return not entries


def remove_owned(folder: str | os.PathLike, listed=None, legacy=None) -> list[str]:
    """Delete what a manifest of ours lists in `folder` (its `MANIFEST`, or `listed`; without either, the
    top-level entries `legacy` accepts), then the folder if nothing else is left. Returns what was kept:
    the entries zh-bert did not write, which are never deleted."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return []
    listed = manifest_files(folder) if listed is None else listed
    if listed is None:
        for p in folder.iterdir():
            if legacy is not None and not p.is_symlink() and legacy(p.name, p.is_dir()):
                _remove(p)
    else:
        for rel in listed:
            p = inside(folder, rel) if not name_problem(rel) else None   # resolved again: a manifest is only read
            if p is not None and p.is_file() and not p.is_symlink():
                p.unlink()
        with contextlib.suppress(FileNotFoundError):
            (folder / MANIFEST).unlink()
        for d in sorted((p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
    kept = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())
    with contextlib.suppress(OSError):
        folder.rmdir()
    return kept


def remove_scratch(path: str | os.PathLike) -> None:
    """Delete a temp or work folder of our own (a hidden `.NAME.tmp…` staging dir, a folder `scratch_dir`
    made, or a claimed one): these are never a user's."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if not (is_claimed(path) or _temp_name(path.name)):
        raise ZhBertError(f"{path}: not a temp folder of zh-bert's; refusing to delete it")
    _remove(path)


def fresh_staging_dir(path: str | os.PathLike) -> Path:
    """A hidden temp folder of a fixed name (`.NAME.tmp`, which every process of a run writes into: a
    checkpoint), emptied of what a killed earlier attempt left, and claimed."""
    path = Path(path)
    remove_scratch(path)
    try:
        path.mkdir(parents=True)
    except OSError as e:
        if e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise
    _add_claim(path)
    return path


def rename_owned(src: str | os.PathLike, dst: str | os.PathLike, listed=None,
                 legacy=None) -> None:
    """Rename a file or folder of ours (claimed, a temp name of ours, or a folder whose manifest `listed` /
    `legacy` rule accounts for every entry) onto a free name."""
    src, dst = Path(src), Path(dst)
    if os.path.lexists(dst):
        raise ZhBertError(f"{dst}: exists; refusing to rename {src.name} onto it")
    proven = (listed is not None or legacy is not None) and src.is_dir() and not foreign_entries(src, legacy, listed)
    if not (proven or is_claimed(src) or _temp_name(src.name)):
        raise ZhBertError(f"{src}: not written by zh-bert; refusing to move it")
    os.replace(src, dst)


def _temp_name(name: str) -> bool:
    return name.startswith(".") and (".tmp" in name or ".trash" in name or ".old-" in name)


@contextlib.contextmanager
def scratch_dir(prefix: str = "zh-bert-", parent: str | os.PathLike | None = None) -> Iterator[Path]:
    """A private temp folder `<prefix><pid>-XXXX` (claimed), removed on every exit (error, Ctrl-C). Folders
    of the same prefix whose process is gone (killed with -9) are removed first, so a leftover never
    outlives the next run."""

    root = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    for d in root.glob(f"{prefix}*-*"):
        pid = d.name[len(prefix):].split("-")[0]
        if d.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    _add_claim(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# Writers for the few formats whose libraries write by path: each goes through `atomic_write`, so every
# file zh-bert writes passes the ownership check and the one-line disk errors.

def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as f:
        f.write(data)


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    with open(src, "rb") as fin, atomic_write(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


def torch_save(obj, path: str | os.PathLike) -> None:
    import torch

    with atomic_write(path, "wb") as f:
        torch.save(obj, f)


def save_safetensors(tensors: dict, path: str | os.PathLike, metadata: dict | None = None) -> None:
    from safetensors.torch import save

    write_bytes(path, save(tensors, metadata=metadata))


def save_pretrained(obj, folder: str | os.PathLike, **kwargs) -> None:
    """`obj.save_pretrained(folder)` (a transformers model or tokenizer), into a folder this process owns:
    a temp dir of `atomic_dir` or a claimed one (transformers writes by path, so the check comes first)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not is_claimed(folder):
        raise ZhBertError(f"{folder}: not a folder zh-bert is writing; refusing to save a model into it")
    try:
        obj.save_pretrained(str(folder), **kwargs)
    except OSError as e:
        if e.errno in _DISK_ERRNOS:
            raise _disk_error(folder, e) from None
        raise
    except Exception as e:   # the tokenizers library raises a bare Exception for an OS error (tokenizer.json)
        disk = _rust_disk_error(str(e))
        if disk is None:
            raise
        raise _disk_error(folder, disk) from None


#: how the tokenizers library words an OS error it raises as a bare Exception ("No space left on device (os error
#: 28)"): the errno it carries
_OS_ERROR_CODE = re.compile(r"\(os error (\d+)\)")


def _rust_disk_error(message: str) -> OSError | None:
    """The OSError a Rust library's message stands for, when it is a disk error; None for anything else."""
    found = _OS_ERROR_CODE.search(message)
    code = int(found[1]) if found else None
    return OSError(code, os.strerror(code)) if code in _DISK_ERRNOS else None


def open_append(path: str | os.PathLike, encoding: str = "utf-8") -> IO:
    """A log or metrics file opened for appending: new, or under a claimed folder (never a user's file)."""
    path = Path(path)
    _check_replace_file(path)
    _make_parents(path)
    try:
        return open(path, "a", encoding=encoding)
    except OSError as e:
        if e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise


def open_for_write(path: str | os.PathLike, mode: str = "wb") -> IO:
    """A file streamed in pieces (shard arrays, a clean part, a subprocess log) into a folder being built:
    new, or under a claimed path or a temp dir of ours. Written in place, not atomically: the folder it is
    in is committed by `atomic_dir`'s rename, or the task that writes it is rerun whole."""
    path = Path(path)
    _check_replace_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, mode)
    except OSError as e:
        if e.errno in _DISK_ERRNOS:
            raise _disk_error(path, e) from None
        raise


def truncate_owned(path: str | os.PathLike) -> None:
    """Delete one file of ours (a metrics log rewound by a resume, a stale job file) under a claimed path."""
    path = Path(path)
    _check_replace_file(path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
