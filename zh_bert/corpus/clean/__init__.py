"""`zh-bert clean INPUT... -o OUT.jsonl`: raw Chinese text → cleaned, deduplicated documents.

With `--executor local|slurm|ray --tasks N` the same cleaning runs as datatrove stages into a directory of
parts (on_executor.py); below is the in-process path, for inputs one machine cleans comfortably.

Pipeline: the main process reads documents in input order (readers.py) and sends batches to worker
processes, whose `DocCleaner` (cleaner.py) normalises (normalize.py), filters (filters.py) and hashes
(dedup.py) them; results come back in submission order and the main process deduplicates and writes them,
so the output is the same for any `--workers`. At most 2 batches per worker are in flight: memory stays
flat on any corpus size.

Output: OUT.jsonl (one `{"text", "source"}` per line, paragraphs joined by "\\n") and OUT.report.json,
both written under temporary names and renamed only when complete. The report records the size and
sha256 of the OUT.jsonl it describes; `read_report` ignores a report that does not match the file.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import multiprocessing as mp
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Literal, Optional

from zh_bert.core.config import build_parser as _build_parser
from zh_bert.core.config import config_from_args, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, claim_file, json_copy, recover, write_json
from zh_bert.core.options import Shared
from zh_bert.corpus.clean.cleaner import BatchResult, CleanConfig, DocCleaner, batched
from zh_bert.corpus.clean.dedup import Deduplicator, MinHashConfig
from zh_bert.corpus.clean.filters import FilterConfig
from zh_bert.corpus.clean.normalize import NormalizeConfig
from zh_bert.corpus.clean.readers import ReadOptions, check_inputs, expand_inputs, read_input
from zh_bert.corpus.clean.report import (
    Tally,
    is_clean_report,
    read_report,
    report_path,
    written_by_clean,
)
from zh_bert.corpus.clean.source import Problems, RawDoc
from zh_bert.corpus.contamination import overlap_index
from zh_bert.corpus.executors import ExecutorOptions, start_method

__all__ = ["main", "clean", "build_parser", "report_path", "read_report", "CleanJob", "CleanConfig",
           "ReadOptions", "DocCleaner"]


@dataclass
class CleanJob:
    """`zh-bert clean INPUT... -o OUT.jsonl [options]` as one value: `clean(CleanJob(...))`. Only `config`
    reaches the worker processes; the rest is the main process's business."""
    inputs: list[str] = option(positional=True, metavar="INPUT",
                               help="files or directories (recursive): text, JSON(L), Parquet, WikiExtractor, "
                               "MediaWiki XML; .gz/.bz2/.xz/.zst are decompressed on the fly")
    output: str = option(flags=("-o",), metavar="OUT.jsonl|OUTDIR", help="output JSONL file; with --executor, "
                         "a directory of parts (part-00000.jsonl ...) and report.json")
    read: ReadOptions = field(default_factory=ReadOptions)
    config: CleanConfig = field(default_factory=CleanConfig)
    engine: ExecutorOptions = field(default_factory=ExecutorOptions)
    workers: Optional[int] = option_of(Shared, "workers", help="worker processes; with --executor, tasks run at once (default: number of cores)")
    compression: Literal["none", "gzip"] = option("none", help="--executor parts as .jsonl or .jsonl.gz")
    quiet: bool = option_of(Shared, "quiet")

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise ZhBertError(f"--workers must be at least 1, got {self.workers}")
        if self.compression not in ("none", "gzip"):
            raise ZhBertError(f"--compression must be none or gzip, got '{self.compression}'")



# --- worker processes ----------------------------------------------------------------------------
_worker_cleaner: DocCleaner | None = None  # one per worker process, built by the pool initializer


def _start_cleaner(cfg: CleanConfig) -> None:
    """A worker: SIGINT is the parent's to handle (it stops the pool), SIGTERM ends the worker quietly (what the
    pool's terminate sends), so a stopped run prints no worker traceback."""
    global _worker_cleaner
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _worker_cleaner = DocCleaner(cfg)


def _clean_in_worker(batch: list[RawDoc]) -> BatchResult:
    return _worker_cleaner(batch)


def _map_ordered(cfg: CleanConfig, batches: Iterable[list[RawDoc]], workers: int) -> Iterator[BatchResult]:
    """Results in input order, with a bounded number of batches in flight (streaming, flat memory)."""
    if workers <= 1:
        cleaner = DocCleaner(cfg)
        for b in batches:
            yield cleaner(b)
        return
    ctx = mp.get_context(start_method())
    with ctx.Pool(workers, initializer=_start_cleaner, initargs=(cfg,)) as pool:
        pending: collections.deque = collections.deque()
        try:
            for b in batches:
                pending.append(pool.apply_async(_clean_in_worker, (b,)))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().get()
            while pending:
                yield pending.popleft().get()
        except BaseException:   # a broken input, a failed write, Ctrl-C, the consumer closing the generator
            _settle(pending)
            raise


#: how long an error waits for the batches in flight before the pool is terminated anyway
SETTLE_SECONDS = 30.0


def _settle(pending: Iterable) -> None:
    """Let the batches in flight finish before the pool is terminated: `Pool.terminate()` can hang for ever when
    its task-handler thread is blocked writing a large batch into a worker's pipe (CPython's `_help_stuff_finish`
    stops draining the pipe too early). With nothing left to send, the handler is idle and terminate returns.
    Bounded, because a worker killed by Ctrl-C never answers."""
    deadline = time.monotonic() + SETTLE_SECONDS
    for r in pending:
        r.wait(max(0.0, deadline - time.monotonic()))


# --- outputs -------------------------------------------------------------------------------------
def _prepare_output(out: Path, inputs: list[str]) -> Path:
    """Claim `-o` and its report before any work: never an input nor a file inside an input directory (its
    walk would read an earlier output back as input); leftovers of killed runs are removed; an existing
    output is replaced only when it is a clean output (its report beside it names it) or empty, and an
    existing report only when it is a clean report. Returns the report path."""
    rpath = report_path(out)
    if out.is_dir():
        raise ZhBertError(f"-o {out}: is a directory; give a file name such as {out}/docs.jsonl")
    for p in (out, rpath):
        recover(p)
    claim_file(out, inputs=inputs, ours=lambda p: p.stat().st_size == 0 or written_by_clean(p),
               what=f"an output of zh-bert clean (no {rpath.name} naming it beside it)")
    claim_file(rpath, inputs=inputs, ours=is_clean_report, flag="-o's report",
               what="a report of zh-bert clean")
    return rpath


def _no_documents(files: list[Path], tally: Tally, problems: Problems) -> ZhBertError:
    names = ", ".join(map(str, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    first = next((w[0] for w in problems.where.values() if w), None)
    return ZhBertError(
        f"no documents in {names}: {tally.docs_in} read, none left after cleaning "
        f"(filtered: {dict(tally.filtered) or 'none'}; unreadable lines: {problems.counts or 'none'}"
        + (f", first {first}" if first else "") + "); nothing written")


class _Progress:
    """tqdm bar in MB with docs/s, only when stderr is a terminal."""

    def __init__(self, total_bytes: int, quiet: bool):
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1_000_000,
                            desc="clean", dynamic_ncols=True)
        self.t0, self.docs = time.time(), 0

    def update(self, res: BatchResult) -> None:
        if self.bar is not None:
            self.docs += res.docs_in
            self.bar.update(res.bytes_in)
            self.bar.set_postfix_str(f"{self.docs / max(1e-9, time.time() - self.t0):,.0f} docs/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def clean(job: CleanJob) -> dict | None:
    """Clean `job.inputs` into `job.output` (+ its report, see `report_path`); returns the report dict
    (None when `--executor slurm` submitted jobs that will write it)."""
    if job.compression != "none" and not job.engine.enabled:
        raise ZhBertError("--compression is for the parts --executor writes: add --executor local (or slurm, ray)")
    if job.config.decontaminate != "none":   # before any work (the task data must be there), and built here
        overlap_index(job.config.decontaminate, job.config.overlap_ngram)   # once: forked workers inherit it
    if job.engine.enabled:
        from zh_bert.corpus.clean.on_executor import clean_on_executor

        return clean_on_executor(job)
    t0 = time.time()
    read, cfg, out = job.read, job.config, Path(job.output)
    rpath = _prepare_output(out, job.inputs)
    files, skipped = expand_inputs(job.inputs, output=str(out))
    if not files:
        raise ZhBertError(f"no input files found in {', '.join(job.inputs)}")
    check_inputs(files, read)
    workers = job.workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                              else os.cpu_count() or 1)

    problems = Problems()
    per_file: dict[str, int] = {}

    def docs() -> Iterator[RawDoc]:
        for f in files:
            n = 0
            for d in read_input(f, read, problems):
                n += 1
                yield d
            per_file[str(f)] = n

    tally = Tally()
    dedup = Deduplicator(cfg.dedup, cfg.minhash)
    progress = _Progress(sum(f.stat().st_size for f in files), job.quiet)
    try:
        with atomic_write(out, "wb") as fout:
            digest, size = hashlib.sha256(), 0
            for res in _map_ordered(cfg, batched(docs()), workers):
                progress.update(res)
                tally.add_batch(res)
                lines = []
                for line, nchars, key, sig in res.kept:
                    dup = dedup.check(key, sig)
                    if dup:
                        tally.duplicates[dup] += 1
                        continue
                    tally.docs_out += 1
                    tally.chars_out += nchars
                    lines.append(line)
                if lines:
                    data = ("\n".join(lines) + "\n").encode("utf-8")
                    digest.update(data)
                    size += len(data)
                    fout.write(data)
            if tally.docs_out == 0:
                raise _no_documents(files, tally, problems)
            default_enc = read.encoding if read.encoding != "auto" else "utf-8"
            report = tally.to_report(
                seconds=time.time() - t0, problems=problems, skipped=skipped, workers=workers, output=str(out),
                inputs=[{"path": str(f), "docs": per_file.get(str(f), 0),
                         "encoding": problems.encodings.get(str(f), default_enc)} for f in files],
                options={"format": read.fmt, "doc_sep": read.doc_sep, "field": read.field_name or "text",
                         "encoding": read.encoding, **asdict(cfg)})
            report.update(output_bytes=size, output_sha256=digest.hexdigest())
            report = json_copy(report)  # returned exactly as written and as `read_report` reads it
            # written before OUT is renamed; a kill between the two renames leaves a report that does not
            # match the OUT on disk, and `read_report` takes no such report
            write_json(rpath, report)
    finally:
        progress.close()
    return report


# --- CLI -----------------------------------------------------------------------------------------
_OPTION_CLASSES = (CleanJob, ReadOptions, NormalizeConfig, FilterConfig, CleanConfig, MinHashConfig,
                   ExecutorOptions)


def build_parser() -> argparse.ArgumentParser:
    return _build_parser(
        "zh-bert clean",
        "Clean raw Chinese text into deduplicated documents: OUT.jsonl ({\"text\", \"source\"} per line) + "
        "OUT.report.json. Streaming and multi-process; output order does not depend on --workers.",
        *_OPTION_CLASSES)


def job_from_args(args: argparse.Namespace) -> CleanJob:
    """The CleanJob a parsed command line describes (each part validated by its own class)."""
    job = config_from_args(CleanJob, args)
    job.engine = config_from_args(ExecutorOptions, args)
    job.read = config_from_args(ReadOptions, args)
    job.config = config_from_args(CleanConfig, args)
    job.config.normalize = config_from_args(NormalizeConfig, args)
    job.config.filters = config_from_args(FilterConfig, args)
    job.config.minhash = config_from_args(MinHashConfig, args)
    return job


def main(argv: list[str] | None = None) -> int:
    job = job_from_args(build_parser().parse_args(argv))
    report = clean(job)
    if report is None:
        print(f"zh-bert clean: Slurm jobs submitted; {Path(job.output) / 'report.json'} appears when the last "
              f"one finishes (rerun the same command afterwards to finish any task that failed)", file=sys.stderr)
        return 0
    if job.engine.enabled and not job.quiet:
        print(f"zh-bert clean: {report['docs_out']:,} of {report['docs_in']:,} documents kept in "
              f"{len(report['parts'])} parts → {job.output}/ ({report['bytes_in'] / 1e6:.1f} MB in "
              f"{report['seconds']:.1f} s); report: {Path(job.output) / 'report.json'}", file=sys.stderr)
        return 0
    if not job.quiet and sys.stderr.isatty():
        print(f"zh-bert clean: {report['docs_out']:,} of {report['docs_in']:,} documents kept "
              f"({report['bytes_in'] / 1e6:.1f} MB in {report['seconds']:.1f} s, {report['mb_per_s']} MB/s) "
              f"→ {job.output}; report: {report_path(job.output)}", file=sys.stderr)
    return 0
