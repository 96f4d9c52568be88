"""`zh-bert clean ... -o OUTDIR --executor local|slurm|ray --tasks N`: the same cleaning as the in-process
path, as datatrove stages, with deduplication across all tasks on disk (no process holds a corpus-sized index).

Stages (each a datatrove job; finished tasks are skipped when the same command is rerun):

1. `clean` (N tasks): task r reads its contiguous share of the input files (balanced by bytes, input order
   kept), runs `DocCleaner` (the function the in-process path runs) and writes the kept documents, their
   exact keys and MinHash band keys (datatrove's `.minhash.sig` record format, sorted) and full signatures.
2. `exact-buckets` (1 task) and `minhash-buckets` (one task per band): datatrove's `MinhashDedupBuckets`
   merges the sorted key files of all tasks and writes candidate pairs.
3. `dedup` (1 task): decides which documents go, with the in-process rule: a document is an exact duplicate
   when an earlier one has its key; otherwise a near duplicate when it shares a band with an earlier *kept*
   document and their signatures agree on at least `--minhash-threshold` of the permutations.
4. `write` (N tasks): OUTDIR/part-{r:05d}.jsonl[.gz] = task r's documents minus the removed ones.
5. `report` (1 task): OUTDIR/report.json, merged over all tasks, written last: its presence means complete.

"Earlier" is global input order (task rank, then position), so the kept documents are those the
in-process path keeps.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from datatrove.pipeline.base import PipelineStep

from zh_bert.clean.dedup import lsh_params
from zh_bert.clean.report import Tally, file_digest
from zh_bert.clean.source import Problems
from zh_bert.corpus_io import CLEAN_REPORT
from zh_bert.errors import ZhBertError
from zh_bert.executors import JobMarker, Stage, check_engine, run_stages
from zh_bert.fileio import atomic_write, recover, write_json

PART = "part-{:05d}.jsonl"
_KEY_WORDS = 4   # a 16-byte exact key as 4 uint32 "hashes" of one datatrove bucket


def _work_file(path: Path):
    """Work files are written in place, not under temp names: a later stage reads them only after
    datatrove marked the task that wrote them complete, and a rerun of that task rewrites them (temp
    names would also land in the folders datatrove's bucket stage lists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")


def _work_json(path: Path, obj) -> None:
    with _work_file(path) as f:
        f.write(json.dumps(obj, ensure_ascii=False).encode("utf-8"))


def assign_files(files: list[Path], tasks: int) -> list[list[str]]:
    """Contiguous runs of `files` (input order kept), about equal in bytes: task r gets the files whose
    first byte falls in [r, r+1) * total / tasks. A task may get none (more tasks than files)."""
    sizes = np.array([max(1, f.stat().st_size) for f in files], dtype=np.float64)
    starts = np.concatenate([[0.0], np.cumsum(sizes)[:-1]]) / sizes.sum() * tasks
    shares: list[list[str]] = [[] for _ in range(tasks)]
    for f, s in zip(files, starts):
        shares[min(tasks - 1, int(s))].append(str(f))
    return shares


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
        self.files = {name: _work_file(self.tmp / f"{name}.bin") for name, _, _ in self.bands}
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

    def finish(self) -> None:
        for name, folder, cols in self.bands:
            self.files[name].close()
            rec = np.fromfile(self.tmp / f"{name}.bin", dtype="<u4").reshape(self.n, cols.stop - cols.start + 1)
            order = np.lexsort([rec[:, j] for j in reversed(range(rec.shape[1]))])
            with _work_file(folder / f"{self.rank:05d}.minhash.sig") as f:
                f.write(rec[order].tobytes())
        shutil.rmtree(self.tmp, ignore_errors=True)


class CleanTaskStep(PipelineStep):
    """Stage 1, task r: read, clean (DocCleaner), write documents, keys and signatures for the dedup stages."""
    name = "zh-bert clean"
    type = "🧹 - CLEAN"

    def __init__(self, shares: list[list[str]], read, config, outdir: str):
        super().__init__()
        self.shares, self.read, self.config, self.outdir = shares, read, config, outdir

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        from zh_bert.clean import DocCleaner, batched
        from zh_bert.clean.readers import read_input

        work, cfg = Work(self.outdir), self.config
        cleaner, tally, problems, per_file = DocCleaner(cfg), Tally(), Problems(), {}

        def docs():
            for f in self.shares[rank]:
                n = 0
                for d in read_input(Path(f), self.read, problems):
                    n += 1
                    yield d
                per_file[f] = n

        keys = KeyRecords(work, rank, cfg)
        with self.track_time(), _work_file(work.docs(rank)) as fdocs, _work_file(work.sigs(rank)) as fsigs, \
                _work_file(work.chars(rank)) as fchars:
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
        _work_json(work.tally(rank), {**{k: dict(v) if isinstance(v, dict) else v for k, v in vars(tally).items()},
                                      "problems": asdict(problems), "per_file": per_file})
        return
        yield  # a datatrove step is a generator


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


def _ids(pairs: np.ndarray) -> np.ndarray:
    """(rank, doc) pairs → int64 ids ordered like the input: rank first, then position."""
    p = pairs.astype(np.int64)
    return np.stack([(p[:, 0] << 32) | p[:, 1], (p[:, 2] << 32) | p[:, 3]], axis=1)


class DedupStep(PipelineStep):
    """Stage 3 (one task): exact duplicates, then near duplicates among the documents exact dedup keeps,
    each decided against earlier kept documents only (the in-process rule), verified on full signatures."""
    name = "zh-bert dedup"
    type = "🫂 - DEDUP"

    def __init__(self, outdir: str, tasks: int, config):
        super().__init__()
        self.outdir, self.tasks, self.config = outdir, tasks, config

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        work = Work(self.outdir)
        removed: dict[int, str] = {}
        with self.track_time():
            exact = _pairs(work.dups("exact")) if self.config.dedup != "none" else np.zeros((0, 4), "<u4")
            for members in _components(_ids(exact)).values():
                for x in members[1:]:
                    removed[x] = "exact"
            if self.config.dedup == "minhash":
                self._near(work, removed)
            by_rank: dict[int, list[int]] = {r: [] for r in range(self.tasks)}
            for x in removed:
                by_rank[x >> 32].append(x & 0xFFFFFFFF)
            for r, idx in by_rank.items():
                with _work_file(work.removed(r)) as f:
                    np.save(f, np.sort(np.asarray(idx, dtype=np.int64)))
            counts = {"exact": 0, "near": 0}
            for why in removed.values():
                counts[why] += 1
                self.stat_update(why)
            _work_json(work.dedup_summary(), counts)
        return
        yield

    def _near(self, work: Work, removed: dict[int, str]) -> None:
        mh = self.config.minhash
        row_bytes = 4 * mh.num_perm

        def sig(x):   # read, not memory-mapped: touched pages would stay in this process's RSS
            return np.fromfile(work.sigs(x >> 32), dtype="<u4", count=mh.num_perm, offset=(x & 0xFFFFFFFF) * row_bytes)

        edges = _ids(_pairs(work.dups("minhash")))
        edges = edges[[a not in removed and b not in removed for a, b in edges.tolist()]] if len(edges) else edges
        for members in _components(edges).values():
            kept = [sig(members[0])]
            for x in members[1:]:
                s = sig(x)
                if any((k == s).mean() >= mh.threshold for k in kept):
                    removed[x] = "near"
                else:
                    kept.append(s)


class WritePartStep(PipelineStep):
    """Stage 4, task r: OUTDIR/part-r = task r's kept documents, copied line by line (no re-encoding)."""
    name = "zh-bert write parts"
    type = "💽 - WRITER"

    def __init__(self, outdir: str, compression: str):
        super().__init__()
        self.outdir, self.compression = outdir, compression

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        work = Work(self.outdir)
        removed = np.load(work.removed(rank))        # sorted document indices
        chars = np.fromfile(work.chars(rank), dtype="<i8")
        name = PART.format(rank) + (".gz" if self.compression == "gzip" else "")
        recover(Path(self.outdir) / name)   # a killed earlier attempt's temp file
        docs = n_chars = 0
        with self.track_time(), atomic_write(Path(self.outdir) / name, "wb") as raw:
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
            path.unlink()
        size, digest = file_digest(path) if docs else (0, None)
        self.stat_update("documents", value=docs)
        _work_json(work.written(rank), {"name": name, "docs": docs, "chars": n_chars, "bytes": size,
                                        "sha256": digest})
        return
        yield


class ReportStep(PipelineStep):
    """Stage 5 (one task): OUTDIR/report.json from every task's tally, written last; then the work files go."""
    name = "zh-bert clean report"
    type = "📊 - STATS"

    def __init__(self, outdir: str, tasks: int, report_info: dict):
        super().__init__()
        self.outdir, self.tasks, self.info = outdir, tasks, report_info

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        work, outdir = Work(self.outdir), Path(self.outdir)
        report = merge_report([json.loads(work.tally(r).read_text()) for r in range(self.tasks)],
                              json.loads(work.dedup_summary().read_text()),
                              [json.loads(work.written(r).read_text()) for r in range(self.tasks)], self.info)
        if report["docs_out"] == 0:
            raise ZhBertError(f"no documents in {', '.join(self.info['input_names'][:3])}: {report['docs_in']} read, "
                              f"none left after cleaning (filtered: {report['filtered'] or 'none'}; unreadable "
                              f"lines: {report['unreadable']['counts'] or 'none'}); nothing written")
        write_json(outdir / CLEAN_REPORT, report)
        shutil.rmtree(work.root, ignore_errors=True)
        return
        yield


def merge_report(tallies: list[dict], dups: dict, written: list[dict], info: dict) -> dict:
    """report.json: the in-process report's keys, summed over tasks, plus the parts and the engine."""
    tally, problems, per_file = Tally(), Problems(), {}
    for t in tallies:
        for k in ("docs_in", "chars_in", "bytes_in", "boilerplate_lines"):
            setattr(tally, k, getattr(tally, k) + t[k])
        tally.filtered.update(t["filtered"])
        tally.pii.update(t["pii"])
        for kind, n in t["problems"]["counts"].items():
            problems.counts[kind] = problems.counts.get(kind, 0) + n
        for kind, where in t["problems"]["where"].items():
            problems.where.setdefault(kind, []).extend(where)
        problems.encodings.update(t["problems"]["encodings"])
        per_file.update(t["per_file"])
    parts = [w for w in written if w["docs"]]
    tally.docs_out = sum(w["docs"] for w in written)
    tally.chars_out = sum(w["chars"] for w in written)
    tally.duplicates = dict(dups)
    seconds = time.time() - info["started"]
    default_enc = info["read_encoding"]
    report = tally.to_report(
        seconds=seconds, problems=problems, skipped=info["skipped"], workers=info["workers"],
        output=info["outdir"], options=info["options"],
        inputs=[{"path": f, "docs": per_file.get(f, 0), "encoding": problems.encodings.get(f, default_enc)}
                for f in info["input_names"]])
    fingerprint = hashlib.sha256(json.dumps([[p["name"], p["sha256"]] for p in parts]).encode()).hexdigest()
    report.update(output_bytes=sum(p["bytes"] for p in parts), output_sha256=fingerprint,
                  tasks=info["tasks"], executor=info["executor"],
                  parts=[{k: p[k] for k in ("name", "docs", "bytes", "sha256")} for p in parts])
    return report


def clean_on_executor(job) -> dict | None:
    """Run `job` on its executor; the report dict once OUTDIR is complete, None when Slurm jobs were submitted."""
    from zh_bert.clean.readers import expand_inputs

    opts, out = job.engine, Path(job.output)
    if out.name.endswith((".jsonl", ".json", ".gz")):
        raise ZhBertError(f"-o {out}: with --executor the output is a directory of parts; give a directory "
                          f"name such as {out.parent / out.name.split('.')[0]}/")
    check_engine(opts)   # before anything is written
    files, skipped = expand_inputs(job.inputs)
    if not files:
        raise ZhBertError(f"no input files found in {', '.join(job.inputs)}")
    workers = job.workers or len(os.sched_getaffinity(0))
    tasks = opts.task_count(workers)
    settings = {"inputs": [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files],
                "read": asdict(job.read), "config": asdict(job.config), "tasks": tasks,
                "compression": job.compression}
    marker = JobMarker(out, "zh-bert clean", settings)
    logdir = Path(opts.logging_dir) if opts.logging_dir else marker.state / "logs"
    resumed = marker.claim(opts.force, logdir=logdir,
                           owned=lambda p: p.name == CLEAN_REPORT or p.name.lstrip(".").startswith("part-"))
    if resumed and (out / CLEAN_REPORT).is_file():
        return json.loads((out / CLEAN_REPORT).read_text(encoding="utf-8"))
    mh = job.config.minhash
    bands = lsh_params(mh.threshold, mh.num_perm)[0]
    info = {"started": marker.started, "outdir": str(out), "tasks": tasks, "executor": opts.executor,
            "workers": workers, "skipped": skipped, "input_names": [str(f) for f in files],
            "read_encoding": job.read.encoding if job.read.encoding != "auto" else "utf-8",
            "options": {"format": job.read.fmt, "doc_sep": job.read.doc_sep, "field": job.read.field_name or "text",
                        "encoding": job.read.encoding, "compression": job.compression, **asdict(job.config)}}
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets
    from datatrove.utils.hashing import HashConfig

    def buckets(kind, n_buckets, words):
        cfg = MinhashConfig(num_buckets=n_buckets, hashes_per_bucket=words,
                            hash_config=HashConfig(precision=32, hash_fc="sha1"))
        work = Work(str(out))
        return Stage(f"{kind}-buckets", [MinhashDedupBuckets(str(work.keys(kind)), str(work.dups(kind)),
                                                             config=cfg)], n_buckets)

    stages = [Stage("clean", [CleanTaskStep(assign_files(files, tasks), job.read, job.config, str(out))], tasks)]
    if job.config.dedup != "none":
        stages.append(buckets("exact", 1, _KEY_WORDS))
    if job.config.dedup == "minhash":
        stages.append(buckets("minhash", bands, lsh_params(mh.threshold, mh.num_perm)[1]))
    stages += [Stage("dedup", [DedupStep(str(out), tasks, job.config)], 1),
               Stage("write", [WritePartStep(str(out), job.compression)], tasks),
               Stage("report", [ReportStep(str(out), tasks, info)], 1)]
    if not run_stages(stages, opts, workers, logdir, quiet=job.quiet):
        return None
    return json.loads((out / CLEAN_REPORT).read_text(encoding="utf-8"))
