"""Benchmark test text in a corpus: character n-gram overlap between documents and the test examples of a suite
(`benchmark_text`), for `zh-bert eval contamination` (which examples a corpus contains) and
`zh-bert clean --decontaminate` (which documents to drop).

Both sides are normalised the same way (`overlap_text`: NFKC, so full-width forms and compatibility characters
meet their plain forms; case folded; all whitespace dropped, so re-spaced or re-wrapped copies still match), then
every run of n characters is hashed to 64 bits (`ngram_keys`). The test n-grams of a suite are a sorted array of
hashes (1.7 M for `all`: 13 MB); a document is tested against it with one vectorised lookup and then forgotten, so a scan holds
no corpus text and its memory does not grow with the corpus. An example overlaps a corpus when any one of its
n-grams occurs in any document (the GPT-3 rule, with characters for words). A test n-gram counts only if it holds
a Han character: with whitespace gone, an English word ("international") or a run of symbols is n characters
long, and shared by any two texts that use it. An example with no such n-gram (every field shorter than n
characters) cannot overlap and is counted as `too_short`.

The default n is 13 characters: the shortest n at which FewCLUE's test sets show almost no chance overlap with
ordinary text (on the bundled sample at most 0.1% of a task's examples, against up to 8% at n = 8; docs/eval.md),
while short test examples (news titles, NLI sentences) keep n-grams to test. Below 8 characters shared set
phrases and names dominate, so smaller n is refused.
"""

from __future__ import annotations

import functools
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.text import CJK_RANGES
from zh_bert.corpus.benchmark_text import iter_test_examples, suite_tasks

DEFAULT_NGRAM = 13
MIN_NGRAM = 8
MAX_NGRAM = 512

_BASE = 0x9FB21C651E98DF25   # odd multiplier of the polynomial hash (mod 2^64)


@dataclass
class NgramOption:
    """The n of the character n-grams, one declaration for `eval contamination` and `clean --decontaminate`."""
    overlap_ngram: int = option(DEFAULT_NGRAM, metavar="N", help=f"characters per n-gram after normalisation (NFKC, "
                        f"case folded, no whitespace); at least {MIN_NGRAM}")

    def __post_init__(self):
        check_ngram(self.overlap_ngram)


def check_ngram(n: int, flag: str = "--overlap-ngram") -> None:
    if not isinstance(n, int) or isinstance(n, bool) or not MIN_NGRAM <= n <= MAX_NGRAM:
        raise ZhBertError(f"{flag} {n}: an n-gram must have {MIN_NGRAM} to {MAX_NGRAM} characters (shorter ones "
                          f"match ordinary phrasing by chance)")


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


def ngram_keys(text: str, n: int) -> np.ndarray:
    """64-bit hash of every n-character window of `text` (already `overlap_text`): the polynomial
    sum(r[i+j] * B^(n-1-j)) mod 2^64, built by doubling (windows of 1, 2, 4, 8... characters, then joined), so an
    n-gram costs log2(n) vectorised passes instead of n."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    m = len(cps) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    windows, k = {1: _mix(cps)}, 1
    while 2 * k <= n:
        prev = windows[k]
        windows[2 * k] = prev[:len(prev) - k] * np.uint64(pow(_BASE, k, 1 << 64)) + prev[k:]
        k *= 2
    h, done = None, 0
    for size in sorted(windows, reverse=True):
        if done + size <= n:
            part = windows[size][done:done + m]
            h = part.copy() if h is None else h * np.uint64(pow(_BASE, size, 1 << 64)) + part
            done += size
    return h


def _han(cps: np.ndarray) -> np.ndarray:
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


class OverlapIndex:
    """The n-grams of every test example of a suite: `keys` (sorted unique hashes) for the yes/no question of
    clean, and (hash, example) pairs sorted by hash for which examples a document overlaps."""

    def __init__(self, suite: str, n: int = DEFAULT_NGRAM):
        check_ngram(n)
        self.suite, self.n, self.tasks = suite, n, suite_tasks(suite)
        self.example_task: list[str] = []
        self.example_id: list[str] = []
        texts, owners = [], []
        for i, ex in enumerate(iter_test_examples(suite)):
            self.example_task.append(ex.task)
            self.example_id.append(ex.id)
            text = "\n".join(overlap_text(s) for s in ex.text.split("\n")) + "\n"
            texts.append(text)
            owners.append(len(text))
        # all examples as one string, fields ended by "\n" (which `overlap_text` removes from documents): one
        # vectorised hash pass, then the windows that cross a field's end are dropped
        joined = "".join(texts)
        owner_of_char = np.repeat(np.arange(len(owners), dtype=np.int32), owners)
        pair_hash = ngram_keys(joined, n)
        cps = np.frombuffer(joined.encode("utf-32-le"), np.uint32)
        ends, han = (np.concatenate(([0], np.cumsum(hit))) for hit in (cps == ord("\n"), _han(cps)))
        m = len(pair_hash)
        whole = (ends[n:n + m] == ends[:m]) & (han[n:n + m] > han[:m])
        pair_hash, pair_owner = pair_hash[whole], owner_of_char[:m][whole]
        self.checkable = np.zeros(len(owners), dtype=bool)
        self.checkable[pair_owner] = True
        self._pairs = (pair_hash, pair_owner)
        self.keys = distinct(pair_hash)
        # a bitmap of the keys' top bits (about 1/40 full) answers "no" for almost every corpus n-gram at the
        # cost of one byte read; a binary search over millions of keys was 80% of a scan's time
        self._bits = max(20, int(np.ceil(np.log2(max(1, len(self.keys)) * 40))))
        self._bitmap = np.zeros(1 << (self._bits - 3), dtype=np.uint8)
        top = self.keys >> np.uint64(64 - self._bits)
        byte, bit = (top >> np.uint64(3)).astype(np.intp), (np.uint8(1) << (top & np.uint64(7)).astype(np.uint8))
        if len(byte):   # keys are sorted, so are their bytes: OR the bits of each run of equal bytes
            starts = np.flatnonzero(np.concatenate(([True], byte[1:] != byte[:-1])))
            self._bitmap[byte[starts]] = np.bitwise_or.reduceat(bit, starts)

    def _found(self, text: str) -> np.ndarray:
        """The distinct test n-grams that occur in `text`."""
        h = ngram_keys(overlap_text(text), self.n)
        if not len(h) or not len(self.keys):
            return h[:0]
        top = h >> np.uint64(64 - self._bits)
        h = h[(self._bitmap[(top >> np.uint64(3)).astype(np.intp)] >> (top & np.uint64(7)).astype(np.uint8)) & 1 > 0]
        at = np.searchsorted(self.keys, h)
        at[at == len(self.keys)] = 0
        return h[self.keys[at] == h]

    def contains(self, text: str) -> bool:
        """Whether `text` holds any test n-gram."""
        return len(self._found(text)) > 0

    @functools.cached_property
    def _by_hash(self) -> tuple[np.ndarray, np.ndarray]:
        """(hash, example) pairs sorted by hash: built on the first `examples_in`, never for clean's yes/no."""
        pair_hash, pair_owner = self._pairs
        order = np.argsort(pair_hash)
        return pair_hash[order], pair_owner[order]

    def examples_in(self, text: str) -> np.ndarray:
        """Indices of the examples one of whose n-grams occurs in `text` (sorted, distinct)."""
        found = distinct(self._found(text))
        if not len(found):
            return np.empty(0, dtype=np.int32)
        pair_hash, pair_owner = self._by_hash
        lo = np.searchsorted(pair_hash, found, "left")
        hi = np.searchsorted(pair_hash, found, "right")
        return distinct(np.concatenate([pair_owner[a:b] for a, b in zip(lo.tolist(), hi.tolist())]))


@functools.lru_cache(maxsize=4)
def overlap_index(suite: str, n: int = DEFAULT_NGRAM) -> OverlapIndex:
    """The index of `suite` at `n`, built once per process (clean's workers each build their own)."""
    return OverlapIndex(suite, n)


def contains_test_text(doc: str, suite: str = "all", n: int = DEFAULT_NGRAM) -> bool:
    """Whether document `doc` contains any test n-gram of `suite`: what `clean --decontaminate` drops."""
    return overlap_index(suite, n).contains(doc)


def scan(documents: Iterable[str], index: OverlapIndex) -> dict:
    """Which test examples of `index` occur in `documents` (streamed: each one is tested and dropped), as the
    JSON result of `eval contamination`: per task the examples, the contaminated ones (count, share, ids in file
    order) and those too short to test; for the corpus the documents and characters read and the documents that
    hold test text."""
    t0 = time.time()
    hit = np.zeros(len(index.example_id), dtype=bool)
    docs = chars = overlapping = 0
    for doc in documents:
        docs += 1
        chars += len(doc)
        found = index.examples_in(doc)
        if len(found):
            overlapping += 1
            hit[found] = True
    if docs == 0:
        raise ZhBertError("the corpus holds no documents: nothing to scan")
    tasks = {}
    task_of = np.array(index.example_task)
    for task in index.tasks:
        mine = task_of == task
        ids = [index.example_id[i] for i in np.flatnonzero(mine & hit)]
        total = int(mine.sum())
        tasks[task] = {"examples": total, "contaminated": len(ids), "share": len(ids) / total if total else 0.0,
                       "too_short": int((mine & ~index.checkable).sum()), "ids": ids}
    return {"suite": index.suite, "ngram": index.n, "documents": docs, "characters": chars,
            "documents_with_test_text": overlapping, "seconds": round(time.time() - t0, 3), "tasks": tasks}
