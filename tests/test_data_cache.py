"""The recipe data cache (`zh_bert.corpus.pipeline`: corpus -> shards, keyed by the inputs): a clean OUTDIR is keyed
by the sha256 of its parts that its report.json lists only while the report still vouches for them; a part
edited in place at the same size is hashed again, so the shards are rebuilt, never stale."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from zh_bert.corpus.pipeline import cache_key, data_inputs, prepare_data
from zh_bert.train.recipe import load_recipe


def _outdir(root: Path, docs: list[str]) -> Path:
    """A finished `zh-bert clean --executor` OUTDIR: two parts, then report.json (written last, as clean does)."""
    out = root / "cleaned"
    out.mkdir()
    parts = []
    for i, chunk in enumerate((docs[: len(docs) // 2], docs[len(docs) // 2:])):
        p = out / f"part-{i:05d}.jsonl"
        p.write_text("".join(json.dumps({"text": t, "source": f"s:{i}"}, ensure_ascii=False) + "\n" for t in chunk),
                     encoding="utf-8")
        parts.append({"name": p.name, "docs": len(chunk), "bytes": p.stat().st_size,
                      "sha256": hashlib.sha256(p.read_bytes()).hexdigest()})
    fingerprint = hashlib.sha256(json.dumps([[p["name"], p["sha256"]] for p in parts]).encode()).hexdigest()
    (out / "report.json").write_text(json.dumps({"docs_out": len(docs), "parts": parts, "output_sha256": fingerprint,
                                                 "output_bytes": sum(p["bytes"] for p in parts)}), encoding="utf-8")
    past = (out / "report.json").stat().st_mtime_ns - 10**10           # parts written well before the report
    for p in parts:
        os.utime(out / p["name"], ns=(past, past))
    return out


def _edit_in_place(part: Path) -> None:
    """Change one character of `part` to another of the same UTF-8 length: same size, other bytes."""
    text = part.read_text(encoding="utf-8")
    i = next(i for i, c in enumerate(text) if "\u4e00" <= c <= "\u9fff" and c != "国")
    edited = text[:i] + ("国" if text[i] != "国" else "中") + text[i + 1:]
    assert len(edited.encode("utf-8")) == len(text.encode("utf-8"))
    with open(part, "r+b") as f:
        f.write(edited.encode("utf-8"))


def test_data_cache_key_changes_after_an_in_place_same_size_edit_of_a_part(tmp_path, sample_docs):
    out = _outdir(tmp_path, sample_docs[:40])
    files, cleaned = data_inputs([out])
    assert cleaned
    key = cache_key([out], files, {"s": 1})
    assert cache_key([out], files, {"s": 1}) == key                    # untouched: the report's hashes count
    size = (out / "part-00000.jsonl").stat().st_size
    _edit_in_place(out / "part-00000.jsonl")
    assert (out / "part-00000.jsonl").stat().st_size == size
    assert cache_key([out], files, {"s": 1}) != key


def test_data_cache_shards_rebuilt_after_an_in_place_same_size_edit_of_a_part(tmp_path, sample_docs, google_tokdir):
    out = _outdir(tmp_path, sample_docs[:40])
    recipe = load_recipe(None, {"data": [str(out)], "tokenizer": str(google_tokdir), "seq_len": 64, "valid_docs": 2,
                                "out_dir": str(tmp_path / "run"), "data_cache": str(tmp_path / "cache")})
    first = prepare_data(recipe, log=lambda m: None).sharddir
    assert prepare_data(recipe, log=lambda m: None).sharddir == first  # reused while nothing changed
    _edit_in_place(out / "part-00000.jsonl")
    logged = []
    second = prepare_data(recipe, log=logged.append).sharddir
    assert second != first and any("shard" in m for m in logged), logged   # rebuilt, not the stale shards
    sha = [[s["sha256"] for s in json.loads((d / "meta.json").read_text(encoding="utf-8"))["sources"]]
           for d in (first, second)]
    assert sha[0][1] == sha[1][1] and sha[0][0] != sha[1][0]            # the new shards hold the edited part
    assert sha[1][0] == hashlib.sha256((out / "part-00000.jsonl").read_bytes()).hexdigest()
