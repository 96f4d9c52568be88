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


# --- every writer through the ownership layer: the probes of the last campaign, one test per class -------------

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_vocab_report_json_never_replaces_an_input_or_a_users_file(tmp_path, sample_jsonl, google_tokdir, capsys):
    """Defect: `vocab report TOK CORPUS --json CORPUS` replaced the corpus (and TOK/vocab.txt, any user file)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(sample_jsonl.read_bytes()[:20000])
    corpus.write_bytes(corpus.read_bytes()[:corpus.read_bytes().rindex(b"\n") + 1])
    mine = tmp_path / "mine.json"
    mine.write_text('{"mine": 1}\n', encoding="utf-8")
    before = {p: _sha(p) for p in (corpus, google_tokdir / "vocab.txt", mine)}
    for target, says in ((corpus, "is the input"), (google_tokdir / "vocab.txt", "holds the input"),
                         (mine, "not a vocab report")):
        rc, err = run(capsys, "vocab", "report", google_tokdir, corpus, "--json", target)
        assert rc == 2 and len(err) == 1, err
        assert says in err[0] or "input" in err[0], err
    assert {p: _sha(p) for p in before} == before
    out = tmp_path / "report.json"
    assert run(capsys, "vocab", "report", google_tokdir, corpus, "--json", out)[0] == 0
    assert run(capsys, "vocab", "report", google_tokdir, corpus, "--json", out)[0] == 0   # its own: replaced


def test_clean_never_replaces_a_users_file_named_like_its_report(tmp_path, sample_jsonl, capsys):
    """Defect: an existing docs.jsonl was refused, but the user's docs.report.json beside it was replaced."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "docs.report.json").write_text('{"mine": 1}\n', encoding="utf-8")
    before = tree_hash(d)
    rc, err = run(capsys, "clean", sample_jsonl, "-o", d / "docs.jsonl", "-q")
    assert rc == 2 and len(err) == 1 and "docs.report.json" in err[0], err
    assert tree_hash(d) == before
    assert run(capsys, "clean", sample_jsonl, "-o", tmp_path / "e" / "docs.jsonl", "-q")[0] == 0
    assert run(capsys, "clean", sample_jsonl, "-o", tmp_path / "e" / "docs.jsonl", "-q")[0] == 0   # its own


def test_a_users_report_json_is_no_job_marker_even_with_force(tmp_path, sample_jsonl, capsys):
    """Defect: with no job marker, a user's report.json was called 'the finished output of another clean run',
    and `--force` overwrote it."""
    r = tmp_path / "r"
    r.mkdir()
    (r / "report.json").write_text('{"mine": 1}\n', encoding="utf-8")
    before = tree_hash(r)
    for extra in ([], ["--force"]):
        rc, err = run(capsys, "clean", sample_jsonl, "-o", r, "--executor", "local", "--tasks", "2", "-q", *extra)
        assert rc == 2 and len(err) == 1 and "report.json" in err[0] and "finished output" not in err[0], err
        assert tree_hash(r) == before


def test_a_users_file_in_a_stage_folder_neither_skips_the_stage_nor_is_lost(tmp_path, sample_jsonl, capsys):
    """Defect: a user file under the logging dir's report/ stage folder kept that folder's completion markers,
    so `--force` skipped the report stage and failed with 'OUT/report.json: no such file'."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    base = ["clean", sample_jsonl, "--executor", "local", "--tasks", "2", "-q", "--logging-dir", logs, "-o", out]
    assert run(capsys, *base)[0] == 0
    stage = next(p for p in logs.iterdir() if p.is_dir() and p.name.endswith("report"))
    (stage / "mine.txt").write_text("我的\n", encoding="utf-8")
    (stage / "logs" / "notes.txt").write_text("笔记\n", encoding="utf-8")    # even inside datatrove's logs/
    mine = {p: _sha(p) for p in (stage / "mine.txt", stage / "logs" / "notes.txt")}
    rc, err = run(capsys, *base, "--force")
    assert rc == 0, err
    assert (out / "report.json").is_file() and {p: _sha(p) for p in mine} == mine
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["docs_out"] > 0


def test_a_logging_dir_that_is_a_file_is_one_line_before_anything_is_created(tmp_path, sample_jsonl, capsys):
    """Defect: `--logging-dir FILE` was a FileExistsError traceback, and -o was left holding .zh-bert/."""
    f = tmp_path / "logs"
    f.write_text("mine\n", encoding="utf-8")
    rc, err = run(capsys, "clean", sample_jsonl, "-o", tmp_path / "out", "--executor", "local", "-q",
                  "--logging-dir", f)
    assert rc == 2 and len(err) == 1 and "--logging-dir" in err[0], err
    assert not (tmp_path / "out").exists() and f.read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize("as_dir", [False, True], ids=["file", "in-a-directory"])
@pytest.mark.parametrize("executor", [[], ["--executor", "local", "--tasks", "2"]], ids=["in-process", "executor"])
def test_xz_input_is_read_like_gz_and_bz2(tmp_path, sample_docs, capsys, executor, as_dir):
    """Defect: `clean ok.txt.xz` said 'not UTF-8 ... pass --encoding'; .xz (as users' dumps come) is now read,
    named on the command line or found by a directory walk."""
    import lzma

    (tmp_path / "raw").mkdir()
    src = tmp_path / "raw" / "docs.txt.xz"
    src.write_bytes(lzma.compress(("\n".join(sample_docs[:80]) + "\n").encode("utf-8")))
    out = tmp_path / ("out" if executor else "out.jsonl")
    rc, err = run(capsys, "clean", src.parent if as_dir else src, "-o", out, "-q", *executor)
    assert rc == 0, err
    text = "".join(p.read_text(encoding="utf-8") for p in ([out] if out.is_file() else sorted(out.glob("part-*"))))
    assert text.count("\n") >= 40 and "docs.txt.xz:80" in text    # documents read, up to the last line
    (tmp_path / "cut.txt.xz").write_bytes(src.read_bytes()[: len(src.read_bytes()) // 2])
    rc, err = run(capsys, "clean", tmp_path / "cut.txt.xz", "-o", tmp_path / "cut.jsonl", "-q")
    assert rc == 2 and len(err) == 1 and "cut.txt.xz" in err[0] and "compressed" in err[0], err
