"""Throughput of `zh-bert clean` on the bundled sample corpus (corpora/sample/, 5.7 MB), in MB/s of input,
with exact dedup and with MinHash, against a baseline run in the same process: a naive single-process
cleaner (NFKC + HTML-tag regex + whitespace collapse + md5 exact dedup + json lines out).

    python -m bench.clean_throughput [--repeat 3] [--workers 2] [--input corpora/sample] [--quick]

Prints one line per configuration (median of --repeat runs: wall-clock MB/s, and MB per CPU-second,
which a machine shared with other jobs disturbs less) and the ratios; compare ratios from one run, not
absolute numbers across runs. Every run writes to a fresh output path (`clean` never overwrites a file it
did not write, such as the baseline's). `--quick`: the first --quick-lines lines of each sample file, one
repeat, every section at toy size (a smoke test, tests/test_bench.py; its figures mean nothing).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from bench import REPO
from bench.cli import parse
from bench.timing import machine, timed
from zh_bert.core.config import option
from zh_bert.core.fileio import atomic_write, remove_scratch, scratch_dir, write_text
from zh_bert.corpus.clean import main as clean_main
from zh_bert.corpus.clean.readers import expand_inputs


@dataclass
class Options:
    input: str = option(str(REPO / "corpora" / "sample"), help="corpus file or folder to clean")
    repeat: int = option(3, help="timed runs per configuration (median)")
    workers: int = option(len(os.sched_getaffinity(0)), help="workers of the N-worker runs")
    quick: bool = option(False, help="toy size, one repeat: a smoke test of every section")
    quick_lines: int = option(300, help="--quick: lines of each sample file")


def baseline(files: list[Path], out: Path) -> int:
    """The naive cleaner: what a user writes in ten minutes."""
    tag = re.compile(r"<[^>]+>")
    space = re.compile(r"\s+")
    seen = set()
    n = 0
    with atomic_write(out) as f:
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as src:
                for line in src:
                    text = space.sub(" ", tag.sub("", unicodedata.normalize("NFKC", line))).strip()
                    if len(text) < 20:
                        continue
                    key = hashlib.md5(text.encode()).digest()
                    if key in seen:
                        continue
                    seen.add(key)
                    f.write(json.dumps({"text": text, "source": str(path)}, ensure_ascii=False) + "\n")
                    n += 1
    return n


def fresh_outputs(tmp: Path):
    """A new output path per call (the previous run's folder removed): the baseline's file and earlier
    runs' outputs are not clean's to overwrite, and a rerun must not be timed against a leftover."""
    for i in itertools.count():
        remove_scratch(tmp / f"run-{i - 1}")
        (tmp / f"run-{i}").mkdir()
        yield tmp / f"run-{i}" / "docs.jsonl"


def quick_input(tmp: Path, lines: int) -> str:
    """The first `lines` non-empty lines of each sample text file, in a folder of the same names."""
    d = tmp / "quick-input"
    d.mkdir()
    for src in sorted((REPO / "corpora" / "sample").glob("*_sampled.txt")):
        keep = [l for l in src.read_text(encoding="utf-8").split("\n") if l.strip()][:lines]
        write_text(d / src.name, "\n".join(keep) + "\n")
    return str(d)


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "clean_throughput", __doc__, argv)
    with scratch_dir("zh-bert-bench-") as tmp:
        tmp = Path(tmp)
        if args.quick:
            args.input, args.repeat = quick_input(tmp, args.quick_lines), 1
        files, _ = expand_inputs([args.input])
        mb = sum(f.stat().st_size for f in files) / 1e6
        outs = fresh_outputs(tmp)

        def clean(*flags: str):
            return clean_main([args.input, "-o", str(next(outs)), "-q", *flags])

        runs = {
            "baseline (naive, 1 process)": lambda: baseline(files, next(outs)),
            "zh-bert clean --dedup exact --workers 1": lambda: clean("--dedup", "exact", "--workers", "1"),
            f"zh-bert clean --dedup exact --workers {args.workers}": lambda: clean(
                "--dedup", "exact", "--workers", str(args.workers)),
            f"zh-bert clean --dedup minhash --workers {args.workers}": lambda: clean(
                "--dedup", "minhash", "--workers", str(args.workers)),
        }
        speed = {}
        for name, fn in runs.items():
            t = timed(fn, args.repeat)
            assert t.result in (0, None) or name.startswith("baseline"), f"{name} returned {t.result}"
            wall, cpu = t.wall, t.cpu
            speed[name] = mb / wall
            print(f"{name:<48} {speed[name]:6.1f} MB/s wall   {mb / cpu:6.1f} MB per CPU-second", flush=True)
        # MinHash signatures alone: ours (numpy, 32-bit lanes) vs datasketch 2.0, same shingles/perms.
        from zh_bert.corpus.clean.dedup import MinHashConfig, MinHasher

        docs = [l for f in files if f.suffix == ".txt" for l in f.read_text(encoding="utf-8").split("\n") if l]
        docs_mb = sum(len(d.encode()) for d in docs) / 1e6
        ours = MinHasher(MinHashConfig())
        sig_ours = docs_mb / timed(lambda: [ours.signature(d) for d in docs]).cpu
        try:
            from datasketch import MinHash

            def ds():
                for d in docs:
                    m = MinHash(num_perm=128)
                    m.update_batch([d[i:i + 5].encode() for i in range(max(1, len(d) - 4))])
            sig_ds = docs_mb / timed(ds).cpu
        except ImportError:
            sig_ds = float("nan")
        print(f"{'MinHash signatures only: zh-bert (numpy)':<48} {sig_ours:6.1f} MB per CPU-second")
        print(f"{'MinHash signatures only: datasketch update_batch':<48} {sig_ds:6.1f} MB per CPU-second")
    names = list(speed)
    base, exact1, exact, minhash = (speed[n] for n in names)
    print(f"\nmachine: {machine()}")
    print(f"input: {args.input} ({mb:.2f} MB, {len(files)} files), median of {args.repeat}, "
          f"{os.cpu_count()} cores")
    print(f"exact / baseline: {exact / base:.2f}x   workers {args.workers} / 1: {exact / exact1:.2f}x   "
          f"minhash / exact: {minhash / exact:.2f}x (MinHash costs {100 * (1 - minhash / exact):.0f}% of throughput)   "
          f"signatures zh-bert / datasketch: {sig_ours / sig_ds:.1f}x")


if __name__ == "__main__":
    main()
