"""Raw corpus -> clean -> vocab -> shard, cached, so `zh-bert pretrain` goes from text to checkpoint.

A recipe's `data:` that already holds cleaned documents (see `is_cleaned_dir`) skips the clean stage:
cleaning a 100 GB `zh-bert clean --executor` OUTDIR a second time on one machine would undo the point of
cleaning it on a cluster.

Each stage is called as the function behind its command (`clean`, `build_vocab`, `build_shards`) with the
config object its CLI builds, so the one-command path and the step-by-step path validate and behave the
same. Outputs live in a cache dir keyed by a hash of the input bytes and every setting that changes them;
each stage writes its output atomically, so an existing output is a complete one and is reused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import DATA_CACHE, parse_json_line, recover
from zh_bert.corpus.clean import CleanJob, clean
from zh_bert.corpus.clean.readers import ReadOptions
from zh_bert.corpus.clean.report import read_report
from zh_bert.corpus.corpus_io import (
    CLEAN_REPORT,
    JOB_MARKER,
    REPORT_NAMES,
    corpus_files,
    iter_lines,
)
from zh_bert.corpus.shard import ShardConfig, build_shards
from zh_bert.corpus.sharddir import META
from zh_bert.corpus.vocab.build import VocabConfig, VocabOptions, build_vocab


@dataclass
class PreparedData:
    sharddir: Path
    tokdir: Path | None          # None: the caller's tokenizer (recipe.tokenizer / init_from) applies
    clean_report: dict | None    # `OUT.report.json` of the clean stage, when it ran here


def is_sharddir(path: str | Path) -> bool:
    return (Path(path) / META).is_file()


CLEANED_PARTS = (".jsonl", ".jsonl.gz")


def _cleaned_line(path: Path) -> bool:
    """Whether the first line of `path` is what `zh-bert clean` writes: {"text": str, "source": str}."""
    first = next(iter_lines(path), (0, ""))[1]
    try:
        obj = parse_json_line(first, path, 1)
    except ZhBertError:
        return False
    return isinstance(obj, dict) and obj.keys() == {"text", "source"} and isinstance(obj["text"], str)


def is_cleaned_dir(path: Path) -> bool:
    """The one rule for `data:`: does this path hold cleaned documents (used as they are) or raw text
    (cleaned first)? Cleaned: a `zh-bert clean` OUTDIR (it has a job marker or report.json; an unfinished
    job is refused), or a directory whose entries are all `*.jsonl` / `*.jsonl.gz` parts (clean reports
    aside) each starting with a {"text", "source"} line, as clean writes them. Anything else (files,
    other directories) is raw text: a raw dump mistaken for cleaned documents would train on uncleaned
    text, while cleaned text mistaken for raw only costs a second, harmless clean."""
    if not path.is_dir():
        return False
    if (path / JOB_MARKER).is_file() or (path / CLEAN_REPORT).is_file():
        corpus_files([path])   # an unfinished job or an OUTDIR without parts: one line, before any work
        return True
    entries = [p for p in path.iterdir() if not p.name.startswith(".") and not p.name.endswith(REPORT_NAMES)]
    if not entries:
        corpus_files([path])   # "holds no corpus parts"
    return all(p.is_file() and p.name.endswith(CLEANED_PARTS) and _cleaned_line(p) for p in entries)


def data_inputs(paths: list[Path]) -> tuple[list[Path], bool]:
    """(the files `data:` reads, whether they are cleaned documents): a cleaned directory's parts, a raw
    directory's files, a file itself. Cleaned and raw inputs in one list are refused: one of them would
    be cleaned and the other not, or both cleaned, silently."""
    files, kinds = [], {}
    for p in paths:
        cleaned = is_cleaned_dir(p)
        if cleaned:
            files += corpus_files([p])
        elif p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        elif p.is_file():
            files.append(p)
        else:
            raise ZhBertError(f"data: {p} does not exist (expected a SHARDDIR, a corpus file or a directory)")
        kinds.setdefault(cleaned, p)
    if len(kinds) == 2:
        other = kinds[False]
        what = ("raw text (a directory that is not a `zh-bert clean` OUTDIR)" if other.is_dir() else
                "a single file (cleaned documents are read only from directories of parts, "
                "e.g. a `zh-bert clean` OUTDIR)")
        raise ZhBertError(f"data: {kinds[True]} holds cleaned documents but {other} is {what}, "
                          f"which would be cleaned first; list only one kind (move {other.name} into a directory of "
                          f"cleaned parts, or `zh-bert clean` it)")
    return files, True in kinds


def outdir_report(paths: list[Path]) -> dict | None:
    """The report.json of a single `zh-bert clean` OUTDIR given as `data:` (what the run card shows), when
    its parts are on disk as it lists them."""
    return read_report(paths[0]) if len(paths) == 1 and paths[0].is_dir() else None


def _report_vouches(outdir: Path, report: dict | None) -> bool:
    """Whether `report` (OUTDIR/report.json) still describes the parts' bytes without reading them: each
    part it lists has its size and was last modified before the report was written. A part edited in
    place at the same size has a newer mtime, so its bytes are hashed again."""
    if report is None or not report.get("output_sha256"):
        return False
    written = (outdir / CLEAN_REPORT).stat().st_mtime_ns
    return all((outdir / part["name"]).stat().st_mtime_ns < written for part in report["parts"])


def cache_key(paths: list[Path], files: list[Path], settings: dict) -> str:
    """sha256 over the inputs and the stage settings: same inputs and settings, same key. A clean OUTDIR
    whose report still vouches for its parts (`_report_vouches`: sizes as listed, none modified since)
    counts by the parts' sha256 the report lists (no pass over a 100 GB corpus at every start); any other
    file by its name and bytes (an edited part is another key)."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    hashed = set()
    for p in paths:
        report = read_report(p) if p.is_dir() else None
        if _report_vouches(p, report):
            h.update(f"{p.resolve()}\0{report['output_sha256']}\0".encode())
            hashed |= {(p / part["name"]).resolve() for part in report["parts"]}
    for f in files:
        if f.resolve() in hashed:
            continue
        h.update(str(f).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


# the stage flags a recipe sets through its own keys: a stage's error names the key the user wrote
RECIPE_KEY_OF_FLAG = {"--valid-docs": "valid_docs", "--seq-len": "seq_len", "--doc-sep": "doc_sep",
                      "--size": "vocab_size", "--kind": "vocab_kind"}


@contextlib.contextmanager
def _in_recipe_terms():
    """Run a stage for a recipe: its one-line errors name the recipe keys (valid_docs), not the stage's CLI
    flags (--valid-docs) that the user of `pretrain` never typed."""
    try:
        yield
    except ZhBertError as e:
        msg = str(e)
        for flag, key in RECIPE_KEY_OF_FLAG.items():
            msg = re.sub(rf"(?<![\w-]){flag}(?![\w-])", key, msg)
        if msg == str(e):
            raise
        raise ZhBertError(msg) from None


def prepare_data(recipe, log=print) -> PreparedData:
    """SHARDDIR as is, or build one from the corpus in `recipe.data` (cached): raw text is cleaned first,
    cleaned documents (`is_cleaned_dir`) go straight to vocab and shard; stage errors name recipe keys."""
    with _in_recipe_terms():
        return _shards_for(recipe, log)


def _shards_for(recipe, log) -> PreparedData:
    paths = [Path(p) for p in recipe.data_paths]
    if len(paths) == 1 and is_sharddir(paths[0]):
        return PreparedData(paths[0], None, None)
    files, cleaned = data_inputs(paths)
    tokenizer = recipe.tokenizer or recipe.init_from   # a given tokenizer is used, not rebuilt
    pairs = recipe.pairs
    settings = {"doc_sep": recipe.doc_sep, "vocab_kind": None if tokenizer else recipe.vocab_kind,
                "vocab_size": None if tokenizer else recipe.vocab_size,
                "tokenizer": str(Path(tokenizer).resolve()) if tokenizer else None,
                "seq_len": recipe.seq_len, "pairs": pairs, "valid_docs": recipe.valid_docs}
    if cleaned:
        settings["cleaned_input"] = True   # no docs.jsonl in this cache entry
    root = Path(recipe.data_cache or Path(recipe.out_dir) / DATA_CACHE) / cache_key(paths, files, settings)
    tokdir, sharddir = root / "tokenizer", root / "shards"
    for d in (tokdir, sharddir):
        recover(d)  # a stage killed while replacing its output: the previous complete one stands
    if cleaned:
        log(f"[data] {' '.join(map(str, paths))}: cleaned documents, no clean stage")
        report, corpus = outdir_report(paths), [str(f) for f in files]
    else:
        docs = root / "docs.jsonl"
        report = read_report(docs) if docs.is_file() else None  # docs without its own report: incomplete
        if report is None:
            log(f"[data] clean {' '.join(map(str, paths))} -> {docs}")
            report = clean(CleanJob(inputs=[str(p) for p in paths], output=str(docs),
                                    read=ReadOptions(doc_sep=recipe.doc_sep)))
        corpus = [str(docs)]
    if not tokenizer and not (tokdir / "tokenizer_config.json").is_file():
        log(f"[data] vocab --kind {recipe.vocab_kind} -> {tokdir}")
        build_vocab(VocabConfig(corpus=corpus, output=str(tokdir), quiet=True,
                                options=VocabOptions(kind=recipe.vocab_kind, size=recipe.vocab_size or None)))
    if not is_sharddir(sharddir):
        tok = str(tokenizer or tokdir)
        log(f"[data] shard --tokenizer {tok} --seq-len {recipe.seq_len} -> {sharddir}")
        build_shards(ShardConfig(corpus=corpus, tokenizer=tok, output=str(sharddir), seq_len=recipe.seq_len,
                                 valid_docs=recipe.valid_docs, pairs=pairs))
    return PreparedData(sharddir, None if tokenizer else tokdir, report)
