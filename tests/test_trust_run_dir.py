"""A run dir and what is read from it (issue 44): a forged manifest deletes nothing; a run dir is one household
(evaluating a run half-way, then training on, is the normal workflow); a stopped run exits non-zero; and what a
resume reads back (trainer_state.json, run.json, metrics.jsonl, a config's model_type) is typed, one line naming
the file and the field.

Every test of a forgery hashes (sha256) every file outside the run before and after, with the real command line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from test_user_files_survive_runs import COMMON, finished  # noqa: F401  (the module's finished 4-step run)
from zh_bert.cli import main
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    EVAL_RESULTS,
    HOUSEHOLD,
    MANIFEST,
    PUBLISHED_RUN_FILES,
    SUITE_DIR,
    VERIFICATION_FILE,
    in_household,
    recover,
)
from zh_bert.train import checkpoint as ckpt

pytestmark = pytest.mark.usefixtures("one_thread")

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
VICTIM_TEXT = "论文一\n".encode()          # 10 bytes: the size a forged manifest claims
SMALL_SUITE = ["--only", "eprstmt", "--splits", "1", "--epochs", "1", "--lr", "2e-3", "--seq-len", "64"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hashes(root: Path, skip: Path | None = None) -> dict[str, str]:
    """sha256 of every file under `root` (links not followed), leaving out what lies under `skip`."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file() or (skip is not None and skip in p.parents):
            continue
        out[str(p.relative_to(root))] = sha(p)
    return out


def cli(*argv, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """The real command line, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "zh_bert", *map(str, argv)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**ENV, **(env or {})})


def in_process(capsys, *argv) -> tuple[int, str, list[str]]:
    """`zh-bert ARGV` in this process: (exit status, stdout, stderr lines other than warnings and notes)."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, [l for l in err.splitlines() if l.strip() and l.startswith("zh-bert ")]


def resume(run: Path, *more: str) -> list[str]:
    return ["pretrain", run / "recipe.yaml", "--set", f"out_dir={run}", *more, "--resume", "auto"]


@pytest.fixture
def world(finished, tmp_path) -> dict:  # noqa: F811
    """A copy of the finished run at tmp/run and a user's thesis beside it at tmp/victim/thesis.txt."""
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    victim = tmp_path / "victim" / "thesis.txt"
    victim.parent.mkdir()
    victim.write_bytes(VICTIM_TEXT)
    return {"root": tmp_path, "run": run, "victim": victim}


# ------------------------------------------------------------------------- a forged manifest deletes nothing


def _forge_checkpoint(step: Path, how: str, victim: Path) -> str:
    """Add the victim to a checkpoint's manifest.json the way `how` says; returns the name it is listed under."""
    manifest = json.loads((step / "manifest.json").read_text(encoding="utf-8"))
    if how == "dotdot":
        name = "../../../victim/thesis.txt"
    elif how == "absolute":
        name = str(victim)
    else:   # a subfolder of the checkpoint that is a link out of it, and a plain-looking name inside it
        (step / "notes").symlink_to(victim.parent, target_is_directory=True)
        name = "notes/thesis.txt"
    manifest["files"][name] = {"size": len(VICTIM_TEXT), "sha256": sha(victim)}
    (step / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return name


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlinked-subfolder"])
def test_a_forged_manifest_deletes_nothing_a_checkpoint_rotated_out(world, capsys, how):
    """The issue's case: `checkpoints/step-0000002/manifest.json` lists `../../../victim/thesis.txt` (or an
    absolute path, or a name under a linked subfolder); a resume with keep_last=1 must rotate step-2 out. The
    forged checkpoint counts as incomplete: never resumed from, never rotated out, and said so on stderr."""
    root, run, victim = world["root"], world["run"], world["victim"]
    step2 = run / "checkpoints" / "step-0000002"
    name = _forge_checkpoint(step2, how, victim)
    outside, forged = hashes(root, skip=run), hashes(step2)
    argv = resume(run, "--set", "max_steps=6", "--set", "keep_last=1")
    if how == "dotdot":   # the issue's own case, in a process of its own
        p = cli(*argv)
        rc, err = p.returncode, p.stderr
    else:
        capsys.readouterr()
        rc = main([str(a) for a in argv])
        err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    assert hashes(root, skip=run) == outside and victim.read_bytes() == VICTIM_TEXT
    assert hashes(step2) == forged, "the forged checkpoint is left exactly as it was"
    assert [c.name for c in ckpt.list_checkpoints(run / "checkpoints")] == ["step-0000006"]
    warning = [l for l in err.splitlines() if str(step2) in l]
    assert len(warning) == 1 and "never resumed from, rotated out or deleted" in warning[0], err
    field = "leads out of the checkpoint" if how == "symlinked-subfolder" else "a name read from a file is never a path"
    assert f"files[{name!r}]" in warning[0] and field in warning[0], warning[0]
    ckpt.discard(step2)   # even asked to delete it outright, nothing outside the checkpoint goes
    assert hashes(root, skip=run) == outside


def test_a_forged_manifest_deletes_nothing_in_the_newest_checkpoint(world, capsys):
    """The newest checkpoint forged: `--resume auto` skips it naming the field, and, since the run would have
    to replace that folder when it saves step 4 again, refuses before any work instead of stopping there."""
    root, run, victim = world["root"], world["run"], world["victim"]
    step4 = run / "checkpoints" / "step-0000004"
    _forge_checkpoint(step4, "dotdot", victim)
    before = hashes(root)
    rc, out, err = in_process(capsys, *resume(run, "--set", "max_steps=6"))
    assert rc == 2 and len(err) == 1 and str(step4) in err[0] and "move it out of" in err[0], err
    assert "files['../../../victim/thesis.txt']" in err[0]
    assert hashes(root) == before


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlinked-subfolder"])
def test_a_forged_manifest_deletes_nothing_when_final_is_replaced(world, capsys, sample_jsonl, how):
    """final/'s layer manifest `.zh-bert-manifest.json` forged the same way: a resume (which replaces final/ at
    the end) and `vocab -o RUN/final --force` are refused in one line before any work; nothing anywhere changes."""
    root, run, victim = world["root"], world["run"], world["victim"]
    final = run / "final"
    manifest = json.loads((final / MANIFEST).read_text(encoding="utf-8"))
    name = {"dotdot": "../../victim/thesis.txt", "absolute": str(victim), "symlinked-subfolder": "notes/thesis.txt"}[how]
    if how == "symlinked-subfolder":
        (final / "notes").symlink_to(victim.parent, target_is_directory=True)
    manifest["files"].append(name)
    (final / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    before = hashes(root)
    rc, out, err = in_process(capsys, *resume(run, "--set", "max_steps=6"))
    assert rc == 2 and len(err) == 1 and ("refusing" in err[0] or "not replaced" in err[0]), err
    assert ("notes" in err[0]) if how == "symlinked-subfolder" else (f"{MANIFEST}: files[" in err[0]), err
    rc, out, err = in_process(capsys, "vocab", sample_jsonl, "-o", final, "--force", "--size", "500", "-q")
    assert rc == 2 and len(err) == 1 and "refusing" in err[0], err
    assert hashes(root) == before and victim.read_bytes() == VICTIM_TEXT


# ------------------------------------------------------------------------------ a run dir is one household


def test_a_run_dir_is_one_household_every_writer_takes_its_name_from_it():
    """One list: each entry names its writer and why; the writers' names are the list's; a killed writer's
    leftovers of any entry belong to the household, anything else (or an entry of the wrong kind) does not."""
    import ast

    from zh_bert.evaluation import eval_results
    from zh_bert.release import publish

    names = [e.name for e in HOUSEHOLD]
    assert len(names) == len(set(names)) and all(e.command and e.why for e in HOUSEHOLD)
    assert eval_results.FILENAME == EVAL_RESULTS
    assert publish.PUBLISHED_RUN_FILES == PUBLISHED_RUN_FILES and "ablate_evals.json" not in PUBLISHED_RUN_FILES
    for e in HOUSEHOLD:
        assert in_household(e.name, e.folder) and not in_household(e.name, not e.folder)
        assert in_household(f".{e.name}.tmp-4242" + ("-k3_x9" if e.folder else ""), e.folder)
    assert in_household(f".{SUITE_DIR}.old-17", True) and in_household("cache", True, ("cache",))
    for name, is_dir in [("notes.txt", False), (".suite.tmp-abc", True), (".thesis.tex.tmp-12", False),
                         ("suite.md", False), (".suite", True), ("cache", True)]:
        assert not in_household(name, is_dir), name
    spelled = []   # `run_dir / "suite"`, `Path("run.json")`: a second spelling of an entry's name
    for path in sorted((REPO / "zh_bert").rglob("*.py")):
        if path.name == "household.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            parts = ([node.right] if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) else
                     node.args if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Path" else [])
            spelled += [f"{path.relative_to(REPO)}:{node.lineno} {p.value}" for p in parts
                        if isinstance(p, ast.Constant) and p.value in names
                        and (path.name, p.value) != ("spec.py", "data")]   # ablate's own OUT/data/
    assert not spelled, f"run-dir entries named outside the household list: {spelled}"


def test_a_run_dir_is_one_household_evaluate_verify_and_a_killed_suite_never_block_a_resume(world, capsys):
    """`eval suite RUN` killed (kill -9 as it commits RUN/suite/) leaves `.suite.tmp-PID-*`; a resume continues
    past it. Then `eval suite RUN` and `leaderboard verify RUN` write RUN/suite/, eval_results.json and
    verification.json; a resume continues to the end and leaves every one of them byte for byte."""
    run = world["run"]
    p = cli("eval", "suite", run, *SMALL_SUITE, env={"ZH_BERT_FAULT": f"written:{SUITE_DIR}"}, timeout=400)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    (leftover,) = [c for c in run.iterdir() if c.name.startswith(f".{SUITE_DIR}.tmp-")]
    rc, out, err = in_process(capsys, *resume(run, "--set", "max_steps=6"))
    assert rc == 0, err
    assert leftover.is_dir(), "another writer's leftover is that writer's to remove"
    recover(run / SUITE_DIR)   # what the next `eval suite` does first
    assert not leftover.exists()

    assert in_process(capsys, "eval", "suite", run, *SMALL_SUITE)[0] == 0
    assert in_process(capsys, "leaderboard", "verify", run, *SMALL_SUITE)[0] == 0
    theirs = {p: sha(p) for p in [*(run / SUITE_DIR).rglob("*"), run / EVAL_RESULTS, run / VERIFICATION_FILE]
              if p.is_file()}
    assert len(theirs) >= 5
    rc, out, err = in_process(capsys, *resume(run, "--set", "max_steps=8"))
    assert rc == 0, err
    assert {p: sha(p) for p in theirs} == theirs
    assert json.loads((run / "run.json").read_text(encoding="utf-8"))["steps"] == 8


# ------------------------------------------------------------------------------ a stopped run exits non-zero


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGINT"])
def test_a_stopped_run_exits_non_zero_then_resume_continues_to_the_end(tmp_path, char_shards, capsys, sig):
    """A scheduler's SIGTERM (or Ctrl-C) to a real `zh-bert pretrain`: it saves a checkpoint, says how to go on,
    exits 128 + the signal (143, 130) so `pretrain R && publish R` stops, and run.json records it; `--resume auto`
    then continues to the end with exit 0."""
    from _run_helpers import save_recipe

    tokdir, sharddir = char_shards
    run = tmp_path / "run"
    recipe = save_recipe(tmp_path / "r.yaml", {**COMMON, "out_dir": str(run), "data": str(sharddir),
                                               "tokenizer": str(tokdir), "max_steps": 100_000, "save_every": 0})
    proc = subprocess.Popen([sys.executable, "-m", "zh_bert", "pretrain", str(recipe)], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    said = [l for l in err.splitlines() if l.startswith(f"{sig.name}: saved")]
    assert len(said) == 1 and f"exit status {128 + sig}" in said[0] and "--resume auto" in said[0], err
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert summary["status"] == "interrupted" and summary["signal"] == sig.name
    (step,) = ckpt.list_checkpoints(run / "checkpoints")
    assert step.name == ckpt.step_dir_name(summary["steps"]) and not (run / "final").exists()

    rc, out, err = in_process(capsys, "pretrain", recipe, "--set", f"max_steps={summary['steps'] + 2}", "--resume",
                              "auto")
    assert rc == 0, err
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert summary["status"] == "finished" and summary["signal"] is None and (run / "final" / "config.json").is_file()


# ------------------------------------------------------------------------------ trust nothing read


def test_trust_nothing_read_a_trainer_state_is_typed(world, capsys):
    """trainer_state.json fields a resume uses: step an integer ≥ 0, counts integers, the loader's position too;
    a wrong one is one line naming the file and the field, before any training."""
    run = world["run"]
    state_path = run / "checkpoints" / "step-0000004" / "trainer_state.json"
    good = json.loads(state_path.read_text(encoding="utf-8"))
    for field, value in [("step", -4), ("step", "4"), ("tokens_seen", 1.5), ("loader", {"epoch": 0, "position": -1}),
                         ("resumes", [{"step": True, "from": "x"}])]:
        state = {**good, field: value}
        state_path.write_text(json.dumps(state), encoding="utf-8")
        with pytest.raises(ZhBertError) as e:
            ckpt.read_state(state_path.parent)
        assert str(e.value).startswith(f"{state_path}: {field}"), str(e.value)
    state_path.write_text(json.dumps(good), encoding="utf-8")
    assert ckpt.read_state(state_path.parent)["step"] == 4


def test_trust_nothing_read_run_json_metrics_and_model_type(tmp_path, world):
    """run.json is a run's proof only when its fields are typed; a metrics line is an object with an integer
    step (the last line may be cut by kill -9), a non-finite figure is written as null; a config's model_type
    must be text."""
    from zh_bert.train.arch.base import model_type
    from zh_bert.train.curves import read_metrics
    from zh_bert.train.rundir import written_by_pretrain

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "run.json").write_text('{"status": "finished", "steps": "many"}', encoding="utf-8")
    assert not written_by_pretrain(mine)
    (mine / "run.json").write_text('{"status": "finished", "steps": 3}', encoding="utf-8")
    assert written_by_pretrain(mine)

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": null}\n{"step": 3, "lo', encoding="utf-8")
    assert [r["step"] for r in read_metrics(log)] == [1, 2]
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": "2"}\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(ZhBertError, match=r"metrics.jsonl:2: step: expected an integer"):
        read_metrics(log)
    log.write_text('{"step": 1, "loss": NaN}\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(ZhBertError, match=r"metrics.jsonl:1: not a JSON line"):
        read_metrics(log)
    rows = read_metrics(world["run"] / "metrics.jsonl")
    assert rows and all(isinstance(r["step"], int) for r in rows)

    config = tmp_path / "config.json"
    config.write_text('{"model_type": ["bert"]}', encoding="utf-8")
    with pytest.raises(ZhBertError, match="model_type: expected text"):
        model_type(config)
    config.write_text('{"hidden_size": 8}', encoding="utf-8")
    assert model_type(config) is None


@pytest.mark.slow
def test_a_stopped_run_exits_non_zero_under_torchrun_on_every_rank(tmp_path, char_shards):
    """SIGTERM to `torchrun` (as a scheduler sends it): it passes the signal to both ranks, which stop after the
    same step, save one checkpoint together (each rank's RNG file in it) and exit 143; run.json records it; a
    resume under torchrun continues to the end with exit 0."""
    from _run_helpers import save_recipe

    tokdir, sharddir = char_shards
    run = tmp_path / "run"
    recipe = save_recipe(tmp_path / "r.yaml", {**COMMON, "out_dir": str(run), "data": str(sharddir),
                                               "tokenizer": str(tokdir), "micro_batch": 4, "max_steps": 100_000,
                                               "save_every": 0})
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                str(REPO / "tests" / "_ddp_helpers.py"), str(recipe)]
    env = {**ENV, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(torchrun, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0, log[-3000:]
    assert "SIGTERM: saved" in log and "exit status 143" in log, log[-3000:]
    assert not any("zh_bert/" in l for l in log.splitlines() if l.strip().startswith("File ")), log[-3000:]
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM"
    assert summary["hardware"]["processes"] == 2
    (step,) = ckpt.list_checkpoints(run / "checkpoints")
    assert {"rng-rank0.pt", "rng-rank1.pt"} <= {p.name for p in step.iterdir()}
    assert ckpt.incomplete_reason(step, deep=True) is None

    p = subprocess.run([*torchrun, "--set", f"max_steps={summary['steps'] + 2}", "--resume", "auto"], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert summary["status"] == "finished" and summary["signal"] is None and summary["hardware"]["processes"] == 2
