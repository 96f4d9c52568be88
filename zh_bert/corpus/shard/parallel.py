"""`zh-bert shard --executor local|slurm|ray --tasks N`: the shard build as datatrove tasks.

Stage `shard-encode` (N tasks): task r reads its share of the corpus lines (input files assigned to tasks
contiguously, balanced by bytes; an uncompressed file is cut at byte offsets, each cut moved to the next
line start, so one big .jsonl still feeds every task) and writes SHARDDIR/part-{r:05d}/ with the chunk
encoder and `SplitWriter` of the in-process build: the same per-split files as a single-part SHARDDIR,
plus its train unigram counts and part.json. Stage `shard-meta` (1 task) sums the parts' counts and
unigram counts and writes SHARDDIR/meta.json last: its presence means every part is complete.

The validation split is a hash of each document's text (`valid_by_hash`), so it is the same for any N.
Finished tasks leave datatrove completion markers; rerunning the same command redoes only the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np
from datatrove.pipeline.base import PipelineStep

from zh_bert.corpus.corpus_io import (corpus_files, iter_lines, line_number, plan_shares, segment_raw_lines,
                                      too_long)
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.executors import ExecutorOptions, JobMarker, Stage, run_stages
from zh_bert.core.fileio import atomic_dir, atomic_write, read_json, read_object, refuse_overlap, remove_scratch, write_json
from zh_bert.corpus.segment import Segmenter
from zh_bert.corpus.shard.build import (COMMAND, Lines, ShardConfig, check_files, check_not_empty, owned_by_shard_job,
                                 chunk_lines, file_sha256, make_encoder, sample_texts, save_npy, shard_inputs,
                                 shard_meta, summary, tokenizer_info, write_npy, write_splits)
from zh_bert.corpus.shard.encode import TextEncoder
from zh_bert.corpus.sharddir import (FORMAT_VERSION, META, PART_META, SPLITS, UNIGRAM_COUNTS, part_name, read_meta,
                              write_meta)
from zh_bert.corpus.tokenizer_files import load_tokenizer, tokenizer_fingerprint

DEFAULT_VALID_FRACTION = 0.01


# ---------------------------------------------------------------------------------------------------
# who reads what: plan_shares and segment_raw_lines (corpus_io, shared with `clean --executor`)
# ---------------------------------------------------------------------------------------------------
def segment_lines(path: str, start: int, end: int) -> Lines:
    """The non-blank lines that begin in bytes [start, end) of `path` (end -1: every line, read through
    `iter_lines`, which also decompresses). Lines are numbered when the segment starts the file; otherwise
    a line's number is minus its byte offset, turned into a number only if the line is reported."""
    if end < 0:
        yield from iter_lines(path)
        return
    n = 0
    for pos, raw in segment_raw_lines(path, start, end):
        n += 1
        if isinstance(raw, int):
            raise ZhBertError(f"{path}:{n if start == 0 else line_number(path, pos)}: {too_long(raw)}; no document "
                              f"is that long")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            where = n if start == 0 else line_number(path, pos)
            raise ZhBertError(f"{path}:{where}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
        if start == 0 and n == 1:
            line = line.removeprefix("\ufeff")
        if line.strip():
            yield (n if start == 0 else -pos), line.rstrip("\n")


# ---------------------------------------------------------------------------------------------------
# the datatrove steps (module level: Slurm and Ray pickle them)
# ---------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _reported(job: dict, name: str):
    """A task's ZhBertError also lands in SHARDDIR/.zh-bert/errors/NAME.json, so that the command can show
    its one line whatever the engine made of the exception."""
    try:
        yield
    except ZhBertError as e:
        write_json(Path(job["out"]) / ".zh-bert" / "errors" / f"{name}.json", {"error": str(e)})
        raise


class _ShardJobStep(PipelineStep):
    """A datatrove step of one `zh-bert shard` job (`job`: what every task reads: `_job_settings`)."""
    type = "zh-bert"

    def __init__(self, job: dict):
        super().__init__()
        self.job = job


class EncodePart(_ShardJobStep):
    """Task r: its share of the corpus -> SHARDDIR/part-{r:05d}/."""
    name = "zh-bert shard: encode part"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with _reported(self.job, part_name(rank)):
            counts, totals = write_part(self.job, rank)
        for k in ("docs", "valid_docs", "bytes"):
            self.stat_update(k, value=totals[k])
        for split, c in counts.items():
            self.stat_update(f"{split}_sequences", value=c["sequences"])
        yield from ()


class WriteMeta(_ShardJobStep):
    """The last task: meta.json over all parts."""
    name = "zh-bert shard: meta.json"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        with _reported(self.job, "meta"):
            merge_parts(self.job)
        yield from ()


def write_part(job: dict, rank: int) -> tuple[dict, dict]:
    cfg, info = job["cfg"], job["info"]
    tok = load_tokenizer(cfg.tokenizer)
    if tokenizer_fingerprint(tok) != info["tokenizer_fingerprint"]:
        raise ZhBertError(f"{cfg.tokenizer}: tokenizer changed since the job started; rerun with --force")
    encoder = TextEncoder(tok, Segmenter(cfg.segmenter, cfg.user_dict), fast=job["char_lookup"])
    share = job["shares"][rank]
    chunks = chunk_lines(((p, segment_lines(p, a, b)) for p, a, b in share), first_idx=rank << 32)
    with atomic_dir(Path(job["out"]) / part_name(rank), overwrite=True) as tmp:
        counts, unigram, totals = write_splits(tmp, cfg, info, chunks, encoder, None, 1)
        save_npy(tmp / UNIGRAM_COUNTS, unigram)
        write_json(tmp / PART_META, {"counts": counts, "text": totals, "segments": share})
    return counts, totals


def merge_parts(job: dict) -> None:
    """The top of a multi-part SHARDDIR: the parts' counts and unigram counts summed, meta.json last."""
    cfg, out = job["cfg"], Path(job["out"])
    parts, unigram = [], np.zeros(job["info"]["vocab_size"], dtype=np.int64)
    counts = {s: {"documents": 0, "sequences": 0, "tokens": 0} for s in SPLITS}
    totals = {"chars": 0, "bytes": 0, "docs": 0, "valid_docs": 0}
    for rank in range(len(job["shares"])):
        name = part_name(rank)
        part = read_object(out / name / PART_META).data
        parts.append({"name": name, "counts": part["counts"], "text": part["text"]})
        for s in counts:
            for k in counts[s]:
                counts[s][k] += part["counts"][s][k]
        for k in totals:
            totals[k] += part["text"][k]
        unigram += np.load(out / name / UNIGRAM_COUNTS, allow_pickle=False)
    check_not_empty(counts, cfg, ", ".join(s["path"] for s in job["sources"]))
    unigram[job["zero_ids"]] = 0
    with atomic_write(out / UNIGRAM_COUNTS, "wb") as f:
        write_npy(f, unigram)
    meta = shard_meta(cfg, job["info"], job["key"], counts, totals, job["char_lookup"], job["sources"],
                      job["build"])
    meta["parts"] = parts
    write_meta(out, meta)


# ---------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------
def _job_settings(cfg: ShardConfig, paths: list[Path], fingerprint: str, tasks: int) -> dict:
    """What makes two runs the same job: inputs (path, size, mtime: no pass over a 100 GB corpus to hash
    it), tokenizer, every setting that changes the rows, and the task count."""
    inputs = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in paths]
    return {"format_version": FORMAT_VERSION, "inputs": inputs, "tokenizer": fingerprint, "seq_len": cfg.seq_len,
            "pairs": cfg.pairs, "segmenter": cfg.segmenter,
            "user_dict": file_sha256(Path(cfg.user_dict)) if cfg.user_dict else None,
            "valid_fraction": cfg.valid_fraction, "seed": cfg.seed, "slow": cfg.slow, "tasks": tasks}


def _plan_job(cfg: ShardConfig, opts: ExecutorOptions) -> tuple[ShardConfig, dict]:
    """Every check that needs no pass over the corpus, before anything is written; the job's picklable state."""
    if cfg.valid_docs is not None:
        raise ZhBertError("--valid-docs needs a count of all documents first; with --executor use "
                          f"--valid-fraction (default {DEFAULT_VALID_FRACTION})")
    if cfg.valid_fraction is None:
        cfg = dataclasses.replace(cfg, valid_fraction=DEFAULT_VALID_FRACTION)
    paths = corpus_files(cfg.corpus)
    check_files(paths)
    if not sum(p.stat().st_size for p in paths):
        raise ZhBertError(f"empty corpus: no documents in {', '.join(map(str, paths))}")
    tok, info, zero_ids = tokenizer_info(cfg.tokenizer)
    encoder = make_encoder(tok, cfg, sample_texts(paths))
    tasks = opts.task_count(cfg.workers)
    sources = [{"path": str(p), "bytes": p.stat().st_size} for p in paths]
    job = {"cfg": cfg, "info": info, "zero_ids": zero_ids, "char_lookup": encoder.fast, "out": str(cfg.output),
           "shares": plan_shares(paths, tasks), "sources": sources,
           "settings": _job_settings(cfg, paths, info["tokenizer_fingerprint"], tasks),
           "build": {"executor": opts.executor, "tasks": tasks, "workers": cfg.workers}}
    return cfg, job


def _shard_stages(job: dict) -> list[Stage]:
    return [Stage("shard-encode", [EncodePart(job)], len(job["shares"])), Stage("shard-meta", [WriteMeta(job)], 1)]


def _task_error(out: Path) -> str | None:
    for p in sorted((out / ".zh-bert" / "errors").glob("*.json")):
        try:
            return f"{read_object(p).text('error')} (task {p.stem})"
        except ZhBertError:
            continue
    return None


def _finished_sharddir(out: Path) -> bool:
    """Whether `out`'s meta.json is one a shard build wrote (not a user's file of that name)."""
    meta = read_json(out / META, default=None)
    return isinstance(meta, dict) and "format_version" in meta


def build_parts(cfg: ShardConfig, opts: ExecutorOptions) -> Path:
    """Write the multi-part SHARDDIR `cfg.output` on `opts.executor`; returns its path (for Slurm: once
    the jobs are submitted)."""
    out = Path(cfg.output)
    refuse_overlap(out, shard_inputs(cfg), "-o")   # before the corpus is read
    cfg, job = _plan_job(cfg, opts)
    marker = JobMarker(out, COMMAND, job["settings"])
    logdir = Path(opts.logging_dir) if opts.logging_dir else out / ".zh-bert" / "logs"
    resumed = marker.claim(opts.force, owned_by_shard_job, logdir, done=META, inputs=shard_inputs(cfg),
                           finished=_finished_sharddir)
    job["key"] = marker.job["key"]
    stages = _shard_stages(job)
    if resumed and (out / META).is_file():
        print(f"zh-bert shard: {out} is up to date (same inputs and settings, job {job['key']})")
        return out
    remove_scratch(out / ".zh-bert" / "errors")
    try:
        ran = run_stages(stages, opts, cfg.workers, logdir)
    except Exception:
        error = _task_error(out)
        if error:
            raise ZhBertError(error) from None
        raise
    if not ran:
        print(f"zh-bert shard: submitted {len(job['shares'])} tasks and the meta.json task to Slurm; {out}/meta.json "
              f"appears when they finish (logs: {logdir}); rerun the same command to resubmit unfinished tasks")
        return out
    meta = read_meta(out)
    print(f"zh-bert shard: {out}: {summary(meta['counts'])}; {len(meta['parts'])} parts, "
          f"{meta['text']['bytes'] / 1e6:.1f} MB of text ({opts.executor} executor, {cfg.workers} workers)")
    return out

