"""`zh-bert clean ... -o OUTDIR --executor local|slurm|ray --tasks N`: the same cleaning as the in-process
path, as datatrove stages, with deduplication across all tasks on disk (no process holds a corpus-sized index).

Stages (each a datatrove job; finished tasks are skipped when the same command is rerun):

1. `clean` (N tasks): task r reads bytes [r*B/N, (r+1)*B/N) of the inputs laid end to end (`plan_shares`:
   a big line-delimited file is cut at line boundaries, a Parquet file at row groups (those that start in the
   range), a compressed or multi-line-record file goes whole to one task; input order kept), runs `DocCleaner`
   (the function the in-process path runs) and writes the kept documents, their exact keys and MinHash band
   keys (datatrove's `.minhash.sig` record format, sorted) and full signatures.
2. `exact-buckets` (1 task) and `minhash-buckets` (one task per band): datatrove's `MinhashDedupBuckets`
   merges the sorted key files of all tasks and writes candidate pairs.
3. `dedup` (1 task): decides which documents go, with the in-process rule and code: a document is an exact
   duplicate when an earlier one has its key; otherwise a near duplicate when it shares a band with an earlier
   *kept* document and their signatures agree on at least `--minhash-threshold` of the permutations
   (`LSHIndex`, replayed over each group of band-sharing documents in input order).
4. `write` (N tasks): OUTDIR/part-{r:05d}.jsonl[.gz] = task r's documents minus the removed ones.
5. `report` (1 task): OUTDIR/report.json, merged over all tasks, written last: its presence means complete.

"Earlier" is global input order (task rank, then position = file order, then offset), so the kept documents
are those the in-process path keeps. report.json's `seconds` is the union of the finished tasks' spans.
The work files and each task's bookkeeping are in work.py, the merged report in report.py.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.minhash import MinhashDedupBuckets

from zh_bert.corpus.clean.cleaner import DocCleaner, batched
from zh_bert.corpus.clean.dedup import LSHIndex, lsh_params
from zh_bert.corpus.clean.readers import check_inputs, expand_inputs, read_input, splittable
from zh_bert.corpus.clean.report import Tally, file_digest, merge_report, read_report
from zh_bert.corpus.clean.source import Problems
from zh_bert.corpus.clean.work import (DISK_FULL, DiskFull, Work, running_task, task_spans, work_file, work_json,
                                working_seconds)
from zh_bert.corpus.corpus_io import CLEAN_REPORT, Segment, plan_shares
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.executors import JobMarker, Stage, check_engine, remove_stage_folder, run_stages
from zh_bert.core.fileio import (atomic_write, open_for_write, read_json, recover, refuse_overlap, remove_scratch,
                            truncate_owned, write_json)

PART = "part-{:05d}.jsonl"
_KEY_WORDS = 4   # a 16-byte exact key as 4 uint32 "hashes" of one datatrove bucket


class _JobStep(PipelineStep):
    """A step of this job's stages: `task(work, rank)` runs inside `running_task` (directory, timing, disk
    errors)."""
    stage = ""

    def __init__(self):
        super().__init__()
        self.cwd = os.getcwd()

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with running_task(self.outdir, self.stage, rank, self.cwd) as work, self.track_time():
            self.task(work, rank)
        yield from ()   # a datatrove step is a generator


class _BucketStep(MinhashDedupBuckets):
    """datatrove's bucket stage, timed and with disk errors handled like the other tasks."""

    def __init__(self, outdir: str, stage: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outdir, self.stage, self.cwd = outdir, stage, os.getcwd()

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with running_task(self.outdir, self.stage, rank, self.cwd):
            super().run(data, rank, world_size)
        yield from ()


class KeyRecords:
    """A task's dedup keys in datatrove's `.minhash.sig` record layout (key words × uint32, doc index uint32).
    Records are appended to one unsorted file per band as documents come, then each band is sorted on its
    own into `bucket_XXX/{rank}.minhash.sig` (sorted by key, then index, as `MinhashDedupBuckets` requires):
    a task holds one band's records at a time, never its signatures."""

    def __init__(self, work: "Work", rank: int, config):
        self.rank, self.bands = rank, []   # (unsorted file, sorted destination folder, column slice)
        if config.dedup != "none":
            self.bands.append(("exact", work.keys("exact") / "bucket_000", slice(0, _KEY_WORDS)))
        if config.dedup == "minhash":
            bands, rows = lsh_params(config.minhash.threshold, config.minhash.num_perm)
            self.bands += [(f"band{b}", work.keys("minhash") / f"bucket_{b:03d}", slice(b * rows, (b + 1) * rows))
                           for b in range(bands)]
        self.tmp = work.root / "unsorted" / f"{rank:05d}"
        self.files = {name: work_file(self.tmp / f"{name}.bin") for name, _, _ in self.bands}
        self.n = 0

    def add(self, keys: list[bytes], sigs: list) -> None:
        """One batch: exact keys (16 bytes each) and MinHash signatures of the documents kept, in order."""
        idx = np.arange(self.n, self.n + len(keys), dtype="<u4")[:, None]
        self.n += len(keys)
        if not keys:
            return
        exact = np.frombuffer(b"".join(keys), dtype="<u4").reshape(len(keys), _KEY_WORDS)
        sig = np.stack(sigs).astype("<u4") if sigs and sigs[0] is not None else None
        for name, _, cols in self.bands:
            src = exact if name == "exact" else sig
            self.files[name].write(np.hstack([src[:, cols], idx]).astype("<u4").tobytes())

    def close(self) -> None:
        """Close the unsorted files (also when the task fails: an open deleted file keeps its disk space)."""
        for f in self.files.values():
            f.close()

    def finish(self) -> None:
        self.close()
        for name, folder, cols in self.bands:
            rec = np.fromfile(self.tmp / f"{name}.bin", dtype="<u4").reshape(self.n, cols.stop - cols.start + 1)
            order = np.lexsort([rec[:, j] for j in reversed(range(rec.shape[1]))])
            with work_file(folder / f"{self.rank:05d}.minhash.sig") as f:
                f.write(rec[order].tobytes())
        remove_scratch(self.tmp)


class CleanTaskStep(_JobStep):
    """Stage 1, task r: read, clean (DocCleaner), write documents, keys and signatures for the dedup stages."""
    name = "zh-bert clean"
    type = "🧹 - CLEAN"
    stage = "clean"

    def __init__(self, shares: list[list[Segment]], read, config, outdir: str):
        super().__init__()
        self.shares, self.read, self.config, self.outdir = shares, read, config, outdir

    def task(self, work: "Work", rank: int) -> None:
        cfg = self.config
        cleaner, tally, problems, per_file = DocCleaner(cfg), Tally(), Problems(), {}

        def docs():
            for f, start, end in self.shares[rank]:
                n = 0
                for d in read_input(Path(f), self.read, problems, None if end < 0 else (f, start, end)):
                    n += 1
                    yield d
                per_file[f] = per_file.get(f, 0) + n

        keys = KeyRecords(work, rank, cfg)
        with contextlib.closing(keys), work_file(work.docs(rank)) as fdocs, work_file(work.sigs(rank)) as fsigs, \
                work_file(work.chars(rank)) as fchars:
            for batch in batched(docs()):
                res = cleaner(batch)
                tally.add_batch(res)
                for reason, n in res.rejected.items():
                    self.stat_update(reason, value=n)
                if res.kept:
                    lines, nchars, exact, sigs = zip(*res.kept)
                    fdocs.write(("\n".join(lines) + "\n").encode("utf-8"))
                    fchars.write(np.asarray(nchars, dtype="<i8").tobytes())
                    if sigs[0] is not None:
                        fsigs.write(np.stack(sigs).astype("<u4").tobytes())
                    keys.add(list(exact), list(sigs))
                self.stat_update("kept", value=len(res.kept))
            keys.finish()
        work_json(work.tally(rank), {**{k: dict(v) if isinstance(v, dict) else v for k, v in vars(tally).items()},
                                      "problems": asdict(problems), "per_file": per_file})


def _pairs(folder: Path) -> np.ndarray:
    """All candidate pairs datatrove's bucket stage wrote: (n, 4) uint32 rows (rank1, doc1, rank2, doc2)."""
    arrs = [np.fromfile(p, dtype="<u4").reshape(-1, 4) for p in sorted(folder.glob("*.dups"))]
    return np.concatenate(arrs) if arrs else np.zeros((0, 4), "<u4")


def _components(edges: np.ndarray) -> dict[int, list[int]]:
    """Connected components of an undirected graph on int64 node ids: root → sorted members."""
    parent: dict[int, int] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    comps: dict[int, list[int]] = {}
    for x in parent:
        comps.setdefault(find(x), []).append(x)
    return {r: sorted(m) for r, m in comps.items()}


def _pair_ids(pairs: np.ndarray) -> np.ndarray:
    """(rank, doc) pairs → int64 ids ordered like the input: rank first, then position."""
    p = pairs.astype(np.int64)
    return np.stack([(p[:, 0] << 32) | p[:, 1], (p[:, 2] << 32) | p[:, 3]], axis=1)


class DedupStep(_JobStep):
    """Stage 3 (one task): exact duplicates, then near duplicates among the documents exact dedup keeps,
    each decided against the earlier kept documents it shares a band with (the in-process rule and code)."""
    name = "zh-bert dedup"
    type = "🫂 - DEDUP"
    stage = "dedup"

    def __init__(self, outdir: str, tasks: int, config):
        super().__init__()
        self.outdir, self.tasks, self.config = outdir, tasks, config

    def task(self, work: "Work", rank: int) -> None:
        removed: dict[int, str] = {}
        exact = _pairs(work.dups("exact")) if self.config.dedup != "none" else np.zeros((0, 4), "<u4")
        for members in _components(_pair_ids(exact)).values():
            for x in members[1:]:
                removed[x] = "exact"
        if self.config.dedup == "minhash":
            self._near(work, removed)
        by_rank: dict[int, list[int]] = {r: [] for r in range(self.tasks)}
        for x in removed:
            by_rank[x >> 32].append(x & 0xFFFFFFFF)
        for r, idx in by_rank.items():
            with open_for_write(work.removed(r)) as f:
                np.save(f, np.sort(np.asarray(idx, dtype=np.int64)))
        counts = {"exact": 0, "near": 0}
        for why in removed.values():
            counts[why] += 1
            self.stat_update(why)
        work_json(work.dedup_summary(), counts)

    def _near(self, work: Work, removed: dict[int, str]) -> None:
        """Near duplicates with the in-process code itself (`LSHIndex`, the one rule): datatrove's bucket
        stage links the documents of each band bucket in a chain of consecutive pairs, so a connected
        component holds every document that shares a band with any of its members, exact copies included
        (they link a later near copy to the first occurrence). Replaying a component's documents in input
        order through a fresh index, exact-removed ones left out as the in-process path leaves them out,
        takes the in-process decisions: no document outside the component shares a band with one inside."""
        mh = self.config.minhash
        row_bytes = 4 * mh.num_perm

        def sig(x):   # read, not memory-mapped: touched pages would stay in this process's RSS
            return np.fromfile(work.sigs(x >> 32), dtype="<u4", count=mh.num_perm, offset=(x & 0xFFFFFFFF) * row_bytes)

        for members in _components(_pair_ids(_pairs(work.dups("minhash")))).values():
            index = LSHIndex(mh)
            for x in members:
                if x not in removed and index.add_or_match(sig(x).astype(np.uint32)):
                    removed[x] = "near"


class WritePartStep(_JobStep):
    """Stage 4, task r: OUTDIR/part-r = task r's kept documents, copied line by line (no re-encoding)."""
    name = "zh-bert write parts"
    type = "💽 - WRITER"
    stage = "write"

    def __init__(self, outdir: str, compression: str):
        super().__init__()
        self.outdir, self.compression = outdir, compression

    def task(self, work: "Work", rank: int) -> None:
        removed = np.load(work.removed(rank))        # sorted document indices
        chars = np.fromfile(work.chars(rank), dtype="<i8")
        name = PART.format(rank) + (".gz" if self.compression == "gzip" else "")
        recover(Path(self.outdir) / name)   # a killed earlier attempt's temp file
        docs = n_chars = 0
        with atomic_write(Path(self.outdir) / name, "wb") as raw:
            out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) \
                if self.compression == "gzip" else raw
            with open(work.docs(rank), "rb") as f:
                drop = iter(removed.tolist() + [-1])
                next_drop = next(drop)
                for i, line in enumerate(f):
                    if i == next_drop:
                        next_drop = next(drop)
                        continue
                    out.write(line)
                    docs += 1
                    n_chars += int(chars[i])
            if out is not raw:
                out.close()
        path = Path(self.outdir) / name
        if docs == 0:
            truncate_owned(path)
        size, digest = file_digest(path) if docs else (0, None)
        self.stat_update("documents", value=docs)
        work_json(work.written(rank), {"name": name, "docs": docs, "chars": n_chars, "bytes": size,
                                        "sha256": digest})


class ReportStep(_JobStep):
    """Stage 5 (one task): OUTDIR/report.json from every task's tally, written last; then the work files go."""
    name = "zh-bert clean report"
    type = "📊 - STATS"
    stage = "report"

    def __init__(self, outdir: str, tasks: int, report_info: dict):
        super().__init__()
        self.outdir, self.tasks, self.info = outdir, tasks, report_info

    def task(self, work: "Work", rank: int) -> None:
        outdir, t0 = Path(self.outdir), time.time()
        seconds = working_seconds(task_spans(work) + [(t0, time.time())])
        report = merge_report([read_json(work.tally(r)) for r in range(self.tasks)],
                              read_json(work.dedup_summary()),
                              [read_json(work.written(r)) for r in range(self.tasks)],
                              {**self.info, "seconds": seconds})
        if report["docs_out"] == 0:
            raise ZhBertError(f"no documents in {', '.join(self.info['input_names'][:3])}: {report['docs_in']} read, "
                              f"none left after cleaning (filtered: {report['filtered'] or 'none'}; unreadable "
                              f"lines: {report['unreadable']['counts'] or 'none'}); nothing written")
        write_json(outdir / CLEAN_REPORT, report)
        remove_scratch(work.root)


def clean_on_executor(job) -> dict | None:
    """Run `job` on its executor; the report dict once OUTDIR is complete, None when Slurm jobs were submitted."""
    opts, out = job.engine, Path(job.output)
    if out.name.endswith((".jsonl", ".json", ".gz")):
        raise ZhBertError(f"-o {out}: with --executor the output is a directory of parts; give a directory "
                          f"name such as {out.parent / out.name.split('.')[0]}/")
    check_engine(opts)   # before anything is written
    refuse_overlap(out, job.inputs, "-o")   # emptied and filled with parts: never an input, around or in one
    files, skipped = expand_inputs(job.inputs)
    if not files:
        raise ZhBertError(f"no input files found in {', '.join(job.inputs)}")
    check_inputs(files, job.read)
    workers = job.workers or len(os.sched_getaffinity(0))
    tasks = opts.task_count(workers)
    settings = {"inputs": [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files],
                "read": asdict(job.read), "config": asdict(job.config), "tasks": tasks,
                "compression": job.compression}
    marker = JobMarker(out, "zh-bert clean", settings)
    logdir = Path(opts.logging_dir) if opts.logging_dir else marker.state / "logs"
    resumed = marker.claim(opts.force, logdir=logdir, done=CLEAN_REPORT, inputs=job.inputs,
                           finished=lambda d: read_report(d) is not None,
                           owned=lambda p: p.name == CLEAN_REPORT or p.name.lstrip(".").startswith("part-"))
    if resumed and (out / CLEAN_REPORT).is_file():
        return read_json(out / CLEAN_REPORT)
    stages = _clean_stages(job, out, files, skipped, tasks, workers)
    try:   # absolute folders: datatrove's file layer (fsspec) caches folder objects by the path given
        ran = run_stages(stages, opts, workers, logdir.absolute(), quiet=job.quiet)
        if not ran:
            return None
    except (DiskFull, OSError) as e:
        if isinstance(e, OSError) and e.errno not in DISK_FULL:
            raise ZhBertError(f"{e.filename or '-o ' + str(out)}: {e.strerror or e}") from None
        _reset(out, logdir, stages)
        if isinstance(e, DiskFull):
            raise
        raise DiskFull(f"-o {out}: no space left on device; the job's work files were removed: free some "
                       f"space, or give -o on another disk, and rerun") from None
    return read_json(out / CLEAN_REPORT)


def _reset(out: Path, logdir: Path, stages: list[Stage]) -> None:
    """After a full disk: remove what this job wrote so far (work files, parts, its stages' completion
    markers, so that a rerun starts over), keeping only its marker: nothing half-done fills the disk."""
    remove_scratch(Work(str(out)).root)
    for stage in stages:
        remove_stage_folder(logdir / stage.name)
    for p in out.glob("*part-*"):
        truncate_owned(p)


def _clean_stages(job, out: Path, files: list[Path], skipped: list[str], tasks: int, workers: int) -> list[Stage]:
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.utils.hashing import HashConfig

    mh = job.config.minhash
    bands, rows = lsh_params(mh.threshold, mh.num_perm)
    where = str(out.absolute())   # for the tasks: fsspec caches folder objects by path, whatever the cwd
    info = {"outdir": str(out), "tasks": tasks, "executor": job.engine.executor,
            "workers": workers, "skipped": skipped, "input_names": [str(f) for f in files],
            "read_encoding": job.read.encoding if job.read.encoding != "auto" else "utf-8",
            "options": {"format": job.read.fmt, "doc_sep": job.read.doc_sep, "field": job.read.field_name or "text",
                        "encoding": job.read.encoding, "compression": job.compression, **asdict(job.config)}}

    def buckets(kind, n_buckets, words):
        cfg = MinhashConfig(num_buckets=n_buckets, hashes_per_bucket=words,
                            hash_config=HashConfig(precision=32, hash_fc="sha1"))
        work = Work(where)
        return Stage(f"{kind}-buckets", [_BucketStep(where, f"{kind}-buckets", str(work.keys(kind)),
                                                     str(work.dups(kind)), config=cfg)], n_buckets)

    shares = plan_shares(files, tasks, whole=lambda p: not splittable(p, job.read))
    stages = [Stage("clean", [CleanTaskStep(shares, job.read, job.config, where)], tasks)]
    if job.config.dedup != "none":
        stages.append(buckets("exact", 1, _KEY_WORDS))
    if job.config.dedup == "minhash":
        stages.append(buckets("minhash", bands, rows))
    return stages + [Stage("dedup", [DedupStep(where, tasks, job.config)], 1),
                     Stage("write", [WritePartStep(where, job.compression)], tasks),
                     Stage("report", [ReportStep(where, tasks, info)], 1)]
