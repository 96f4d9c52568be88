"""Data loss: the executor commands (`clean --executor`, `shard --executor`) delete or overwrite only what their
own job marker proves they wrote, `--force` included. Every test hashes the user's files before and after."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from zh_bert import cli


def tree_hash(root: Path) -> dict[str, str]:
    """Every path under `root` with the sha256 of its bytes (folders as 'dir')."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def run(capsys, *argv) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    err = [line for line in capsys.readouterr().err.split("\n") if line.strip()]
    return rc, err


@pytest.fixture()
def mine(tmp_path, sample_jsonl) -> Path:
    """The user's own file, named like a part a clean job writes."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "part-00000.jsonl").write_bytes(sample_jsonl.read_bytes()[:5000])
    return d


def test_clean_executor_keeps_a_users_part_named_file_without_a_job_marker(mine, sample_jsonl, capsys):
    before = tree_hash(mine)
    for extra in ([], ["--force"]):
        rc, err = run(capsys, "clean", sample_jsonl, "-o", mine, "--executor", "local", "--tasks", "2", "-q", *extra)
        assert rc == 2 and len(err) == 1 and "part-00000.jsonl" in err[0] and "did not write" in err[0], err
        assert tree_hash(mine) == before


def test_shard_executor_keeps_a_users_part_named_folder_without_a_job_marker(tmp_path, sample_jsonl, google_tokdir,
                                                                             capsys):
    out = tmp_path / "sh"
    (out / "part-00000").mkdir(parents=True)
    (out / "part-00000" / "notes.txt").write_text("我的笔记\n", encoding="utf-8")
    before = tree_hash(out)
    rc, err = run(capsys, "shard", sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--tasks", "2",
                  "--workers", "1", "--force")
    assert rc == 2 and len(err) == 1 and "part-00000" in err[0], err
    assert tree_hash(out) == before


def test_force_with_another_jobs_logging_dir_keeps_the_users_files_there(tmp_path, sample_jsonl, capsys):
    logs = tmp_path / "logs"
    base = ["clean", sample_jsonl, "--executor", "local", "--tasks", "2", "-q", "--logging-dir", logs]
    assert run(capsys, *base, "-o", tmp_path / "a")[0] == 0
    (logs / "mine").mkdir()
    (logs / "mine" / "thesis.tex").write_text("四年的心血\n", encoding="utf-8")
    (logs / "notes.txt").write_text("别删\n", encoding="utf-8")
    users = {k: v for k, v in tree_hash(logs).items() if k.startswith("mine") or k == "notes.txt"}
    rc, err = run(capsys, *base, "-o", tmp_path / "b", "--dedup", "exact")      # another job, same --logging-dir
    assert rc == 2 and "--logging-dir" in err[0] and "--force" in err[0], err
    assert run(capsys, *base, "-o", tmp_path / "b", "--dedup", "exact", "--force")[0] == 0
    after = tree_hash(logs)
    assert {k: after.get(k) for k in users} == users
    job = json.loads((logs / "job.json").read_text(encoding="utf-8"))
    assert job["settings"]["config"]["dedup"] == "exact"                      # the logs are the new job's


def test_a_logging_dir_holding_foreign_files_is_refused_for_a_new_job(tmp_path, sample_jsonl, capsys):
    logs = tmp_path / "logs"
    (logs / "clean" / "completions").mkdir(parents=True)            # looks like a stage folder: not ours
    (logs / "clean" / "completions" / "00000").write_text("", encoding="utf-8")
    before = tree_hash(logs)
    rc, err = run(capsys, "clean", sample_jsonl, "-o", tmp_path / "out", "--executor", "local", "--tasks", "2",
                  "-q", "--logging-dir", logs, "--force")
    assert rc == 2 and len(err) == 1 and "--logging-dir" in err[0] and "clean" in err[0], err
    assert tree_hash(logs) == before and not (tmp_path / "out").exists()


def test_a_finished_job_with_other_settings_is_not_called_unfinished(tmp_path, sample_jsonl, capsys):
    out = tmp_path / "out"
    argv = ["clean", sample_jsonl, "-o", out, "--executor", "local", "-q"]
    assert run(capsys, *argv, "--tasks", "2")[0] == 0
    rc, err = run(capsys, *argv, "--tasks", "3")
    assert rc == 2 and "finished output" in err[0] and "rerun" not in err[0], err


def test_executor_output_in_the_current_directory_is_refused(tmp_path, sample_jsonl, capsys, monkeypatch):
    (tmp_path / "mine.txt").write_text("我的文件\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    before = tree_hash(tmp_path)
    rc, err = run(capsys, "clean", sample_jsonl, "-o", ".", "--executor", "local", "--tasks", "2", "-q", "--force")
    assert rc == 2 and len(err) == 1, err
    assert tree_hash(tmp_path) == before


def test_in_process_rebuild_keeps_a_users_file_inside_a_multi_part_sharddir(tmp_path, sample_jsonl, google_tokdir,
                                                                            capsys):
    out = tmp_path / "sh"
    base = ["shard", sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--workers", "1"]
    assert run(capsys, *base, "--tasks", "2")[0] == 0                   # a multi-part SHARDDIR of a shard job
    (out / "notes.txt").write_text("我的笔记\n", encoding="utf-8")
    before = tree_hash(out)
    rc, err = run(capsys, *base)                                        # in-process rebuild would replace it whole
    assert rc == 2 and len(err) == 1 and "notes.txt" in err[0], err
    assert tree_hash(out) == before
