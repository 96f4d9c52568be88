"""A directory of parts (what `zh-bert clean --executor` writes, or a user's own) is the same corpus as the
parts concatenated: `vocab` builds the same tokenizer, `eval mlm` gives the same numbers, and a recipe's
`data:` takes it as cleaned documents (no clean stage), while a raw-text directory is still cleaned."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from zh_bert.core.errors import ZhBertError


def split_into_parts(src: Path, out: Path, n: int = 3, gzip_part: int = 1) -> Path:
    """`src` (cleaned JSONL) as `n` parts `part-0000i.jsonl`, part `gzip_part` gzipped: in name order, the
    parts concatenated are `src`."""
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    out.mkdir(parents=True)
    step = -(-len(lines) // n)
    for i in range(n):
        body = "".join(lines[i * step:(i + 1) * step]).encode("utf-8")
        if i == gzip_part:
            (out / f"part-{i:05d}.jsonl.gz").write_bytes(gzip.compress(body))
        else:
            (out / f"part-{i:05d}.jsonl").write_bytes(body)
    return out


def as_clean_outdir(parts: Path, out: Path) -> Path:
    """`parts` as a finished `zh-bert clean` OUTDIR: a job marker and report.json beside the parts."""
    shutil.copytree(parts, out)
    (out / ".zh-bert").mkdir()
    (out / ".zh-bert" / "job.json").write_text('{"command": "clean"}', encoding="utf-8")
    (out / "report.json").write_text(json.dumps({"docs_out": 150, "parts": []}), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def small_jsonl(tmp_path_factory, sample_docs) -> Path:
    """150 real documents in `zh-bert clean` output format."""
    path = tmp_path_factory.mktemp("small") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t, "source": f"s:{i}"}, ensure_ascii=False) + "\n"
                            for i, t in enumerate(sample_docs[:150])), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory, small_jsonl) -> Path:
    return split_into_parts(small_jsonl, tmp_path_factory.mktemp("parts") / "parts")


def test_vocab_from_parts_is_the_vocab_of_the_concatenated_file(tmp_path, sample_jsonl):
    from zh_bert.corpus.vocab import main

    outdir = as_clean_outdir(split_into_parts(sample_jsonl, tmp_path / "p"), tmp_path / "outdir")
    for name, corpus in (("file", sample_jsonl), ("outdir", outdir)):
        assert main([str(corpus), "-o", str(tmp_path / f"tok-{name}"), "--kind", "char", "--size", "4000", "-q"]) == 0
    vocab = [(tmp_path / f"tok-{n}" / "vocab.txt").read_bytes() for n in ("file", "outdir")]
    assert vocab[0] == vocab[1] and len(vocab[0].split(b"\n")) > 1000


def test_xz_and_bz2_parts_are_read_like_gz_ones(tmp_path, small_jsonl):
    """A directory of `*.jsonl.xz` / `*.jsonl.bz2` parts (real Chinese text) is the same corpus as the file."""
    import bz2
    import lzma

    from zh_bert.corpus.corpus_io import corpus_files, iter_documents

    d = split_into_parts(small_jsonl, tmp_path / "p", gzip_part=-1)
    for p, pack in ((d / "part-00001.jsonl", lzma.compress), (d / "part-00002.jsonl", bz2.compress)):
        (d / (p.name + (".xz" if pack is lzma.compress else ".bz2"))).write_bytes(pack(p.read_bytes()))
        p.unlink()
    assert [f.name for f in corpus_files([d])] == ["part-00000.jsonl", "part-00001.jsonl.xz", "part-00002.jsonl.bz2"]
    assert list(iter_documents([d])) == list(iter_documents([small_jsonl]))


def test_eval_mlm_on_parts_equals_the_concatenated_file(tiny_model_dir, tmp_path, sample_docs, capsys):
    from zh_bert.cli import main

    src = tmp_path / "held.jsonl"
    src.write_text("".join(json.dumps({"text": t, "source": "h"}, ensure_ascii=False) + "\n"
                           for t in sample_docs[-12:]), encoding="utf-8")
    parts = split_into_parts(src, tmp_path / "held_parts")
    results = []
    for text in (src, parts):
        assert main(["eval", "mlm", str(tiny_model_dir), "--text", str(text), "--no-record"]) == 0
        results.append(json.loads(capsys.readouterr().out.strip().split("\n")[-1]))
    assert results[0] == results[1] and results[0]["n_masked"] > 0


@pytest.mark.parametrize("layout, cleaned", [
    ("parts", True),                # *.jsonl + *.jsonl.gz of {"text", "source"} lines: a user's own parts
    ("outdir", True),               # a finished `zh-bert clean` OUTDIR
    ("with_report", True),          # `clean -o DIR/docs.jsonl` wrote DIR/docs.report.json beside it
    ("text_only", False),           # {"text"} without "source": a raw dump, cleaned first
    ("txt", False),                 # plain text
    ("subdir", False),              # parts one level down: a raw tree, as clean walks it
])
def test_the_rule_for_data_directories(tmp_path, parts, small_jsonl, layout, cleaned):
    from zh_bert.corpus.pipeline import is_cleaned_dir

    d = tmp_path / "d"
    if layout == "outdir":
        as_clean_outdir(parts, d)
    elif layout == "subdir":
        shutil.copytree(parts, d / "sub")
    else:
        shutil.copytree(parts, d)
    if layout == "with_report":
        (d / "part-00000.report.json").write_text("{}", encoding="utf-8")
    elif layout == "text_only":
        (d / "part-00002.jsonl").write_text('{"text": "今天天气很好。"}\n', encoding="utf-8")
    elif layout == "txt":
        (d / "raw.txt").write_text("今天天气很好。\n", encoding="utf-8")
    assert is_cleaned_dir(d) is cleaned


def test_recipe_data_dir_of_parts_skips_clean_and_keys_the_cache_on_every_part(tmp_path, parts, small_jsonl,
                                                                                  monkeypatch):
    import zh_bert.corpus.pipeline as pipeline
    from zh_bert.train.recipe import load_recipe

    def no_clean(*_a, **_k):
        raise AssertionError("cleaned documents were cleaned again")

    monkeypatch.setattr(pipeline, "clean", no_clean)
    outdir = as_clean_outdir(parts, tmp_path / "outdir")
    recipe = load_recipe(None, {"out_dir": str(tmp_path / "run"), "data": str(outdir), "seq_len": 64,
                                "valid_docs": 5, "vocab_size": 3000})
    said: list[str] = []
    prepared = pipeline.prepare_data(recipe, log=said.append)
    assert [s.split()[1] for s in said] == [f"{outdir}:", "vocab", "shard"]
    assert prepared.clean_report == json.loads((outdir / "report.json").read_text(encoding="utf-8"))
    assert not (prepared.sharddir.parent / "docs.jsonl").exists()
    from zh_bert.corpus.sharddir import read_meta

    counts = read_meta(prepared.sharddir)["counts"]
    assert counts["train"]["documents"] + counts["valid"]["documents"] == 150

    gz = outdir / "part-00001.jsonl.gz"          # one part changes: the cache key changes
    gz.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes())[:-200].rsplit(b"\n", 1)[0] + b"\n"))
    said.clear()
    again = pipeline.prepare_data(recipe, log=said.append)
    assert again.sharddir != prepared.sharddir and [s.split()[1] for s in said][1:] == ["vocab", "shard"]


def test_raw_text_directory_is_still_cleaned_and_kinds_do_not_mix(tmp_path, sample_docs, parts):
    from zh_bert.corpus.pipeline import data_inputs, prepare_data
    from zh_bert.train.recipe import load_recipe

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("\n".join(sample_docs[:60]) + "\n", encoding="utf-8")
    (raw / "b.txt").write_text("\n".join(sample_docs[60:120]) + "\n", encoding="utf-8")
    recipe = load_recipe(None, {"out_dir": str(tmp_path / "run"), "data": str(raw), "seq_len": 64,
                                "valid_docs": 5, "vocab_size": 3000})
    said: list[str] = []
    prepare_data(recipe, log=said.append)
    assert [s.split()[1] for s in said] == ["clean", "vocab", "shard"]
    with pytest.raises(ZhBertError, match=r"holds cleaned documents but .*raw is raw text"):
        data_inputs([parts, raw])



def test_ablate_carves_a_directory_of_parts(tmp_path, parts, small_jsonl):
    """`zh-bert ablate` holds documents out of each part, `.gz` ones too; its copies are plain JSONL."""
    from zh_bert.evaluation.ablation.corpus import carve_corpus
    from zh_bert.corpus.corpus_io import read_documents
    from zh_bert.corpus.pipeline import data_inputs

    files, cleaned = data_inputs([parts])
    assert cleaned and [f.name for f in files] == ["part-00000.jsonl", "part-00001.jsonl.gz", "part-00002.jsonl"]
    train, heldout = carve_corpus(files, tmp_path / "corpus", 2, {1.0}, "line")
    assert [Path(p).name for p in train[1.0]] == ["00-part-00000.jsonl", "01-part-00001.jsonl", "02-part-00002.jsonl"]
    carved = read_documents(train[1.0]) + read_documents([heldout])
    assert sorted(carved) == sorted(read_documents([small_jsonl])) and len(read_documents([heldout])) == 6
