"""Raw corpus -> clean -> vocab -> shard, cached, so `zh-bert pretrain` goes from text to checkpoint.

Each stage is called as the function behind its command (`clean`, `build_vocab`, `build_shards`) with the
config object its CLI builds, so the one-command path and the step-by-step path validate and behave the
same. Outputs live in a cache dir keyed by a hash of the input bytes and every setting that changes them;
each stage writes its output atomically, so an existing output is a complete one and is reused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from zh_bert.clean import CleanJob, clean
from zh_bert.clean.readers import ReadOptions
from zh_bert.clean.report import read_report
from zh_bert.errors import ZhBertError
from zh_bert.fileio import recover
from zh_bert.shard import ShardConfig, build_shards
from zh_bert.vocab.build import VocabConfig, VocabOptions, build_vocab


@dataclass
class PreparedData:
    sharddir: Path
    tokdir: Path | None          # None: the caller's tokenizer (recipe.tokenizer / init_from) applies
    clean_report: dict | None    # `OUT.report.json` of the clean stage, when it ran here


def is_sharddir(path: str | Path) -> bool:
    return (Path(path) / "meta.json").is_file()


def input_files(paths: list[Path]) -> list[Path]:
    files = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        elif p.is_file():
            files.append(p)
        else:
            raise ZhBertError(f"data: {p} does not exist (expected a SHARDDIR, a corpus file or a directory)")
    return files


def cache_key(paths: list[Path], settings: dict) -> str:
    """sha256 over input file names + bytes and the stage settings: same inputs and settings, same key."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for f in input_files(paths):
        h.update(str(f).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def prepare_data(recipe, log=print) -> PreparedData:
    """SHARDDIR as is, or build one from the raw corpus in `recipe.data` (cached)."""
    paths = [Path(p) for p in recipe.data_paths]
    if len(paths) == 1 and is_sharddir(paths[0]):
        return PreparedData(paths[0], None, None)
    tokenizer = recipe.tokenizer or recipe.init_from   # a given tokenizer is used, not rebuilt
    pairs = recipe.pairs
    settings = {"doc_sep": recipe.doc_sep, "vocab_kind": None if tokenizer else recipe.vocab_kind,
                "vocab_size": None if tokenizer else recipe.vocab_size,
                "tokenizer": str(Path(tokenizer).resolve()) if tokenizer else None,
                "seq_len": recipe.seq_len, "pairs": pairs, "valid_docs": recipe.valid_docs}
    root = Path(recipe.data_cache or Path(recipe.out_dir) / "data") / cache_key(paths, settings)
    docs, tokdir, sharddir = root / "docs.jsonl", root / "tokenizer", root / "shards"
    for d in (tokdir, sharddir):
        recover(d)  # a stage killed while replacing its output: the previous complete one stands
    report = read_report(docs) if docs.is_file() else None  # docs without its own report: incomplete
    if report is None:
        log(f"[data] clean {' '.join(map(str, paths))} -> {docs}")
        report = clean(CleanJob(inputs=[str(p) for p in paths], output=str(docs),
                                read=ReadOptions(doc_sep=recipe.doc_sep)))
    if not tokenizer and not (tokdir / "tokenizer_config.json").is_file():
        log(f"[data] vocab --kind {recipe.vocab_kind} -> {tokdir}")
        build_vocab(VocabConfig(corpus=[str(docs)], output=str(tokdir), quiet=True,
                                options=VocabOptions(kind=recipe.vocab_kind, size=recipe.vocab_size or None)))
    if not is_sharddir(sharddir):
        tok = str(tokenizer or tokdir)
        log(f"[data] shard --tokenizer {tok} --seq-len {recipe.seq_len} -> {sharddir}")
        build_shards(ShardConfig(corpus=[str(docs)], tokenizer=tok, output=str(sharddir), seq_len=recipe.seq_len,
                                 valid_docs=recipe.valid_docs, pairs=pairs))
    return PreparedData(sharddir, None if tokenizer else tokdir, report)
