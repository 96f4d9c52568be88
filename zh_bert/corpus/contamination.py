"""Benchmark test text in a corpus: which test examples of a suite (`benchmark_text`) a document holds, for
`zh-bert eval contamination` (which examples a corpus contains) and `zh-bert clean --decontaminate` (which
documents to drop).

Contamination means that most of a test example's text is in one document, not that the two share a phrase:
laws and government documents repeat stock phrases (改革开放和社会主义现代化建设) that test sets quote too. Both
sides are normalised the same way (`overlap_text`: NFKC, so full-width forms and compatibility characters meet
their plain forms; case folded; all whitespace dropped, so re-spaced or re-wrapped copies still match), then:

- a long example (at least n distinct n-grams of n characters holding a Han character, so about 2n characters
  of text) is in a document when at least `--overlap-share` (0.5) of its countable n-grams occur in that same
  document. A stock phrase of up to 18 characters (at n = 13) is under half of such an example's n-grams;
- a short example (TNEWS titles, BUSTM queries, short NLI pairs) is in a document only when every field of it
  occurs there whole. One whose every field has fewer than `WHOLE_HAN` Han characters is `too_short`;
- common phrasing does not count. The reference sample of ordinary Chinese (`benchmark_text.reference_documents`:
  the bundled corpus's 5,551 zhwiki and CLUECorpusSmall documents) decides: an n-gram in `COMMON_DOCS` or more
  of its documents is not counted (a copy of a test passage is one document, a template line many), and a short
  example that the sample holds by the rule above (用着还可以, 我想说的是) is a phrase, never found: `common`,
  as is a long one with no countable n-gram left.

The test n-grams are (hash, example) pairs sorted by hash, each n-gram hashed to 64 bits (`window_keys`); a
document is tested with one vectorised lookup and then forgotten, so a scan holds no corpus text and its memory
does not grow with the corpus. Short examples are found by the hash of their first `WHOLE_HAN` characters,
then compared as strings.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.benchmark_text import iter_test_examples, reference_documents, suite_tasks
from zh_bert.corpus.overlap_hash import KeySet, distinct, han_mask, longest_run, overlap_text, window_keys

DEFAULT_NGRAM = 13
MIN_NGRAM = 8
MAX_NGRAM = 512
DEFAULT_SHARE = 0.5
WHOLE_HAN = 5       # Han characters a short example needs in one field to be tested whole (its hash prefix)
COMMON_DOCS = 2     # reference documents an n-gram must be in to be common phrasing
SHOWN_CHARS = 40    # matched text in a report, shortened to about this many characters
MAX_LISTED = 100    # contaminated documents listed in a report (the counts are always exact)
LONG, SHORT, TOO_SHORT, COMMON = range(4)   # how an example is tested


@dataclass
class OverlapOptions:
    """What counts as test text in a document, one declaration for `eval contamination` and
    `clean --decontaminate`."""
    overlap_ngram: int = option(DEFAULT_NGRAM, metavar="N", help=f"characters per n-gram after normalisation (NFKC, "
                                f"case folded, no whitespace); at least {MIN_NGRAM}")
    overlap_share: float = option(DEFAULT_SHARE, metavar="S", help="share of a test example's distinct n-grams "
                                  "(those not common in ordinary Chinese) that one document must hold for the "
                                  "example to be in it; an example with fewer than N n-grams must be there whole")

    def __post_init__(self):
        check_ngram(self.overlap_ngram)
        check_share(self.overlap_share)


def check_ngram(n: int, flag: str = "--overlap-ngram") -> None:
    if not isinstance(n, int) or isinstance(n, bool) or not MIN_NGRAM <= n <= MAX_NGRAM:
        raise ZhBertError(f"{flag} {n}: an n-gram must have {MIN_NGRAM} to {MAX_NGRAM} characters (shorter ones "
                          f"match ordinary phrasing by chance)")


def check_share(share: float, flag: str = "--overlap-share") -> None:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ZhBertError(f"{flag} {share}: a share of a test example's n-grams, above 0 and at most 1")


@dataclass(frozen=True)
class Match:
    """A test example found in a document: the example's index, the share of its countable n-grams there
    (1.0 for a short example, found whole) and the longest matched text (normalised, shortened)."""
    item: int
    share: float
    text: str


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-(limit // 2 - 1):]}"


def _item_ngrams(fields: list[list[str]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (hash, example) pairs of every n-gram holding a Han character, sorted by hash, no n-gram
    spanning two fields:
    all examples as one string, fields ended by "\\n" (which `overlap_text` removes from documents), one
    vectorised hash pass, then the windows that cross a field's end are dropped."""
    texts = ["".join(f + "\n" for f in fs) for fs in fields]
    joined = "".join(texts)
    owner_of_char = np.repeat(np.arange(len(texts), dtype=np.int32), [len(t) for t in texts])
    (pair_hash,) = window_keys(joined, (n,))
    cps = np.frombuffer(joined.encode("utf-32-le"), np.uint32)
    ends, han = (np.concatenate(([0], np.cumsum(hit))) for hit in (cps == ord("\n"), han_mask(cps)))
    m = len(pair_hash)     # windows of n: none when the text is shorter
    whole = (ends[n:n + m] == ends[:m]) & (han[n:n + m] > han[:m])
    pair_hash, pair_owner = pair_hash[whole], owner_of_char[:m][whole]
    if not len(pair_hash):      # every example shorter than n (or none at all): nothing to count
        return pair_hash, pair_owner
    order = np.argsort(pair_hash, kind="stable")   # owners stay in order within a hash: repeats are neighbours
    pair_hash, pair_owner = pair_hash[order], pair_owner[order]
    first = np.concatenate(([True], (pair_hash[1:] != pair_hash[:-1]) | (pair_owner[1:] != pair_owner[:-1])))
    return pair_hash[first], pair_owner[first]


def _common_ngrams(reference: list[str], candidates: np.ndarray, n: int) -> np.ndarray:
    """The `candidates` that occur in at least COMMON_DOCS of the `reference` documents (normalised)."""
    joined = "".join(doc + "\n" for doc in reference)
    (h,) = window_keys(joined, (n,))
    if not len(h):
        return h
    cps = np.frombuffer(joined.encode("utf-32-le"), np.uint32)
    doc_end = np.concatenate(([0], np.cumsum(cps == ord("\n"))))
    at = KeySet(candidates).where(h)
    at = at[doc_end[at + n] == doc_end[at]]   # windows inside one document
    pairs = np.unique(np.stack([h[at], doc_end[at].astype(np.uint64)], axis=1), axis=0)
    keys, docs = np.unique(pairs[:, 0], return_counts=True)
    return keys[docs >= COMMON_DOCS]


class _Anchors:
    """The short examples, each by its anchor (the field with the most Han characters) and its other fields,
    found through the hash of the anchor's first WHOLE_HAN characters."""

    def __init__(self, anchors: dict[int, tuple[str, tuple[str, ...]]]):
        self.anchors = anchors
        items = list(anchors)
        (prefix,) = window_keys("".join(anchors[i][0][:WHOLE_HAN] for i in items), (WHOLE_HAN,))
        self.by_prefix: dict[int, list[int]] = {}
        for i, key in zip(items, prefix[::WHOLE_HAN].tolist()):
            self.by_prefix.setdefault(key, []).append(i)
        self.keys = KeySet(np.fromiter(self.by_prefix, dtype=np.uint64, count=len(self.by_prefix)))

    def at(self, text: str, prefixes: np.ndarray) -> list[tuple[int, int]]:
        """(position, example) of every anchor in `text` (normalised; `prefixes`: its WHOLE_HAN-grams)."""
        at = self.keys.where(prefixes)
        return [(pos, i) for pos, key in zip(at.tolist(), prefixes[at].tolist()) for i in self.by_prefix[key]
                if text.startswith(self.anchors[i][0], pos)]

    def found(self, text: str, prefixes: np.ndarray) -> list[int]:
        """The short examples whose every field occurs in `text`."""
        return list(dict.fromkeys(i for _, i in self.at(text, prefixes) if self.whole(i, text)))

    def whole(self, i: int, text: str) -> bool:
        """Whether the other fields of example `i`, whose anchor `text` holds, are in it too."""
        return all(o in text for o in self.anchors[i][1])


def _common_short(anchors: _Anchors, reference: list[str]) -> set[int]:
    """The short examples that a `reference` document (normalised) holds whole: common phrasing."""
    joined = "".join(doc + "\n" for doc in reference)
    starts = np.cumsum([0] + [len(doc) + 1 for doc in reference])
    found = anchors.at(joined, window_keys(joined, (WHOLE_HAN,))[0])
    docs = np.searchsorted(starts, [pos for pos, _ in found], "right") - 1
    return {i for (_, i), d in zip(found, docs.tolist()) if anchors.whole(i, reference[d])}


class OverlapIndex:
    """The test examples of a suite, how each is tested (`status`: LONG, SHORT, TOO_SHORT, COMMON), the
    countable n-grams of the long ones as (hash, example) pairs sorted by hash, and the short ones' anchors."""

    def __init__(self, suite: str, n: int = DEFAULT_NGRAM, share: float = DEFAULT_SHARE):
        check_ngram(n)
        check_share(share)
        self.suite, self.n, self.share, self.tasks = suite, n, share, suite_tasks(suite)
        self.task: list[str] = []
        self.id: list[str] = []
        self.split: list[str] = []
        fields: list[list[str]] = []
        normal = functools.lru_cache(maxsize=None)(overlap_text)   # a CMRC passage is in each of its questions
        for ex in iter_test_examples(suite):
            self.task.append(ex.task)
            self.id.append(ex.id)
            self.split.append(ex.split)
            fields.append([f for f in map(normal, ex.text.split("\n")) if f])
        reference = [overlap_text(doc) for doc in reference_documents()]
        pair_hash, pair_owner = _item_ngrams(fields, n)
        long = np.bincount(pair_owner, minlength=len(fields)) >= n
        pair_hash, pair_owner = pair_hash[long[pair_owner]], pair_owner[long[pair_owner]]
        countable = ~np.isin(pair_hash, _common_ngrams(reference, pair_hash, n))
        self._pairs = pair_hash[countable], pair_owner[countable]   # sorted by hash
        self.total = np.bincount(self._pairs[1], minlength=len(fields))
        self._long = KeySet(self._pairs[0], presorted=True)
        self.status = np.where(long, np.where(self.total > 0, LONG, COMMON), SHORT).astype(np.int8)
        anchors = {}
        for i in np.flatnonzero(~long).tolist():
            han = [int(han_mask(np.frombuffer(f.encode("utf-32-le"), np.uint32)).sum()) for f in fields[i]]
            if not han or max(han) < WHOLE_HAN:
                self.status[i] = TOO_SHORT
                continue
            anchor = fields[i][int(np.argmax(han))]
            anchors[i] = (anchor, tuple(dict.fromkeys(f for f in fields[i] if f != anchor)))
        common = _common_short(_Anchors(anchors), reference)
        self.status[sorted(common)] = COMMON
        self._anchors = _Anchors({i: a for i, a in anchors.items() if i not in common})

    def matches(self, text: str) -> list[Match]:
        """The test examples in document `text` (its long ones first, each once)."""
        t = overlap_text(text)
        long_h, prefixes = window_keys(t, (self.n, WHOLE_HAN))
        out = self._long_matches(t, long_h) if len(long_h) else []
        if len(prefixes):
            out += [Match(i, 1.0, shortened(self._anchors.anchors[i][0])) for i in self._anchors.found(t, prefixes)]
        return out

    def _long_matches(self, t: str, h: np.ndarray) -> list[Match]:
        at = self._long.where(h)
        if not len(at):
            return []
        found = distinct(h[at])
        pair_hash, pair_owner = self._pairs
        lo, hi = np.searchsorted(pair_hash, found, "left"), np.searchsorted(pair_hash, found, "right")
        counts = hi - lo
        idx = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts - lo, counts)
        owners, of_hash = pair_owner[idx], np.repeat(found, counts)
        items, hits = np.unique(owners, return_counts=True)
        share = hits / self.total[items]
        out = []
        for i, s in zip(items[share >= self.share].tolist(), share[share >= self.share].tolist()):
            a, b = longest_run(at[np.isin(h[at], of_hash[owners == i])], self.n)
            out.append(Match(i, round(s, 4), shortened(t[a:b])))
        return out

    def contains(self, text: str) -> bool:
        """Whether document `text` holds any test example of the suite: what `clean --decontaminate` drops."""
        return bool(self.matches(text))

    def describe(self, m: Match) -> dict:
        """A match as a report lists it: which test example (task, split, id), its share found, the text."""
        return {"task": self.task[m.item], "split": self.split[m.item], "id": self.id[m.item], "share": m.share,
                "text": m.text}

    def entry(self, document: str, found: list[Match]) -> dict:
        """A contaminated document as a report lists it: where it is and what matched."""
        return {"document": document, "matches": [self.describe(m) for m in found]}


def overlap_index(suite: str, n: int = DEFAULT_NGRAM, share: float = DEFAULT_SHARE) -> OverlapIndex:
    """The index of `suite` at `n` and `share`, built once per process (clean's workers inherit the one built
    before they start, or each build their own)."""
    return _cached_index(suite, n, float(share))


@functools.lru_cache(maxsize=4)
def _cached_index(suite: str, n: int, share: float) -> OverlapIndex:
    return OverlapIndex(suite, n, share)


def contains_test_text(doc: str, suite: str = "all", n: int = DEFAULT_NGRAM, share: float = DEFAULT_SHARE) -> bool:
    """Whether document `doc` holds any test example of `suite`: what `clean --decontaminate` drops."""
    return overlap_index(suite, n, share).contains(doc)


def scan(documents: Iterable[tuple[str, str]], index: OverlapIndex, where: str = "the corpus") -> dict:
    """Which test examples of `index` occur in `documents` ((name, text) pairs, streamed: each one is tested
    and dropped), as the JSON result of `eval contamination`: per task the examples, how many are contaminated
    (count, share, ids in file order, and for each the highest share found, where, and the matched text), how
    many cannot be tested (too short, common); for the corpus the documents and characters read, the documents
    that hold test text and the first MAX_LISTED of them with what matched."""
    t0 = time.time()
    best: dict[int, tuple[float, str, str]] = {}
    listed: list[dict] = []
    docs = chars = with_text = 0
    for name, doc in documents:
        docs += 1
        chars += len(doc)
        found = index.matches(doc)
        if found:
            with_text += 1
            if len(listed) < MAX_LISTED:
                listed.append(index.entry(name, found))
            for m in found:
                if m.item not in best or m.share > best[m.item][0]:
                    best[m.item] = (m.share, name, m.text)
    if docs == 0:
        raise ZhBertError(f"{where}: no documents to scan")
    tasks = {}
    task_of = np.array(index.task)
    for task in index.tasks:
        mine = np.flatnonzero(task_of == task)
        hit = [i for i in mine.tolist() if i in best]
        status = index.status[mine]
        tasks[task] = {"examples": len(mine), "contaminated": len(hit), "share": len(hit) / len(mine) if len(mine)
                       else 0.0, "too_short": int((status == TOO_SHORT).sum()), "common": int((status == COMMON).sum()),
                       "ids": [index.id[i] for i in hit],
                       "found": [{"id": index.id[i], "split": index.split[i], "share": best[i][0],
                                  "document": best[i][1], "text": best[i][2]} for i in hit]}
    return {"suite": index.suite, "ngram": index.n, "overlap_share": index.share, "documents": docs,
            "characters": chars, "documents_with_test_text": with_text, "seconds": round(time.time() - t0, 3),
            "tasks": tasks, "contaminated_documents": listed}
