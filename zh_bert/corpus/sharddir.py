"""The SHARDDIR on-disk format: file names, version, dtypes and meta.json, shared by the writer
(`zh_bert.corpus.shard`) and the readers (`zh_bert.train.data`), so neither side imports the other.

SHARDDIR layout (written by `zh-bert shard`, format_version 1). Per split S in {train, valid}, N sequences
of seq_len L, all raw little-endian arrays that `np.memmap` opens directly:

    S.ids.bin         (N, L) uint16 (vocab <= 65535) or uint32 token ids, [PAD] after `lengths`
    S.word_start.bin  (N, L) uint8, 1 where a token begins a jieba word ([CLS]/[SEP]/[PAD] are starts)
    S.lengths.npy     (N,) int32 real tokens per sequence (attention_mask = position < length)
    S.doc_starts.npy  (D,) int64 flat position (row * L + column) of each document's first token
    S.b_start.npy     (N,) int32 position of segment B (token_type_ids 1 from there), only with --pairs
    S.nsp.npy         (N,) int8 next_sentence_label (0 = B follows A in order, 1 = random/swapped)
    unigram_counts.npy (V,) int64 train-split token counts (for `unigram-noise` masking)
    meta.json         format_version, tokenizer_fingerprint, vocab_size, seq_len, pairs, special ids,
                      counts per split, segmenter, sources + input hashes, cache_key

A multi-part SHARDDIR (`zh-bert shard --executor ... --tasks N`) holds these per-split files in
part-00000/ ... part-{N-1}/ (each also with its unigram_counts.npy and part.json), and at the top only
meta.json (written last: "parts" lists each part's counts, "counts" are the totals) and the summed
unigram_counts.npy.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from zh_bert.corpus.corpus_io import JOB_MARKER
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, number, read_json, write_json

FORMAT_VERSION = 1
SPLITS = ("train", "valid")
META = "meta.json"
PART_META = "part.json"
UNIGRAM_COUNTS = "unigram_counts.npy"
_PART = re.compile(r"part-\d{5,}")
SPLIT_FILES = ("ids.bin", "word_start.bin", "lengths.npy", "doc_starts.npy", "b_start.npy", "nsp.npy")


def split_file(split: str, kind: str) -> str:
    """The file name of one split's array: `split_file("train", "ids.bin")` is `train.ids.bin`."""
    return f"{split}.{kind}"


def part_name(rank: int) -> str:
    return f"part-{rank:05d}"


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


def read_meta(sharddir: str | Path) -> dict:
    """SHARDDIR/meta.json, refused with a one-line reason when the directory is missing, unfinished,
    not a SHARDDIR, unreadable, or of another format version."""
    sharddir = Path(sharddir)
    path = sharddir / META
    if not sharddir.is_dir():
        raise ZhBertError(f"{sharddir}: shard directory not found (build it with `zh-bert shard`)")
    if not path.is_file() and (sharddir / JOB_MARKER).is_file():
        raise ZhBertError(f"{sharddir}: unfinished `zh-bert shard --executor` job (no meta.json yet); rerun the "
                          f"same shard command to finish it")
    if not path.is_file():
        raise ZhBertError(f"{sharddir}: not a shard directory (no meta.json); build it with `zh-bert shard`")
    try:
        meta = read_json(path)
    except ZhBertError as e:
        raise ZhBertError(f"{path}: unreadable meta.json ({e})") from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        version = meta.get("format_version") if isinstance(meta, dict) else None
        raise ZhBertError(f"{path}: shard format_version {version!r} is not {FORMAT_VERSION}; re-run `zh-bert shard`")
    check_meta(Record(meta, str(path)))
    return meta


def check_meta(meta: Record) -> None:
    """Every field the loader sizes arrays or opens files by, checked before it does: sizes are whole numbers in
    range, special ids inside the vocabulary, part names entries of the SHARDDIR (never a path out of it)."""
    vocab = meta.integer("vocab_size", lo=1, hi=2**32 - 1)
    meta.integer("seq_len", lo=4, hi=1 << 20)
    if meta.text("ids_dtype") != ids_dtype(vocab).name:
        raise meta.error("ids_dtype", f"expected {ids_dtype(vocab).name} for vocab_size {vocab}")
    for key in ("pad_id", "cls_id", "sep_id", "mask_id", "unk_id"):
        meta.integer(key, lo=0, hi=vocab - 1)
    for i, v in enumerate(meta.list("special_ids")):
        number(v, f"{meta.where}: special_ids[{i}]", 0, vocab - 1, integer=True)
    _check_counts(meta.record("counts"))
    for part in meta.records("parts", []):
        if not _PART.fullmatch(part.name("name")):
            raise part.error("name", f"expected part-NNNNN, got {part.raw('name')!r}")
        _check_counts(part.record("counts"))


def _check_counts(counts: Record) -> None:
    for split in SPLITS:
        c = counts.record(split)
        c.integer("sequences", lo=0, hi=2**40)
        c.integer("documents", lo=0, hi=2**40)


def write_meta(folder: Path, meta: dict) -> None:
    """FOLDER/meta.json, under a temp name renamed when complete: written last, its presence says the
    SHARDDIR is complete."""
    write_json(folder / META, meta)
