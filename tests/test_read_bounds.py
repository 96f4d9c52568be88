"""What is read bounds itself: a number, shape or dtype written in a file is compared with the data actually there
before it sizes a loop or an allocation, or is trusted as a weight. Each test is named after the defect it
reproduced (D: model inputs, B: data inputs; docs/reliability.md#bounds-on-what-is-read); the ones that run a
command in a child process under a memory cap or a signal (B1, B2, B8, B12) are in the slow suite."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

import _tf_index
from conftest import DATA
from zh_bert.cli import main

TF1 = DATA / "convert_fixtures" / "tf1"
GAMMA = "bert/embeddings/LayerNorm/gamma"


def _tf1(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(TF1, src)
    return src


def _convert_says(capsys, src: Path, out: Path, says: str) -> str:
    t0 = time.perf_counter()
    rc = main(["convert", str(src), "-o", str(out)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and says in lines[0] and "Traceback" not in err, err
    assert not out.exists() and time.perf_counter() - t0 < 30
    return lines[0]


@pytest.mark.parametrize("count", [10**12, 10**7, 2, 0])
def test_d1_a_forged_shard_count_costs_a_listing_not_a_list(count, tmp_path, capsys):
    """The header's `num_shards` against the data files there (it built one path per declared shard: 10^12 ->
    MemoryError)."""
    src = _tf1(tmp_path)
    _tf_index.rewrite(src / "bert_model.ckpt.index", num_shards=count)
    _convert_says(capsys, src, tmp_path / "out", f"the header names {count:,} data shards, and 1 ")


def test_d2_a_rank_65_shape_is_one_line(tmp_path, capsys):
    src = _tf1(tmp_path)
    _tf_index.rewrite(src / "bert_model.ckpt.index", name=GAMMA, shape=(1,) * 64 + (32,))
    _convert_says(capsys, src, tmp_path / "out", "a tensor of rank above 8")


def test_d3_a_float_weight_relabelled_int32_is_refused(tmp_path, capsys):
    """The bytes, size and CRC unchanged, only the dtype says DT_INT32: read as ints it 'converted equal' with a
    LayerNorm gamma of 1e9."""
    src = _tf1(tmp_path)
    _tf_index.rewrite(src / "bert_model.ckpt.index", name=GAMMA, dtype=3)
    _convert_says(capsys, src, tmp_path / "out", f"{GAMMA} is stored as <i4 integers, but a weight is floating point")


def _one_line(capsys, argv: list[str], says: str) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and says in lines[0] and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("where", ["tf1", "convert --vocab"])
def test_d4_a_vocab_txt_not_utf8_names_the_byte(where, tmp_path, capsys):
    src = _tf1(tmp_path)
    bad = src / "vocab.txt" if where == "tf1" else tmp_path / "other-vocab.txt"
    bad.write_bytes((TF1 / "vocab.txt").read_bytes().replace("北".encode(), b"\xff\xfe\xfd"))
    extra = ["--vocab", str(bad)] if where != "tf1" else []
    line = _one_line(capsys, ["convert", str(src), "-o", str(tmp_path / "out"), *extra], "not UTF-8 text")
    assert "at byte" in line and str(bad) in line


def test_d5_b11_json_nested_past_the_reader_is_one_line(tmp_path, capsys):
    """A config.json (or eval_results, a manifest, a JSONL line) of 100,000 `[`: RecursionError was the traceback."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.core.fileio import parse_json_line, read_json

    deep = tmp_path / "config.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ZhBertError, match="nested deeper than the reader follows"):
        read_json(deep)
    with pytest.raises(ZhBertError, match=r"c.jsonl:7: not valid JSON here"):
        parse_json_line("[" * 100_000, "c.jsonl", 7)
    src = _tf1(tmp_path)
    (src / "bert_config.json").write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    _one_line(capsys, ["convert", str(src), "-o", str(tmp_path / "out")], "nested deeper than the reader follows")


@pytest.mark.parametrize("how", ["expand", "meta", "sparse"])
def test_d6_d7_a_tensor_without_its_own_dense_data_is_refused_before_any_copy(how, tmp_path, capsys):
    """A 100 KB .bin whose word embedding is a stride-0 view saying 10^10 elements (`.float()` of it allocated
    40 GB), a meta tensor, a sparse one: one line naming the tensor, nothing materialised."""
    import resource

    import torch

    src = tmp_path / "src"
    shutil.copytree(DATA / "convert_fixtures" / "uer_modular", src)
    state = torch.load(src / "model.bin", weights_only=True)
    name = "embedding.word.embedding.weight"
    state[name] = {"expand": lambda: torch.zeros(100_000).expand(100_000, 100_000),
                   "meta": lambda: torch.empty(120, 32, device="meta"),
                   "sparse": lambda: torch.eye(120, 32).to_sparse()}[how]()
    torch.save(state, src / "model.bin")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = _one_line(capsys, ["convert", str(src), "-o", str(tmp_path / "out")], f"{name} is a")
    assert "refused before anything is converted" in line
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000   # KB: nothing 40 GB was tried


def test_d8_a_full_disk_under_the_tokenizers_library_is_the_disk_line(tmp_path):
    """tokenizers raises a bare `Exception("No space left on device (os error 28)")` when tokenizer.json cannot be
    written: the same one line as every other write to a full disk."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.core.fileio import save_pretrained

    class FullDisk:
        def save_pretrained(self, folder, **kw):
            raise Exception("No space left on device (os error 28)")

    with pytest.raises(ZhBertError, match=r"cannot write \(No space left on device\); nothing was changed"):
        save_pretrained(FullDisk(), tmp_path / "out")

    class Bug:
        def save_pretrained(self, folder, **kw):
            raise Exception("something else")

    with pytest.raises(Exception, match="something else"):
        save_pretrained(Bug(), tmp_path / "out2")


@pytest.mark.parametrize("layers", [3, 20_000])
def test_d9_d10_a_config_with_more_layers_than_its_weights_is_one_line_before_building(layers, tiny_model_dir,
                                                                                       tmp_path, capsys):
    """config.json says 3 (or 20,000) layers, the weights hold 2: `eval mlm` ran with layer 3 random (rc 0) or
    built 20,000 layers first; now one line from the safetensors header, before any model is built."""
    import json

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    text = tmp_path / "held.txt"
    text.write_text("北京是中国的首都。\n" * 20, encoding="utf-8")
    t0 = time.perf_counter()
    _one_line(capsys, ["eval", "mlm", str(folder), "--text", str(text)],
              f"num_hidden_layers {layers:,}, but the weights hold 2 layers")
    assert time.perf_counter() - t0 < 20


# --------------------------------------------------------------------------- cards and the board

def _card_board(capsys, tiny_model_dir, tmp_path, front: str) -> dict:
    from _board_helpers import build

    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "README.md").write_text(f"---\nlicense: mit\n{front}---\n# m\n", encoding="utf-8")
    rc, _, err = build(capsys, folder, "-o", tmp_path / "b", "--no-contamination")
    assert rc == 0 and "Traceback" not in err, err
    import json

    return json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]


EPRSTMT = "  - task: {type: text-classification}\n    dataset: {type: fewclue-eprstmt, name: e, split: test_public}\n"


def test_b3_an_alias_tree_in_a_card_is_a_note_in_bounded_memory(tiny_model_dir, tmp_path, capsys):
    """827 bytes of aliases to aliases stand for 10^9 strings: `str(value)[:40]` built them all (5 GB)."""
    import resource

    levels = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
        f"*a{i - 1}, *a{i - 1}]\n" for i in range(1, 9))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    row = _card_board(capsys, tiny_model_dir, tmp_path, levels + "model-index:\n- name: m\n  results:\n" + EPRSTMT
                      + "    metrics:\n    - {type: accuracy, value: *a8}\n")
    assert any("aliases stand for more than 200,000 values" in n["reason"] for n in row["notes"]), row["notes"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300_000     # KB


def test_b4_notes_of_one_card_are_bounded(tiny_model_dir, tmp_path, capsys):
    """N results x M metrics each an unreadable value: the first 20 notes and one counting the rest (a 3.4 KB card
    made 160,000 notes and a 167 MB board)."""
    metrics = "    metrics:\n" + "".join(f"    - {{type: accuracy, value: bad{k}}}\n" for k in range(30))
    row = _card_board(capsys, tiny_model_dir, tmp_path, "model-index:\n- name: m\n  results:\n"
                      + (EPRSTMT + metrics) * 10)
    reasons = [n["reason"] for n in row["notes"]]
    assert len(reasons) == 21 and reasons[-1] == "280 more unreadable parts of this card's model-index"


@pytest.mark.parametrize("value", ["9" * 5000, "9" * 400])
def test_b5_a_card_value_of_thousands_of_digits_is_a_note(value, tiny_model_dir, tmp_path, capsys):
    """5,000 digits: PyYAML's ValueError (not a YAMLError) was a traceback; 400 digits: an int past any float."""
    row = _card_board(capsys, tiny_model_dir, tmp_path, "model-index:\n- name: m\n  results:\n" + EPRSTMT
                      + f"    metrics:\n    - {{type: accuracy, value: {value}}}\n    - {{type: accuracy, value: 0.5}}\n")
    assert row["notes"], row
    if len(value) > 4300:
        assert "not valid YAML" in row["notes"][0]["reason"]
    else:
        assert row["scores"]["fewclue-eprstmt"]["claimed"] == 50.0
        assert "expected a finite number, got int an integer of" in row["notes"][0]["reason"]


def test_b6_two_claims_for_one_cell_are_both_named(tiny_model_dir, tmp_path, capsys):
    row = _card_board(capsys, tiny_model_dir, tmp_path, "model-index:\n- name: m\n  results:\n" + EPRSTMT
                      + "    metrics:\n    - {type: accuracy, value: 0.95}\n" + EPRSTMT
                      + "    metrics:\n    - {type: accuracy, value: 0.5}\n")
    said = [n["reason"] for n in row["notes"]]
    assert any("two claims for the fewclue-eprstmt column: e (test_public): accuracy 0.95 and "
               "e (test_public): accuracy 0.5; the last is shown" in r for r in said), said


@pytest.mark.parametrize("texts", [["好"], [""], [], ["好", "北京是中国的首都也是一座有三千多年历史的城市"]])
def test_b7_test_items_of_one_character_empty_or_absent_are_counted_not_a_traceback(texts, monkeypatch):
    from collections import namedtuple

    import zh_bert.corpus.contamination as contamination

    Example = namedtuple("Example", "task id split text")
    monkeypatch.setattr(contamination, "iter_test_examples",
                        lambda suite: iter([Example("t", str(i), "test", t) for i, t in enumerate(texts)]))
    index = contamination.OverlapIndex("sts")
    report = contamination.scan([("doc", "北京是中国的首都也是一座有三千多年历史的城市。")], index)
    assert report["documents"] == 1
    assert int((index.status == contamination.TOO_SHORT).sum()) == len([t for t in texts if len(t) < 5])


@pytest.mark.parametrize("under", ["model/a/b", "run/final/x/y", "run/x"])
def test_b10_a_board_is_refused_inside_a_zh_bert_folder_at_any_depth(under, tiny_model_dir, tmp_path, capsys):
    from _board_helpers import build

    shutil.copytree(tiny_model_dir, tmp_path / "model")
    shutil.copytree(tiny_model_dir, tmp_path / "run" / "final")
    (tmp_path / "run" / "run.json").write_text("{}")
    out = tmp_path / under
    before = sorted(tmp_path.rglob("*"))
    rc, _, err = build(capsys, tmp_path / "model", "-o", out, "--no-contamination")
    assert rc == 2 and "refusing to add a board to it" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(tmp_path.rglob("*")) == before


# --------------------------------------------------------------------------- corpora: a line is bounded while read

@pytest.fixture(scope="module")
def one_huge_line(tmp_path_factory) -> Path:
    """A .jsonl.zst of a few KB holding a good line, one JSON line of 300 MB, and another good line."""
    import zstandard

    path = tmp_path_factory.mktemp("huge") / "corpus.jsonl.zst"
    good = '{"text": "北京是中国的首都，也是一座有三千多年历史的城市。今天天气很好，我们去公园散步。"}\n'.encode()
    with open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as out:
        out.write(good)
        out.write(b'{"text": "')
        for _ in range(100):
            out.write("好".encode() * 1_000_000)   # 3 MB each
        out.write(b'"}\n')
        out.write(good)
    assert path.stat().st_size < 200_000
    return path


#: runs a zh-bert command, then says on its last stderr line the peak resident memory of it (VmHWM: ru_maxrss of
#: a process carries its parent's across exec) and of its workers (forked from it: their own)
_PEAK = ("import re, resource, sys\nfrom zh_bert.cli import main\nrc = main(sys.argv[1:])\n"
         "own = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"
         "peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
         "print(f'peak_rss_mb {peak // 1024}', file=sys.stderr)\nsys.exit(rc)")


def _capped(argv: list[str], cwd: Path, cap_gb: float = 3):
    """`zh-bert ARGV` in a child with its address space capped, its stderr without the last line and its peak
    resident memory in MB (`.peak_mb`): a reader that held a 300 MB value whole would need several times that."""
    import os
    import resource
    import subprocess
    import sys

    def cap():
        limit = int(cap_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}   # this checkout's zh_bert
    r = subprocess.run([sys.executable, "-c", _PEAK, *argv], cwd=cwd, capture_output=True, text=True,
                       preexec_fn=cap, timeout=300, env=env)
    lines = r.stderr.rstrip("\n").split("\n")
    r.peak_mb = int(lines[-1].split()[1]) if lines[-1].startswith("peak_rss_mb ") else None
    r.stderr = "\n".join(lines[:-1]) if r.peak_mb is not None else r.stderr
    return r


#: the most a command may hold reading a corpus with one 300 MB value (measured: about 200 MB)
BOUNDED_MB = 600


@pytest.mark.slow
def test_b1_an_over_long_line_is_counted_while_read_never_normalised(one_huge_line, tmp_path):
    import json

    r = _capped(["clean", str(one_huge_line), "-o", str(tmp_path / "out.jsonl")], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr and r.peak_mb < BOUNDED_MB, (r.peak_mb, r.stderr[-2000:])
    report = json.loads((tmp_path / "out.report.json").read_text())
    assert json.dumps(report).count("too_long") >= 1 and "a line of 300,000,013 bytes" in json.dumps(report)
    assert len((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()) == 1   # the two good lines: one


@pytest.mark.slow
def test_b2_vocab_and_contamination_on_an_over_long_line_are_bounded(one_huge_line, tmp_path):
    r = _capped(["vocab", str(one_huge_line), "-o", str(tmp_path / "tok"), "--kind", "char"], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and f"{one_huge_line}:2: a line of 300,000,013 bytes" in lines[0]
    assert r.peak_mb < BOUNDED_MB
    r = _capped(["eval", "contamination", str(one_huge_line), "--suite", "sts"], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr and r.peak_mb < BOUNDED_MB, (r.peak_mb, r.stderr[-2000:])


@pytest.mark.slow
def test_b12_a_job_failed_on_a_damaged_input_reruns_once_the_input_is_repaired(tmp_path, capsys):
    """`clean --executor local` stops on a damaged Parquet file; the file is replaced by a good copy; the same
    command again starts over (the old parts came from the old file) instead of refusing as another job's work."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from conftest import SAMPLE

    docs = [x for x in (SAMPLE / "zhwiki_sampled.txt").read_text(encoding="utf-8").split("\n") if len(x) > 50][:300]
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": list(range(len(docs))), "text": docs}), good, row_group_size=50)
    inputs = tmp_path / "in"
    inputs.mkdir()
    data = bytearray(good.read_bytes())
    col = pq.ParquetFile(good).metadata.row_group(3).column(1)
    rng = random.Random(3)
    for k in range(col.data_page_offset + 8, col.data_page_offset + 300):
        data[k] = rng.randrange(256)
    (inputs / "corpus.parquet").write_bytes(bytes(data))
    argv = ["clean", str(inputs), "-o", str(tmp_path / "out"), "--executor", "local", "--tasks", "2", "-q"]
    assert main(argv) == 2
    shutil.copy(good, inputs / "corpus.parquet")
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "changed since the unfinished run" in out and "starting over" in out
    assert (tmp_path / "out" / "report.json").is_file()


@pytest.mark.slow
def test_b8_sigterm_to_clean_with_workers_is_handled_as_sigint(tmp_path):
    """SIGTERM to `clean --workers 2` mid-run: exit 143 and one line, no worker traceback (BrokenPipeError), no
    temp file left beside the output."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import SAMPLE

    text = "\n".join(x for f in sorted(SAMPLE.glob("*.txt")) for x in f.read_text(encoding="utf-8").split("\n"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((text + "\n") * 8, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen([sys.executable, "-m", "zh_bert", "clean", str(corpus), "-o", str(out / "clean.jsonl"),
                          "--workers", "2", "-q"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not any(out.iterdir()) and time.time() - t0 < 60 and p.poll() is None:   # writing has begun
        time.sleep(0.05)
    time.sleep(0.5)
    assert p.poll() is None, "clean finished before it could be stopped: give it more text"
    p.send_signal(signal.SIGTERM)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 143 and err.strip().splitlines() == ["zh-bert clean: terminated"], err[-3000:]
    assert list(out.iterdir()) == []


@pytest.mark.slow
def test_b1_a_parquet_value_of_hundreds_of_megabytes_is_counted_unread(tmp_path):
    """A Parquet file of a few KB whose one row unpacks to a 300 MB string, and one of 40 rows where one value is
    36 MB: counted too_long (file#row), never normalised, under the same memory cap; the other rows read."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    one = tmp_path / "in" / "one.parquet"
    one.parent.mkdir()
    pq.write_table(pa.table({"text": ["好" * 100_000_000]}), one, compression="zstd")
    assert one.stat().st_size < 100_000
    docs = [f"第{i}篇文档：北京是中国的首都，也是一座有三千多年历史的城市。今天天气很好。" for i in range(40)]
    docs[7] = "好" * 12_000_000
    pq.write_table(pa.table({"text": docs}), tmp_path / "in" / "many.parquet", compression="zstd")
    r = _capped(["clean", str(tmp_path / "in"), "-o", str(tmp_path / "out.jsonl")], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr and r.peak_mb < BOUNDED_MB, (r.peak_mb, r.stderr[-2000:])
    said = json.dumps(json.loads((tmp_path / "out.report.json").read_text()), ensure_ascii=False)
    assert "many.parquet#7: a value of 36,000,000 bytes" in said and "one.parquet#0: row group 0, 1 rows" in said
    assert len((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()) == 39


def test_b11_nesting_in_a_card_and_in_eval_results_is_a_note_or_one_line(tiny_model_dir, tmp_path, capsys):
    """100,000 `[` in a card's front matter: the row's note, the board built; in eval_results.json: one line."""
    from _board_helpers import build

    row = _card_board(capsys, tiny_model_dir, tmp_path, "x: " + "[" * 100_000 + "\n")
    assert any("nested deeper than 64 levels" in n["reason"] for n in row["notes"]), row["notes"]
    run = tmp_path / "m2"
    shutil.copytree(tiny_model_dir, run)
    (run / "eval_results.json").write_text("[" * 100_000 + "]" * 100_000)
    rc, _, err = build(capsys, run, "-o", tmp_path / "b2", "--no-contamination")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nested deeper than the reader follows" in err, err
