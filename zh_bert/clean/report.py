"""The run's tally and `OUT.report.json`: what a model card needs to say how the corpus was cleaned
(counts per filter reason, duplicates, chars and documents in/out, unreadable lines with file:line,
inputs with their encodings, every option in effect, time)."""

from __future__ import annotations

import collections
import json
import os
from dataclasses import dataclass, field
from pathlib import Path


REPORT_SUFFIX = ".report.json"


def report_path(out: str | os.PathLike) -> Path:
    """Where `zh-bert clean -o OUT` writes its report: OUT.report.json beside OUT.jsonl (docs.jsonl →
    docs.report.json; an output not ending in .jsonl gets the suffix appended). The only place that
    knows the name: clean writes it, shard and the pipeline read it through `read_report`."""
    out = Path(out)
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + REPORT_SUFFIX)


def read_report(out: str | os.PathLike) -> dict | None:
    """The report `zh-bert clean` wrote beside its output `out`; None when there is none (a corpus not
    made by clean) or it is unreadable."""
    path = report_path(out)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


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

    def add_batch(self, res) -> None:
        """Counts from a worker's BatchResult (before deduplication)."""
        self.docs_in += res.docs_in
        self.chars_in += res.chars_in
        self.bytes_in += res.bytes_in
        self.filtered.update(res.rejected)
        self.pii.update(res.pii)
        self.boilerplate_lines += res.boilerplate_lines

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
        }
