"""Every benchmark script still runs: `python bench/NAME.py --quick` (every section at toy size, offline) exits 0
and prints its result lines, ratios against its baseline included. The scripts are found by globbing bench/*.py
(private helpers `_*.py` run through them), so a new script without a `--quick` mode, or without an entry in
RESULT_LINES naming what it must print, fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.stem for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))
NUM = r"\d[\d,]*(?:\.\d+)?"   # figures print with thousands separators (1,810)

#: script -> regexes (multiline) its --quick stdout must match: the ratio/result lines of that benchmark
RESULT_LINES = {
    "clean_throughput": [rf"^exact / baseline: {NUM}x +workers \d+ / 1: {NUM}x +minhash / exact: {NUM}x",
                         rf"signatures zh-bert / datasketch: (?:{NUM}|nan)x$"],
    "cpu_runtime": [rf"^glibc defaults, ACTIVE \(baseline\) +{NUM} tokens/s .* 1\.00x",
                    rf"^keep_freed_memory, ACTIVE .* {NUM}x +minor faults",
                    rf"^keep_freed_memory, PASSIVE .* {NUM}x +minor faults"],
    "demo_latency": [rf"^zh-bert fill, 1 blank .* median +{NUM} ms", rf"^ratio baseline/ours: {NUM}x"],
    "gpu_proof": [*(rf"^section {s}: measured \(" for s in ("device", "throughput", "memory", "fp16_vs_fp32",
                                                            "resume", "science")),
                  r"^wrote .*gpu_proof\.json and .*gpu_proof\.md"],
    "main_recipe_length": [rf"^4 steps .* {NUM} ± {NUM}", rf"^random init +- +{NUM} ± {NUM}"],
    "masking_throughput": [rf'"per_sequence_vs_row_at_a_time": {NUM}', rf'"correction_vs_wwm_per_sequence": {NUM}',
                           rf'"build_s": {NUM}'],
    "modernbert_head": [rf"^tiny: zh-bert / transformers sparse_prediction = {NUM}x; modernbert / bert .* = {NUM}x$"],
    "plan_memory_check": [rf"^mini +4 +{NUM} +{NUM} +{NUM}$", r"^(?:NOT )?all within ±25%"],
    "scale": [rf"^\| 1 MB \| clean executor \| .*\| {NUM} / {NUM} \|",
              rf"^\| 1 MB \| shard executor \| .*\| {NUM} / {NUM} \|"],
    "shard_throughput": [rf"zh-bert shard --workers 2 .* x *{NUM} wall", rf"word-start F1 {NUM}",
                         rf"^  loader / step = {NUM}%"],
    "train_throughput": [rf"^\| tiny \| fp32 \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|"],
    "vocab_build": [r"^baseline: tokenizers WordPieceTrainer.* 1\.00x$",
                    *(rf"^zh-bert vocab {kind} .* {NUM}x$" for kind in
                      ("char --size", "wordpiece", "word", "sentencepiece unigram", "sentencepiece bpe"))],
}


def test_every_bench_script_has_a_quick_entry():
    """A script added to bench/ must say what its --quick run prints (and so get a --quick mode)."""
    assert SCRIPTS and set(SCRIPTS) <= set(RESULT_LINES), f"add to RESULT_LINES: {set(SCRIPTS) - set(RESULT_LINES)}"
    for name in SCRIPTS:
        assert "--quick" in (REPO / "bench" / f"{name}.py").read_text(encoding="utf-8"), f"bench/{name}.py: no --quick"


#: scripts whose --quick run a test of their own already makes (and checks more closely): not run twice
OWN_TEST = {"gpu_proof": "tests/test_gpu_proof.py"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SCRIPTS if n not in OWN_TEST])
def test_bench_quick_mode_runs_every_section(name, tmp_path):
    """Offline, in its own temp dir; exit 0, no traceback, and every result line present."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, f"bench/{name}.py", "--quick"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=480)
    took = time.perf_counter() - t0
    print(f"bench/{name}.py --quick: {took:.1f} s")
    assert r.returncode == 0 and "Traceback" not in r.stderr, f"rc {r.returncode}\n{r.stderr[-3000:]}"
    missing = [rx for rx in RESULT_LINES.get(name, [r"(?!)"]) if not re.search(rx, r.stdout, re.M)]
    assert not missing, f"bench/{name}.py --quick printed no line matching {missing}:\n{r.stdout[-3000:]}"
