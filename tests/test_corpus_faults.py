"""Faults in the corpus stages (clean, vocab, shard): a kill at a chosen moment (ZH_BERT_FAULT makes the
process SIGKILL itself right after a named step, or a patched rename raises), a full disk, an output path
that holds someone else's files. Each test asserts that nothing previously complete changed, nothing
incomplete looks complete, and the next run cleans up what the killed one left."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zh_bert.core import fileio
from zh_bert.corpus.clean.report import read_report, report_path
from zh_bert.core.errors import ZhBertError

REPO = Path(__file__).resolve().parent.parent


def _tree(d: Path) -> dict[str, bytes]:
    """Every file under `d` (relative name -> bytes): equality means nothing changed."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _hidden(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


def _killed_at(step: str, *argv: str, cwd: Path) -> None:
    """Run `zh-bert ARGV` in a child that SIGKILLs itself right after `step`; assert it died that way."""
    env = {**os.environ, "ZH_BERT_FAULT": step, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "zh_bert", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])


def _cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    from zh_bert.cli import main

    capsys.readouterr()
    rc = main(argv)
    err = [l for l in capsys.readouterr().err.split("\n") if l.strip()]
    return rc, err


@pytest.fixture
def docs(tmp_path, sample_jsonl) -> Path:
    """200 real documents in clean's output format."""
    p = tmp_path / "corpus.jsonl"
    p.write_text("".join(sample_jsonl.read_text(encoding="utf-8").splitlines(keepends=True)[:200]),
                 encoding="utf-8")
    return p


# ---------------------------------------------------------------------------------------------- fileio
class _Killed(BaseException):
    """Stands for a SIGKILL in-process: nothing after the raise runs in the patched call."""


def test_replace_dir_interrupted_between_renames_is_undone_by_recover(tmp_path, monkeypatch):
    target = tmp_path / "out"
    target.mkdir()
    (target / "a.txt").write_text("previous, complete", encoding="utf-8")
    monkeypatch.setattr("zh_bert.core.fileio.atomic._exchange", lambda a, b: False)    # the two-rename path
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append((src, dst))
        if len(calls) == 3:   # 1: the manifest into the temp dir, 2: out -> .out.old-PID, 3: temp -> out
            raise _Killed
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(_Killed):   # `legacy`: the writer's rule for its outputs from before manifests
        with fileio.atomic_dir(target, overwrite=True, legacy=lambda name, _: name == "a.txt") as tmp:
            (tmp / "a.txt").write_text("new", encoding="utf-8")
    monkeypatch.setattr(os, "replace", real)
    assert not target.exists() and _hidden(tmp_path) == [f".out.old-{os.getpid()}"]
    fileio.recover(target)
    assert _tree(target) == {"a.txt": "previous, complete".encode()} and _hidden(tmp_path) == []


def test_replace_dir_exchange_keeps_target_present(tmp_path):
    """Where the file system swaps two names in one call, the target exists at every instant."""
    target = tmp_path / "out"
    target.mkdir()
    (target / "a.txt").write_text("old", encoding="utf-8")
    with fileio.atomic_dir(target, overwrite=True, legacy=lambda name, _: name == "a.txt") as tmp:
        (tmp / "a.txt").write_text("new", encoding="utf-8")
    assert _tree(target) == {"a.txt": b"new", fileio.MANIFEST: b'{\n "written_by": "zh-bert",\n "files": [\n  "a.txt"\n ]\n}\n'}
    assert _hidden(tmp_path) == []


def test_recover_leaves_a_live_process_alone(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f".out.tmp-{live.pid}-abc").mkdir()
        (tmp_path / ".out.tmp-999999999-abc").mkdir()             # no such process
        fileio.recover(tmp_path / "out")
        assert _hidden(tmp_path) == [f".out.tmp-{live.pid}-abc"]
    finally:
        live.kill()
        live.wait()


# ---------------------------------------------------------------------------------------------- vocab
def test_vocab_force_killed_between_renames_keeps_previous_tokdir(tmp_path, docs, capsys):
    from zh_bert.corpus.vocab import main as vocab_main

    tok = tmp_path / "tok"
    assert vocab_main([str(docs), "-o", str(tok), "--kind", "char", "--size", "3000", "-q"]) == 0
    before = _tree(tok)
    _killed_at("between:tok", "vocab", str(docs), "-o", "tok", "--kind", "char", "--size", "3100", "--force", "-q",
               cwd=tmp_path)
    assert not tok.exists() and [n.split("-")[0] for n in _hidden(tmp_path)] == [".tok.old", ".tok.tmp"]
    # the next run first puts the complete previous TOKDIR back, then refuses to replace it without --force
    rc, err = _cli(["vocab", str(docs), "-o", str(tok), "--kind", "char", "--size", "3100", "-q"], capsys)
    assert rc == 2 and "--force" in err[0] and _tree(tok) == before and _hidden(tmp_path) == []
    rc, err = _cli(["vocab", str(docs), "-o", str(tok), "--kind", "char", "--size", "3100", "-q", "--force"], capsys)
    assert rc == 0 and json.loads((tok / "zh_bert_vocab.json").read_text())["vocab_size"] <= 3100
    assert _hidden(tmp_path) == []


@pytest.mark.slow
def test_killed_vocab_and_shard_leave_temp_dirs_the_next_run_removes(tmp_path, docs, google_tokdir):
    from zh_bert.corpus.shard import main as shard_main
    from zh_bert.corpus.vocab import main as vocab_main

    _killed_at("written:tok", "vocab", str(docs), "-o", "tok", "--kind", "char", "--size", "3000", "-q",
               cwd=tmp_path)
    _killed_at("written:sh", "shard", str(docs), "--tokenizer", str(google_tokdir), "-o", "sh", "--workers", "1",
               cwd=tmp_path)
    left = _hidden(tmp_path)
    assert not (tmp_path / "tok").exists() and not (tmp_path / "sh").exists()
    assert [n.split(".tmp-")[0] for n in left] == [".sh", ".tok"], left
    assert vocab_main([str(docs), "-o", str(tmp_path / "tok"), "--kind", "char", "--size", "3000", "-q"]) == 0
    assert shard_main([str(docs), "--tokenizer", str(google_tokdir), "-o", str(tmp_path / "sh"),
                       "--workers", "1"]) == 0
    assert _hidden(tmp_path) == []


def test_vocab_force_replaces_only_a_tokdir(tmp_path, docs, capsys):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("四年的心血", encoding="utf-8")
    rc, err = _cli(["vocab", str(docs), "-o", str(thesis), "--force", "-q"], capsys)
    assert rc == 2 and len(err) == 1 and "refusing to overwrite" in err[0] and "thesis.tex" in err[0]
    assert _tree(thesis) == {"thesis.tex": "四年的心血".encode()}
    tok = tmp_path / "tok"                          # a real TOKDIR, with a user's note added to it
    assert _cli(["vocab", str(docs), "-o", str(tok), "--kind", "char", "--size", "3000", "-q"], capsys)[0] == 0
    (tok / "notes.md").write_text("mine", encoding="utf-8")
    before = _tree(tok)
    rc, err = _cli(["vocab", str(docs), "-o", str(tok), "--kind", "char", "--size", "3100", "--force", "-q"], capsys)
    assert rc == 2 and "notes.md" in err[0] and _tree(tok) == before


# ---------------------------------------------------------------------------------------------- shard
def test_shard_refuses_a_dir_it_did_not_write(tmp_path, docs, google_tokdir, capsys):
    out = tmp_path / "sh"
    out.mkdir()
    (out / "meta.json").write_text("{}", encoding="utf-8")
    (out / "thesis.pdf").write_bytes(b"%PDF")
    rc, err = _cli(["shard", str(docs), "--tokenizer", str(google_tokdir), "-o", str(out)], capsys)
    assert rc == 2 and len(err) == 1 and "thesis.pdf" in err[0]
    assert _tree(out) == {"meta.json": b"{}", "thesis.pdf": b"%PDF"}


def test_shard_full_disk_is_one_line_and_keeps_previous_output(tmp_path, docs, google_tokdir, capsys,
                                                                monkeypatch):
    from zh_bert.corpus.shard import build as shard_build

    out = tmp_path / "sh"
    args = ["shard", str(docs), "--tokenizer", str(google_tokdir), "-o", str(out), "--workers", "1"]
    assert _cli(args, capsys)[0] == 0
    before = _tree(out)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shard_build, "write_array", full)  # all array bytes (real disk: test_full_disk_vocab_shard)
    rc, err = _cli(args + ["--seq-len", "64"], capsys)
    assert rc == 2 and len(err) == 1 and str(out) in err[0] and "No space left" in err[0], err
    assert _tree(out) == before and _hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------- clean
def _clean(src: Path, out: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    return _cli(["clean", str(src), "-o", str(out), "--workers", "1", "-q", *extra], capsys)


def test_clean_killed_between_renames_report_is_not_taken_for_the_old_output(tmp_path, capsys):
    from zh_bert.corpus.shard import file_sha256

    src = tmp_path / "raw.txt"
    src.write_text("\n".join(f"第{i}篇文档：北京是中国的首都，也是一座历史悠久的文化名城。" for i in range(50)) + "\n",
                   encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _clean(src, out, capsys)[0] == 0
    old = out.read_bytes()
    assert read_report(out)["output_sha256"] == file_sha256(out)
    src.write_text(src.read_text(encoding="utf-8") + "又一篇新的文档，内容和前面的完全不同，足够长以通过过滤。\n", encoding="utf-8")
    _killed_at("replaced:out.report.json", "clean", str(src), "-o", str(out), "--workers", "1", "-q", cwd=tmp_path)
    assert out.read_bytes() == old                        # the previous output, unchanged
    assert json.loads(report_path(out).read_text())["docs_out"] == 51   # a new report beside it ...
    assert read_report(out) is None                       # ... that no reader takes for the old output
    assert [n.split(".tmp-")[0] for n in _hidden(tmp_path)] == [".out.jsonl"]
    assert _clean(src, out, capsys)[0] == 0               # the next run replaces both and cleans up
    assert read_report(out)["docs_out"] == 51 and _hidden(tmp_path) == []


def test_clean_rename_failure_between_the_two_files(tmp_path, capsys, monkeypatch):
    """The same, in-process: the second os.replace (OUT.jsonl) fails after the report was renamed."""
    src = tmp_path / "raw.txt"
    src.write_text("北京是中国的首都，也是一座历史悠久的文化名城。\n" * 3, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    real, calls = os.replace, []

    def replace(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise _Killed
        real(a, b)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(_Killed):
        _clean(src, out, capsys)
    monkeypatch.setattr(os, "replace", real)
    assert report_path(out).is_file() and not out.exists() and read_report(out) is None


def test_clean_full_disk_is_one_line_and_keeps_previous_output(tmp_path, capsys, monkeypatch):
    src = tmp_path / "raw.txt"
    src.write_text("北京是中国的首都，也是一座历史悠久的文化名城。\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _clean(src, out, capsys)[0] == 0
    before = _tree(tmp_path)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    rc, err = _clean(src, out, capsys, "--min-chars", "5")
    assert rc == 2 and len(err) == 1 and "No space left" in err[0] and "out." in err[0], err
    assert _tree(tmp_path) == before


def test_clean_replaces_only_its_own_output(tmp_path, capsys):
    src = tmp_path / "raw.txt"
    src.write_text("北京是中国的首都，也是一座历史悠久的文化名城。\n", encoding="utf-8")
    mine = tmp_path / "notes.jsonl"
    mine.write_text('{"my": "data"}\n', encoding="utf-8")
    rc, err = _clean(src, mine, capsys)
    assert rc == 2 and len(err) == 1 and "refusing to overwrite" in err[0]
    assert mine.read_text(encoding="utf-8") == '{"my": "data"}\n'
    out = tmp_path / "out.jsonl"
    assert _clean(src, out, capsys)[0] == 0 and _clean(src, out, capsys)[0] == 0   # its own: replaced


def test_clean_skips_a_lone_surrogate_and_names_it(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "北京是中国的首都，也是一座历史悠久的文化名城。"}\n{"text": "\\ud800 坏的文本，不是字符。"}\n',
                   encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _clean(src, out, capsys)[0] == 0
    report = read_report(out)
    assert report["docs_out"] == 1 and report["unreadable"]["counts"] == {"bad_text": 1}
    assert report["unreadable"]["where"]["bad_text"][0].startswith(f"{src}:2: lone surrogate")


def test_lone_surrogate_in_a_corpus_is_one_line_for_every_reader(tmp_path):
    """vocab, vocab report, shard and eval mlm all read documents through corpus_io."""
    from zh_bert.corpus.corpus_io import read_documents

    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "好的"}\n{"text": "\\udfff"}\n', encoding="utf-8")
    with pytest.raises(ZhBertError, match=r"c\.jsonl:2: lone surrogate \\udfff"):
        read_documents([src])
