"""Corpus stages on an existing engine: datatrove's executors (local processes, Slurm, Ray).

A stage that outgrows one process pool (`zh-bert clean`, `zh-bert shard`) is written as a list of
`Stage`s, each a datatrove pipeline run as N tasks. `run_stages` hands them to one executor kind:

- `local`: `LocalPipelineExecutor`, `--workers` tasks at a time on this machine;
- `slurm`: `SlurmPipelineExecutor`, one job array per stage chained by `afterok` dependencies (the
  command submits and returns; the last stage writes the output's completion file);
- `ray`: `RayPipelineExecutor` on the cluster at `--ray-address` (or a local one).

Every finished task leaves datatrove's completion marker under `--logging-dir`, so rerunning the same
command redoes only unfinished tasks. `JobMarker` ties an output directory to one job's settings: another
job's leftovers are refused unless `--force`.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    claim_dir,
    claim_file,
    parse_json,
    read_json,
    refuse_overlap,
    remove_owned,
    remove_scratch,
    write_json,
)
from zh_bert.core.fileio.claims import STATE_DIR
from zh_bert.core.options import Shared

ExecutorKind = Literal["local", "slurm", "ray"]
SCALE_INSTALL = "pip install 'zh-bert[scale]'  (or: pip install -e \".[scale]\" in a checkout)"
_ENGINE_MODULE = {"local": "datatrove", "slurm": "datatrove", "ray": "ray"}


@dataclass
class ExecutorOptions:
    """The engine flags shared by `zh-bert clean` and `zh-bert shard` (one schema for both)."""
    executor: Optional[ExecutorKind] = option(
        None, help="run on datatrove: local processes, a Slurm cluster or a Ray cluster (default: one "
        "in-process pool; --tasks alone means local)")
    tasks: Optional[int] = option(None, metavar="N", help="datatrove tasks, one output part each (default: "
                                  "4 per worker for local and ray, 64 for slurm)")
    slurm_partition: Optional[str] = option(None, metavar="NAME", help="Slurm partition (--executor slurm)")
    slurm_time: Optional[str] = option(None, metavar="HH:MM:SS", help="Slurm time limit per task "
                                       "(--executor slurm; default 24:00:00)")
    slurm_cpus: Optional[int] = option(None, metavar="N", help="CPUs per Slurm task (--executor slurm; default 1)")
    ray_address: Optional[str] = option(None, metavar="HOST:PORT", help="Ray cluster to join, or 'auto' "
                                        "(--executor ray; default: start a local one)")
    logging_dir: Optional[str] = option(None, metavar="DIR", help="datatrove logs, stats and completion markers "
                                        "(default: OUTDIR/.zh-bert/logs)")
    force: bool = option_of(Shared, "force", help="start over in an output directory that holds another job's unfinished work (its parts and logs are removed)")

    def __post_init__(self):
        if self.executor is not None and self.executor not in _ENGINE_MODULE:
            raise ZhBertError(f"--executor must be one of local, slurm, ray, got '{self.executor}'")
        if self.tasks is not None and self.tasks < 1:
            raise ZhBertError(f"--tasks must be at least 1, got {self.tasks}")
        if self.slurm_cpus is not None and self.slurm_cpus < 1:
            raise ZhBertError(f"--slurm-cpus must be at least 1, got {self.slurm_cpus}")
        if self.executor is None and self.tasks is not None:
            self.executor = "local"
        for name in ("slurm_partition", "slurm_time", "slurm_cpus"):
            if getattr(self, name) is not None and self.executor != "slurm":
                raise ZhBertError(f"--{name.replace('_', '-')} is a Slurm setting: add --executor slurm")
        if self.ray_address is not None and self.executor != "ray":
            raise ZhBertError("--ray-address is a Ray setting: add --executor ray")
        if self.logging_dir is not None and self.executor is None:
            raise ZhBertError("--logging-dir is for datatrove's logs: add --executor local, slurm or ray")

    @property
    def enabled(self) -> bool:
        return self.executor is not None

    def task_count(self, workers: int) -> int:
        return self.tasks or (64 if self.executor == "slurm" else 4 * workers)


def check_engine(opts: ExecutorOptions) -> None:
    """Before any work: the engine is importable, `sbatch` is there for Slurm, the Ray address answers."""
    kind = opts.executor
    if kind is None:
        return
    module = _ENGINE_MODULE[kind]
    if importlib.util.find_spec(module) is None:
        raise ZhBertError(f"--executor {kind} needs {module}, which is not installed: {SCALE_INSTALL}")
    if kind == "slurm" and shutil.which("sbatch") is None:
        raise ZhBertError("--executor slurm: sbatch not found on PATH (run on a Slurm login node)")
    if kind == "ray" and opts.ray_address not in (None, "auto"):
        _check_reachable(opts.ray_address)


def _check_reachable(address: str) -> None:
    """A TCP connect to HOST:PORT, so that a typo fails in a second instead of after Ray's long retries."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ZhBertError(f"--ray-address '{address}' is not HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as e:
        raise ZhBertError(f"--ray-address {address}: no Ray cluster answers there ({e.strerror or e}); start "
                          f"one with `ray start --head --port {port}` or fix the address") from None


@dataclass
class Stage:
    """One datatrove pipeline run as `tasks` tasks; its completion markers live in LOGDIR/`name`."""
    name: str
    steps: list
    tasks: int


def start_method() -> str:
    """fork when this process runs no other Python thread (fast: no re-import); otherwise forkserver,
    because forking while another thread holds a lock (logging, imports) can deadlock the child. fsspec's
    event-loop thread (datatrove's file layer starts it) does not count: fsspec resets it in a forked child."""

    methods = mp.get_all_start_methods()
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and t.name != "fsspecIO"]
    if "fork" in methods and not others:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _executor(stage: Stage, opts: ExecutorOptions, workers: int, logdir: Path, depends):
    folder = str((logdir / stage.name).absolute())   # fsspec caches folders by path: never a relative one
    if opts.executor == "local":
        from datatrove.executor import LocalPipelineExecutor

        return LocalPipelineExecutor(stage.steps, tasks=stage.tasks, workers=min(workers, stage.tasks),
                                     logging_dir=folder, start_method=start_method())
    if opts.executor == "ray":
        from datatrove.executor.ray import RayPipelineExecutor

        return RayPipelineExecutor(stage.steps, tasks=stage.tasks, workers=workers, logging_dir=folder,
                                   cpus_per_task=1, mem_per_cpu_gb=1)
    from datatrove.executor.slurm import SlurmPipelineExecutor

    return SlurmPipelineExecutor(
        stage.steps, tasks=stage.tasks, time=opts.slurm_time or "24:00:00", partition=opts.slurm_partition,
        cpus_per_task=opts.slurm_cpus or 1, mem_per_cpu_gb=4, workers=-1, job_name=f"zh-bert-{stage.name}",
        qos="", logging_dir=folder, depends=depends, requeue=False,
        # the job finds this Python's `launch_pickled_pipeline` and zh_bert whatever its login shell sets
        env_command=f"export PATH={Path(sys.executable).parent}:$PATH; "
                    f"export PYTHONPATH={os.pathsep.join(p for p in sys.path if p)}")


def _ray_init(opts: ExecutorOptions, workers: int) -> None:
    import ray

    if ray.is_initialized():
        return
    try:
        if opts.ray_address:
            ray.init(address=opts.ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = opts.ray_address or "a local cluster"
        raise ZhBertError(f"--executor ray: cannot connect to {where} ({str(e).splitlines()[0]})") from None


def incomplete(stage: Stage, logdir: Path) -> list[int]:
    done = logdir / stage.name / "completions"
    return [r for r in range(stage.tasks) if not (done / f"{r:05d}").is_file()]


@contextlib.contextmanager
def task_logs_to_files():
    """datatrove prints every task's INFO log, its stats and any traceback to the terminal; here each task
    logs to LOGDIR/STAGE/logs/task_NNNNN.log only, the terminal gets warnings, and a failure reaches the
    user as the command's one-line error (the traceback stays in the task's log file)."""
    import datatrove.executor.base as base
    from loguru import logger

    fmt = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"
    saved = base.add_task_logger, base.close_task_logger

    def to_terminal():
        logger.remove()
        logger.add(sys.stderr, level="WARNING", format="{level}: {message}")

    def add_task_logger(logging_dir, rank, local_rank=0, node_rank=-1):
        logger.remove()
        logfile = logging_dir.open(f"logs/task_{rank:05d}.log", "w")
        logger.add(logfile, level="DEBUG", colorize=False, format=fmt, catch=False)   # a full disk: no loguru
                                                                                   # "Logging error" blocks
        logger.info(f"Launching pipeline for {rank=}")
        return logfile

    def close_task_logger(logfile):
        logger.complete()
        to_terminal()
        logfile.close()

    base.add_task_logger, base.close_task_logger = add_task_logger, close_task_logger
    to_terminal()
    try:
        yield
    finally:
        base.add_task_logger, base.close_task_logger = saved
        logger.remove()
        logger.add(sys.stderr)


# --- no process outlives the command ---------------------------------------------------------------
_PDEATHSIG = {"on": False, "forker": 0}


def _before_fork() -> None:
    _PDEATHSIG["forker"] = os.getpid()


def _after_fork_in_child() -> None:
    """In a child forked while `children_die_with_parent` is active: the kernel kills it when its parent
    dies (prctl PR_SET_PDEATHSIG), even by SIGKILL, which no Python cleanup can see; if the parent died
    before this line ran, exit now."""
    if not _PDEATHSIG["on"] or not sys.platform.startswith("linux"):
        return

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # 1 = PR_SET_PDEATHSIG
    if os.getppid() != _PDEATHSIG["forker"]:
        os._exit(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def children_die_with_parent():
    """While active, every process forked here (datatrove's multiprocess Manager and pool workers, and their
    own children) dies with its parent: a `kill -9` of the command leaves no process behind (the Manager
    used to live on forever, ~48 MB)."""
    saved = _PDEATHSIG["on"]
    _PDEATHSIG["on"] = True
    try:
        yield
    finally:
        _PDEATHSIG["on"] = saved


def run_stages(stages: list[Stage], opts: ExecutorOptions, workers: int, logdir: Path, quiet: bool = False) -> bool:
    """Run `stages` in order, each after the previous one finished; tasks finished by an earlier run of
    the same job are skipped. True when everything ran here; False when Slurm jobs were submitted."""
    check_engine(opts)
    if opts.executor == "slurm":
        prev = None
        for stage in stages:
            prev = _executor(stage, opts, workers, logdir, prev)
        prev.run()   # submits every unfinished stage, chained by afterok dependencies
        return False
    with task_logs_to_files(), children_die_with_parent():
        if opts.executor == "ray":
            _ray_init(opts, workers)
        for stage in stages:
            todo = incomplete(stage, logdir)
            if len(todo) < stage.tasks and not quiet:
                print(f"zh-bert: stage {stage.name}: {stage.tasks - len(todo)} of {stage.tasks} tasks finished "
                      f"by an earlier run, skipped", file=sys.stderr)
            if not todo:
                continue
            _executor(stage, opts, workers, logdir, None).run()
            left = incomplete(stage, logdir)
            if left:
                raise ZhBertError(f"stage {stage.name}: tasks {left[:10]} did not finish; see their logs in "
                                  f"{logdir / stage.name / 'logs'} and rerun the same command to finish them")
    return True


# What datatrove writes in a stage's logging folder (`executor.json` at every launch, then per task its
# completion marker, log and stats; Slurm's launch files): only these files are ever deleted from it.
_DATATROVE_TOP = frozenset({"executor.json", "stats.json", "ranks_to_run.json", "executor.pik",
                            "launch_script.slurm"})
_DATATROVE_FILE = re.compile(r"completions/\d{5}|logs/task_\d{5}\.log|stats/\d{5}\.json|slurm_logs/\d+_\d+\.out")


def _datatrove_files(p: Path) -> dict[str, None]:
    """The files of stage folder `p` that datatrove writes (relative paths), by their exact names."""
    return dict.fromkeys(rel for rel in (q.relative_to(p).as_posix() for q in p.rglob("*")
                                         if q.is_file() and not q.is_symlink())
                         if rel in _DATATROVE_TOP or _DATATROVE_FILE.fullmatch(rel))


def remove_stage_folder(p: Path) -> list[str]:
    """Delete what datatrove wrote in a stage folder of a logging dir (its completion markers, logs, stats),
    so that none of them makes a later job skip a task; a file of the user's in it (even in its `logs/`)
    stays, and with it the folder. Returns what was kept."""
    if not p.is_dir() or p.is_symlink() or not (p / "executor.json").is_file():
        return []
    return remove_owned(p, listed=_datatrove_files(p))


class JobMarker:
    """OUTDIR/.zh-bert/job.json: which command and settings own this directory. A rerun of the same job
    resumes; another job is refused unless `force`, which clears what the old job's marker proves it
    wrote (its parts, work and datatrove's stage folders) and nothing else: a file the marker does not
    cover, in OUTDIR or in --logging-dir, is never deleted, and an OUTDIR with no marker is never emptied."""

    def __init__(self, outdir: Path, command: str, settings: dict):
        self.outdir = outdir
        self.state = outdir / ".zh-bert"
        self.path = self.state / "job.json"
        self.command = command
        blob = json.dumps(settings, sort_keys=True, default=str)
        self.job = {"command": command, "key": hashlib.sha256(blob.encode()).hexdigest()[:16],
                    "started": time.time(), "settings": parse_json(blob, f"{command}'s settings")}

    @property
    def started(self) -> float:
        return self.job["started"]

    @staticmethod
    def _read(path: Path) -> dict | None:
        job = read_json(path, default=None)
        return job if isinstance(job, dict) and isinstance(job.get("key"), str) else None

    def claim(self, force: bool, owned, logdir: Path, done: str | None = None, finished=None, inputs=()) -> bool:
        """Take OUTDIR (and `logdir`, whose completion markers decide what a rerun skips) for this job; True
        when it resumes an earlier run of the same job. `owned(path)`: whether a file in OUTDIR is one this
        command writes; `done`: the file whose presence says a job finished, and `finished(OUTDIR)` whether it
        is really this command's finished output (a user's `report.json` is not); `inputs`: the command's
        inputs, which neither folder may be, hold or lie inside. The ownership checks are the layer's
        (`claim_dir`, `refuse_overlap`); nothing is written until every check passed."""
        if os.path.lexists(self.outdir) and (not self.outdir.is_dir() or self.outdir.is_symlink()):
            raise ZhBertError(f"-o {self.outdir}: is a file; give a directory for the parts")
        if os.path.lexists(logdir) and (not logdir.is_dir() or logdir.is_symlink()):
            raise ZhBertError(f"--logging-dir {logdir}: exists and is not a directory; give a directory for the "
                              f"logs")
        old, log_old = self._read(self.path), self._read(logdir / "job.json")
        if old is not None and old["key"] == self.job["key"]:
            self._claim_outdir(old, owned, force, done, finished, inputs)
            if log_old is not None and log_old["key"] != old["key"] and not force:
                raise ZhBertError(f"--logging-dir {logdir}: holds another job's logs; give another directory "
                                  f"or add --force to clear them")
            self._claim_logdir(logdir, log_old, inputs)
            self.job = old
            self._take_logdir(logdir, log_old)
            return True
        changed = self._changed_inputs(old, done)
        if changed:       # the same job on a repaired input: the parts of the old file are useless, and ours
            print(f"{self.command}: {changed[0]}{f' and {len(changed) - 1} more' if len(changed) > 1 else ''} changed "
                  f"since the unfinished run in {self.outdir}; starting over")
            force = True
        self._claim_outdir(old, owned, force, done, finished, inputs)
        if (old is not None or log_old is not None) and not force:
            self._refuse_other_job(old, log_old, logdir, done)
        self._claim_logdir(logdir, log_old, inputs)
        new = not os.path.lexists(self.outdir)
        if not new:   # every entry is proven ours (`_claim_outdir`) and claimed
            for p in self.outdir.iterdir():
                remove_scratch(p)
        write_json(self.path, self.job)
        try:
            self._take_logdir(logdir, log_old)
        except BaseException:   # e.g. a full disk under --logging-dir: no marker of a job that never started
            remove_scratch(self.state)
            if new:
                remove_owned(self.outdir, listed={})   # the folder only if it is still empty
            raise
        return False

    def _changed_inputs(self, old: dict | None, done: str | None) -> list[str]:
        """The inputs that changed (size or modification time) since an unfinished run of this same job, when
        nothing else did (the same command, files and settings): that run cannot be finished, only redone."""
        if old is None or old.get("command") != self.command or (done and (self.outdir / done).is_file()):
            return []
        then, now = old.get("settings"), self.job["settings"]
        if not isinstance(then, dict) or not isinstance(then.get("inputs"), list) or set(then) != set(now):
            return []
        if any(then[k] != now[k] for k in now if k != "inputs") or len(then["inputs"]) != len(now["inputs"]):
            return []
        pairs = list(zip(then["inputs"], now["inputs"]))
        if any(not isinstance(a, list) or not a or a[0] != b[0] for a, b in pairs):
            return []
        return [b[0] for a, b in pairs if a != b]

    def _claim_outdir(self, old: dict | None, owned, force: bool, done: str | None, finished, inputs) -> None:
        """OUTDIR through the ownership layer: new or empty, or every entry one this command writes (`owned`,
        the `legacy` rule) AND a proof that this command wrote them: its job marker, or (`done` present and
        `finished` says it is this command's output, e.g. a clean report zh-bert wrote) the finished output of
        a run whose job state was removed, which only --force replaces. Without a marker, `part-00000.jsonl`
        or `report.json` is the user's, `--force` or not."""
        def proof(p: Path) -> bool:
            if old is not None:
                return old.get("command") == self.command
            return self._finished(done, finished)

        if old is not None and old.get("command") != self.command:
            raise ZhBertError(f"-o {self.outdir}: holds the work of {old.get('command', 'another command')} "
                              f"({self.path.relative_to(self.outdir)}), not of {self.command}; give an empty or new "
                              f"directory")
        unmarked_output = old is None and self._finished(done, finished)
        marked = old is not None or unmarked_output   # without either, no entry is proven ours: all are named
        claim_dir(self.outdir, inputs=inputs, proof=proof, force=force, need_force=unmarked_output,
                  legacy=lambda name, _: marked and (name == STATE_DIR or owned(self.outdir / name)),
                  what=f"an output of {self.command}")

    def _finished(self, done: str | None, finished) -> bool:
        return bool(done) and (self.outdir / done).is_file() and (finished is None or finished(self.outdir))

    def _refuse_other_job(self, old: dict | None, log_old: dict | None, logdir: Path, done: str | None) -> None:
        if old is None:
            raise ZhBertError(f"--logging-dir {logdir}: holds another {log_old.get('command', 'zh-bert')} job's "
                              f"logs; give another directory, or add --force to clear them")
        if done and (self.outdir / done).is_file():
            raise ZhBertError(f"-o {self.outdir}: holds the finished output of another {old.get('command')} job "
                              f"(other inputs or settings); give another directory, or add --force to replace it")
        raise ZhBertError(f"-o {self.outdir}: holds another {old.get('command', 'zh-bert')} job's work "
                          f"(other inputs or settings), not finished; rerun that job's command to finish it, or add --force to "
                          f"start over")

    def _claim_logdir(self, logdir: Path, log_old: dict | None, inputs) -> None:
        """--logging-dir through the ownership layer. A fresh job must not find completion markers it would
        take for its own: without a job marker of ours, the folder must be new or empty (`claim_dir`, no entry
        is ours); with one, its stage folders are the job's (`_take_logdir`) and anything else in it is the
        user's, kept. Never an input, a folder holding one or inside an input directory (a rerun's walk would
        read the logs as input), nor the current directory."""
        if logdir.resolve() == (self.state / "logs").resolve():
            return   # inside OUTDIR's state folder, claimed with OUTDIR
        if log_old is None:
            claim_dir(logdir, inputs=inputs, legacy=lambda name, _: False, flag="--logging-dir",
                      what=f"a logging dir of a {self.command} job")
        else:
            refuse_overlap(logdir, inputs, "--logging-dir")

    def _take_logdir(self, logdir: Path, log_old: dict | None) -> None:
        """Mark `logdir` as this job's. The stage folders of another job (or of an earlier run of this job
        whose OUTDIR was started over) are removed, so their completion markers skip nothing; anything else
        in `logdir` (the user's files beside the logs) is left as it is."""
        if log_old is not None and (log_old["key"], log_old.get("started")) != (self.job["key"], self.started):
            for p in logdir.iterdir() if logdir.is_dir() else ():
                remove_stage_folder(p)
            log_old = None
        if log_old is None:   # a job marker of ours (or none): `_read` proves it
            claim_file(logdir / "job.json", ours=lambda p: self._read(p) is not None, flag="--logging-dir",
                       what="a job marker of zh-bert's")
            write_json(logdir / "job.json", self.job)
