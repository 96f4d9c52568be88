"""Similar words for `masking: correction` (MacBERT's "MLM as correction", Cui et al. 2020), learned from
the shard dir's own training text.

MacBERT replaces the words it masks with *similar* words (it used the Synonyms toolkit: word2vec
similarity). Here the similarity comes from word vectors zh-bert learns once per SHARDDIR from its train
split, with numpy and scipy only and nothing downloaded (Levy, Goldberg & Dagan 2015, "Improving
Distributional Similarity with Lessons Learned from Word Embeddings": PPMI with context-distribution
smoothing, then truncated SVD):

1. words = jieba words exactly as ``wwm`` masks them (the shards' word boundaries), each a sequence of
   1..`max_len` token ids; the `MAX_WORDS` most frequent words seen at least `MIN_COUNT` times get vectors;
2. a word-word co-occurrence matrix over a ±`WINDOW`-word window within each sequence;
3. positive PMI with the context counts raised to 0.75; truncated SVD to `DIM` dimensions, vectors U·√S;
4. for every word, the `NEIGHBOURS` nearest words by cosine *among words of the same length in tokens*
   (for a character vocab: the same number of characters), kept if the cosine is at least
   `MIN_SIMILARITY`.

The table is written to SHARDDIR/similar_words.npz (atomically) with a fingerprint of the shard dir's
meta.json and of these settings, so it is built once and rebuilt only when the shards or the settings change.
At masking time it is an array lookup: a word's token ids pack into one int64 key (base vocab_size + 1),
found by binary search in the sorted keys.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, claim_file
from zh_bert.corpus.segment import word_units

TABLE_FILE = "similar_words.npz"
TABLE_FORMAT_VERSION = 1   # of similar_words.npz (a SHARDDIR's own format is sharddir.FORMAT_VERSION)
WINDOW = 2              # context words on each side
MIN_COUNT = 3           # a word needs this many occurrences to get a vector
MAX_WORDS = 50_000      # most frequent words with vectors
DIM = 100               # SVD dimensions (fewer when there are few words)
NEIGHBOURS = 10         # similar words kept per word
MIN_SIMILARITY = 0.3    # cosine; weaker neighbours are dropped
MAX_TOKENS = 20_000_000  # train tokens read (evenly spaced sequences beyond that)
MAX_WORD_LEN = 4        # longest word, in tokens, that can have similar words
MIN_TRAIN_TOKENS = 20_000   # smaller train splits cannot give a table
MIN_TABLE_WORDS = 100       # words with vectors needed for a table
SETTINGS = {"format": TABLE_FORMAT_VERSION, "window": WINDOW, "min_count": MIN_COUNT, "max_words": MAX_WORDS,
            "dim": DIM, "neighbours": NEIGHBOURS, "min_similarity": MIN_SIMILARITY, "max_tokens": MAX_TOKENS,
            "max_word_len": MAX_WORD_LEN, "alpha": 0.75}


@functools.lru_cache(maxsize=8)
def max_word_len(vocab_size: int) -> int:
    """Longest word (tokens) whose key (sum of (id + 1) * (vocab_size + 1)^j) fits in an int64."""
    return max(1, min(MAX_WORD_LEN, int(63 * math.log(2) / math.log(vocab_size + 1))))


def pack_keys(flat: np.ndarray, start: np.ndarray, length: np.ndarray, vocab_size: int) -> np.ndarray:
    """int64 key of each word (token ids flat[start : start + length]); -1 for words too long to have one."""
    W = max_word_len(vocab_size)
    j = np.arange(W)
    idx = np.minimum(start[:, None] + j, max(len(flat) - 1, 0))
    digits = np.where(j < length[:, None], flat[idx] + 1, 0) if len(flat) else np.zeros((len(start), W), np.int64)
    keys = (digits.astype(np.int64, copy=False) * _powers(vocab_size + 1, W)).sum(axis=1)
    keys[length > W] = -1
    return keys


@functools.lru_cache(maxsize=8)
def _powers(base: int, n: int) -> np.ndarray:
    return np.array([base ** j for j in range(n)], dtype=np.int64)


@dataclass
class SimilarWords:
    """The table: `keys` (n,) sorted word keys, `tokens` (n, max_len) their token ids (-1 padded),
    `lengths` (n,), `counts` (n,) occurrences, `neighbours` (n, K) rows of similar words (-1 padded, most
    similar first), `similarity` (n, K) their cosines, `n_neighbours` (n,)."""
    keys: np.ndarray
    tokens: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    neighbours: np.ndarray
    similarity: np.ndarray
    n_neighbours: np.ndarray
    vocab_size: int
    fingerprint: str = ""

    def find(self, flat: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Row of each word (flat[start : start + length]) that has similar words; -1 where none."""
        keys = pack_keys(flat, start, length, self.vocab_size)
        if not len(self.keys):
            return np.full(len(keys), -1, dtype=np.int64)
        row = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        ok = (keys >= 0) & (self.keys[row] == keys) & (self.n_neighbours[row] > 0)
        return np.where(ok, row, -1)

    def pick(self, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One similar word (row) for each row, uniformly among its neighbours: `u` holds one uniform [0, 1)
        draw per row."""
        j = (u * self.n_neighbours[rows]).astype(np.int64)
        return self.neighbours[rows, j]

    def words(self, rows) -> list[list[int]]:
        return [self.tokens[r, :self.lengths[r]].tolist() for r in np.atleast_1d(rows)]

    def coverage(self) -> float:
        """Share of word occurrences (among words with vectors) that have similar words."""
        return float(self.counts[self.n_neighbours > 0].sum() / max(self.counts.sum(), 1))

    def save(self, path: Path) -> None:
        """Atomically: a killed build leaves no half table, a full disk is one line naming the file; an
        existing file is replaced only when it is a table of ours (a shard dir may be the user's)."""
        claim_file(path, ours=_is_table, flag="similar-word table", what="a similar-word table zh-bert wrote")
        with atomic_write(path, "wb") as f:
            np.savez(f, keys=self.keys, tokens=self.tokens, lengths=self.lengths, counts=self.counts,
                     neighbours=self.neighbours, similarity=self.similarity, n_neighbours=self.n_neighbours,
                     vocab_size=np.int64(self.vocab_size), fingerprint=np.str_(self.fingerprint))

    @classmethod
    def load(cls, path: Path) -> "SimilarWords":
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return cls(vocab_size=int(arrays.pop("vocab_size")), fingerprint=str(arrays.pop("fingerprint")), **arrays)


def _is_table(path: Path) -> bool:
    try:
        with np.load(path, allow_pickle=False) as z:
            return "fingerprint" in z.files
    except (OSError, ValueError, EOFError):
        return False


def fingerprint(sharddir: Path) -> str:
    meta = (Path(sharddir) / "meta.json").read_bytes()
    return hashlib.sha256(meta + json.dumps(SETTINGS, sort_keys=True).encode()).hexdigest()[:16]


def check_possible(meta: dict, sharddir) -> None:
    """One line, before any data is read, when the train split is too small for a table."""
    n = int(meta.get("counts", {}).get("train", {}).get("tokens", 0))
    if n < MIN_TRAIN_TOKENS:
        raise ZhBertError(f"masking correction learns its similar words from the shards' train split, and "
                          f"{sharddir} has only {n:,} train tokens (needs at least {MIN_TRAIN_TOKENS:,}); "
                          f"use more text or another masking (wwm)")


def load_or_build(ds, log=None) -> SimilarWords:
    """The table of the shard dir of `ds` (a `zh_bert.train.data.ShardDataset` of any split; the table is always
    learned from the train split): loaded from SHARDDIR/similar_words.npz when its fingerprint matches,
    else built and saved there (kept in memory only, with a note, when the shard dir is read-only)."""
    train_ds = ds if ds.split == "train" else type(ds)(ds.dir, "train")
    sharddir = Path(train_ds.dir)
    check_possible(train_ds.meta, sharddir)
    fp = fingerprint(sharddir)
    path = sharddir / TABLE_FILE
    if path.is_file():
        try:
            table = SimilarWords.load(path)
            if table.fingerprint == fp:
                return table
        except (OSError, ValueError, KeyError, EOFError):
            pass    # unreadable or from another build: rebuilt below
    t0 = time.time()
    table = build(train_ds)
    table.fingerprint = fp
    try:
        table.save(path)
    except (OSError, ZhBertError) as e:
        if log:
            log(f"note: similar-word table kept in memory only, {path} not writable ({e})")
    if log:
        log(f"[data] similar-word table for masking correction: {int((table.n_neighbours > 0).sum()):,} of "
            f"{len(table.keys):,} words have similar words ({table.coverage():.0%} of occurrences), built in "
            f"{time.time() - t0:.1f} s -> {path}")
    return table


def _word_stream(train_ds) -> tuple[np.ndarray, np.ndarray]:
    """(key, sequence) of every word of the train split (at most MAX_TOKENS tokens, evenly spaced
    sequences), in order; key -1 for special tokens and words too long to have a key."""
    n, L = len(train_ds), train_ds.seq_len
    rows = np.arange(n)
    if n * L > MAX_TOKENS:
        rows = np.linspace(0, n - 1, MAX_TOKENS // L).astype(np.int64)
    specials = np.asarray(train_ds.special_ids)
    keys, seqs = [], []
    for lo in range(0, len(rows), 8192):
        b = train_ds.batch(rows[lo:lo + 8192])
        ids = b["input_ids"]
        special = np.isin(ids, specials) | (b["attention_mask"] == 0)
        start = np.flatnonzero(word_units(b["word_start"], special).ravel())
        length = np.diff(np.append(start, ids.size))
        k = pack_keys(ids.ravel(), start, length, train_ds.vocab_size)
        k[special.ravel()[start]] = -1
        keep = ~(special.ravel()[start] & (ids.ravel()[start] == train_ds.pad_id))   # drop padding
        keys.append(k[keep])
        seqs.append((lo + start // L)[keep])
    return np.concatenate(keys), np.concatenate(seqs)


def _vocabulary(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(word keys, counts, word index of every position or -1): the MAX_WORDS most frequent words seen
    at least MIN_COUNT times."""
    uniq, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)
    good = (uniq >= 0) & (counts >= MIN_COUNT)
    order = np.flatnonzero(good)[np.argsort(-counts[good], kind="stable")][:MAX_WORDS]
    order.sort()                                   # word index follows key order: rows of the table
    index = np.full(len(uniq), -1, dtype=np.int64)
    index[order] = np.arange(len(order))
    return uniq[order], counts[order], index[inv.ravel()]


def _vectors(word: np.ndarray, seq: np.ndarray, n: int) -> np.ndarray:
    """(n, dim) unit-length word vectors: PPMI (context counts^0.75) of ±WINDOW co-occurrence, SVD."""
    import scipy.sparse as sp

    a, b = [], []
    for d in range(1, WINDOW + 1):
        ok = (word[:-d] >= 0) & (word[d:] >= 0) & (seq[:-d] == seq[d:])
        a += [word[:-d][ok], word[d:][ok]]
        b += [word[d:][ok], word[:-d][ok]]
    a, b = np.concatenate(a), np.concatenate(b)
    m = sp.coo_matrix((np.ones(len(a), dtype=np.float64), (a, b)), shape=(n, n)).tocsr()
    m.sum_duplicates()
    row = np.asarray(m.sum(axis=1)).ravel()
    col = np.asarray(m.sum(axis=0)).ravel() ** SETTINGS["alpha"]
    r, c = m.nonzero()
    pmi = np.log(m.data) - np.log(row[r]) - np.log(col[c]) + np.log(col.sum())
    keep = pmi > 0
    ppmi = sp.csr_matrix((pmi[keep], (r[keep], c[keep])), shape=(n, n))
    u, s = _randomized_svd(ppmi, max(2, min(DIM, n // 2)))
    vec = (u * np.sqrt(s)).astype(np.float32)
    return vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)


def _randomized_svd(m, k: int, oversample: int = 10, n_iter: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Top-k left singular vectors and values of sparse `m` (randomized range finder with power
    iterations, Halko, Martinsson & Tropp 2011), seeded. Only (n, k) x (k, k) dense algebra."""
    q = _orth(m @ np.random.default_rng(0).standard_normal((m.shape[1], min(k + oversample, m.shape[1]))))
    for _ in range(n_iter):
        q = _orth(m @ _orth(m.T @ q))
    b = np.asarray((m.T @ q).T)                  # (k', n): m ≈ q b
    w, v = np.linalg.eigh(b @ b.T)               # b = u_b s v_b^T with u_b = v, s = sqrt(w)
    top = np.argsort(-w)[:k]
    return q @ v[:, top], np.sqrt(np.maximum(w[top], 0))


def _orth(a: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning `a` (Cholesky-QR done twice, through the small Gram matrix)."""
    a = np.asarray(a, dtype=np.float64)
    for _ in range(2):
        w, v = np.linalg.eigh(a.T @ a)
        a = a @ (v / np.sqrt(np.maximum(w, w.max() * 1e-12)))
    return a


def _neighbours(vec: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, NEIGHBOURS) nearest words of the same length by cosine (-1 padded), and their cosines."""
    n = len(vec)
    nb = np.full((n, NEIGHBOURS), -1, dtype=np.int32)
    sim = np.zeros((n, NEIGHBOURS), dtype=np.float16)
    for length in np.unique(lengths):
        group = np.flatnonzero(lengths == length)
        k = min(NEIGHBOURS, len(group) - 1)
        if k < 1:
            continue
        g = vec[group]
        for lo in range(0, len(group), 1024):
            s = g[lo:lo + 1024] @ g.T
            s[np.arange(len(s)), np.arange(lo, lo + len(s))] = -np.inf     # not itself
            top = np.argpartition(-s, k - 1, axis=1)[:, :k]
            top_s = np.take_along_axis(s, top, axis=1)
            order = np.argsort(-top_s, axis=1, kind="stable")
            top, top_s = np.take_along_axis(top, order, 1), np.take_along_axis(top_s, order, 1)
            good = top_s >= MIN_SIMILARITY
            nb[group[lo:lo + len(s)], :k] = np.where(good, group[top], -1)
            sim[group[lo:lo + len(s)], :k] = np.where(good, top_s, 0)
    return nb, sim


def build(train_ds) -> SimilarWords:
    """Learn the table from a train split (see the module docstring); ZhBertError when too few words."""
    keys, seq = _word_stream(train_ds)
    words, counts, word = _vocabulary(keys)
    if len(words) < MIN_TABLE_WORDS:
        raise ZhBertError(f"masking correction: {train_ds.dir} has only {len(words)} distinct words seen at "
                          f"least {MIN_COUNT} times (needs {MIN_TABLE_WORDS} for a similar-word table); use "
                          f"more text or another masking (wwm)")
    W = max_word_len(train_ds.vocab_size)
    base = train_ds.vocab_size + 1
    digits = (words[:, None] // (base ** np.arange(W)).astype(np.int64)) % base
    tokens = (digits - 1).astype(np.int32)
    lengths = (digits > 0).sum(axis=1).astype(np.int8)
    nb, sim = _neighbours(_vectors(word, seq, len(words)), lengths)
    # neighbours are sorted most similar first and -1 only at the end of a row
    return SimilarWords(keys=words, tokens=tokens, lengths=lengths, counts=counts.astype(np.int64),
                        neighbours=nb, similarity=sim, n_neighbours=(nb >= 0).sum(axis=1).astype(np.int16),
                        vocab_size=train_ds.vocab_size)
