"""Deduplication: exact (hash of the normalised text) and near-duplicate (MinHash LSH over character
n-grams).

Signatures are computed in the worker processes (pure numpy: one multiply-shift hash family applied
to all shingles at once, ~5x faster than datasketch's per-shingle update loop); the index lives in the
main process, which sees documents in input order, so the first occurrence is always the one kept
whatever the number of workers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

DEDUP_MODES = ("exact", "minhash", "none")


@dataclass
class MinHashConfig:
    num_perm: int = 128       # signature length
    ngram: int = 5            # character shingle size
    threshold: float = 0.8    # Jaccard similarity above which two documents are near-duplicates
    seed: int = 1


def exact_key(text: str) -> bytes:
    """16-byte digest of the normalised text (blake2b: faster than md5, collisions negligible)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) with bands*rows <= num_perm minimising false positives + false negatives around
    `threshold` (the same criterion as datasketch's MinHashLSH, integrated numerically)."""
    xs = np.linspace(0, 1, 201)
    lo, hi = xs < threshold, xs >= threshold
    trapz = getattr(np, "trapezoid", None) or np.trapz  # numpy 2 renamed it
    best, best_err = (1, num_perm), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            p = 1 - (1 - xs ** r) ** b            # probability of becoming a candidate at similarity x
            err = trapz(p[lo], xs[lo]) + trapz(1 - p[hi], xs[hi])
            if err < best_err:
                best, best_err = (b, r), err
    return best


class MinHasher:
    """Signatures of character n-gram sets: min over shingles of (a*x + b) >> 32 (multiply-shift hashing,
    64-bit arithmetic wraps), one (a, b) pair per permutation."""

    def __init__(self, cfg: MinHashConfig):
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        self.a = (rng.integers(1, 2**63, cfg.num_perm, dtype=np.uint64) | np.uint64(1))[None, :]
        self.b = rng.integers(0, 2**63, cfg.num_perm, dtype=np.uint64)[None, :]

    def shingles(self, text: str) -> np.ndarray:
        text = text.replace("\n", "")
        cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        n = min(self.cfg.ngram, len(cps))
        m = len(cps) - n + 1
        if m <= 0:
            return np.zeros(1, dtype=np.uint64)
        h = np.zeros(m, dtype=np.uint64)
        for k in range(n):
            h = h * np.uint64(0x100000001B3) + cps[k:k + m]
        return np.unique(h)

    def signature(self, text: str) -> np.ndarray:
        """(num_perm,) uint32 signature."""
        sh = self.shingles(text)
        sig = np.full(self.cfg.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for i in range(0, len(sh), 2048):  # bound the (shingles x perms) matrix to 2 MB
            block = sh[i:i + 2048, None] * self.a + self.b
            np.minimum(sig, block.min(axis=0), out=sig)
        return (sig >> np.uint64(32)).astype(np.uint32)


class LSHIndex:
    """Banded LSH over signatures. `add_or_match(sig)` returns True if a stored document shares a band
    with `sig` (a near-duplicate), else stores it. Memory: `bands` Python ints per kept document
    (~1.5 kB each with 16 bands)."""

    def __init__(self, cfg: MinHashConfig):
        self.bands, self.rows = lsh_params(cfg.threshold, cfg.num_perm)
        self.tables: list[set[int]] = [set() for _ in range(self.bands)]

    def add_or_match(self, sig: np.ndarray) -> bool:
        keys = [hash(sig[i * self.rows:(i + 1) * self.rows].tobytes()) for i in range(self.bands)]
        if any(k in t for k, t in zip(keys, self.tables)):
            return True
        for k, t in zip(keys, self.tables):
            t.add(k)
        return False
