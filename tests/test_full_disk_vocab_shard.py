"""A full disk under `zh-bert vocab` and in-process `zh-bert shard` (issue 22, defect 13), on a real small
filesystem (tmpfs, needs root), not a patched call: the errors the libraries really raise there (numpy's
`tofile` short write without an errno, tokenizers' bare `Exception` from `save`) must come out as the one
disk-error line `zh-bert CMD: error: PATH: cannot write (No space left on device); nothing was changed`,
exit 2, nothing half-written, a previous output untouched. Each run is a fresh process, so a message printed
at exit (an unflushable buffer collected late) would show too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _fs_helpers import tmpfs

REPO = Path(__file__).resolve().parent.parent
KINDS = ("char", "wordpiece", "sentencepiece", "word")


@pytest.fixture
def small_disk(tmp_path):
    """A real 256 KB file system."""
    with tmpfs(tmp_path / "small_disk", "size=256k") as d:
        yield d


def _run(*argv) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "zh_bert", *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=600)
    return proc.returncode, [line for line in proc.stderr.split("\n") if line.strip()]


def _fill(disk: Path, leave: int = 8192) -> Path:
    """Take all but `leave` bytes of `disk`: the next output cannot fit."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _assert_disk_line(rc: int, err: list[str], cmd: str, out: Path) -> None:
    assert rc == 2 and len(err) == 1, (rc, err[-20:])
    assert err[0] == f"zh-bert {cmd}: error: {out}: cannot write (No space left on device); nothing was changed", err


@pytest.mark.parametrize("kind", KINDS)
def test_full_disk_vocab_is_one_line_and_writes_nothing(small_disk, sample_jsonl, kind):
    out = small_disk / "tok"
    _fill(small_disk, leave=16384)
    _assert_disk_line(*_run("vocab", sample_jsonl, "-o", out, "--kind", kind, "-q"), "vocab", out)
    assert [p.name for p in small_disk.iterdir()] == ["filler"]  # no TOKDIR, no temp dir


@pytest.mark.slow
def test_full_disk_vocab_force_keeps_the_previous_tokdir(small_disk, sample_jsonl):
    out = small_disk / "tok"
    assert _run("vocab", sample_jsonl, "-o", out, "--max-docs", "50", "-q")[0] == 0
    before = _tree(out)
    filler = _fill(small_disk)
    _assert_disk_line(*_run("vocab", sample_jsonl, "-o", out, "--force", "-q"), "vocab", out)
    assert _tree(out) == before and sorted(p.name for p in small_disk.iterdir()) == ["filler", "tok"]
    filler.unlink()


@pytest.mark.parametrize("workers", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_full_disk_shard_in_process_is_one_line_and_writes_nothing(small_disk, sample_jsonl, google_tokdir,
                                                                   workers):
    out = small_disk / "sh"
    _fill(small_disk, leave=16384)
    _assert_disk_line(*_run("shard", sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--workers", workers),
                      "shard", out)
    assert [p.name for p in small_disk.iterdir()] == ["filler"]


@pytest.mark.slow
def test_full_disk_shard_keeps_the_previous_shards(small_disk, sample_jsonl, google_tokdir, tmp_path):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(sample_jsonl.read_text(encoding="utf-8").splitlines(keepends=True)[:40]),
                     encoding="utf-8")
    out = small_disk / "sh"
    args = ("shard", small, "--tokenizer", google_tokdir, "-o", out, "--workers", "1")
    assert _run(*args)[0] == 0
    before = _tree(out)
    _fill(small_disk)
    _assert_disk_line(*_run(*args, "--seq-len", "64"), "shard", out)
    assert _tree(out) == before and sorted(p.name for p in small_disk.iterdir()) == ["filler", "sh"]


# --- a 100% full disk at the first file a command writes: its job marker, its logs' marker, a report --------------

def _leftovers(*dirs: Path) -> list[str]:
    """Temp files (`.NAME.tmp-PID`) or anything else a failed command left in `dirs` (the filler aside)."""
    return sorted(str(p) for d in dirs if d.exists() for p in d.rglob("*") if p.name != "filler")


def test_full_disk_clean_executor_job_marker_is_one_line(small_disk, sample_jsonl):
    out = small_disk / "out"
    _fill(small_disk, leave=0)
    _assert_disk_line(*_run("clean", sample_jsonl, "-o", out, "--executor", "local", "--tasks", "2", "-q"),
                      "clean", out / ".zh-bert" / "job.json")
    assert _leftovers(small_disk) == []                        # no out/, no .job.json.tmp-PID


def test_full_disk_logging_dir_is_one_line_and_leaves_no_job(small_disk, sample_jsonl, tmp_path):
    logs, out = small_disk / "logs", tmp_path / "out"
    _fill(small_disk, leave=0)
    _assert_disk_line(*_run("clean", sample_jsonl, "-o", out, "--executor", "local", "--tasks", "2", "-q",
                            "--logging-dir", logs), "clean", logs / "job.json")
    assert _leftovers(small_disk) == [] and not out.exists()   # no marker of a job that never started


@pytest.mark.slow
def test_full_disk_vocab_report_json_is_one_line(small_disk, sample_jsonl, google_tokdir):
    for target in (small_disk / "report.json", small_disk / "new" / "report.json"):
        _fill(small_disk, leave=0)
        _assert_disk_line(*_run("vocab", "report", google_tokdir, sample_jsonl, "--json", target), "vocab", target)
        assert _leftovers(small_disk) == []
        (small_disk / "filler").unlink()
