"""bench/gpu_proof.py keeps working where no GPU is: its GPU-side command runs every section at toy size on a
CPU with the packages the GPU machine lacks (jieba, rjieba, opencc, datatrove, gradio) made unimportable, and
writes both report files with every section; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("device", "throughput", "memory", "fp16_vs_fp32", "resume", "science")
TITLES = ("Device and matmul peak", "Training throughput", "Memory:", "fp16 + loss scaling", "kill -9",
          "--science:")
MISSING_ON_GPU = ("jieba", "rjieba", "opencc", "datatrove", "gradio")
BLOCKER = f'''import importlib.abc, sys
BLOCKED = {set(MISSING_ON_GPU)!r}
class _Missing(importlib.abc.MetaPathFinder):
    """As on the GPU machine: these packages are not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked: not on the GPU machine)")
        return None
sys.meta_path.insert(0, _Missing())
'''


def _env(tmp_path: Path, *front: Path) -> dict:
    return {**os.environ, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([*map(str, front), str(REPO)])}


def _proof(args: list[str], env: dict, timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/gpu_proof.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_gpu_side_runs_every_section_without_the_packages_the_gpu_lacks(tmp_path):
    """--prepare (here, everything installed), then the GPU-side command with jieba & co. unimportable in it
    and in every process it starts: exit 0, gpu_proof.json and gpu_proof.md with every section measured."""
    data, out, block = tmp_path / "data", tmp_path / "out", tmp_path / "block"
    p = _proof(["--prepare", str(data), "--quick"], _env(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["datasets"]["main"] and manifest["datasets"]["science"]
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = _env(tmp_path, block)
    check = subprocess.run([sys.executable, "-c", "import jieba"], env=env, capture_output=True, text=True)
    assert check.returncode != 0 and "blocked" in check.stderr
    p = _proof(["--device", "cpu", "--quick", "--data", str(data), "--out", str(out)], env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    from test_bench import RESULT_LINES   # what tests/test_bench.py would check of this --quick run

    assert not [rx for rx in RESULT_LINES["gpu_proof"] if not re.search(rx, p.stdout, re.M)], p.stdout[-3000:]
    report = json.loads((out / "gpu_proof.json").read_text(encoding="utf-8"))
    assert {s: report["sections"][s]["status"] for s in SECTIONS} == dict.fromkeys(SECTIONS, "measured")
    md = (out / "gpu_proof.md").read_text(encoding="utf-8")
    for title in TITLES:
        assert f"## {title}" in md
    assert md.count("Status: **measured**") == len(SECTIONS)
    assert report["sections"]["resume"]["max_abs_loss_diff"] == 0          # CPU kernels are deterministic
    assert report["sections"]["fp16_vs_fp32"]["runs"]["fp16"]["precision"] == "fp16"
    assert {r["value"] for r in report["sections"]["science"]["rows"]} >= {"mlm+wwm", "mlm+correction", "electra"}


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    """--device cuda without a GPU, --science without a prepared corpus, a --data dir that is not a prepared
    one, --prepare into an existing dir."""
    fake = tmp_path / "prepared-without-science"
    fake.mkdir()
    (fake / "manifest.json").write_text(json.dumps({
        "format": "zh-bert gpu_proof data", "version": 1, "quick": False, "note": "zh_real_text not found",
        "datasets": {"main": {"files": {}}, "science": None}}), encoding="utf-8")
    empty = tmp_path / "not-prepared"
    empty.mkdir()
    cases = [(["--science", "--data", str(fake)], "no prepared science corpus"),
             (["--data", str(empty)], "not a prepared gpu_proof dir"),
             (["--prepare", str(empty)], "exists")]
    import torch

    if not torch.cuda.is_available():
        cases.append((["--device", "cuda", "--quick"], "no CUDA GPU"))
    for args, why in cases:
        out = tmp_path / "out"
        p = _proof(args + (["--out", str(out)] if "--prepare" not in args else []), _env(tmp_path), timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("gpu_proof: error: "), (args, p.stderr)
        assert why in lines[0], (args, lines[0])
        assert not out.exists() and p.stdout == "", args
    assert sorted(x.name for x in tmp_path.iterdir()) == ["not-prepared", "prepared-without-science"]
