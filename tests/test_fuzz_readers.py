"""The fuzz harness (slow): for each reader, hostile inputs generated from a seed (`_fuzz_readers.py`) run in a
child process under an address-space cap and a time cap; each must end as read, one line (exit 2) or a counted
skip, never a traceback, never past the caps. Figures: docs/reliability.md#bounds-on-what-is-read."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: inputs per reader (a run of all: about 3 minutes on 2 cores)
COUNTS = {"tf1_index": 200, "state_dict": 100, "config_vocab": 100, "json": 400, "yaml": 400, "card": 200,
          "parquet": 100, "zst": 100, "ner": 150, "task": 150, "manifest": 300, "eval_results": 300}
#: the address-space cap of a child (torch alone reserves about 1.5 GB of it) and its time cap
CAP_BYTES, CAP_SECONDS = 6 << 30, 300


def run_reader(reader: str, count: int, seed: int, scratch: Path) -> dict:
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))

    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(HERE / "_fuzz_readers.py"), reader, str(count), str(seed), str(scratch)],
                       capture_output=True, text=True, preexec_fn=cap, timeout=CAP_SECONDS, env=env)
    assert r.returncode == 0, f"{reader}: the child died (rc {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("reader", list(COUNTS))
def test_every_hostile_input_is_read_one_line_or_a_counted_skip(reader, tmp_path):
    tally = run_reader(reader, COUNTS[reader], 2026, tmp_path)
    print(json.dumps(tally))
    assert not tally["failures"], tally["failures"][:5]
    assert tally["tried"] == tally["read"] + tally["one_line"] + tally["skipped"] == COUNTS[reader]
    assert tally["peak_rss_mb"] < CAP_BYTES >> 20


if __name__ == "__main__":   # the figures of docs/reliability.md: python tests/test_fuzz_readers.py
    import tempfile
    import time

    print("| reader | inputs | read | one line | counted skip | peak RSS | seconds |\n|---|---|---|---|---|---|---|")
    for name, n in COUNTS.items():
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            t = run_reader(name, n, 2026, Path(d))
            assert not t["failures"], t["failures"][:5]
            print(f"| {name} | {t['tried']} | {t['read']} | {t['one_line']} | {t['skipped']} | {t['peak_rss_mb']} MB "
                  f"| {time.perf_counter() - t0:.0f} |", flush=True)
