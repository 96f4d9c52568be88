"""`zh-bert embed CKPT FILE... -o OUTDIR --executor local|slurm|ray --tasks N`: the encoding as datatrove tasks.

Stage `embed-encode` (N tasks): task r loads the model and encodes its share of the input lines (files laid end
to end, cut at byte offsets moved to line starts: `corpus_io.plan_shares`, as `shard --executor` reads) into
OUTDIR/part-{r:05d}.npy (or .parquet). Stage `embed-meta` (1 task) writes OUTDIR/embed.json last: the parts in
order with their row counts; its presence means every part is complete. The parts, read in order, are the
vectors a one-process `zh-bert embed` writes, row for row. Finished tasks leave datatrove's completion markers;
rerunning the same command redoes only the others (`executors.JobMarker` ties OUTDIR to one job's settings).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from datatrove.pipeline.base import PipelineStep

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, read_json, read_object, refuse_overlap, write_json
from zh_bert.corpus.corpus_io import (document_text, is_jsonl, line_number, plan_shares, segment_raw_lines,
                                      too_long)
from zh_bert.corpus.executors import ExecutorOptions, JobMarker, Stage, run_stages
from zh_bert.evaluation.heads.embed.vectors import Encoder, Lines, write_vectors_npy, write_parquet
from zh_bert.evaluation.heads.embed.encoder import CHUNK_TEXTS

EMBED_COMMAND = "zh-bert embed"
EMBED_META = "embed.json"
#: what an embed job writes in OUTDIR (and so what a rerun may replace)
EMBED_PART = re.compile(r"part-\d{5}\.(npy|parquet)")


def part_file(rank: int, suffix: str) -> str:
    return f"part-{rank:05d}{suffix}"


class _EmbedStep(PipelineStep):
    type = "zh-bert"

    def __init__(self, job: dict):
        super().__init__()
        self.job = job


class EmbedPart(_EmbedStep):
    """Task r: its share of the lines -> OUTDIR/part-{r:05d}.npy|.parquet."""
    name = "zh-bert embed: encode part"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        rows = encode_part(self.job, rank)
        self.stat_update("texts", value=rows)
        yield from ()


class EmbedMeta(_EmbedStep):
    """The last task: embed.json over all parts."""
    name = "zh-bert embed: embed.json"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        write_embed_meta(self.job)
        yield from ()


def share_texts(share: list, jsonl: dict[str, bool]):
    """The non-blank texts of a task's segments, in order (a JSON-lines file's `text` field)."""
    for path, start, end in share:
        if end < 0:
            yield from Lines([Path(path)])
            continue
        for pos, raw in segment_raw_lines(path, start, end):
            if isinstance(raw, int):
                raise ZhBertError(f"{path}:{line_number(path, pos)}: {too_long(raw)}")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ZhBertError(f"{path}:{line_number(path, pos)}: not UTF-8 text ({e.reason})") from None
            line = line.removeprefix("\ufeff") if pos == 0 else line
            text = (document_text(line, path, line_number(path, pos)) if jsonl[path] else line).strip()
            if text:
                yield text


def encode_part(job: dict, rank: int) -> int:
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // job["workers"]))   # the tasks at once share the cores
    enc = Encoder(job["ckpt"], job["pooling"], job["seq_len"], job["precision"])
    out = Path(job["out"]) / part_file(rank, job["suffix"])
    texts = list(share_texts(job["shares"][rank], job["jsonl"])) if job["suffix"] == ".npy" else None
    with atomic_write(out, "wb") as f:
        if texts is not None:
            rows = write_vectors_npy(f, enc.stream(texts), len(texts), enc.dim)
        else:
            rows = write_parquet(f, _chunks(enc, share_texts(job["shares"][rank], job["jsonl"])), enc.dim)
    write_json(Path(job["out"]) / ".zh-bert" / "parts" / f"{rank:05d}.json", {"rows": rows, "cut": enc.cut})
    return rows


def _chunks(enc: Encoder, texts):
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == CHUNK_TEXTS:
            yield batch, enc.encode(batch)
            batch = []
    if batch:
        yield batch, enc.encode(batch)


def write_embed_meta(job: dict) -> None:
    out = Path(job["out"])
    parts = []
    for rank in range(len(job["shares"])):
        info = read_object(out / ".zh-bert" / "parts" / f"{rank:05d}.json")
        parts.append({"file": part_file(rank, job["suffix"]), "rows": info.integer("rows", lo=0),
                      "cut": info.integer("cut", lo=0)})
    write_json(out / EMBED_META, {"command": EMBED_COMMAND, "checkpoint": job["ckpt"], "pooling": job["pooling"],
                            "seq_len": job["seq_len"], "precision": job["precision"],
                            "rows": sum(p["rows"] for p in parts), "parts": parts, "key": job["key"]})


def _owned(p: Path) -> bool:
    return not p.is_symlink() and (p.name == EMBED_META or EMBED_PART.fullmatch(p.name) is not None)


def _finished(out: Path) -> bool:
    meta = read_json(out / EMBED_META, default=None)
    return isinstance(meta, dict) and meta.get("command") == EMBED_COMMAND


def embed_parts(cfg, opts: ExecutorOptions, paths: list[Path]) -> Path:
    """OUTDIR of parts on `opts.executor` (for Slurm: once the jobs are submitted)."""
    out = Path(cfg.output)
    suffix = out.suffix if out.suffix in (".npy", ".parquet") else ".npy"
    refuse_overlap(out, paths, "-o")
    if not any(p.stat().st_size for p in paths):
        raise ZhBertError(f"{', '.join(map(str, paths))}: no text to encode")
    tasks = opts.task_count(1)
    folder = Path(cfg.ckpt)
    weights = [[str(q), q.stat().st_size, q.stat().st_mtime_ns] for q in sorted(folder.rglob("*.safetensors"))]
    settings = {"inputs": [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in paths],
                "ckpt": str(folder.resolve()), "weights": weights, "pooling": cfg.pooling, "seq_len": cfg.seq_len,
                "precision": cfg.precision, "tasks": tasks, "suffix": suffix}
    marker = JobMarker(out, EMBED_COMMAND, settings)
    logdir = Path(opts.logging_dir) if opts.logging_dir else out / ".zh-bert" / "logs"
    resumed = marker.claim(opts.force, _owned, logdir, done=EMBED_META, inputs=paths, finished=_finished)
    job = {"ckpt": cfg.ckpt, "pooling": cfg.pooling, "seq_len": cfg.seq_len, "precision": cfg.precision,
           "out": str(out), "suffix": suffix, "shares": plan_shares(paths, tasks),
           "jsonl": {str(p): is_jsonl(p) for p in paths}, "key": marker.job["key"], "workers": cfg.workers or 1}
    if resumed and _finished(out):
        print(f"zh-bert embed: {out} is up to date (same inputs and settings, job {job['key']})")
        return out
    stages = [Stage("embed-encode", [EmbedPart(job)], tasks), Stage("embed-meta", [EmbedMeta(job)], 1)]
    if not run_stages(stages, opts, job["workers"], logdir):
        print(f"zh-bert embed: submitted {tasks} tasks and the embed.json task to Slurm; {out}/{EMBED_META} appears when "
              f"they finish (logs: {logdir})")
        return out
    meta = read_object(out / EMBED_META)
    print(f"zh-bert embed: {out}: {meta.integer('rows', lo=0):,} vectors in {tasks} parts ({opts.executor} executor)")
    return out
