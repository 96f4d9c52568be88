"""`zh-bert clean --executor`: the same documents as the in-process path on datatrove's local executor, a local
Ray cluster and Slurm (a stub `sbatch` that runs the generated job scripts here); dedup across tasks; a
kill -9 mid-job finished by rerunning the command; another job's directory refused."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zh_bert import cli
from zh_bert.corpus.clean import CleanConfig, DocCleaner
from zh_bert.corpus.clean.source import RawDoc
from zh_bert.corpus.corpus_io import corpus_files, read_jsonl

REPO = Path(__file__).resolve().parent.parent
REPORT_COUNTS = ("docs_in", "docs_out", "chars_in", "chars_out", "bytes_in", "filtered", "duplicates", "pii",
                 "lines_removed", "unreadable")


def shingles(text: str, n: int = 5) -> set[str]:
    t = text.replace("\n", "")
    return {t[i:i + n] for i in range(len(t) - n + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb)


def near_copy(text: str, rng: random.Random, lo: float = 0.85, hi: float = 0.95) -> tuple[str, float]:
    """`text` with characters replaced one at a time until the 5-gram Jaccard with the original is in [lo, hi]."""
    chars = list(text)
    while True:
        i = rng.randrange(len(chars))
        chars[i] = chr(rng.randrange(0x4E00, 0x9FA5))
        j = jaccard(text, "".join(chars))
        if j <= (lo + hi) / 2:
            assert lo <= j <= hi, j
            return "".join(chars), j


@pytest.fixture(scope="module")
def planted(tmp_path_factory, sample_docs) -> tuple[Path, set[str]]:
    """4 raw text files of distinct documents that pass the quality filters, plus planted duplicates in later
    files: 12 exact copies and 24 near copies (Jaccard 0.85-0.95) of documents in earlier files. Returns the
    input dir and the sources (file:line) of the planted copies."""
    cleaner, rng = DocCleaner(CleanConfig()), random.Random(0)
    base: list[str] = []
    for text in sample_docs:
        if len(text) >= 120 and cleaner([RawDoc(text, "x")]).kept and all(jaccard(text, b) < 0.3 for b in base[-60:]):
            base.append(text)
    files = [base[i::4] for i in range(4)]
    copies = []
    for k in range(36):
        src = files[k % 2][k]
        copies.append(src if k < 12 else near_copy(src, rng)[0])
    d = tmp_path_factory.mktemp("planted") / "raw"
    d.mkdir()
    planted_sources = set()
    for i, docs in enumerate(files):
        extra = copies[i - 2::2] if i >= 2 else []
        lines = docs[: len(docs) // 2] + extra + docs[len(docs) // 2:]
        (d / f"f{i}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        first = len(docs) // 2 + 1
        planted_sources |= {f"{d / f'f{i}.txt'}:{first + j}" for j in range(len(extra))}
    return d, planted_sources


def run_clean(*argv: str) -> int:
    return cli.main(["clean", *map(str, argv), "-q"])


def docs_of(out: Path) -> list[tuple[str, str]]:
    files = corpus_files([out])
    return [(obj["text"], obj["source"]) for f in files for _, obj in read_jsonl(f)]


def report_of(out: Path) -> dict:
    path = out / "report.json" if out.is_dir() else out.with_name(out.name.replace(".jsonl", ".report.json"))
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, planted) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inproc")
    outs = {}
    for mode in ("exact", "minhash"):
        outs[mode] = d / f"{mode}.jsonl"
        assert run_clean(planted[0], "-o", outs[mode], "--dedup", mode, "--workers", "2") == 0
    return outs


def test_local_executor_keeps_the_same_documents_and_counts(tmp_path, planted, in_process):
    out = tmp_path / "out"
    assert run_clean(planted[0], "-o", out, "--dedup", "exact", "--executor", "local", "--tasks", "4",
                     "--workers", "2") == 0
    assert sorted(docs_of(out)) == sorted(docs_of(in_process["exact"]))
    ours, theirs = report_of(out), report_of(in_process["exact"])
    assert {k: ours[k] for k in REPORT_COUNTS} == {k: theirs[k] for k in REPORT_COUNTS}
    assert ours["duplicates"]["exact"] == 12
    assert [p["name"] for p in ours["parts"]] == sorted(p.name for p in out.glob("part-*"))
    assert ours["docs_out"] == sum(p["docs"] for p in ours["parts"])


def test_near_duplicates_across_tasks_are_removed(tmp_path, planted, in_process):
    raw, planted_sources = planted
    out = tmp_path / "out"
    assert run_clean(raw, "-o", out, "--dedup", "minhash", "--executor", "local", "--tasks", "4",
                     "--workers", "2") == 0
    kept = {s for _, s in docs_of(out)}
    inputs = {f"{f}:{n}" for f in sorted(raw.iterdir()) for n, line in enumerate(f.read_text().split("\n"), 1)
              if line.strip()}
    removed = inputs - kept
    recall = len(removed & planted_sources) / len(planted_sources)
    precision = len(removed & planted_sources) / max(1, len(removed))
    assert recall >= 0.95 and precision >= 0.99, (recall, precision)
    assert sorted(docs_of(out)) == sorted(docs_of(in_process["minhash"]))   # the in-process rule, task by task


def test_gzip_parts_hold_the_same_documents(tmp_path, planted, in_process):
    out = tmp_path / "out"
    assert run_clean(planted[0], "-o", out, "--executor", "local", "--tasks", "3", "--compression", "gzip") == 0
    assert all(p.name.endswith(".jsonl.gz") for p in corpus_files([out]))
    assert sorted(docs_of(out)) == sorted(docs_of(in_process["exact"]))


def test_rerun_is_a_no_op_and_another_job_is_refused_unless_force(tmp_path, planted, capsys):
    out = tmp_path / "out"
    argv = [planted[0], "-o", out, "--executor", "local", "--tasks", "2"]
    assert run_clean(*argv) == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert run_clean(*argv) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    capsys.readouterr()
    assert run_clean(*argv[:-1], "3") == 2
    assert "another zh-bert clean job" in capsys.readouterr().err
    assert run_clean(*argv[:-1], "3", "--force") == 0
    assert len(report_of(out)["parts"]) <= 3 and report_of(out)["tasks"] == 3


def test_output_dir_with_user_files_is_refused_even_with_force(tmp_path, planted, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("四年的心血\n", encoding="utf-8")
    assert run_clean(planted[0], "-o", out, "--executor", "local", "--force") == 2
    assert "thesis.tex" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]


def test_engine_not_installed_is_one_line(tmp_path, planted, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert run_clean(planted[0], "-o", tmp_path / "out", "--executor", "ray") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'zh-bert[scale]'" in err[0]
    assert not (tmp_path / "out").exists()


def _cli_process(*argv, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zh_bert", "clean", *map(str, argv)], cwd=REPO,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.mark.slow
def test_kill_9_mid_job_then_rerun_finishes_it_and_skips_finished_tasks(tmp_path, planted, capsys):
    ref, out = tmp_path / "ref", tmp_path / "out"
    argv = [planted[0], "--dedup", "minhash", "--executor", "local", "--tasks", "6", "--workers", "1"]
    assert run_clean(*argv, "-o", ref) == 0
    proc = _cli_process(*argv, "-o", out)
    done = out / ".zh-bert" / "logs" / "clean" / "completions"
    deadline = time.time() + 120
    while not (done.is_dir() and len(list(done.iterdir())) >= 2) and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "report.json").exists()
    with pytest.raises(Exception, match="unfinished"):
        corpus_files([out])
    finished = len(list(done.iterdir()))
    capsys.readouterr()
    assert cli.main(["clean", *map(str, argv), "-o", str(out)]) == 0
    assert f"stage clean: {finished} of 6 tasks finished by an earlier run, skipped" in capsys.readouterr().err
    assert docs_of(out) == docs_of(ref)
    assert [p.read_bytes() for p in sorted(out.glob("part-*"))] == [p.read_bytes() for p in sorted(ref.glob("part-*"))]
    assert report_of(out)["docs_out"] == report_of(ref)["docs_out"]


@pytest.mark.slow
def test_ray_local_cluster_keeps_the_same_documents(tmp_path, planted, in_process):
    out = tmp_path / "out"
    proc = _cli_process(planted[0], "-o", out, "--executor", "ray", "--tasks", "3", "--workers", "2", "-q")
    log = proc.communicate(timeout=300)[0].decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert sorted(docs_of(out)) == sorted(docs_of(in_process["exact"]))


@pytest.mark.slow
def test_slurm_job_scripts_run_and_finish_the_job(tmp_path, planted, in_process):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "srun", "scontrol", "squeue"):
        (bin_dir / name).symlink_to(REPO / "tests" / "slurm_stub.py")
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SLURM_STUB_STATE": str(tmp_path / "state")}
    out = tmp_path / "out"
    proc = _cli_process(planted[0], "-o", out, "--executor", "slurm", "--tasks", "2", "--slurm-partition", "cpu",
                        "--slurm-time", "1:00:00", env=env)
    log = proc.communicate(timeout=300)[0].decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "Slurm jobs submitted" in log
    script = (out / ".zh-bert" / "logs" / "clean" / "launch_script.slurm").read_text()
    assert "#SBATCH --partition=cpu" in script and "#SBATCH --time=1:00:00" in script
    assert not (tmp_path / "state" / "failed").exists()
    assert sorted(docs_of(out)) == sorted(docs_of(in_process["exact"]))
