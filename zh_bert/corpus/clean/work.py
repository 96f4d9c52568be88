"""The work files of a `zh-bert clean --executor` job (OUTDIR/.zh-bert/work) and what every task does around
its work: run in the command's directory, record its time span, turn a disk error into one line."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import open_for_write, read_json, remove_scratch

def work_file(path: Path):
    """Work files are written in place, not under temp names: a later stage reads them only after
    datatrove marked the task that wrote them complete, and a rerun of that task rewrites them (temp
    names would also land in the folders datatrove's bucket stage lists)."""
    return open_for_write(path)


def work_json(path: Path, obj) -> None:
    with work_file(path) as f:
        f.write(json.dumps(obj, ensure_ascii=False).encode("utf-8"))


class Work:
    """Paths under OUTDIR/.zh-bert/work: one place that knows the layout every stage reads and writes."""

    def __init__(self, outdir: str):
        self.outdir = Path(outdir)
        self.root = self.outdir / ".zh-bert" / "work"

    def docs(self, r): return self.root / "docs" / f"{r:05d}.jsonl"
    def chars(self, r): return self.root / "chars" / f"{r:05d}.bin"
    def sigs(self, r): return self.root / "sigs" / f"{r:05d}.bin"
    def tally(self, r): return self.root / "tally" / f"{r:05d}.json"
    def removed(self, r): return self.root / "removed" / f"{r:05d}.npy"
    def written(self, r): return self.root / "written" / f"{r:05d}.json"
    def keys(self, kind): return self.root / kind          # datatrove signature folder (bucket_XXX/)
    def dups(self, kind): return self.root / f"{kind}-dups"
    def dedup_summary(self): return self.root / "dedup.json"
    def times(self): return self.root / "times"


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(ZhBertError):
    """A task found no space for the job's files; the command then removes the job's work files."""


def task_spans(work: "Work") -> list[tuple[float, float]]:
    """The (start, end) of every finished task of this job, over all its runs."""
    spans = []
    for p in sorted(work.times().glob("*.json")) if work.times().is_dir() else ():
        span = read_json(p, default=None)
        if span is not None:
            spans.append(tuple(span))
    return spans


def working_seconds(spans: list[tuple[float, float]]) -> float:
    """Seconds during which at least one task was working (the union of the task spans): the time between
    a killed run and its rerun, when nothing ran, does not count; tasks running side by side count once."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


@contextlib.contextmanager
def running_task(outdir: str, stage: str, rank: int, cwd: str):
    """One task of this job, run in the command's directory `cwd` (a forkserver, a Ray or Slurm worker
    starts elsewhere; inputs and -o may be relative, and sources name inputs as the user gave them). Its
    span is recorded once it finished (report.json's seconds), and a disk error is one line; on a full
    disk the task first removes its own work files (its log line then fits)."""
    with contextlib.suppress(OSError):   # a Ray node without that folder: absolute paths still work
        if os.getcwd() != cwd:
            os.chdir(cwd)
    work, t0 = Work(outdir), time.time()
    try:
        yield work
        if work.root.is_dir():   # not after the report task, which removes the work files
            work_json(work.times() / f"{stage}-{rank:05d}.json", [t0, time.time()])
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise ZhBertError(f"{e.filename or '-o ' + outdir}: {e.strerror or e} (stage {stage}, task {rank})") from None
        for p in list(work.root.rglob(f"{rank:05d}*")):
            remove_scratch(p)
        raise DiskFull(f"-o {outdir}: no space left on device (stage {stage}, task {rank}); the job's work files "
                       f"were removed: free some space, or give -o on another disk, and rerun") from None
