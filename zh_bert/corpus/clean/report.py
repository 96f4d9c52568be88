"""The run's tally and `OUT.report.json` (or, merged over the tasks of `--executor`, OUTDIR/report.json):
what a model card needs to say how the corpus was cleaned (counts per filter reason, duplicates, chars and
documents in/out, unreadable lines with file:line, inputs with their encodings, every option in effect, time)."""

from __future__ import annotations

import collections
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.corpus.clean.source import MAX_RECORDED, Problems
from zh_bert.corpus.contamination import MAX_LISTED
from zh_bert.core.fileio import read_json

REPORT_SUFFIX = ".report.json"


def report_path(out: str | os.PathLike) -> Path:
    """Where `zh-bert clean -o OUT` writes its report: OUT.report.json beside OUT.jsonl (docs.jsonl →
    docs.report.json; an output not ending in .jsonl gets the suffix appended). The only place that
    knows the name: clean writes it, shard and the pipeline read it through `read_report`."""
    out = Path(out)
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + REPORT_SUFFIX)


def _load(path: Path) -> dict | None:
    obj = read_json(path, default=None)
    return obj if isinstance(obj, dict) else None


def file_digest(path: str | os.PathLike) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file: what a report says about the output it describes."""
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
            n += len(block)
    return n, h.hexdigest()


def read_report(out: str | os.PathLike, sha256: str | None = None) -> dict | None:
    """The report `zh-bert clean` wrote for the output `out` now on disk; None when there is none (a corpus
    not made by clean), it is unreadable, or it describes other bytes than `out` holds (a run killed
    between writing its report and renaming its output, or an output edited since): a report is taken
    only for the exact file it was written with. `sha256`: the caller's hash of `out`, saves a pass."""
    out = Path(out)
    if out.is_dir():
        return _read_dir_report(out)
    report = _load(report_path(out))
    if report is None or not out.is_file() or report.get("output_bytes") != out.stat().st_size:
        return None
    return report if report.get("output_sha256") == (sha256 or file_digest(out)[1]) else None


def _read_dir_report(outdir: Path) -> dict | None:
    """OUTDIR/report.json of `zh-bert clean --executor`, if every part it lists is on disk with its size."""
    report = _load(outdir / "report.json")
    if report is None or not isinstance(report.get("parts"), list):
        return None
    for part in report["parts"]:
        p = outdir / str(part.get("name"))
        if not p.is_file() or p.stat().st_size != part.get("bytes"):
            return None
    return report


def is_clean_report(path: str | os.PathLike) -> bool:
    """Whether `path` is a report `zh-bert clean` wrote (it names its output and counts its documents)."""
    report = _load(Path(path))
    return report is not None and "output" in report and "docs_out" in report


def written_by_clean(out: str | os.PathLike) -> bool:
    """True when a clean report beside `out` names it: `out` is a clean output (possibly one whose
    replacement was interrupted), so a new run may replace it. Anything else is the user's file."""
    report = _load(report_path(out))
    return report is not None and Path(str(report.get("output", ""))).name == Path(out).name


@dataclass
class Tally:
    docs_in: int = 0
    chars_in: int = 0
    bytes_in: int = 0
    docs_out: int = 0
    chars_out: int = 0
    filtered: collections.Counter = field(default_factory=collections.Counter)
    duplicates: dict = field(default_factory=lambda: {"exact": 0, "near": 0})
    pii: collections.Counter = field(default_factory=collections.Counter)
    boilerplate_lines: int = 0
    contaminated: list = field(default_factory=list)   # the first MAX_LISTED dropped documents, what matched

    def add_batch(self, res) -> None:
        """Counts from a worker's BatchResult (before deduplication)."""
        self.docs_in += res.docs_in
        self.chars_in += res.chars_in
        self.bytes_in += res.bytes_in
        self.filtered.update(res.rejected)
        self.pii.update(res.pii)
        self.boilerplate_lines += res.boilerplate_lines
        self.contaminated += res.contaminated[:MAX_LISTED - len(self.contaminated)]

    def to_report(self, *, seconds: float, problems, inputs: list[dict], skipped: list[str], workers: int,
                  options: dict, output: str) -> dict:
        return {
            "docs_in": self.docs_in, "docs_out": self.docs_out,
            "chars_in": self.chars_in, "chars_out": self.chars_out,
            "bytes_in": self.bytes_in,
            "filtered": {r: self.filtered[r] for r in sorted(self.filtered)},
            "duplicates": dict(self.duplicates),
            "lines_removed": {"boilerplate": self.boilerplate_lines},
            "pii": {k: self.pii[k] for k in sorted(self.pii)},
            "unreadable": {"counts": problems.counts, "where": problems.where},
            "seconds": round(seconds, 3),
            "mb_per_s": round(self.bytes_in / 1e6 / max(seconds, 1e-9), 2),
            "inputs": inputs,
            "skipped_files": skipped,
            "workers": workers,
            "options": options,
            "output": output,
            **({"contaminated_documents": self.contaminated} if options.get("decontaminate", "none") != "none"
               else {}),
        }


def merge_report(tallies: list[dict], dups: dict, written: list[dict], info: dict) -> dict:
    """report.json: the in-process report's keys, summed over tasks, plus the parts and the engine."""
    tally, problems, per_file = Tally(), Problems(), {}
    for t in tallies:
        for k in ("docs_in", "chars_in", "bytes_in", "boilerplate_lines"):
            setattr(tally, k, getattr(tally, k) + t[k])
        tally.filtered.update(t["filtered"])
        tally.pii.update(t["pii"])
        tally.contaminated += t.get("contaminated", [])[:MAX_LISTED - len(tally.contaminated)]
        for kind, n in t["problems"]["counts"].items():
            problems.counts[kind] = problems.counts.get(kind, 0) + n
        for kind, where in t["problems"]["where"].items():
            problems.where.setdefault(kind, []).extend(where)
        problems.encodings.update(t["problems"]["encodings"])
        for f, n in t["per_file"].items():
            docs, readers = per_file.get(f, (0, 0))
            per_file[f] = (docs + n, readers + (n > 0))
    problems.where = {kind: where[:MAX_RECORDED] for kind, where in problems.where.items()}
    parts = [w for w in written if w["docs"]]
    tally.docs_out = sum(w["docs"] for w in written)
    tally.chars_out = sum(w["chars"] for w in written)
    tally.duplicates = dict(dups)
    seconds = info["seconds"]
    default_enc = info["read_encoding"]
    report = tally.to_report(
        seconds=seconds, problems=problems, skipped=info["skipped"], workers=info["workers"],
        output=info["outdir"], options=info["options"],
        inputs=[{"path": f, "docs": per_file.get(f, (0, 0))[0], "encoding": problems.encodings.get(f, default_enc),
                 "tasks": per_file.get(f, (0, 0))[1]} for f in info["input_names"]])
    fingerprint = hashlib.sha256(json.dumps([[p["name"], p["sha256"]] for p in parts]).encode()).hexdigest()
    report.update(output_bytes=sum(p["bytes"] for p in parts), output_sha256=fingerprint,
                  tasks=info["tasks"], executor=info["executor"],
                  parts=[{k: p[k] for k in ("name", "docs", "bytes", "sha256")} for p in parts])
    return report
