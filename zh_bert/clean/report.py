"""The run's tally and `OUT.report.json`: what a model card needs to say how the corpus was cleaned
(counts per filter reason, duplicates, chars and documents in/out, unreadable lines with file:line,
inputs with their encodings, every option in effect, time)."""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from pathlib import Path


def report_path(out: str | os.PathLike) -> Path:
    """OUT.report.json beside OUT.jsonl (docs.jsonl → docs.report.json)."""
    out = Path(out)
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + ".report.json")


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
