"""What the pretraining tests share (a pytest plugin, see conftest): one thread for identical arithmetic,
recipe files, the metrics log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml


@pytest.fixture
def one_thread():
    """1 thread here (and OMP_NUM_THREADS=1 in the subprocesses the tests start): identical arithmetic in an
    in-process reference run and a subprocess, and no OpenMP oversubscription on a shared test machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def save_recipe(path: Path, recipe: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return path


def metrics(run: Path) -> list[dict]:
    """The rows of a run's metrics.jsonl."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]


def kill_then_resume(cmd: list[str], run: Path, env: dict, cwd: Path, last_step: int, step: int = 4) -> list[dict]:
    """Start `cmd` (a `zh-bert pretrain` of `last_step` steps), SIGKILL it as soon as the checkpoint of `step` is
    complete, check the kill landed mid-run, rerun with `--resume auto`; the run's metrics rows that carry a loss."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 240
    while not (run / "checkpoints" / f"step-{step:07d}" / "trainer_state.json").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    logged = [r["step"] for r in metrics(run) if "loss" in r]
    assert step <= max(logged) < last_step, "the kill must land after a checkpoint and before the end"
    p = subprocess.run(cmd + ["--resume", "auto"], cwd=cwd, capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "resumed from" in p.stdout + p.stderr
    return [r for r in metrics(run) if "loss" in r]
