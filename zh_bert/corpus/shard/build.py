"""The in-process shard build: read corpus lines in fixed chunks, encode them in a process pool, pack them
into SHARDDIR's per-split files. The datatrove path (`zh_bert.corpus.shard.parallel`) runs the same chunk
encoder and the same `SplitWriter` once per task, so both paths make the same rows from the same lines."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Literal, Optional

import numpy as np

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    atomic_dir,
    atomic_write,
    claim_dir,
    open_for_write,
    read_json,
    read_object,
    recover,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.clean.report import file_digest, read_report
from zh_bert.corpus.corpus_io import (
    JOB_MARKER,
    corpus_files,
    document_text,
    iter_lines,
    line_number,
)
from zh_bert.corpus.segment import (
    DEFAULT_SEGMENTER,
    SEGMENTERS,
    Segmenter,
    SegmenterName,
    check_segmenter,
)
from zh_bert.corpus.shard.encode import Packer, Specials, TextEncoder, build_pairs
from zh_bert.corpus.sharddir import (
    FORMAT_VERSION,
    META,
    SPLIT_FILES,
    SPLITS,
    UNIGRAM_COUNTS,
    ids_dtype,
    split_file,
    write_meta,
)
from zh_bert.corpus.similar_words import TABLE_FILE as SIMILAR_WORDS_FILE
from zh_bert.corpus.tokenizer_files import load_tokenizer, tokenizer_fingerprint

CHUNK_CHARS = 1_000_000  # work unit (~3 MB of Chinese); fixed, so the output is the same for any --workers
MIN_SEQ_LEN = 8
DEFAULT_MAX_POSITIONS = 512
COMMAND = "zh-bert shard"


# ---------------------------------------------------------------------------------------------------
# reading corpora, workers
# ---------------------------------------------------------------------------------------------------
Chunk = tuple[int, str, list[tuple[int, str]], int]  # (chunk index, path, numbered lines, first doc index)
Lines = Iterator[tuple[int, str]]


def chunk_lines(sources: Iterable[tuple[str, Lines]], first_idx: int = 0) -> Iterator[Chunk]:
    """The non-blank lines of every (path, lines) source (each line one document) in pieces of about
    CHUNK_CHARS characters; a piece never spans two sources."""
    idx, doc = first_idx, 0
    for path, numbered in sources:
        lines, size = [], 0
        for n, line in numbered:
            lines.append((n, line))
            size += len(line) + 1
            if size >= CHUNK_CHARS:
                yield idx, str(path), lines, doc
                idx, doc, lines, size = idx + 1, doc + len(lines), [], 0
        if lines:
            yield idx, str(path), lines, doc
            idx, doc = idx + 1, doc + len(lines)


def iter_chunks(paths: list[Path]) -> Iterator[Chunk]:
    return chunk_lines((p, iter_lines(p)) for p in paths)


def parse_docs(path: str, lines: list[tuple[int, str]]) -> list[str]:
    """Texts of numbered `zh-bert clean` JSONL lines (a broken line is a `path:line:` error). A number
    <= 0 is minus the line's byte offset: a reader that starts mid-file knows no line numbers, so the
    number is counted only for a line that is reported."""
    texts = []
    for n, line in lines:
        try:
            texts.append(document_text(line, path, n))
        except ZhBertError:
            if n > 0:
                raise
            document_text(line, path, line_number(path, -n))   # raises again, naming the line
            raise
    return texts


def valid_by_hash(texts: list[str], seed: int, fraction: float) -> np.ndarray:
    """Which documents are held out: those whose keyed text hash falls under `fraction`. A document's
    split depends on its text and the seed only (not on its position, the chunking or the task count),
    and identical texts always land in the same split."""
    limit, key = int(fraction * 2**64), str(seed).encode()
    return np.fromiter((int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8, key=key).digest(),
                                       "little") < limit for t in texts), dtype=bool, count=len(texts))


_WORK: dict = {}  # per worker process: the encoder and settings (set once by the pool initializer)


def _set_worker_encoder(encoder: TextEncoder, settings: dict, valid: np.ndarray | None) -> None:
    _WORK.update(encoder=encoder, settings=settings, valid=valid)


def process_chunk(item: Chunk) -> dict:
    """One chunk of lines -> per split: packed-ready tokens (or finished pairs) + train unigram counts."""
    idx, path, lines, doc0 = item
    enc_, st = _WORK["encoder"], _WORK["settings"]
    try:
        texts = parse_docs(path, lines)
    except ZhBertError as e:
        return {"error": str(e)}
    enc = enc_.encode(texts, sentences=bool(st["pairs"]))
    if st.get("valid_fraction") is not None:
        is_valid = valid_by_hash(texts, st["seed"], st["valid_fraction"])
    else:
        is_valid = np.isin(np.arange(doc0, doc0 + len(texts)), _WORK["valid"])
    out = {"chars": enc.chars, "bytes": sum(len(t.encode("utf-8")) for t in texts), "docs": len(texts),
           "valid_docs": int(is_valid.sum())}
    sp = Specials(**st["specials"])
    doc_lens = np.diff(enc.doc_tok)
    for split, sel in (("train", ~is_valid), ("valid", is_valid)):
        docs = np.flatnonzero(sel)
        if st["pairs"]:
            rng = np.random.default_rng([st["seed"], idx, split == "valid"])
            out[split] = build_pairs(enc, docs, st["seq_len"], st["pairs"], sp, rng)
        else:
            tok_sel = np.repeat(sel, doc_lens)   # ids travel back in the shard dtype: 4x less to pickle
            out[split] = {"ids": enc.ids[tok_sel].astype(ids_dtype(st["vocab_size"])), "ws": enc.word_start[tok_sel],
                          "doc_lens": doc_lens[sel]}
    train_ids = enc.ids[np.repeat(~is_valid, doc_lens)]
    out["unigram"] = np.bincount(train_ids, minlength=st["vocab_size"])
    return out


def _map_chunks(chunks: Iterator[Chunk], workers: int, encoder: TextEncoder, settings: dict,
                valid: np.ndarray | None) -> Iterator[dict]:
    """`process_chunk` over every chunk, in order, in `workers` processes (fork: the encoder is shared)."""
    if workers == 1:
        _set_worker_encoder(encoder, settings, valid)
        yield from map(process_chunk, chunks)
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    pool = mp.get_context("fork").Pool(workers, _set_worker_encoder, (encoder, settings, valid))
    try:
        yield from pool.imap(process_chunk, chunks)
    finally:
        pool.terminate()
        pool.join()


# ---------------------------------------------------------------------------------------------------
# writing SHARDDIR
# ---------------------------------------------------------------------------------------------------
class SplitWriter:
    def __init__(self, tmp: Path, split: str, seq_len: int, dtype: np.dtype, pairs: str | None, sp: Specials):
        self.tmp, self.split, self.seq_len, self.dtype, self.pairs = tmp, split, seq_len, dtype, pairs
        self.f_ids = open_for_write(tmp / split_file(split, "ids.bin"))
        self.f_ws = open_for_write(tmp / split_file(split, "word_start.bin"))
        self.lengths, self.b_start, self.nsp, self.doc_starts = [], [], [], []
        self.rows = 0
        self.packer = None if pairs else Packer(seq_len, sp, self.write)

    def write(self, ids, ws, lengths, b_start, nsp):
        write_array(self.f_ids, ids.astype(self.dtype))
        write_array(self.f_ws, ws.astype(np.uint8))
        self.lengths.append(lengths)
        if b_start is not None:
            self.b_start.append(b_start), self.nsp.append(nsp)
        self.rows += len(ids)

    def add(self, part: dict):
        if self.packer:
            self.packer.add(part["ids"], part["ws"], part["doc_lens"])
        elif len(part["ids"]):
            self.doc_starts.append((self.rows + part["doc_first_row"]) * self.seq_len + 1)
            self.write(part["ids"], part["word_start"], part["lengths"], part["b_start"], part["nsp"])

    def finish(self) -> dict:
        if self.packer:
            self.doc_starts = [self.packer.finish()]
        self.f_ids.close(), self.f_ws.close()
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        lengths = cat(self.lengths, np.int32)
        save_npy(self.tmp / split_file(self.split, "lengths.npy"), lengths)
        doc_starts = cat(self.doc_starts, np.int64)
        save_npy(self.tmp / split_file(self.split, "doc_starts.npy"), doc_starts)
        if self.pairs:
            save_npy(self.tmp / split_file(self.split, "b_start.npy"), cat(self.b_start, np.int32))
            save_npy(self.tmp / split_file(self.split, "nsp.npy"), cat(self.nsp, np.int8))
        return {"documents": int(len(doc_starts)), "sequences": int(self.rows), "tokens": int(lengths.sum())}


    def abort(self) -> None:
        """Close the files after a failure: a buffer that cannot be flushed (full disk) is dropped here, not
        reported again as 'Exception ignored' when the file object is collected."""
        for f in (self.f_ids, self.f_ws):
            try:
                f.close()
            except OSError:
                pass


def write_array(f, a: np.ndarray) -> None:
    """`a`'s bytes through Python's file write. numpy's `tofile` (and `np.save` to a file) reports a full
    disk as `OSError('N requested and M written')` without an errno, which no disk-error path can tell from a
    bug; Python's write raises OSError(ENOSPC), which `atomic_dir` turns into the one-line disk error."""
    f.write(np.ascontiguousarray(a).data)


def write_npy(f, a: np.ndarray) -> None:
    """`np.save(f, a)`, byte for byte, written by `write_array` (a full disk is an ENOSPC OSError)."""
    a = np.ascontiguousarray(a)
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(a))
    write_array(f, a)


def save_npy(path: Path, a: np.ndarray) -> None:
    with atomic_write(path, "wb") as f:
        write_npy(f, a)


def file_sha256(path: Path) -> str:
    return file_digest(path)[1]


# ---------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------
@dataclass
class ShardConfig:
    """`zh-bert shard CORPUS... --tokenizer TOKDIR -o SHARDDIR [options]` as one value:
    `zh_bert.corpus.shard.build_shards(ShardConfig(...))`."""
    corpus: list[str] = option(positional=True, metavar="CORPUS", help="`zh-bert clean` output: .jsonl files "
                               "(.jsonl.gz too) or directories of such parts")
    tokenizer: str = option(metavar="TOKDIR", help="tokenizer dir from `zh-bert vocab`")
    output: str = option(flags=("-o",), metavar="SHARDDIR", help="output shard dir")
    seq_len: int = option(128, help="tokens per sequence incl. [CLS]/[SEP]")
    max_positions: int = option(DEFAULT_MAX_POSITIONS,
                                help="the model's max_position_embeddings; --seq-len may not exceed it")
    valid_docs: Optional[int] = option(None, help="documents held out for validation (default: 1%% of documents, "
                                       "at most 1000)")
    valid_fraction: Optional[float] = option(None, metavar="F", help="instead of --valid-docs: hold out the "
                                             "documents whose text hash falls under F (the same documents for any "
                                             "--tasks); the default with --executor, at 0.01")
    pairs: Optional[Literal["nsp", "sop"]] = option(None, help="build [CLS] A [SEP] B [SEP] pairs for "
                                                     "next-sentence / sentence-order prediction")
    segmenter: SegmenterName = option(DEFAULT_SEGMENTER, help=f"word boundaries: {'|'.join(SEGMENTERS)}")
    user_dict: Optional[str] = option(None, metavar="FILE", help="jieba user dictionary (word [freq] [tag])")
    workers: Optional[int] = option_of(Shared, "workers", default=min(4, os.cpu_count() or 1), help="worker processes (with --executor: tasks run at once on this machine)")
    seed: int = option_of(Shared, "seed", default=0, help="validation split and pair sampling")
    slow: bool = option(False, help="tokenize everything with the tokenizer (no char lookup)")

    def __post_init__(self):
        if self.seq_len < MIN_SEQ_LEN:
            raise ZhBertError(f"--seq-len {self.seq_len} is too short: at least {MIN_SEQ_LEN} tokens")
        if self.seq_len > self.max_positions:
            raise ZhBertError(f"--seq-len {self.seq_len} is longer than the model's positions "
                              f"(--max-positions {self.max_positions})")
        if self.workers < 1:
            raise ZhBertError(f"--workers must be >= 1, got {self.workers}")
        if self.pairs not in (None, "nsp", "sop"):
            raise ZhBertError(f"--pairs must be nsp or sop, got '{self.pairs}'")
        if self.valid_docs is not None and self.valid_docs < 0:
            raise ZhBertError(f"--valid-docs must be >= 0, got {self.valid_docs}")
        if self.valid_fraction is not None and not 0 <= self.valid_fraction < 1:
            raise ZhBertError(f"--valid-fraction must be in [0, 1), got {self.valid_fraction}")
        if self.valid_docs is not None and self.valid_fraction is not None:
            raise ZhBertError("--valid-docs and --valid-fraction both choose the validation split: give one")
        check_segmenter(self.segmenter)


def _count_docs(paths: list[Path]) -> int:
    """Documents (non-blank lines) in `paths`; also proves every file is there and is UTF-8 throughout."""
    check_files(paths)
    n_docs = sum(1 for p in paths for _ in iter_lines(p))
    if n_docs == 0:
        raise ZhBertError(f"empty corpus: no documents in {', '.join(map(str, paths))}")
    return n_docs


def check_files(paths: list[Path]) -> None:
    for p in paths:
        if not p.is_file():
            raise ZhBertError(f"{p}: corpus file not found")


def tokenizer_info(tokdir: str):
    """(tokenizer, what meta.json records about it, ids whose unigram count is zeroed). A tokenizer
    without cls/sep/pad/mask cannot make shards."""
    tok = load_tokenizer(tokdir)
    sp_ids = {k: getattr(tok, f"{k}_token_id") for k in ("cls", "sep", "pad", "mask", "unk")}
    missing = [k for k, v in sp_ids.items() if v is None and k != "unk"]
    if missing:
        raise ZhBertError(f"{tokdir}: tokenizer has no {', '.join(m + '_token' for m in missing)}")
    kind_file = Path(tokdir) / "zh_bert_vocab.json"
    info = {"tokenizer": str(Path(tokdir).resolve()), "tokenizer_fingerprint": tokenizer_fingerprint(tok),
            "tokenizer_kind": read_object(kind_file).text("kind", None, max_len=64) if kind_file.is_file() else None,
            "vocab_size": len(tok), "ids_dtype": ids_dtype(len(tok)).name,
            "pad_id": sp_ids["pad"], "cls_id": sp_ids["cls"], "sep_id": sp_ids["sep"], "mask_id": sp_ids["mask"],
            "unk_id": sp_ids["unk"], "special_ids": sorted(int(i) for i in tok.all_special_ids)}
    zero_ids = sorted({int(i) for i in sp_ids.values() if i is not None} | {int(i) for i in tok.all_special_ids})
    return tok, info, zero_ids


def specials(info: dict) -> Specials:
    return Specials(cls=info["cls_id"], sep=info["sep_id"], pad=info["pad_id"])


def _cache_key(cfg: ShardConfig, hashes: list[str], fingerprint: str) -> str:
    """Same inputs, tokenizer and settings -> same key: a rerun with the same key has nothing to do."""
    settings = {"format_version": FORMAT_VERSION, "inputs": hashes, "tokenizer": fingerprint,
                "seq_len": cfg.seq_len, "pairs": cfg.pairs, "segmenter": cfg.segmenter,
                "user_dict": file_sha256(Path(cfg.user_dict)) if cfg.user_dict else None,
                "valid_docs": cfg.valid_docs, "seed": cfg.seed, "slow": cfg.slow}
    if cfg.valid_fraction is not None:
        settings["valid_fraction"] = cfg.valid_fraction
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


# Every file `build_in_process` writes (and the similar-word table `masking: correction` caches beside them):
# a rebuild replaces a dir holding these and nothing else.
SHARD_FILES = frozenset({META, UNIGRAM_COUNTS, SIMILAR_WORDS_FILE}
                        | {split_file(s, f) for s in SPLITS for f in SPLIT_FILES})


# What `zh-bert shard --executor` writes at the top of a multi-part SHARDDIR (besides its `.zh-bert` state).
PARTS_OWNED = re.compile(r"\.?(part-\d{5}|meta\.json|unigram_counts\.npy)(\.(tmp|old)-.*)?")


def owned_by_shard_job(p: Path) -> bool:
    return not p.is_symlink() and (p.name in SHARD_FILES or PARTS_OWNED.fullmatch(p.name) is not None)


def written_by_shard_job(out: Path) -> bool:
    """`out` is a multi-part SHARDDIR (or an unfinished one) that `zh-bert shard --executor` owns."""
    marker = read_json(out / JOB_MARKER, default=None)
    return isinstance(marker, dict) and marker.get("command") == COMMAND


def _shard_entry(name: str, is_dir: bool) -> bool:
    """An entry of a SHARDDIR written before manifests: a one-part dir's files, or a multi-part job's."""
    return (not is_dir and name in SHARD_FILES) or name == ".zh-bert" or PARTS_OWNED.fullmatch(name) is not None


def shard_inputs(cfg: ShardConfig) -> list[str]:
    """What a SHARDDIR must never be, hold or lie inside: the corpus, the tokenizer, the user dictionary."""
    return [*cfg.corpus, cfg.tokenizer, cfg.user_dict or ""]


def claim_output(out: Path, cfg: ShardConfig) -> None:
    """Before any work: leftovers of an interrupted earlier build are recovered, then `out` is claimed
    through the ownership layer: new or empty, or a shard dir this command wrote (every entry one of its
    files, and its meta.json or a shard job's marker present); anything else is refused in one line."""
    recover(out)
    if os.path.lexists(out) and (not out.is_dir() or out.is_symlink()):
        raise ZhBertError(f"-o {out}: exists and is not a shard directory; refusing to overwrite it")
    claim_dir(out, inputs=shard_inputs(cfg), legacy=_shard_entry,
              proof=lambda p: (p / META).is_file() or written_by_shard_job(p), what="a shard directory")


def _up_to_date(out: Path, cache_key: str) -> bool:
    """True when `out` (claimed: `claim_output`) holds shards with this cache key; a multi-part SHARDDIR of
    a shard job is replaced whole by an in-process build."""
    if written_by_shard_job(out) or not (out / META).is_file():
        return False
    old = read_json(out / META, default={})
    return isinstance(old, dict) and old.get("cache_key") == cache_key


def sample_texts(paths: list[Path]) -> list[str]:
    """The corpus's first documents (at most 100, all in its first chunk): what the char lookup is checked on."""
    _, path, lines, _ = next(iter_chunks(paths), (0, "", [], 0))
    return parse_docs(path, lines[:100])


def make_encoder(tok, cfg: ShardConfig, sample: list[str]) -> TextEncoder:
    """The encoder, with the character lookup only if it reproduces the tokenizer on `sample` (the corpus's
    first documents)."""
    encoder = TextEncoder(tok, Segmenter(cfg.segmenter, cfg.user_dict), fast=not cfg.slow)
    if encoder.fast and not encoder.self_check(sample):
        print("zh-bert shard: warning: character lookup disagrees with the tokenizer; using the tokenizer "
              "for everything (slower)", file=sys.stderr)
        encoder.lut = None
    return encoder


def write_splits(tmp: Path, cfg: ShardConfig, info: dict, chunks: Iterator[Chunk], encoder: TextEncoder,
                 valid: np.ndarray | None, workers: int) -> tuple[dict, np.ndarray, dict]:
    """Encode and pack every chunk into tmp/{train,valid}.*; (counts per split, train unigram, text totals).
    `valid`: indices of held-out documents, or None for the hash split (`cfg.valid_fraction`)."""
    vocab_size, sp = info["vocab_size"], specials(info)
    settings = {"pairs": cfg.pairs, "seq_len": cfg.seq_len, "seed": cfg.seed, "vocab_size": vocab_size,
                "specials": {"cls": sp.cls, "sep": sp.sep, "pad": sp.pad}, "valid_fraction": cfg.valid_fraction}
    dtype = ids_dtype(vocab_size)
    writers = {s: SplitWriter(tmp, s, cfg.seq_len, dtype, cfg.pairs, sp) for s in SPLITS}
    totals = {"chars": 0, "bytes": 0, "docs": 0, "valid_docs": 0}
    unigram = np.zeros(vocab_size, dtype=np.int64)
    try:
        for res in _map_chunks(chunks, workers, encoder, settings, valid):
            if "error" in res:
                raise ZhBertError(res["error"])
            for s in SPLITS:
                writers[s].add(res[s])
            unigram += res["unigram"]
            for k in totals:
                totals[k] += res[k]
        return {s: w.finish() for s, w in writers.items()}, unigram, totals
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


def check_not_empty(counts: dict, cfg: ShardConfig, where: str) -> None:
    if counts["train"]["sequences"] == 0:
        raise ZhBertError(f"empty corpus: no tokens in {where}"
                          + (" (documents too short for --pairs)" if cfg.pairs else ""))


def shard_meta(cfg: ShardConfig, info: dict, cache_key: str, counts: dict, totals: dict, fast: bool,
               sources: list[dict], build: dict) -> dict:
    """meta.json: what the readers need (dtype, seq_len, special ids, counts) and where the rows came from."""
    return {"format_version": FORMAT_VERSION, "cache_key": cache_key, **info, "seq_len": cfg.seq_len,
            "pairs": cfg.pairs, "counts": counts, "segmenter": cfg.segmenter,
            "user_dict": str(cfg.user_dict) if cfg.user_dict else None,
            "valid_docs": int(totals["valid_docs"]), "valid_fraction": cfg.valid_fraction, "seed": cfg.seed,
            "char_lookup": fast, "sources": sources,
            "text": {"documents": totals["docs"], "chars": totals["chars"], "bytes": totals["bytes"]},
            "build": build}


def build_in_process(cfg: ShardConfig) -> Path:
    """Write the shard dir `cfg.output` (atomically) unless it already holds these shards; returns its path."""
    t0 = time.perf_counter()
    out = Path(cfg.output)
    claim_output(out, cfg)
    paths = corpus_files(cfg.corpus)
    n_docs = _count_docs(paths)
    n_valid = cfg.valid_docs if cfg.valid_docs is not None else (min(1000, n_docs // 100) if n_docs >= 100 else 0)
    if n_valid >= n_docs and cfg.valid_fraction is None:
        raise ZhBertError(f"--valid-docs {n_valid} must be in [0, {n_docs}) for {n_docs} documents")
    tok, info, zero_ids = tokenizer_info(cfg.tokenizer)
    hashes = [file_sha256(p) for p in paths]
    cache_key = _cache_key(cfg, hashes, info["tokenizer_fingerprint"])
    if _up_to_date(out, cache_key):
        print(f"zh-bert shard: {out} is up to date (same inputs and settings, cache key {cache_key})")
        return out
    valid = None if cfg.valid_fraction is not None else \
        np.sort(np.random.default_rng([cfg.seed, 1]).choice(n_docs, size=n_valid, replace=False))
    encoder = make_encoder(tok, cfg, sample_texts(paths))
    with atomic_dir(out, overwrite=True, legacy=_shard_entry) as tmp:
        counts, unigram, totals = write_splits(tmp, cfg, info, iter_chunks(paths), encoder, valid, cfg.workers)
        check_not_empty(counts, cfg, ", ".join(map(str, paths)))
        unigram[zero_ids] = 0
        save_npy(tmp / UNIGRAM_COUNTS, unigram)
        wall = time.perf_counter() - t0
        sources = [{"path": str(p), "sha256": h, "clean_report": read_report(p, h)} for p, h in zip(paths, hashes)]
        build = {"workers": cfg.workers, "wall_clock_s": round(wall, 3),
                 "mb_per_s": round(totals["bytes"] / 1e6 / max(wall, 1e-9), 2)}
        meta = shard_meta(cfg, info, cache_key, counts, totals, encoder.fast, sources, build)
        write_meta(tmp, meta)
    print(f"zh-bert shard: {out}: {summary(counts)}; {totals['bytes'] / 1e6:.1f} MB of text in {wall:.1f} s "
          f"({build['mb_per_s']} MB/s, {cfg.workers} workers, segmenter {cfg.segmenter})")
    return out


def summary(c: dict) -> str:
    return (f"train {c['train']['sequences']} sequences ({c['train']['documents']} docs, {c['train']['tokens']} "
            f"tokens), valid {c['valid']['sequences']} sequences ({c['valid']['documents']} docs)")
