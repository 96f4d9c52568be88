"""`zh-bert shard`: cleaned documents + tokenizer -> packed, memory-mappable token shards (see data.py).

Speed comes from not calling the tokenizer on Chinese characters. For BERT-style tokenizers (BertNormalizer
with handle_chinese_chars + BertPreTokenizer: Google's vocab, char vocabs, WordPiece) every CJK character
and punctuation mark is its own pre-token, so its id never depends on context: `char_lut` asks the real
tokenizer once for all of them and the shard stage maps code points -> ids with one numpy lookup. Only the
runs in between (Latin, digits) go through the tokenizer. Other tokenizers (SentencePiece, word vocabs)
take the tokenizer for everything. Either way ids equal the tokenizer's with split_special_tokens=True
(text that happens to contain "[MASK]" stays text), which `TextEncoder.self_check` verifies on the corpus
before sharding.

Pure pieces reusable elsewhere (e.g. `zh-bert eval mlm` on held-out text): `TextEncoder.encode`,
`pack_sequences`, `build_pairs`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Iterator, Literal, Optional

import numpy as np

from zh_bert.clean.report import file_digest, read_report
from zh_bert.config import build_parser as _build_parser
from zh_bert.config import config_from_args, option
from zh_bert.corpus_io import document_text, iter_lines
from zh_bert.data import FORMAT_VERSION, ids_dtype
from zh_bert.errors import ZhBertError
from zh_bert.fileio import atomic_dir, check_replaceable, recover
from zh_bert.segment import DEFAULT_SEGMENTER, SEGMENTERS, Segmenter, check_segmenter, token_word_starts
from zh_bert.text import BERT_CJK_RANGES, is_bert_punct, sentence_end_offsets
from zh_bert.tokenizer_files import load_tokenizer, tokenizer_fingerprint

CHUNK_CHARS = 1_000_000  # work unit (~3 MB of Chinese); fixed, so the output is the same for any --workers
MIN_SEQ_LEN = 8
DEFAULT_MAX_POSITIONS = 512

# BERT's CJK blocks in the BMP (tokenizers' BertNormalizer.handle_chinese_chars pads these and the
# supplementary-plane extensions; those are rare, so they take the tokenizer path instead of the table).
_BERT_CJK_BMP = tuple((a, b) for a, b in BERT_CJK_RANGES if b < 0x10000)
_WHITESPACE = " \t\n\r\u3000"


# ---------------------------------------------------------------------------------------------------
# text -> ids + word starts
# ---------------------------------------------------------------------------------------------------
def _backend(tok):
    """A private copy of the tokenizer's `tokenizers.Tokenizer`, splitting special-token text."""
    from tokenizers import Tokenizer

    bt = getattr(tok, "backend_tokenizer", None)
    if bt is None:
        raise ZhBertError(f"tokenizer {getattr(tok, 'name_or_path', '')} has no fast (tokenizers) backend")
    bt = Tokenizer.from_str(bt.to_str())
    bt.no_truncation()
    bt.no_padding()
    bt.encode_special_tokens = True
    return bt


def char_lut(backend) -> np.ndarray | None:
    """code point -> token id (>= 0), -1 (tokenize with the real tokenizer), -2 (whitespace: skip).

    None when the tokenizer is not BERT-style, i.e. CJK characters are not guaranteed to be isolated."""
    spec = json.loads(backend.to_str())
    norm, pre = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if not (norm.get("type") == "BertNormalizer" and norm.get("handle_chinese_chars")
            and pre.get("type") == "BertPreTokenizer"):
        return None
    cands = [cp for a, b in _BERT_CJK_BMP for cp in range(a, b + 1)]
    cands += [cp for cp in range(0x3400) if is_bert_punct(chr(cp))]
    cands += [cp for cp in range(0xA000, 0x10000) if not 0xD800 <= cp <= 0xDFFF and not 0xF900 <= cp <= 0xFAFF
              and is_bert_punct(chr(cp))]
    lut = np.full(0x110000, -1, dtype=np.int32)
    for cp in _WHITESPACE:
        lut[ord(cp)] = -2
    cands = np.asarray(sorted(set(cands)), dtype=np.int64)
    enc = backend.encode(" ".join(map(chr, cands.tolist())), add_special_tokens=False)
    offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
    ids = np.asarray(enc.ids, dtype=np.int64)
    which = offs[:, 0] // 2
    exact = (offs[:, 0] % 2 == 0) & (offs[:, 1] - offs[:, 0] == 1)
    n_tok = np.bincount(which, minlength=len(cands))
    single = exact & (n_tok[which] == 1)
    lut[cands[which[single]]] = ids[single]
    return lut


@dataclass
class Encoded:
    """Tokens of a list of documents, concatenated. Document d is tokens doc_tok[d]:doc_tok[d+1]."""
    ids: np.ndarray        # (T,) int64
    word_start: np.ndarray  # (T,) bool
    doc_tok: np.ndarray    # (D+1,) int64
    sent_tok: np.ndarray   # token indices where a sentence starts (only when sentences=True)
    chars: int


class TextEncoder:
    """Documents -> token ids equal to the tokenizer's, plus per-token jieba word starts."""

    def __init__(self, tok, segmenter: Segmenter, fast: bool = True):
        self.backend = _backend(tok)
        self.segmenter = segmenter
        self.lut = char_lut(self.backend) if fast else None

    @property
    def fast(self) -> bool:
        return self.lut is not None

    def _tokens(self, joined: str, doc_start: np.ndarray, texts: list[str]):
        """(ids, start, end) of all tokens of `joined`, offsets in characters of `joined`."""
        if self.lut is not None:
            codes = self.lut[np.frombuffer(joined.encode("utf-32-le"), dtype="<u4")]
            iso = np.flatnonzero(codes >= 0)
            run = np.diff((codes == -1).view(np.int8), prepend=0, append=0)
            rs, re_ = np.flatnonzero(run == 1), np.flatnonzero(run == -1)
            # All runs in one string, space-separated (whitespace always splits pre-tokens): one call
            # instead of one per run, which would cost more than the rest of this function.
            runs = [joined[s:e] for s, e in zip(rs.tolist(), re_.tolist())]
            enc = self.backend.encode(" ".join(runs), add_special_tokens=False)
            r_ids = np.asarray(enc.ids, dtype=np.int64)
            offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            run_at = np.zeros(len(runs), dtype=np.int64)
            run_at[1:] = np.cumsum(re_ - rs + 1)[:-1]
            k = np.searchsorted(run_at, offs[:, 0], side="right") - 1
            offs = offs + (rs[k] - run_at[k])[:, None] if len(k) else offs
            ids = np.concatenate([codes[iso].astype(np.int64), r_ids])
            start = np.concatenate([iso, offs[:, 0]])
            end = np.concatenate([iso + 1, offs[:, 1]])
            order = np.argsort(start, kind="stable")
            return ids[order], start[order], end[order]
        encs = self.backend.encode_batch(texts, add_special_tokens=False)
        n = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        ids = np.fromiter(chain.from_iterable(e.ids for e in encs), dtype=np.int64, count=int(n.sum()))
        offs = np.fromiter(chain.from_iterable(chain.from_iterable(e.offsets for e in encs)), dtype=np.int64,
                           count=2 * int(n.sum())).reshape(-1, 2) + np.repeat(doc_start[:-1], n)[:, None]
        return ids, offs[:, 0], offs[:, 1]

    def encode(self, texts: list[str], sentences: bool = False) -> Encoded:
        joined = "\n".join(texts)  # a newline is whitespace for both the tokenizer and jieba
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        doc_start = np.zeros(len(texts) + 1, dtype=np.int64)
        doc_start[1:] = np.cumsum(lens + 1)
        ids, start, end = self._tokens(joined, doc_start, texts)
        ws = token_word_starts(self.segmenter.word_start_mask(joined), start, end)
        doc_tok = np.searchsorted(start, doc_start)
        first = doc_tok[:-1][doc_tok[:-1] < len(ids)]
        ws[first] = True
        sent_tok = np.zeros(0, dtype=np.int64)
        if sentences:
            ends = np.asarray(sentence_end_offsets(joined), dtype=np.int64)
            sent_tok = np.unique(np.concatenate([np.searchsorted(start, ends), doc_tok]))
        return Encoded(ids, ws, doc_tok, sent_tok, int(lens.sum()))

    def self_check(self, texts: list[str]) -> bool:
        """True when the fast path gives exactly the tokenizer's ids on `texts`."""
        if self.lut is None or not texts:
            return True
        enc = self.encode(texts)
        ref = self.backend.encode_batch(texts, add_special_tokens=False)
        return all(np.array_equal(enc.ids[enc.doc_tok[d]:enc.doc_tok[d + 1]], r.ids) for d, r in enumerate(ref))


# ---------------------------------------------------------------------------------------------------
# packing (RoBERTa full-sentences) and BERT segment pairs
# ---------------------------------------------------------------------------------------------------
@dataclass
class Specials:
    cls: int
    sep: int
    pad: int


class Packer:
    """Streams documents into full rows `[CLS] ... [SEP]` (documents joined by [SEP]); only the last row
    is padded. Call `add` per batch of documents and `finish` once; rows come out via `emit(rows)`."""

    def __init__(self, seq_len: int, sp: Specials, emit):
        self.L, self.C, self.sp, self.emit = seq_len, seq_len - 2, sp, emit
        self.ids = np.zeros(0, dtype=np.int64)
        self.ws = np.zeros(0, dtype=bool)
        self.stream_pos = 0            # stream index of self.ids[0]
        self.doc_starts: list[np.ndarray] = []
        self.rows = 0

    def _flat(self, s: np.ndarray) -> np.ndarray:
        return (s // self.C) * self.L + s % self.C + 1

    def add(self, ids: np.ndarray, ws: np.ndarray, doc_lens: np.ndarray) -> None:
        doc_lens = doc_lens[doc_lens > 0]
        if not doc_lens.size:
            return
        total = int(doc_lens.sum()) + len(doc_lens)
        sep_at = np.cumsum(doc_lens + 1) - 1
        is_sep = np.zeros(total, dtype=bool)
        is_sep[sep_at] = True
        s_ids = np.empty(total, dtype=np.int64)
        s_ids[~is_sep], s_ids[is_sep] = ids, self.sp.sep
        s_ws = np.ones(total, dtype=bool)
        s_ws[~is_sep] = ws
        base = self.stream_pos + len(self.ids)
        self.doc_starts.append(self._flat(base + sep_at - doc_lens))
        self.ids, self.ws = np.concatenate([self.ids, s_ids]), np.concatenate([self.ws, s_ws])
        n_full = len(self.ids) // self.C
        if n_full:
            self._rows(self.ids[:n_full * self.C].reshape(n_full, self.C),
                       self.ws[:n_full * self.C].reshape(n_full, self.C), np.full(n_full, self.L))
            self.ids, self.ws = self.ids[n_full * self.C:], self.ws[n_full * self.C:]
            self.stream_pos += n_full * self.C

    def _rows(self, content_ids, content_ws, lengths):
        n = len(content_ids)
        ids = np.full((n, self.L), self.sp.pad, dtype=np.int64)
        ws = np.ones((n, self.L), dtype=bool)
        ids[:, 0] = self.sp.cls
        ids[:, 1:1 + content_ids.shape[1]] = content_ids
        ws[:, 1:1 + content_ids.shape[1]] = content_ws
        ids[np.arange(n), lengths - 1] = self.sp.sep
        self.emit(ids, ws, lengths.astype(np.int32), None, None)
        self.rows += n

    def finish(self) -> np.ndarray:
        """Flush the padded last row; returns the flat positions of all document starts."""
        ids, ws = self.ids, self.ws
        if len(ids) and ids[-1] == self.sp.sep:   # no separator after the last document
            ids, ws = ids[:-1], ws[:-1]
        if len(ids):
            pad = self.C - len(ids)
            self._rows(np.pad(ids, (0, pad), constant_values=self.sp.pad)[None],
                       np.pad(ws, (0, pad), constant_values=True)[None], np.array([len(ids) + 2]))
        self.ids = self.ws = np.zeros(0)
        return np.concatenate(self.doc_starts) if self.doc_starts else np.zeros(0, dtype=np.int64)


def pack_sequences(enc: Encoded, seq_len: int, sp: Specials) -> dict:
    """All documents of `enc` packed into rows (in memory): ids, word_start, lengths, doc_starts."""
    out = {"ids": [], "ws": [], "lengths": []}

    def emit(ids, ws, lengths, _b, _nsp):
        out["ids"].append(ids), out["ws"].append(ws), out["lengths"].append(lengths)

    p = Packer(seq_len, sp, emit)
    p.add(enc.ids, enc.word_start, np.diff(enc.doc_tok))
    doc_starts = p.finish()
    if not out["ids"]:
        return {"ids": np.zeros((0, seq_len), np.int64), "word_start": np.zeros((0, seq_len), bool),
                "lengths": np.zeros(0, np.int32), "doc_starts": doc_starts}
    return {"ids": np.concatenate(out["ids"]), "word_start": np.concatenate(out["ws"]),
            "lengths": np.concatenate(out["lengths"]), "doc_starts": doc_starts}


def build_pairs(enc: Encoded, docs: np.ndarray, seq_len: int, kind: str, sp: Specials,
                rng: np.random.Generator) -> dict:
    """BERT-style `[CLS] A [SEP] B [SEP]` pairs from documents `docs` of `enc` (create_pretraining_data.py).

    Sentences are accumulated up to seq_len - 3 tokens and split at a random sentence boundary (a lone
    sentence is split at a random token). Then a fair coin: `nsp` replaces B by text from another random
    document (label 1), `sop` swaps A and B (label 1); label 0 keeps B after A in order. Because every pair
    has both halves before the coin, labels are exactly 50/50 in expectation.
    """
    max_tok = seq_len - 3
    docs = np.asarray([d for d in docs if enc.doc_tok[d + 1] - enc.doc_tok[d] >= 2], dtype=np.int64)
    rows_ids, rows_ws, lengths, b_starts, labels, doc_first = [], [], [], [], [], []

    def sentences(d):
        lo, hi = enc.doc_tok[d], enc.doc_tok[d + 1]
        cuts = enc.sent_tok[(enc.sent_tok > lo) & (enc.sent_tok < hi)]
        bounds = np.concatenate([[lo], cuts, [hi]])
        segs = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            for s in range(int(a), int(b), max_tok):   # split over-long sentences
                segs.append((s, min(int(b), s + max_tok)))
        return segs

    def cat(segs):
        if not segs:
            return np.zeros(0, np.int64), np.zeros(0, bool)
        return (np.concatenate([enc.ids[a:b] for a, b in segs]),
                np.concatenate([enc.word_start[a:b] for a, b in segs]))

    for d in docs.tolist():
        segs = sentences(d)
        first_row = len(rows_ids)
        i, chunk, cur = 0, [], 0
        while i < len(segs):
            chunk.append(segs[i])
            cur += segs[i][1] - segs[i][0]
            if i == len(segs) - 1 or cur >= max_tok:
                a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a_ids, a_ws = cat(chunk[:a_end])
                b_ids, b_ws = cat(chunk[a_end:])
                if not len(b_ids) and len(a_ids) >= 2:  # one sentence: split it at a random token
                    cut = int(rng.integers(1, len(a_ids)))
                    a_ids, b_ids, a_ws, b_ws = a_ids[:cut], a_ids[cut:], a_ws[:cut], a_ws[cut:]
                while len(a_ids) + len(b_ids) > max_tok:         # trim A's front / B's back: A, B stay adjacent
                    if len(a_ids) > len(b_ids):
                        a_ids, a_ws = a_ids[1:], a_ws[1:]
                    else:
                        b_ids, b_ws = b_ids[:-1], b_ws[:-1]
                label = int(rng.random() < 0.5)
                if label and kind == "nsp":
                    i -= len(chunk) - a_end                      # the real B sentences go back in the queue
                    other = int(docs[rng.integers(len(docs))]) if len(docs) > 1 else d
                    if other == d and len(docs) > 1:
                        other = int(docs[(np.searchsorted(docs, d) + 1) % len(docs)])
                    osegs = sentences(other)
                    start = int(rng.integers(len(osegs)))
                    b_ids, b_ws = cat(osegs[start:])
                    b_ids, b_ws = b_ids[:max_tok - len(a_ids)], b_ws[:max_tok - len(a_ids)]
                elif label:                                      # sop: swapped order
                    a_ids, b_ids, a_ws, b_ws = b_ids, a_ids, b_ws, a_ws
                if len(a_ids) and len(b_ids):
                    row = np.full(seq_len, sp.pad, np.int64)
                    rws = np.ones(seq_len, bool)
                    la, lb = len(a_ids), len(b_ids)
                    row[0], row[1:1 + la], row[1 + la] = sp.cls, a_ids, sp.sep
                    row[2 + la:2 + la + lb], row[2 + la + lb] = b_ids, sp.sep
                    rws[1:1 + la], rws[2 + la:2 + la + lb] = a_ws, b_ws
                    rws[1], rws[2 + la] = True, True
                    rows_ids.append(row), rows_ws.append(rws), lengths.append(la + lb + 3)
                    b_starts.append(la + 2), labels.append(label)
                chunk, cur = [], 0
            i += 1
        if len(rows_ids) > first_row:
            doc_first.append(first_row)
    n = len(rows_ids)
    return {"ids": np.stack(rows_ids) if n else np.zeros((0, seq_len), np.int64),
            "word_start": np.stack(rows_ws) if n else np.zeros((0, seq_len), bool),
            "lengths": np.asarray(lengths, np.int32), "b_start": np.asarray(b_starts, np.int32),
            "nsp": np.asarray(labels, np.int8), "doc_first_row": np.asarray(doc_first, np.int64)}


# ---------------------------------------------------------------------------------------------------
# reading corpora, workers
# ---------------------------------------------------------------------------------------------------
Chunk = tuple[int, str, list[tuple[int, str]], int]  # (chunk index, path, numbered lines, first doc index)


def iter_chunks(paths: list[Path]) -> Iterator[Chunk]:
    """The non-blank lines of every file (each one document) in pieces of about CHUNK_CHARS characters."""
    idx, doc = 0, 0
    for path in paths:
        lines, size = [], 0
        for n, line in iter_lines(path):
            lines.append((n, line))
            size += len(line) + 1
            if size >= CHUNK_CHARS:
                yield idx, str(path), lines, doc
                idx, doc, lines, size = idx + 1, doc + len(lines), [], 0
        if lines:
            yield idx, str(path), lines, doc
            idx, doc = idx + 1, doc + len(lines)


def parse_docs(path: str, lines: list[tuple[int, str]]) -> list[str]:
    """Texts of numbered `zh-bert clean` JSONL lines (a broken line is a `path:line:` error)."""
    return [document_text(line, path, n) for n, line in lines]


_WORK: dict = {}  # per worker process: the encoder and settings (set once by the pool initializer)


def _init_worker(encoder: TextEncoder, settings: dict, valid: np.ndarray) -> None:
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
    is_valid = np.isin(np.arange(doc0, doc0 + len(texts)), _WORK["valid"])
    out = {"chars": enc.chars, "bytes": sum(len(t.encode("utf-8")) for t in texts), "docs": len(texts)}
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


def _map_chunks(paths: list[Path], workers: int, encoder: TextEncoder, settings: dict,
                valid: np.ndarray) -> Iterator[dict]:
    """`process_chunk` over every chunk, in order, in `workers` processes (fork: the encoder is shared)."""
    if workers == 1:
        _init_worker(encoder, settings, valid)
        yield from map(process_chunk, iter_chunks(paths))
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    pool = mp.get_context("fork").Pool(workers, _init_worker, (encoder, settings, valid))
    try:
        yield from pool.imap(process_chunk, iter_chunks(paths))
    finally:
        pool.terminate()
        pool.join()


# ---------------------------------------------------------------------------------------------------
# writing SHARDDIR
# ---------------------------------------------------------------------------------------------------
class SplitWriter:
    def __init__(self, tmp: Path, split: str, seq_len: int, dtype: np.dtype, pairs: str | None, sp: Specials):
        self.tmp, self.split, self.seq_len, self.dtype, self.pairs = tmp, split, seq_len, dtype, pairs
        self.f_ids = open(tmp / f"{split}.ids.bin", "wb")
        self.f_ws = open(tmp / f"{split}.word_start.bin", "wb")
        self.lengths, self.b_start, self.nsp, self.doc_starts = [], [], [], []
        self.rows = 0
        self.packer = None if pairs else Packer(seq_len, sp, self.write)

    def write(self, ids, ws, lengths, b_start, nsp):
        ids.astype(self.dtype).tofile(self.f_ids)
        ws.astype(np.uint8).tofile(self.f_ws)
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
        np.save(self.tmp / f"{self.split}.lengths.npy", lengths)
        doc_starts = cat(self.doc_starts, np.int64)
        np.save(self.tmp / f"{self.split}.doc_starts.npy", doc_starts)
        if self.pairs:
            np.save(self.tmp / f"{self.split}.b_start.npy", cat(self.b_start, np.int32))
            np.save(self.tmp / f"{self.split}.nsp.npy", cat(self.nsp, np.int8))
        return {"documents": int(len(doc_starts)), "sequences": int(self.rows), "tokens": int(lengths.sum())}


def file_sha256(path: Path) -> str:
    return file_digest(path)[1]


# ---------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------
@dataclass
class ShardConfig:
    """`zh-bert shard CORPUS.jsonl... --tokenizer TOKDIR -o SHARDDIR [options]` as one value:
    `build_shards(ShardConfig(...))`."""
    corpus: list[str] = option(positional=True, metavar="CORPUS.jsonl", help="`zh-bert clean` output file(s)")
    tokenizer: str = option(metavar="TOKDIR", help="tokenizer dir from `zh-bert vocab`")
    output: str = option(flags=("-o",), metavar="SHARDDIR", help="output shard dir")
    seq_len: int = option(128, help="tokens per sequence incl. [CLS]/[SEP]")
    max_positions: int = option(DEFAULT_MAX_POSITIONS,
                                help="the model's max_position_embeddings; --seq-len may not exceed it")
    valid_docs: Optional[int] = option(None, help="documents held out for validation (default: 1%% of documents, "
                                       "at most 1000)")
    pairs: Optional[Literal["nsp", "sop"]] = option(None, help="build [CLS] A [SEP] B [SEP] pairs for "
                                                     "next-sentence / sentence-order prediction")
    segmenter: str = option(DEFAULT_SEGMENTER, help=f"word boundaries: {'|'.join(SEGMENTERS)}")
    user_dict: Optional[str] = option(None, metavar="FILE", help="jieba user dictionary (word [freq] [tag])")
    workers: int = option(min(4, os.cpu_count() or 1), help="worker processes")
    seed: int = option(0, help="validation split and pair sampling")
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
        check_segmenter(self.segmenter)


def _count_docs(paths: list[Path]) -> int:
    """Documents (non-blank lines) in `paths`; also proves every file is there and is UTF-8 throughout."""
    for p in paths:
        if not p.is_file():
            raise ZhBertError(f"{p}: corpus file not found")
    n_docs = sum(1 for p in paths for _ in iter_lines(p))
    if n_docs == 0:
        raise ZhBertError(f"empty corpus: no documents in {', '.join(map(str, paths))}")
    return n_docs


def _load_tokenizer(tokdir: str):
    """(tokenizer, ids of cls/sep/pad/mask/unk); a tokenizer without cls/sep/pad/mask cannot make shards."""
    tok = load_tokenizer(tokdir)
    sp_ids = {k: getattr(tok, f"{k}_token_id") for k in ("cls", "sep", "pad", "mask", "unk")}
    missing = [k for k, v in sp_ids.items() if v is None and k != "unk"]
    if missing:
        raise ZhBertError(f"{tokdir}: tokenizer has no {', '.join(m + '_token' for m in missing)}")
    return tok, sp_ids


def _cache_key(cfg: ShardConfig, hashes: list[str], fingerprint: str) -> str:
    """Same inputs, tokenizer and settings -> same key: a rerun with the same key has nothing to do."""
    settings = {"format_version": FORMAT_VERSION, "inputs": hashes, "tokenizer": fingerprint,
                "seq_len": cfg.seq_len, "pairs": cfg.pairs, "segmenter": cfg.segmenter,
                "user_dict": file_sha256(Path(cfg.user_dict)) if cfg.user_dict else None,
                "valid_docs": cfg.valid_docs, "seed": cfg.seed, "slow": cfg.slow}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


_SPLIT_FILES = ("ids.bin", "word_start.bin", "lengths.npy", "doc_starts.npy", "b_start.npy", "nsp.npy")
# Every file `build_shards` writes: a rebuild replaces a dir holding these and nothing else.
SHARD_FILES = frozenset({"meta.json", "unigram_counts.npy"} | {f"{s}.{f}" for s in ("train", "valid")
                                                                 for f in _SPLIT_FILES})


def _up_to_date(out: Path, cache_key: str) -> bool:
    """True when `out` holds shards with this cache key. Leftovers of an interrupted earlier build are
    recovered first; an existing output that is not a shard dir this command wrote is refused."""
    recover(out)
    check_replaceable(out, "meta.json", SHARD_FILES.__contains__, "a shard directory")
    if (out / "meta.json").is_file():
        try:
            old = json.loads((out / "meta.json").read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            old = {}
        return old.get("cache_key") == cache_key
    return False


def _encoder(tok, cfg: ShardConfig, paths: list[Path]) -> TextEncoder:
    """The encoder, with the character lookup only if it reproduces the tokenizer on the corpus's first
    documents."""
    encoder = TextEncoder(tok, Segmenter(cfg.segmenter, cfg.user_dict), fast=not cfg.slow)
    if encoder.fast:
        _, path, lines, _ = next(iter_chunks(paths))
        if not encoder.self_check(parse_docs(path, lines[:100])):
            print("zh-bert shard: warning: character lookup disagrees with the tokenizer; using the tokenizer "
                  "for everything (slower)", file=sys.stderr)
            encoder.lut = None
    return encoder


def _write_splits(tmp: Path, cfg: ShardConfig, paths: list[Path], encoder: TextEncoder, sp: Specials,
                  valid: np.ndarray, vocab_size: int) -> tuple[dict, np.ndarray, dict]:
    """Encode and pack every chunk into tmp/{train,valid}.*; (counts per split, train unigram, text totals)."""
    settings = {"pairs": cfg.pairs, "seq_len": cfg.seq_len, "seed": cfg.seed, "vocab_size": vocab_size,
                "specials": {"cls": sp.cls, "sep": sp.sep, "pad": sp.pad}}
    dtype = ids_dtype(vocab_size)
    writers = {s: SplitWriter(tmp, s, cfg.seq_len, dtype, cfg.pairs, sp) for s in ("train", "valid")}
    totals = {"chars": 0, "bytes": 0, "docs": 0}
    unigram = np.zeros(vocab_size, dtype=np.int64)
    for res in _map_chunks(paths, cfg.workers, encoder, settings, valid):
        if "error" in res:
            raise ZhBertError(res["error"])
        for s in ("train", "valid"):
            writers[s].add(res[s])
        unigram += res["unigram"]
        for k in totals:
            totals[k] += res[k]
    counts = {s: w.finish() for s, w in writers.items()}
    if counts["train"]["sequences"] == 0:
        raise ZhBertError(f"empty corpus: no tokens in {', '.join(map(str, paths))}"
                          + (" (documents too short for --pairs)" if cfg.pairs else ""))
    return counts, unigram, totals


def build_shards(cfg: ShardConfig) -> Path:
    """Write the shard dir `cfg.output` (atomically) unless it already holds these shards; returns its path."""
    t0 = time.perf_counter()
    paths = [Path(p) for p in cfg.corpus]
    n_docs = _count_docs(paths)
    n_valid = cfg.valid_docs if cfg.valid_docs is not None else (min(1000, n_docs // 100) if n_docs >= 100 else 0)
    if n_valid >= n_docs:
        raise ZhBertError(f"--valid-docs {n_valid} must be in [0, {n_docs}) for {n_docs} documents")
    tok, sp_ids = _load_tokenizer(cfg.tokenizer)
    fingerprint, vocab_size, out = tokenizer_fingerprint(tok), len(tok), Path(cfg.output)
    hashes = [file_sha256(p) for p in paths]
    cache_key = _cache_key(cfg, hashes, fingerprint)
    if _up_to_date(out, cache_key):
        print(f"zh-bert shard: {out} is up to date (same inputs and settings, cache key {cache_key})")
        return out
    valid = np.sort(np.random.default_rng([cfg.seed, 1]).choice(n_docs, size=n_valid, replace=False))
    encoder = _encoder(tok, cfg, paths)
    sp = Specials(cls=sp_ids["cls"], sep=sp_ids["sep"], pad=sp_ids["pad"])
    with atomic_dir(out, overwrite=True) as tmp:
        counts, unigram, totals = _write_splits(tmp, cfg, paths, encoder, sp, valid, vocab_size)
        unigram[[i for i in sp_ids.values() if i is not None]] = 0
        unigram[list(tok.all_special_ids)] = 0
        np.save(tmp / "unigram_counts.npy", unigram)
        kind_file = Path(cfg.tokenizer) / "zh_bert_vocab.json"
        wall = time.perf_counter() - t0
        meta = {
            "format_version": FORMAT_VERSION, "cache_key": cache_key,
            "tokenizer": str(Path(cfg.tokenizer).resolve()), "tokenizer_fingerprint": fingerprint,
            "tokenizer_kind": (json.loads(kind_file.read_text(encoding="utf-8")).get("kind")
                               if kind_file.is_file() else None),
            "vocab_size": vocab_size, "ids_dtype": ids_dtype(vocab_size).name, "seq_len": cfg.seq_len,
            "pairs": cfg.pairs, "pad_id": sp.pad, "cls_id": sp.cls, "sep_id": sp.sep, "mask_id": sp_ids["mask"],
            "unk_id": sp_ids["unk"], "special_ids": sorted(int(i) for i in tok.all_special_ids),
            "counts": counts, "segmenter": cfg.segmenter,
            "user_dict": str(cfg.user_dict) if cfg.user_dict else None,
            "valid_docs": int(n_valid), "seed": cfg.seed, "char_lookup": encoder.fast,
            "sources": [{"path": str(p), "sha256": h, "clean_report": read_report(p, h)} for p, h in zip(paths, hashes)],
            "text": {"documents": totals["docs"], "chars": totals["chars"], "bytes": totals["bytes"]},
            "build": {"workers": cfg.workers, "wall_clock_s": round(wall, 3),
                      "mb_per_s": round(totals["bytes"] / 1e6 / max(wall, 1e-9), 2)},
        }
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    c = counts
    print(f"zh-bert shard: {out}: train {c['train']['sequences']} sequences ({c['train']['documents']} docs, "
          f"{c['train']['tokens']} tokens), valid {c['valid']['sequences']} sequences "
          f"({c['valid']['documents']} docs); {totals['bytes'] / 1e6:.1f} MB of text in {wall:.1f} s "
          f"({meta['build']['mb_per_s']} MB/s, {cfg.workers} workers, segmenter {cfg.segmenter})")
    return out


def build_parser() -> argparse.ArgumentParser:
    return _build_parser("zh-bert shard", __doc__.split("\n")[0], ShardConfig)


def main(argv: list[str]) -> int:
    build_shards(config_from_args(ShardConfig, build_parser().parse_args(argv)))
    return 0
