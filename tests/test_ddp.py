"""Two data-parallel CPU processes (gloo) through the real `zh-bert pretrain`, against one process.

Launch lines: `torchrun --standalone --nproc_per_node 2` and `accelerate launch --config_file
recipes/accelerate/2xcpu.yaml` (MULTI_GPU with 2 processes; `--cpu` would silently run one). The worker is
tests/_ddp_helpers.py: `zh-bert pretrain` unchanged except that it logs the rows each rank draws. The
loader masks each sequence with an RNG keyed by its position in the global sample stream, so 1 and 2
processes see the very same masked sequences. Dropout is 0 so both runs compute the same function.

Tolerance for "same parameters": max |Δ| ≤ 2e-5 after 4 AdamW steps at lr 1e-3 (fp32; the runs differ
only in the order of floating-point sums: per-rank partial sums + all-reduce vs one accumulation;
measured 5.6e-7). Resume: losses within 1e-5 and parameters within 1e-6 (measured: identical).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE, read_lines

pytestmark = pytest.mark.slow

WORKER = REPO / "tests" / "_ddp_helpers.py"
TOL = 2e-5
STEPS = 4
RECIPE = """\
out_dir: {out}
data: {shards}
tokenizer: {tok}
model: tiny
seq_len: 64
global_batch: 16
micro_batch: 4
lr: 0.001
warmup_steps: 0
schedule: constant
max_steps: {steps}
save_every: 2
keep_last: 3
log_every: 1
eval_every: 0
eval_batches: 2
dropout: 0.0
precision: fp32
seed: 7
"""


def _env(index_dir: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), ZH_BERT_TEST_INDEX_DIR=str(index_dir),
               TOKENIZERS_PARALLELISM="false")
    return env


def free_port() -> int:
    """A free local port for the rendezvous (the config's default 29500 may be taken by another run)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(how: str, recipe: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the worker as 1 process, or 2 via torchrun / accelerate launch; output goes to out/log.txt."""
    out.mkdir(parents=True, exist_ok=True)
    args = [str(recipe), "--set", f"out_dir={out}", *extra]
    if how == "single":
        cmd = [sys.executable, str(WORKER), *args]
    elif how == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(WORKER), *args]
    else:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "recipes" / "accelerate" / "2xcpu.yaml"), "--main_process_port", str(free_port()),
               str(WORKER), *args]
    proc = subprocess.run(cmd, env=_env(out), capture_output=True, text=True, timeout=400,
                          cwd=str(REPO))
    log = proc.stdout + proc.stderr
    (out / "log.txt").write_text(log)
    if how != "single" and "1 process(es)" in log:
        pytest.fail(SINGLE_PROCESS_BUG)
    assert proc.returncode == 0, f"{how} run failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
    return proc


def one_and_two(recipe: Path, root: Path, env: dict) -> dict[str, Path]:
    """The recipe as 1 process and as 2 torchrun (gloo) processes, into root/one and root/two; each run must
    say it ran on that many processes. For the objectives' own 1-vs-2 checks (ELECTRA, distillation)."""
    runs = {}
    for how in ("one", "two"):
        out = root / how
        launcher = ([] if how == "one" else ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                                             "--master_port", str(free_port())])
        p = subprocess.run([sys.executable, *launcher, str(WORKER), str(recipe), "--set", f"out_dir={out}"],
                           cwd=REPO, capture_output=True, text=True, timeout=400,
                           env={**env, "TOKENIZERS_PARALLELISM": "false"})
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        assert f"{2 if how == 'two' else 1} process(es)" in p.stdout + p.stderr
        runs[how] = out
    return runs


def load_params(run: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(run / "final" / "model.safetensors"))


def losses(run: Path) -> dict[int, float]:
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def draws(run: Path, rank: int) -> list[dict]:
    path = run / f"indices-rank{rank}.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


SINGLE_PROCESS_BUG = (
    "the 2-process launch trained as two independent single processes (log: '1 process(es)'): on a machine "
    "without CUDA, Accelerate sets up gloo data parallelism only for PartialState(cpu=True) / "
    "Accelerator(cpu=True), so zh_bert/train/pretrain.py must pass cpu=not torch.cuda.is_available() to both")


def assert_two_processes(run: Path) -> None:
    summary = json.loads((run / "run.json").read_text())
    assert summary["hardware"]["processes"] == 2, SINGLE_PROCESS_BUG


@pytest.fixture(scope="module")
def ddp(tmp_path_factory, google_tokdir):
    """Shards from 120 real zhwiki documents; a 1-process and a 2-process run of the same recipe."""
    from zh_bert.corpus.shard import main as shard_main

    root = tmp_path_factory.mktemp("ddp")
    docs = root / "docs.jsonl"
    with open(docs, "w", encoding="utf-8") as f:
        for i, t in enumerate(read_lines(SAMPLE / "zhwiki_sampled.txt", 120)):
            f.write(json.dumps({"text": t, "source": f"zhwiki:{i}"}, ensure_ascii=False) + "\n")
    shards = root / "shards"
    assert shard_main([str(docs), "--tokenizer", str(google_tokdir), "-o", str(shards), "--seq-len", "64",
                       "--workers", "1", "--valid-docs", "10"]) == 0
    recipe = root / "ddp.yaml"
    recipe.write_text(RECIPE.format(out=root / "unused", shards=shards, tok=google_tokdir, steps=STEPS))
    one, two = root / "one", root / "two"
    launch("single", recipe, one)      # 1 process: micro 4 × accumulation 4 = 16
    launch("torchrun", recipe, two)    # 2 processes: micro 4 × accumulation 2 × 2 = 16
    return {"root": root, "recipe": recipe, "one": one, "two": two}


def test_two_processes_equal_one_process_with_double_accumulation(ddp):
    one, two = ddp["one"], ddp["two"]
    assert_two_processes(two)
    assert "2 process(es)" in (two / "log.txt").read_text() and "4 × 2 accumulation × 2" in (two / "log.txt").read_text()
    assert "4 × 4 accumulation × 1" in (one / "log.txt").read_text()
    l1, l2 = losses(one), losses(two)
    assert sorted(l1) == sorted(l2) == list(range(1, STEPS + 1))
    for s in l1:
        assert abs(l1[s] - l2[s]) <= 1e-5, (s, l1[s], l2[s])
    p1, p2 = load_params(one), load_params(two)
    assert p1.keys() == p2.keys()
    worst = max(float(abs(p1[k] - p2[k]).max()) for k in p1)
    assert worst <= TOL, f"max parameter difference {worst:.2e} > {TOL:.0e}"
    assert l1[STEPS] < l1[1] - 0.1                  # and it did train


def test_each_rank_sees_disjoint_data(ddp):
    one, two = ddp["one"], ddp["two"]
    assert_two_processes(two)
    r0, r1, single = draws(two, 0), draws(two, 1), draws(one, 0)
    steps = len(r0)
    assert steps == len(r1) == STEPS * 2            # 2 micro-batches per step per rank
    for a, b in zip(r0, r1):
        assert a["position"] == b["position"]       # both ranks draw from the same global batch
        assert not set(a["rows"]) & set(b["rows"])  # ... disjoint halves of it
    # per optimizer step the two ranks together see exactly the 16 rows one process sees
    for step in range(STEPS):
        both = {r for d in r0[2 * step:2 * step + 2] + r1[2 * step:2 * step + 2] for r in d["rows"]}
        alone = {r for d in single[4 * step:4 * step + 4] for r in d["rows"]}
        assert len(both) == 16 and both == alone


def test_resume_under_two_processes(ddp):
    """Drop the run's last checkpoint and final model (as if it died after step 2), resume with
    `--resume auto` through `accelerate launch` and the recipe's config file: same losses, same weights."""
    two = ddp["two"]
    assert_two_processes(two)
    resumed = ddp["root"] / "resumed"
    shutil.copytree(two, resumed)
    for p in (resumed / "checkpoints").iterdir():
        if p.name != "step-0000002":
            shutil.rmtree(p)
    shutil.rmtree(resumed / "final")
    for f in [*resumed.glob("indices-rank*.jsonl"), resumed / "log.txt"]:   # the test's files: pretrain refuses
        f.unlink()                                                            # a run dir holding foreign files
    launch("accelerate", ddp["recipe"], resumed, "--resume", "auto")
    assert_two_processes(resumed)
    assert "resumed from" in (resumed / "log.txt").read_text()
    la, lb = losses(two), losses(resumed)
    assert sorted(lb) == list(range(1, STEPS + 1))
    for s in range(3, STEPS + 1):
        assert abs(la[s] - lb[s]) <= 1e-5, (s, la[s], lb[s])
    # the resumed ranks continue at the data position where the interrupted run stopped
    assert draws(resumed, 0)[0]["position"] == 2 * 16
    pa, pb = load_params(two), load_params(resumed)
    worst = max(float(abs(pa[k] - pb[k]).max()) for k in pa)
    assert worst <= 1e-6, f"resumed parameters differ by {worst:.2e}"


def test_every_rank_writes_its_part_of_each_checkpoint_and_the_manifest_lists_it(ddp):
    """The main process writes manifest.json after a collective: rank 1's RNG file is listed with its size."""
    from zh_bert.train import checkpoint as ckpt

    two = ddp["two"]
    assert_two_processes(two)
    for c in (two / "checkpoints").iterdir():
        files = json.loads((c / "manifest.json").read_text())["files"]
        assert {"rng-rank0.pt", "rng-rank1.pt", "optimizer.pt", "model.safetensors", "trainer_state.json"} <= set(files)
        assert ckpt.incomplete_reason(c, deep=True) is None


def test_a_full_disk_on_one_rank_stops_every_rank_with_one_line(ddp, tmp_path):
    """Rank 1 cannot write its part of the step-4 checkpoint: both processes stop (none waits forever at a
    barrier), the error is one line, step-2 is intact and no temp dir is left."""
    from zh_bert.train import checkpoint as ckpt

    out = tmp_path / "full"
    env = {**_env(out), "ZH_BERT_TEST_FULL_DISK": "1@4"}
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER),
           str(ddp["recipe"]), "--set", f"out_dir={out}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=str(REPO))
    log = proc.stdout + proc.stderr
    errors = [l for l in log.splitlines() if "zh-bert pretrain: error: cannot save checkpoint" in l]
    assert proc.returncode != 0 and len(errors) == 2, log[-3000:]      # both ranks, one line each
    assert any("No space left on device" in e for e in errors), errors
    frames = [l for l in log.splitlines() if l.strip().startswith("File ")]
    assert not any("zh_bert/" in f for f in frames), log[-3000:]        # no traceback from zh_bert (torchrun's own
                                                                       # report of the exit code is not ours)
    assert [c.name for c in ckpt.list_checkpoints(out / "checkpoints")] == ["step-0000002"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000002"]
