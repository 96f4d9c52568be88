"""Which paths zh-bert may replace or delete: the claims a command made, and the manifests of its folders.

A *claim* is the one check before a command writes (`zh_bert.core.fileio.owned.claim_dir`/`claim_file`): the
target is not the cwd (or above it), not an input, not around or inside one, and every entry it already
holds is listed by a manifest of ours (or, for outputs of older versions, recognised by the writer's
`legacy` rule). A claimed path is recorded in the environment, so the command's worker processes inherit
it. `atomic_write` replaces an existing file only under a claimed path or inside a temp dir of this
process; `atomic_dir` and `remove_owned` touch a folder's entries only when its own manifest lists them.
`--force` lets a claim replace our own finished output; it never widens what counts as ours.
"""

from __future__ import annotations

import os
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio.read import name_problem, read_json


# Temp and old paths this process is using right now: a leftover carrying our own pid but not in here
# was left by an earlier, interrupted call in this process (or a killed process whose pid we now have).
_ACTIVE: set[Path] = set()


MANIFEST = ".zh-bert-manifest.json"   # written last into every folder `atomic_dir` commits


_CLAIMS_ENV = "ZH_BERT_CLAIMED"
STATE_DIR = ".zh-bert"   # OUTDIR/.zh-bert/: an executor job's marker and work files


def _inside(a: Path, b: Path) -> bool:
    """Whether resolved path `a` is `b` or lies under it."""
    return a == b or b in a.parents


def reset_claims() -> None:
    """Forget this process's claims (each CLI command starts with none)."""
    os.environ.pop(_CLAIMS_ENV, None)


def _claims() -> list[Path]:
    return [Path(p) for p in os.environ.get(_CLAIMS_ENV, "").split(os.pathsep) if p]


def _add_claim(path: Path) -> None:
    real = str(Path(path).resolve())
    have = os.environ.get(_CLAIMS_ENV, "").split(os.pathsep)
    if real not in have:
        os.environ[_CLAIMS_ENV] = os.pathsep.join([p for p in have if p] + [real])


def is_claimed(path: str | os.PathLike) -> bool:
    """Whether `path` lies under a claimed target or a temp dir this process is filling."""
    real = Path(path).resolve()
    if STATE_DIR in real.parts:   # the state folder a job keeps inside its output, proven by its job marker
        root = Path(*real.parts[:real.parts.index(STATE_DIR) + 1])
        if (root / "job.json").is_file():
            return True
    if (real.parent / STATE_DIR / "job.json").is_file():
        return True   # a part of an executor job's OUTDIR, which the job claimed before any work: its workers
        #               (forkserver, Slurm, Ray) may not inherit the environment the claim is recorded in
    return any(_inside(real, c) for c in _claims()) or any(_inside(real, t.resolve()) for t in _ACTIVE)


def _check_replace_file(path: Path) -> None:
    if os.path.lexists(path) and not is_claimed(path):
        raise ZhBertError(f"{path}: exists and no manifest of zh-bert's says it wrote it; refusing to replace it")


def manifest_files(folder: str | os.PathLike) -> dict[str, None] | None:
    """The files (relative paths) that `folder`'s manifest lists, or None without a readable one. A manifest
    naming anything but an entry of its own folder (`..`, an absolute path) proves nothing: None."""
    obj = read_json(Path(folder) / MANIFEST, default=None)
    files = obj.get("files") if isinstance(obj, dict) and obj.get("written_by") == "zh-bert" else None
    if not isinstance(files, list) or any(name_problem(f) for f in files):
        return None
    return dict.fromkeys(files)


def foreign_entries(folder: str | os.PathLike, legacy=None, listed=None) -> list[str]:
    """The entries of `folder` that no manifest of ours accounts for (sorted): with a manifest (`MANIFEST`,
    or `listed`: names), every file must be listed; without one, each top-level entry must pass the
    writer's `legacy(name, is_dir)` rule for outputs of older versions (none: every entry is foreign)."""
    folder = Path(folder)
    listed = manifest_files(folder) if listed is None else listed
    if listed is not None:
        out = []
        for p in sorted(folder.rglob("*")):
            rel = p.relative_to(folder).as_posix()
            if p.is_symlink() or (p.is_file() and rel != MANIFEST and rel not in listed):
                out.append(rel)
            elif p.is_dir() and not any(k.startswith(rel + "/") for k in listed):
                out.append(rel + "/")
        return out
    return sorted(p.name for p in folder.iterdir()
                  if p.is_symlink() or legacy is None or not legacy(p.name, p.is_dir()))


def _listing(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def check_dir_ours(path: str | os.PathLike, legacy=None, what: str = "", listed=None) -> None:
    """Refuse (one line) to replace or delete a folder holding anything no manifest of ours lists."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        raise ZhBertError(f"{path}: exists and is not {what or 'a folder zh-bert wrote'}; refusing to replace it")
    foreign = foreign_entries(path, legacy, listed)
    if foreign:
        raise ZhBertError(f"{path}: exists and is not {what or 'a folder zh-bert wrote'} (it holds "
                          f"{_listing(foreign)}); refusing to overwrite it: zh-bert did not write "
                          f"{'them' if len(foreign) > 1 else 'it'}")
