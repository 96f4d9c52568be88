"""Text as `zh_bert.corpus.contamination` compares it: the normalisation both sides get, 64-bit hashes of every
window of n characters, and sorted key sets looked up a document at a time. Vectorised with numpy, because
clean runs it on every document of a corpus."""

from __future__ import annotations

import unicodedata

import numpy as np

from zh_bert.core.text import CJK_RANGES

_BASE = 0x9FB21C651E98DF25   # odd multiplier of the polynomial hash (mod 2^64)


def overlap_text(text: str) -> str:
    """`text` as both sides are compared: NFKC, case folded, whitespace removed."""
    if not unicodedata.is_normalized("NFKC", text):   # the quick check: most text is, and NFKC is 3x slower
        text = unicodedata.normalize("NFKC", text)
    return "".join(text.casefold().split())


def _mix(cps: np.ndarray) -> np.ndarray:
    """splitmix64 of each code point: characters as random 64-bit values, so the polynomial hash of nearby code
    points (consecutive Han characters) does not collide by structure."""
    z = cps.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def window_keys(text: str, sizes: tuple[int, ...]) -> list[np.ndarray]:
    """For each n in `sizes`, the 64-bit hash of every n-character window of `text` (already `overlap_text`):
    the polynomial sum(r[i+j] * B^(n-1-j)) mod 2^64, built by doubling (windows of 1, 2, 4, 8... characters,
    shared by every n, then joined), so an n-gram costs log2(n) vectorised passes instead of n."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    windows, k = {1: _mix(cps)}, 1
    while 2 * k <= max(sizes) and 2 * k <= len(cps):
        prev = windows[k]
        windows[2 * k] = prev[:len(prev) - k] * np.uint64(pow(_BASE, k, 1 << 64)) + prev[k:]
        k *= 2
    out = []
    for n in sizes:
        m = len(cps) - n + 1
        h, done = np.empty(0, dtype=np.uint64), 0
        for size in sorted(windows, reverse=True):
            if m > 0 and done + size <= n:
                part = windows[size][done:done + m]
                h = part.copy() if done == 0 else h * np.uint64(pow(_BASE, size, 1 << 64)) + part
                done += size
        out.append(h)
    return out


def ngram_keys(text: str, n: int) -> np.ndarray:
    """The 64-bit hash of every n-character window of `text` (already `overlap_text`)."""
    return window_keys(text, (n,))[0]


def han_mask(cps: np.ndarray) -> np.ndarray:
    """Which code points are Han characters (`zh_bert.core.text.CJK_RANGES`)."""
    mask = np.zeros(len(cps), dtype=bool)
    for lo, hi in CJK_RANGES:
        mask |= (cps >= lo) & (cps <= hi)
    return mask


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values: a sort and a mask (numpy 2.4's hash-based `np.unique` is 60x slower on
    millions of 64-bit hashes)."""
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


def longest_run(starts: np.ndarray, n: int) -> tuple[int, int]:
    """The longest stretch of text that the n-character windows at `starts` (sorted) cover without a gap."""
    gaps = np.flatnonzero(np.diff(starts) > n)
    first, last = np.concatenate(([0], gaps + 1)), np.concatenate((gaps, [len(starts) - 1]))
    k = int(np.argmax(starts[last] - starts[first]))
    return int(starts[first[k]]), int(starts[last[k]]) + n


class KeySet:
    """Sorted distinct 64-bit keys behind a bitmap of their top bits (about 1/40 full), which answers "no" for
    almost every corpus window at the cost of one byte read; a binary search over millions of keys alone was
    80% of a scan's time."""

    def __init__(self, keys: np.ndarray, presorted: bool = False):
        self.keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if presorted and len(keys) else distinct(keys)
        self.bits = max(16, int(np.ceil(np.log2(max(1, len(self.keys)) * 40))))
        self.bitmap = np.zeros(1 << (self.bits - 3), dtype=np.uint8)
        top = self.keys >> np.uint64(64 - self.bits)
        byte, bit = (top >> np.uint64(3)).astype(np.intp), (np.uint8(1) << (top & np.uint64(7)).astype(np.uint8))
        if len(byte):   # keys are sorted, so are their bytes: OR the bits of each run of equal bytes
            starts = np.flatnonzero(np.concatenate(([True], byte[1:] != byte[:-1])))
            self.bitmap[byte[starts]] = np.bitwise_or.reduceat(bit, starts)

    def where(self, h: np.ndarray) -> np.ndarray:
        """The positions in `h` of the values that are keys."""
        if not len(h) or not len(self.keys):
            return np.empty(0, dtype=np.intp)
        top = h >> np.uint64(64 - self.bits)
        at = np.flatnonzero((self.bitmap[(top >> np.uint64(3)).astype(np.intp)]
                             >> (top & np.uint64(7)).astype(np.uint8)) & 1)
        pos = np.searchsorted(self.keys, h[at])
        pos[pos == len(self.keys)] = 0
        return at[self.keys[pos] == h[at]]
