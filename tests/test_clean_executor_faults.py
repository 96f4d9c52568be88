"""`zh-bert clean --executor` under faults: a kill -9 of the main process leaves no process behind, the report's
time excludes the gap between a killed run and its rerun, a real full disk (a small tmpfs) is one line with the
job's work removed, a broken .gz input is one line naming it (both clean paths), and an output that is, holds or
lies inside an input is refused before anything is touched (the inputs' bytes are unchanged)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _fs_helpers import tmpfs

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "corpora" / "sample"


def _cli(argv: list, capsys) -> tuple[int, list[str]]:
    from zh_bert.cli import main

    capsys.readouterr()
    rc = main(["clean", *map(str, argv)])
    return rc, [l for l in capsys.readouterr().err.split("\n") if l.strip()]


def _hashes(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.fixture
def raw(tmp_path) -> Path:
    """A folder with two real raw text files (zhwiki and CLUECorpusSmall lines)."""
    d = tmp_path / "raw"
    d.mkdir()
    for name in ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt"):
        (d / name).write_bytes((SAMPLE / name).read_bytes())
    return d


# ------------------------------------------------------------------------------------ orphans (defect 10)
@pytest.mark.slow
@pytest.mark.parametrize("command", ["clean", "shard"])
def test_kill_9_of_the_main_process_leaves_no_process_behind(tmp_path, raw, google_tokdir, sample_jsonl, command):
    psutil = pytest.importorskip("psutil")
    big = tmp_path / ("big.txt" if command == "clean" else "big.jsonl")
    inputs = sorted(raw.iterdir()) if command == "clean" else [sample_jsonl]
    big.write_bytes(b"".join(p.read_bytes() for p in inputs) * (3 if command == "clean" else 20))
    extra = ["--dedup", "minhash"] if command == "clean" else ["--tokenizer", str(google_tokdir)]
    proc = subprocess.Popen([sys.executable, "-m", "zh_bert", command, str(big), "-o", str(tmp_path / "out"),
                             "--executor", "local", "--tasks", "4", "--workers", "2", *extra],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    main, kids, deadline = psutil.Process(proc.pid), [], time.time() + 120
    while len(kids) < 3 and time.time() < deadline and proc.poll() is None:   # the Manager and 2 workers
        kids = main.children(recursive=True)
        time.sleep(0.02)
    assert len(kids) >= 3, "the job never started its workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = kids
    for _ in range(100):
        left = [k for k in left if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.05)
    for k in left:
        k.kill()
    assert not left, [" ".join(k.cmdline()) for k in left]


# ------------------------------------------------------------------------------------ timing (defect 9)
def test_working_seconds_count_overlapping_tasks_once_and_skip_gaps():
    from zh_bert.corpus.clean.work import working_seconds

    assert working_seconds([(0, 2), (1, 3), (100, 101), (100.5, 100.7)]) == pytest.approx(4.0)
    assert working_seconds([]) == 0


@pytest.mark.slow
def test_report_time_excludes_the_gap_between_a_killed_run_and_its_rerun(tmp_path, raw, capsys):
    out = tmp_path / "out"
    argv = [raw, "-o", out, "--executor", "local", "--tasks", "2", "--workers", "1", "-q"]
    env = {**os.environ, "ZH_BERT_FAULT": "replaced:part-00000.jsonl"}   # killed in the write stage
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "zh_bert", "clean", *map(str, argv)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    first = time.time() - t0
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    time.sleep(4)                                                  # nothing runs for 4 s
    t1 = time.time()
    assert _cli(argv, capsys)[0] == 0
    rerun = time.time() - t1
    seconds = json.loads((out / "report.json").read_text())["seconds"]
    assert 0 < seconds <= first + rerun, (seconds, first, rerun)    # the 4 s gap is not in it


# ------------------------------------------------------------------------------------ full disk (defect 13)
@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MB file system."""
    with tmpfs(tmp_path / "small_disk", "size=2m") as d:
        yield d


@pytest.mark.parametrize("workers", ["1", "2"])
def test_full_disk_is_one_line_and_leaves_no_work_files(small_disk, raw, capsys, workers):
    out = small_disk / "out"
    rc, err = _cli([raw, "-o", out, "--executor", "local", "--tasks", "2", "--workers", workers, "--dedup",
                    "minhash", "-q"], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("zh-bert clean: error: "), err
    assert "No space left" in err[0] or "no space left" in err[0], err
    assert not list(out.glob("*part-*")) and not (out / "report.json").exists()
    assert not (out / ".zh-bert" / "work").exists()
    assert sum(p.stat().st_size for p in small_disk.rglob("*") if p.is_file()) < 20_000


# ------------------------------------------------------------------------------------ broken .gz (defect 14)
@pytest.mark.parametrize("kind", ["truncated", "fake"])
@pytest.mark.parametrize("engine", [[], ["--executor", "local", "--tasks", "2"]], ids=["in-process", "executor"])
def test_broken_gz_input_is_one_line_naming_the_file(tmp_path, raw, capsys, kind, engine):
    data = (raw / "zhwiki_sampled.txt").read_bytes()
    src = tmp_path / f"{kind}.txt.gz"
    whole = gzip.compress(data)
    src.write_bytes(whole[: len(whole) // 2] if kind == "truncated" else data)
    out = tmp_path / ("out" if engine else "out.jsonl")
    rc, err = _cli([src, "-o", out, *engine, "-q"], capsys)
    assert rc == 2 and len(err) == 1 and f"{src}: broken or truncated compressed file" in err[0], err
    assert not out.is_file() and not (out / "report.json").exists() and not list(out.glob("*part-*"))


# ------------------------------------------------------------------------------------ outputs apart from inputs
@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_executor_refuses_its_input_dir_as_output_and_touches_nothing(raw, capsys, force):
    before = _hashes(raw)
    rc, err = _cli([raw, "-o", raw, "--executor", "local", "--tasks", "2", *force], capsys)
    assert rc == 2 and len(err) == 1 and f"-o {raw}: is the input" in err[0], err
    assert _hashes(raw) == before and not (raw / ".zh-bert").exists()


def test_executor_refuses_an_output_inside_an_input_dir_or_holding_an_input(tmp_path, raw, capsys):
    before = _hashes(raw)
    rc, err = _cli([raw, "-o", raw / "cleaned", "--executor", "local", "--tasks", "2"], capsys)
    assert rc == 2 and len(err) == 1 and "is inside the input directory" in err[0], err
    rc, err = _cli([raw / "zhwiki_sampled.txt", "-o", raw, "--executor", "local", "--tasks", "2", "--force"], capsys)
    assert rc == 2 and len(err) == 1 and "holds the input" in err[0], err
    assert _hashes(raw) == before


def test_in_process_output_inside_its_input_dir_is_refused_like_the_executors(raw, capsys):
    """Defect: `clean DIR -o DIR/out2.jsonl` was accepted and read an earlier output in DIR back as input.
    In-process and on an executor alike, an output inside an input directory is refused before any work."""
    before = {p.name: p.read_bytes() for p in raw.iterdir()}
    for out in (raw / "cleaned.jsonl", raw / "sub" / "out2.jsonl"):
        rc, err = _cli([raw, "-o", out, "-q"], capsys)
        assert rc == 2 and len(err) == 1 and "inside the input directory" in err[0], err
    assert {p.name: p.read_bytes() for p in raw.iterdir()} == before
    rc, err = _cli([raw / sorted(before)[0], "-o", raw / sorted(before)[0]], capsys)   # an input itself: refused
    assert rc == 2 and len(err) == 1 and "input" in err[0], err
