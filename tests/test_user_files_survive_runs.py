"""Data loss in a run dir: pretrain replaces `final/` and rotates checkpoints only by what a manifest of its
own lists, so a user's file added to a finished run (a model card in `final/`, notes in a checkpoint) survives
byte for byte; a full disk at the start of a run is one line and leaves nothing behind. Each test hashes the
user's files before and after."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from _fs_helpers import tmpfs
from _run_helpers import save_recipe
from conftest import CHAR_SEQ
from zh_bert.train import checkpoint as ckpt
from zh_bert.cli import main
from zh_bert.core.fileio import MANIFEST, read_json

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON = dict(model="tiny", masking="wwm", seq_len=CHAR_SEQ, global_batch=8, micro_batch=8, lr=3e-3,
              warmup_steps=1, max_steps=4, log_every=1, eval_every=0, eval_batches=1, save_every=2, keep_last=5,
              seed=7, precision="fp32")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(capsys, *argv) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    err = [line for line in capsys.readouterr().err.split("\n") if line.strip() and not line.startswith("warning")]
    return rc, err


@pytest.fixture(scope="module")
def finished(tmp_path_factory, char_shards) -> Path:
    """A finished 4-step run (checkpoints at 2 and 4, final/)."""
    tokdir, sharddir = char_shards
    root = tmp_path_factory.mktemp("finished")
    save_recipe(root / "r.yaml", {**COMMON, "out_dir": str(root / "run"), "data": str(sharddir),
                                  "tokenizer": str(tokdir)})
    assert main(["pretrain", str(root / "r.yaml")]) == 0
    return root / "run"


def _copy(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest, symlinks=True)
    return dest


def test_final_is_written_with_a_manifest_of_every_file(finished):
    listed = read_json(finished / "final" / MANIFEST)["files"]
    on_disk = {p.relative_to(finished / "final").as_posix() for p in (finished / "final").rglob("*")
               if p.is_file() and p.name != MANIFEST}
    assert set(listed) == on_disk and "model.safetensors" in listed


@pytest.mark.parametrize("legacy", [False, True], ids=["with-manifest", "before-manifests"])
def test_a_users_card_in_final_stops_a_resume_before_it_trains(finished, tmp_path, capsys, legacy):
    """Defect: a resume into a copy of a finished run replaced final/ and the user's README.md with it."""
    copy = _copy(finished, tmp_path / "copy")
    if legacy:   # a run dir of a version before final/'s manifest: the known file names stand in for it
        (copy / "final" / MANIFEST).unlink()
    card = copy / "final" / "README.md"
    card.write_text("# 我的模型\n自己写的模型卡。\n", encoding="utf-8")
    before = {p: sha(p) for p in copy.rglob("*") if p.is_file()}
    rc, err = run(capsys, "pretrain", copy / "recipe.yaml", "--set", f"out_dir={copy}", "--set", "max_steps=6",
                  "--resume", "auto")
    assert rc == 2 and len(err) == 1 and "README.md" in err[0] and "refusing" in err[0], err
    assert {p: sha(p) for p in copy.rglob("*") if p.is_file()} == before   # nothing trained, nothing replaced


def test_rotation_deletes_only_the_files_a_checkpoints_manifest_lists(finished, tmp_path, capsys):
    """Defect: keep_last rotated a checkpoint out with the user's notes.txt inside it."""
    copy = _copy(finished, tmp_path / "copy")
    step2 = copy / "checkpoints" / "step-0000002"
    notes = step2 / "notes.txt"
    notes.write_text("第二步的笔记\n", encoding="utf-8")
    digest = sha(notes)
    rc, err = run(capsys, "pretrain", copy / "recipe.yaml", "--set", f"out_dir={copy}", "--set", "max_steps=6",
                  "--set", "keep_last=1", "--resume", "auto")
    assert rc == 0, err
    assert sha(notes) == digest and sorted(p.name for p in step2.iterdir()) == ["notes.txt"]
    assert [p.name for p in ckpt.list_checkpoints(copy / "checkpoints")] == ["step-0000006"]
    assert not (copy / "checkpoints" / "step-0000004").exists()   # wholly ours: removed as before


def test_discard_keeps_what_the_manifest_does_not_list(finished, tmp_path):
    copy = _copy(finished, tmp_path / "copy")
    step = copy / "checkpoints" / "step-0000004"
    (step / "mine.bin").write_bytes(b"\x00\x01")
    (step / "generator").mkdir()
    (step / "generator" / "extra.txt").write_text("x", encoding="utf-8")
    kept = ckpt.discard(step)
    assert sorted(kept) == ["generator/extra.txt", "mine.bin"]
    assert ckpt.incomplete_reason(step) is not None and (step / "mine.bin").read_bytes() == b"\x00\x01"


def test_a_checkpoint_holding_a_users_file_is_never_replaced(finished, tmp_path, capsys):
    """Re-saving a step whose folder holds a user's file is refused in one line; the folder stays as it was."""
    copy = _copy(finished, tmp_path / "copy")
    step4 = copy / "checkpoints" / "step-0000004"
    (step4 / "notes.txt").write_text("别删\n", encoding="utf-8")
    before = {p.name: sha(p) for p in step4.iterdir()}
    with pytest.raises(Exception) as e:
        from zh_bert.core.fileio import check_dir_ours

        check_dir_ours(step4, listed=ckpt.listed_files(step4))
    assert "notes.txt" in str(e.value) and {p.name: sha(p) for p in step4.iterdir()} == before


@pytest.mark.parametrize("options", ["size=64k", "size=1m,ro"], ids=["full", "read-only"])
def test_a_full_or_read_only_disk_at_the_start_of_a_run_is_one_line_and_leaves_nothing(
        tmp_path, char_shards, capsys, options):
    """Defect: a full disk made atomic_write close its file twice (a traceback) and left `.recipe.yaml.tmp-PID`
    in a new out_dir."""
    tokdir, sharddir = char_shards
    mnt = tmp_path / "mnt"
    with tmpfs(mnt, options):
        if "ro" not in options:      # fill the disk to the last block
            fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                with pytest.raises(OSError):
                    while True:
                        os.write(fd, b"\0" * 4096)
            finally:
                os.close(fd)
        recipe = tmp_path / "r.yaml"
        save_recipe(recipe, {**COMMON, "out_dir": str(mnt / "run"), "data": str(sharddir), "tokenizer": str(tokdir)})
        rc, err = run(capsys, "pretrain", recipe)
        assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
        assert not (mnt / "run").exists() and not [p for p in mnt.iterdir() if p.name != "filler"]
