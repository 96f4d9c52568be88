"""`python -m bench.gpu_proof` keeps working where no GPU is: its GPU-side command runs every section at toy size
on a CPU with the packages the GPU machine lacks (jieba, rjieba, opencc, datatrove, gradio) made unimportable,
and writes both report files with every section; bad input is one line, exit 2, nothing written. Those run the
command end to end (slow: `--slow`); the fast tests check its options and the manifest reader in-process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("device", "throughput", "memory", "fp16_vs_fp32", "resume", "science")
#: what its --quick run must print (tests/test_bench.py leaves this benchmark to this file)
RESULT_LINES = [*(rf"^section {s}: measured \(" for s in SECTIONS), r"^wrote .*gpu_proof\.json and .*gpu_proof\.md"]
TITLES = ("Device and matmul peak", "Training throughput", "Memory:", "fp16 + loss scaling", "kill -9",
          "--science:")
MISSING_ON_GPU = ("jieba", "rjieba", "opencc", "datatrove", "gradio")
BLOCKER = f'''import importlib.abc, sys
BLOCKED = {set(MISSING_ON_GPU)!r}
class _Missing(importlib.abc.MetaPathFinder):
    """As on the GPU machine: these packages are not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked: not on the GPU machine)")
        return None
sys.meta_path.insert(0, _Missing())
'''


def _env(tmp_path: Path, *front: Path) -> dict:
    return {**os.environ, "TMPDIR": str(tmp_path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([*map(str, front), str(REPO)])}


def _proof(args: list[str], env: dict, timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.gpu_proof", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_options_come_from_the_dataclass_and_a_bad_one_is_one_line(tmp_path):
    """`python -m bench.gpu_proof --help` lists every field of `Options` (nothing else); a refused value is one
    line, exit 2, nothing written."""
    from bench.gpu_proof import Options
    from zh_bert.core.config import cli_fields

    p = _proof(["--help"], _env(tmp_path), timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("usage: python -m bench.gpu_proof"), p.stderr[-2000:]
    flags = set(re.findall(r"^  (--[a-z-]+)", p.stdout, re.M)) - {"--help"}   # each option's own line
    assert flags == {"--" + f.name.replace("_", "-") for f in cli_fields(Options)}
    for bad in (["--device", "tpu"], ["--budget-s", "nan"], ["--quik"]):
        p = _proof([*bad, "--out", str(tmp_path / "out")], _env(tmp_path), timeout=60)
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, (bad, p.stderr)
        assert p.stderr.startswith("gpu_proof: error: ") and bad[0] in p.stderr, (bad, p.stderr)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_gpu_side_runs_every_section_without_the_packages_the_gpu_lacks(tmp_path):
    """--prepare (here, everything installed), then the GPU-side command with jieba & co. unimportable in it
    and in every process it starts: exit 0, gpu_proof.json and gpu_proof.md with every section measured."""
    data, out, block = tmp_path / "data", tmp_path / "out", tmp_path / "block"
    p = _proof(["--prepare", str(data), "--quick"], _env(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["datasets"]["main"] and manifest["datasets"]["science"]
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = _env(tmp_path, block)
    check = subprocess.run([sys.executable, "-c", "import jieba"], env=env, capture_output=True, text=True)
    assert check.returncode != 0 and "blocked" in check.stderr
    p = _proof(["--device", "cpu", "--quick", "--data", str(data), "--out", str(out)], env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert not [rx for rx in RESULT_LINES if not re.search(rx, p.stdout, re.M)], p.stdout[-3000:]
    report = json.loads((out / "gpu_proof.json").read_text(encoding="utf-8"))
    assert {s: report["sections"][s]["status"] for s in SECTIONS} == dict.fromkeys(SECTIONS, "measured")
    md = (out / "gpu_proof.md").read_text(encoding="utf-8")
    for title in TITLES:
        assert f"## {title}" in md
    assert md.count("Status: **measured**") == len(SECTIONS)
    assert report["sections"]["resume"]["max_abs_loss_diff"] == 0          # CPU kernels are deterministic
    assert report["sections"]["fp16_vs_fp32"]["runs"]["fp16"]["precision"] == "fp16"
    assert {r["value"] for r in report["sections"]["science"]["rows"]} >= {"mlm+wwm", "mlm+correction", "electra"}


@pytest.mark.slow
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    """--device cuda without a GPU, --science without a prepared corpus, a --data dir that is not a prepared
    one, --prepare into an existing dir."""
    fake = tmp_path / "prepared-without-science"
    fake.mkdir()
    (fake / "manifest.json").write_text(json.dumps({
        "format": "zh-bert gpu_proof data", "version": 1, "quick": False, "note": "zh_real_text not found",
        "datasets": {"main": {"tokenizer": "main/tokenizer", "shards": "main/shards", "files": {}, "vocab_size": 8000},
                     "science": None}}), encoding="utf-8")
    empty = tmp_path / "not-prepared"
    empty.mkdir()
    cases = [(["--science", "--data", str(fake)], "no prepared science corpus"),
             (["--data", str(empty)], "not a prepared gpu_proof dir"),
             (["--prepare", str(empty)], "exists")]
    import torch

    if not torch.cuda.is_available():
        cases.append((["--device", "cuda", "--quick"], "no CUDA GPU"))
    for args, why in cases:
        out = tmp_path / "out"
        p = _proof(args + (["--out", str(out)] if "--prepare" not in args else []), _env(tmp_path), timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("gpu_proof: error: "), (args, p.stderr)
        assert why in lines[0], (args, lines[0])
        assert not out.exists() and p.stdout == "", args
    assert sorted(x.name for x in tmp_path.iterdir()) == ["not-prepared", "prepared-without-science"]


# --------------------------------------------------------------------------- ownership, bad input, disks

def _sha(root: Path) -> dict[str, str]:
    """Every path under `root` with the sha256 of its bytes (folders as 'dir')."""
    import hashlib

    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def _one_line(p: subprocess.CompletedProcess, *want: str) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("gpu_proof: error: "), (p.returncode,
                                                                                                  p.stderr[-3000:])
    assert "Traceback" not in p.stderr and all(w in lines[0] for w in want), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def proof_dirs(tmp_path_factory):
    """A toy prepared DIR (--prepare --quick) and an OUT holding the report of a `--sections device` run."""
    root = tmp_path_factory.mktemp("gpu-proof")
    data, out = root / "data", root / "out"
    p = _proof(["--prepare", str(data), "--quick"], _env(root))
    assert p.returncode == 0, p.stderr[-2000:]
    p = _proof(["--device", "cpu", "--quick", "--data", str(data), "--out", str(out), "--sections", "device"],
               _env(root), timeout=200)
    assert p.returncode == 0, p.stderr[-2000:]
    return data, out


def _device_run(data: Path, out: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return _proof(["--device", "cpu", "--quick", "--data", str(data), "--out", str(out), "--sections", "device",
                   *extra], _env(tmp_path), timeout=200)


@pytest.mark.slow
def test_user_files_survive_gpu_proof_out_holding_the_users_gpu_proof_md_and_json(proof_dirs, tmp_path):
    """Defect 6: --out DIR holding the user's own gpu_proof.md / gpu_proof.json (or gpu_proof's report with
    the user's edits, or any other file; --work likewise) is refused in one line, byte for byte untouched;
    a report gpu_proof wrote is added to."""
    data, ours = proof_dirs
    report = json.loads((ours / "gpu_proof.json").read_text(encoding="utf-8"))
    md = (ours / "gpu_proof.md").read_text(encoding="utf-8")
    cases = {
        "the user's md and json": {"gpu_proof.md": "# 我的 GPU 笔记\n", "gpu_proof.json": '{"mine": [1, 2]}\n'},
        "the user's md alone": {"gpu_proof.md": "# 我的 GPU 笔记\n"},
        "the user's json alone": {"gpu_proof.json": json.dumps({"gpu_proof": 1, "notes": "mine"})},
        "our json, the user's md": {"gpu_proof.json": json.dumps(report), "gpu_proof.md": "# 我的 GPU 笔记\n"},
        "our report, md edited": {"gpu_proof.json": json.dumps(report), "gpu_proof.md": md.replace("Device", "设备", 1)},
        "our report, notes appended": {"gpu_proof.json": json.dumps(report), "gpu_proof.md": md + "我的结论\n"},
        "our report and a file of the user's": {"gpu_proof.json": json.dumps(report), "gpu_proof.md": md,
                                                "notes.txt": "别删\n"},
    }
    for why, files in cases.items():
        out = tmp_path / "out"
        out.mkdir()
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
        before, around = _sha(out), sorted(x.name for x in tmp_path.iterdir())
        _one_line(_device_run(data, out, tmp_path), "--out", str(out))
        assert _sha(out) == before, why
        assert sorted(x.name for x in tmp_path.iterdir()) == around, why   # no temp dir, no work dir left
        for f in out.iterdir():
            f.unlink()
        out.rmdir()
    work = tmp_path / "work"                      # a --work folder of the user's
    work.mkdir()
    (work / "data").mkdir()
    (work / "data" / "thesis.tex").write_text("四年的心血\n", encoding="utf-8")
    before = _sha(work)
    _one_line(_device_run(data, tmp_path / "out", tmp_path, "--work", str(work)), "--work", str(work))
    assert _sha(work) == before and not (tmp_path / "out").exists()
    out = tmp_path / "ours"                       # gpu_proof's own report: added to
    out.mkdir()
    for name in ("gpu_proof.json", "gpu_proof.md"):
        (out / name).write_bytes((ours / name).read_bytes())
    p = _device_run(data, out, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(json.loads((out / "gpu_proof.json").read_text(encoding="utf-8"))["invocations"]) == 2
    assert sorted(x.name for x in out.iterdir()) == ["gpu_proof.json", "gpu_proof.md"]


def test_read_manifest_refuses_every_wrong_shape(tmp_path):
    """Defect 18, in this process: a --data manifest.json of gpu_proof's name but not its shape ([1, 2], fields
    of the wrong type) is a ProofError naming manifest.json, never another error (an AttributeError)."""
    from bench.gpu_proof.data import ProofError, read_manifest

    head = {"format": "zh-bert gpu_proof data", "version": 1}
    ds = {"tokenizer": "main/tokenizer", "shards": "main/shards", "files": {}, "vocab_size": 8000}
    bad = {"a list": [1, 2], "a string": "manifest", "null": None,
           "datasets a list": {**head, "quick": True, "datasets": [1, 2]},
           "main a string": {**head, "quick": True, "datasets": {"main": "main"}},
           "no quick": {**head, "datasets": {"main": ds}},
           "files a list": {**head, "quick": True, "datasets": {"main": {**ds, "files": ["a"]}}},
           "file info a number": {**head, "quick": True, "datasets": {"main": {**ds, "files": {"main/x": 3}}}},
           "science a list": {**head, "quick": True, "datasets": {"main": ds, "science": [1]}}}
    for why, manifest in bad.items():
        (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        with pytest.raises(ProofError, match="manifest.json"):
            read_manifest(tmp_path)


@pytest.mark.slow
def test_bad_input_gpu_proof_data_manifest_not_an_object(tmp_path):
    """Defect 18, end to end: a --data manifest.json of gpu_proof's name but not its shape is one line, exit 2,
    nothing written (each shape in-process: test_read_manifest_refuses_every_wrong_shape)."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    (data / "manifest.json").write_text("[1, 2]", encoding="utf-8")
    before = _sha(data)
    for extra in ([], ["--science"]):
        p = _proof(["--device", "cpu", "--quick", "--data", str(data), "--out", str(out), *extra], _env(tmp_path),
                   timeout=120)
        _one_line(p, str(data), "manifest.json")
        assert not out.exists() and _sha(data) == before
    assert [x.name for x in tmp_path.iterdir()] == ["data"]


DISK_CASES = [(t, d) for t in ("prepare", "out", "out-with-a-report") for d in ("read-only", "full")] + [
    ("prepare", "fills-at-1m"), ("prepare", "fills-at-3m")]   # a report is a few KB: it fits or it does not


@pytest.mark.slow
@pytest.mark.parametrize("target,disk", DISK_CASES, ids=[f"{t}-{d}" for t, d in DISK_CASES])
def test_full_disk_gpu_proof_prepare_and_out_are_one_line(target, disk, proof_dirs, tmp_path):
    """Defect 19: --prepare DIR or --out DIR on a read-only or full file system (a real tmpfs): one line
    `gpu_proof: error: PATH: cannot write (...); nothing was changed`, exit 2, no traceback, no temp file
    or folder left (on the disk or in TMPDIR), an earlier report there byte for byte as it was. `fills-at-*`:
    --prepare fills the disk midway (at the vocab, at the packed shards)."""
    from _fs_helpers import tmpfs

    data, ours = proof_dirs
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    size = {"read-only": "size=2m", "full": "size=256k", "fills-at-1m": "size=1m", "fills-at-3m": "size=3m"}[disk]
    with tmpfs(tmp_path / "disk", size) as d:
        out = d / ("data" if target == "prepare" else "out")
        if target == "out-with-a-report":
            out.mkdir()
            for name in ("gpu_proof.json", "gpu_proof.md"):
                (out / name).write_bytes((ours / name).read_bytes())
        if disk == "full":
            st = os.statvfs(d)
            (d / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))
        if disk == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        before = _sha(d)
        args = ["--prepare", str(out), "--quick"] if target == "prepare" else \
            ["--device", "cpu", "--quick", "--data", str(data), "--out", str(out)]
        p = _proof(args, {**_env(tmp_path), "TMPDIR": str(tmp)}, timeout=300)
        why = "Read-only file system" if disk == "read-only" else "No space left on device"
        line = _one_line(p, str(out), f"cannot write ({why}); nothing was changed")
        assert _sha(d) == before, line
        assert list(tmp.iterdir()) == [], line
        if disk == "read-only":
            subprocess.run(["mount", "-o", "remount,rw", str(d)], check=True)
