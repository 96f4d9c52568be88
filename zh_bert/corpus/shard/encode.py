"""Text -> token ids with jieba word starts, and rows: RoBERTa full-sentence packing and BERT segment pairs.

Speed comes from not calling the tokenizer on Chinese characters. For BERT-style tokenizers (BertNormalizer
with handle_chinese_chars + BertPreTokenizer: Google's vocab, char vocabs, WordPiece) every CJK character
and punctuation mark is its own pre-token, so its id never depends on context: `char_lut` asks the real
tokenizer once for all of them and the shard stage maps code points -> ids with one numpy lookup. Only the
runs in between (Latin, digits) go through the tokenizer. Other tokenizers (SentencePiece, word vocabs)
take the tokenizer for everything. Either way ids equal the tokenizer's with split_special_tokens=True
(text that happens to contain "[MASK]" stays text), which `TextEncoder.self_check` verifies on the corpus
before sharding.

Pure pieces, reusable elsewhere (e.g. `zh-bert eval mlm` on held-out text): `TextEncoder.encode`,
`pack_sequences`, `build_pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import parse_json
from zh_bert.core.text import BERT_CJK_RANGES, is_bert_punct, sentence_end_offsets
from zh_bert.corpus.segment import Segmenter, token_word_starts

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
    spec = parse_json(backend.to_str(), "the tokenizer's tokenizer.json")
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
