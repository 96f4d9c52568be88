"""Checkpoints under faults, and the resume rules.

A real `zh-bert pretrain` process SIGKILLs itself at a chosen point of a checkpoint save (the test hook
`ZH_BERT_FAULT=after:POINT@STEP`); a full disk is a patched `torch.save`. After each: the checkpoints that were
complete before are unchanged, the interrupted one is never taken for complete, `--resume auto` continues from
the newest complete one and logs exactly the per-step losses of an uninterrupted run, and the next run leaves
no temp dirs. Then the rules: an incomplete checkpoint is skipped by `auto` and refused by PATH (one line
naming the file), an older checkpoint only continues in a new out_dir, and `--set` on resume either takes
effect (lr, max_steps, ...) or is refused naming the key.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from _run_helpers import metrics, save_recipe
from conftest import CHAR_SEQ, REPO
from zh_bert.train import checkpoint as ckpt

pytestmark = pytest.mark.usefixtures("one_thread")

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
COMMON = dict(model="tiny", masking="wwm", seq_len=CHAR_SEQ, global_batch=16, micro_batch=8, lr=3e-3,
              warmup_steps=2, max_steps=12, log_every=1, eval_every=0, eval_batches=2, save_every=4, keep_last=5,
              seed=7, precision="fp32")




def write_recipe(path: Path, char_shards, **over) -> Path:
    tokdir, sharddir = char_shards
    recipe = {**COMMON, "out_dir": str(path.parent / "run"), "data": str(sharddir), "tokenizer": str(tokdir), **over}
    save_recipe(path, recipe)
    return path


def losses(run: Path) -> dict[int, float]:
    rows = metrics(run)
    steps = [r["step"] for r in rows if "loss" in r]
    assert len(steps) == len(set(steps)), "a step logged twice"
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zh_bert", "pretrain", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**ONE_THREAD, **(env or {})})


def in_process(capsys, *argv: str) -> tuple[int, str, str]:
    from zh_bert.cli import main

    capsys.readouterr()
    rc = main(["pretrain", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def leftovers(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("."))


def assert_same_losses(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
    diffs = {s: abs(got[s] - expected[s]) for s in expected}
    assert max(diffs.values()) <= 1e-5, diffs


@pytest.fixture(scope="module")
def reference(tmp_path_factory, char_shards):
    """An uninterrupted 12-step run (checkpoints at 4, 8, 12): its losses and its run dir."""
    from zh_bert.train.pretrain import main

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("reference")
    assert main([str(write_recipe(root / "r.yaml", char_shards))]) == 0
    run = root / "run"
    assert [p.name for p in ckpt.list_checkpoints(run / "checkpoints")] == [
        "step-0000004", "step-0000008", "step-0000012"]
    return {"run": run, "losses": losses(run)}


# ------------------------------------------------------------------------------------------ kill -9 during a save


@pytest.mark.slow
@pytest.mark.parametrize("point", ["rng-rank0", "optimizer", "manifest", "renamed", "trashed"])
def test_kill9_during_a_save_never_loses_or_fakes_a_checkpoint(point, tmp_path, char_shards, reference):
    keep_last = 1 if point == "trashed" else 5      # "trashed": killed while removing step-4 after step-8 is in
    recipe = write_recipe(tmp_path / "r.yaml", char_shards, keep_last=keep_last)
    run, root = tmp_path / "run", tmp_path / "run" / "checkpoints"
    p = cli(str(recipe), env={"ZH_BERT_FAULT": f"after:{point}@8"})
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]

    complete = [c.name for c in ckpt.list_checkpoints(root)]
    saved8 = point in ("renamed", "trashed")
    assert complete[-1] == ("step-0000008" if saved8 else "step-0000004"), complete
    if not saved8:   # the interrupted save is not under the final name, and not taken for complete
        assert not (root / "step-0000008").exists() and (root / ".step-0000008.tmp").is_dir()
    if point != "trashed":   # what was complete before the kill is exactly what the uninterrupted run wrote
        assert ckpt.incomplete_reason(root / "step-0000004", deep=True) is None
        mine, ref = root / "step-0000004", reference["run"] / "checkpoints" / "step-0000004"
        for name in ("config.json", "model.safetensors"):
            assert (mine / name).read_bytes() == (ref / name).read_bytes(), name
        a, b = (torch.load(d / "rng-rank0.pt", weights_only=True) for d in (mine, ref))
        assert torch.equal(a["torch"], b["torch"]) and a["python"] == b["python"]

    p = cli(str(recipe), "--resume", "auto")
    assert p.returncode == 0, p.stderr[-2000:]
    resumed_at = 8 if saved8 or point == "manifest" else 4   # a save killed after its manifest is complete
    assert f"step-{resumed_at:07d} at step {resumed_at}" in p.stdout + p.stderr
    assert_same_losses(losses(run), reference["losses"])
    assert leftovers(run) == [], "temp dirs of the killed save are removed by the next run"
    assert all(ckpt.incomplete_reason(c, deep=True) is None for c in root.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter "
                                                "failed writing file data/0: file write failed")])
def test_full_disk_during_a_save_is_one_line_and_resumable(error, tmp_path, char_shards, reference, capsys,
                                                           monkeypatch):
    recipe = write_recipe(tmp_path / "r.yaml", char_shards)
    run, root = tmp_path / "run", tmp_path / "run" / "checkpoints"
    real_save = torch.save

    def full_disk(obj, f, *a, **kw):
        name = str(getattr(f, "name", f))   # the layer's temp file handle: `.optimizer.pt.tmp-PID`
        if ".step-0000008.tmp" in name and Path(name).name.lstrip(".").startswith("optimizer.pt"):
            raise error
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", full_disk)
    rc, out, err = in_process(capsys, str(recipe))
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 2 and "Traceback" not in err, err
    assert lines[-1].startswith("zh-bert pretrain: error: cannot save checkpoint") and "--resume auto" in lines[-1]
    assert [c.name for c in ckpt.list_checkpoints(root)] == ["step-0000004"]
    assert sorted(p.name for p in root.iterdir()) == ["step-0000004"], "no partial checkpoint, no temp dir"
    assert not (run / "final").exists()

    monkeypatch.setattr(torch, "save", real_save)
    rc, out, err = in_process(capsys, str(recipe), "--resume", "auto")
    assert rc == 0, err
    assert_same_losses(losses(run), reference["losses"])


# ------------------------------------------------------------------------------------------ incomplete checkpoints


def test_incomplete_checkpoints_are_skipped_by_auto_and_refused_by_path(tmp_path, reference, capsys):
    run = tmp_path / "run"
    shutil.copytree(reference["run"], run)
    root = run / "checkpoints"
    (root / "step-0000012" / "rng-rank0.pt").unlink()        # the case: a re-save killed half-way
    warned: list[str] = []
    assert ckpt.find_resume("auto", root, warn=warned.append) == root / "step-0000008"
    assert len(warned) == 1 and "step-0000012" in warned[0] and "rng-rank0.pt is missing" in warned[0]
    assert [c.name for c in ckpt.list_checkpoints(root)] == ["step-0000004", "step-0000008"]

    recipe = tmp_path / "r.yaml"
    recipe.write_text((reference["run"].parent / "r.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    rc, out, err = in_process(capsys, str(recipe), "--set", f"out_dir={run}", "--resume", str(root / "step-0000012"))
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 2 and len(lines) == 1 and "rng-rank0.pt is missing" in lines[0], err

    opt = root / "step-0000008" / "optimizer.pt"             # a truncated file: the sizes tell
    os.truncate(opt, opt.stat().st_size // 2)
    assert "optimizer.pt has" in ckpt.incomplete_reason(root / "step-0000008")
    rng = root / "step-0000004" / "rng-rank0.pt"              # same size, other bytes: the sha256 tells
    data = bytearray(rng.read_bytes())
    data[-1] ^= 0xFF
    rng.write_bytes(bytes(data))
    assert ckpt.incomplete_reason(root / "step-0000004") is None
    assert "sha256" in ckpt.incomplete_reason(root / "step-0000004", deep=True)
    assert ckpt.find_resume("auto", root, warn=warned.append) is None


def test_resume_auto_skipping_an_incomplete_checkpoint_warns_on_stderr(tmp_path, reference, capsys):
    """The warning is a diagnostic: stderr, not stdout (where the run's progress lines go)."""
    run = tmp_path / "run"
    shutil.copytree(reference["run"], run)
    (run / "checkpoints" / "step-0000012" / "rng-rank0.pt").unlink()
    rc, out, err = in_process(capsys, str(reference["run"].parent / "r.yaml"), "--set", f"out_dir={run}",
                              "--resume", "auto")
    assert rc == 0, err
    assert "warning: skipping incomplete checkpoint" in err and "step-0000012" in err
    assert "skipping incomplete checkpoint" not in out and "resumed from" in out
    assert_same_losses(losses(run), reference["losses"])


def test_checkpoints_from_before_manifests_count_only_when_every_file_is_there(tmp_path, reference):
    root = tmp_path / "checkpoints"
    shutil.copytree(reference["run"] / "checkpoints", root)
    for c in root.iterdir():
        (c / "manifest.json").unlink()
    assert [c.name for c in ckpt.list_checkpoints(root)] == ["step-0000004", "step-0000008", "step-0000012"]
    (root / "step-0000012" / "rng-rank0.pt").unlink()
    (root / "step-0000008" / "trainer_state.json").write_text('{"step": 8, "lo', encoding="utf-8")
    assert ckpt.incomplete_reason(root / "step-0000012") == "rng-rank0.pt is missing"
    assert "unreadable" in ckpt.incomplete_reason(root / "step-0000008")
    assert ckpt.find_resume("auto", root, warn=lambda s: None) == root / "step-0000004"


def test_leftovers_of_killed_saves_are_removed_or_put_back(tmp_path, reference):
    root = tmp_path / "checkpoints"
    shutil.copytree(reference["run"] / "checkpoints", root)
    (root / ".step-0000016.tmp").mkdir()                                     # killed while writing
    (root / ".step-0000016.tmp" / "rng-rank0.pt").write_bytes(b"x")
    os.replace(root / "step-0000008", root / ".step-0000008.trash")          # killed between the two renames
    shutil.copytree(root / "step-0000012", root / ".step-0000012.trash")     # killed after a replace
    done = ckpt.clean_leftovers(root)
    assert len(done) == 3 and any("restored step-0000008" in d for d in done)
    assert sorted(p.name for p in root.iterdir()) == ["step-0000004", "step-0000008", "step-0000012"]


# ------------------------------------------------------------------------------------------ resume rules


def test_an_older_checkpoint_continues_only_in_a_new_out_dir(tmp_path, reference, capsys):
    from zh_bert.train.training_run import resume_point
    from zh_bert.train.recipe import load_recipe

    run = tmp_path / "run"
    shutil.copytree(reference["run"], run)
    before = {c.name: digest(c) for c in (run / "checkpoints").iterdir()}
    recipe = str(reference["run"].parent / "r.yaml")
    old = str(run / "checkpoints" / "step-0000004")
    rc, out, err = in_process(capsys, recipe, "--set", f"out_dir={run}", "--resume", old)
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 2 and len(lines) == 1 and "newer checkpoint (step-0000012)" in lines[0] and "out_dir=" in lines[0]
    rc, out, err = in_process(capsys, recipe, "--set", f"out_dir={reference['run']}", "--resume", old)
    assert rc == 2 and "already holds a run" in err                    # a branch needs an out_dir of its own

    branch = tmp_path / "branch"
    rc, out, err = in_process(capsys, recipe, "--set", f"out_dir={branch}", "--resume", old)
    assert rc == 0, err
    assert_same_losses(losses(branch), reference["losses"])            # old lines up to 4 copied, 5..12 trained
    assert [c.name for c in ckpt.list_checkpoints(branch / "checkpoints")] == ["step-0000008", "step-0000012"]
    assert {c.name: digest(c) for c in (run / "checkpoints").iterdir()} == before, "the old run is untouched"
    assert yaml.safe_load((branch / "recipe.yaml").read_text())["out_dir"] == str(branch)
    path, branch_of, _ = resume_point(load_recipe(recipe, [f"out_dir={branch}"]), "auto", print)
    assert path.parent == branch / "checkpoints" and branch_of is None    # auto there reads only the branch's own


def test_set_on_resume_refuses_what_cannot_change(tmp_path, reference, capsys):
    run = tmp_path / "run"
    shutil.copytree(reference["run"], run)
    recipe = str(reference["run"].parent / "r.yaml")
    for key, value in [("mask_rate", "0.3"), ("seed", "8"), ("seq_len", "128"), ("global_batch", "32"),
                       ("model", "mini"), ("objective", "mlm+sop")]:
        rc, out, err = in_process(capsys, recipe, "--set", f"out_dir={run}", "--set", f"{key}={value}",
                                  "--resume", "auto")
        lines = [l for l in err.splitlines() if l.strip()]
        assert rc == 2 and len(lines) == 1 and f"'{key}' cannot change when resuming" in lines[0], (key, err)


@pytest.mark.slow
def test_lr_set_on_resume_takes_effect_and_is_recorded(tmp_path, char_shards, capsys):
    over = dict(schedule="constant", warmup_steps=0, max_steps=4, save_every=0)
    same, changed = tmp_path / "same" / "r.yaml", tmp_path / "changed" / "r.yaml"
    for r in (same, changed):
        assert in_process(capsys, str(write_recipe(r, char_shards, **over)))[0] == 0
    assert in_process(capsys, str(same), "--set", "max_steps=8", "--resume", "auto")[0] == 0
    rc, out, err = in_process(capsys, str(changed), "--set", "max_steps=8", "--set", "lr=1e-3", "--resume", "auto")
    assert rc == 0, err
    assert "lr: 0.003 -> 0.001" in out
    rows = [json.loads(l) for l in (changed.parent / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in rows if "loss" in r] == [3e-3] * 4 + [1e-3] * 4
    a, b = losses(same.parent / "run"), losses(changed.parent / "run")
    assert all(a[s] == b[s] for s in range(1, 6)) and all(a[s] != b[s] for s in range(6, 9))
    state = torch.load(changed.parent / "run" / "checkpoints" / "step-0000008" / "optimizer.pt", weights_only=True)
    assert {g["lr"] for g in state["optimizer"]["param_groups"]} == {1e-3} and state["scheduler"]["base_lrs"] == [
        1e-3, 1e-3]
    assert yaml.safe_load((changed.parent / "run" / "recipe.yaml").read_text())["lr"] == 1e-3
    summary = json.loads((changed.parent / "run" / "run.json").read_text())
    assert summary["resumes"][-1]["changed"] == {"lr": [3e-3, 1e-3], "max_steps": [4, 8]}
