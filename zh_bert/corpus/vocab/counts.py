"""One streaming pass over the corpus: character and word counts in memory that does not grow with it
(documents are read one at a time and never held; word tables are bounded by `COUNT_CAP`)."""

from __future__ import annotations

import collections
import itertools
import re
from typing import Iterable, Iterator, Optional

from zh_bert.corpus.corpus_io import iter_documents
from zh_bert.core.errors import ZhBertError
from zh_bert.core.text import BERT_CJK_RANGES, is_bert_punct
from zh_bert.corpus.vocab.tokenizer_json import bert_normalizer, char_class

# Memory bounds (counts and samples, never documents, are held: peak RSS does not grow with the corpus):
# a word-count table holds at most this many distinct words; past it the rarest are dropped (`_prune`). jieba
# words (`word`) cost ~150 bytes each; BERT words (`char`/`wordpiece`: Latin/digit runs, CJK characters) are
# also spelled out token by token for the WordPiece learner (~1 KB each), hence the smaller bound. The bundled
# sample corpora (84k jieba words, 15k BERT words) are far below both: counted exactly.
COUNT_CAP = {"jieba": 1 << 18, "pretokenizer": 1 << 16}


class CorpusCounts:
    """What one pass over the documents leaves: character counts and word counts.

    Documents are read one at a time and only counts are kept, so memory depends on the number of distinct
    characters and words, not on the corpus size; the word table is bounded too (`COUNT_CAP`, `_prune`)."""

    def __init__(self, words: Optional[str] = None):
        self.chars: collections.Counter = collections.Counter()   # every non-whitespace character
        self.words: collections.Counter = collections.Counter()   # 'pretokenizer' or 'jieba' words (see `count_corpus`)
        self.kind, self.pruned_below = words, 0
        self._norm = bert_normalizer(split_cjk=False)
        self._splitter = _BertWords() if words == "pretokenizer" else None
        self._cut = _jieba_cut() if words == "jieba" else None
        self._cap = COUNT_CAP.get(words, 0)

    def add(self, doc: str) -> None:
        text = self._norm.normalize_str(doc)  # BERT-uncased: control chars dropped, lowercase; CJK not split
        seen = len(self.chars)
        self.chars.update(text)
        if self._splitter is not None:
            if len(self.chars) > seen:  # new characters: new punctuation must join the regex first
                self._splitter.learn(itertools.islice(self.chars, seen, None))
            self.words.update(self._splitter.findall(text))
        elif self._cut is not None:
            self.words.update(w for w in self._cut(text) if len(w) > 1)
        if len(self.words) > self._cap:
            self.pruned_below = _prune(self.words, self.pruned_below, self._cap)

    def finish(self) -> "CorpusCounts":
        for ws in [c for c in self.chars if c.isspace()]:
            del self.chars[ws]
        if self.kind == "jieba":  # BertPreTokenizer splits these off: such a "word" could never match whole
            for w in [w for w in self.words if any(c.isspace() or is_bert_punct(c) for c in w)]:
                del self.words[w]
        return self


def count_corpus(docs: Iterable[str], words: Optional[str] = None) -> CorpusCounts:
    """One streaming pass: characters (after BERT-uncased normalisation) and, with `words`, word counts:
    'pretokenizer' = the words BertPreTokenizer makes once the normaliser has put spaces around CJK characters
    (split on whitespace; every punctuation and CJK character a word of its own), 'jieba' = jieba words of
    two or more characters (rjieba = jieba-rs, ~20x faster, same segmentation) without whitespace or
    punctuation."""
    counts = CorpusCounts(words)
    for doc in docs:
        counts.add(doc)
    return counts.finish()


def _prune(counts: collections.Counter, below: int, cap: int) -> int:
    """Keep a count table under `cap` entries (word2vec's vocabulary reduction): drop every entry seen
    at most `below` + 1 times, raising the bar until it fits; returns the new bar. Deterministic (document
    order), and it never runs on a corpus whose distinct words fit, so such a corpus is counted exactly."""
    while len(counts) > cap * 3 // 4:
        below += 1
        for k in [k for k, n in counts.items() if n <= below]:
            del counts[k]
    return below


class _BertWords:
    """BertPreTokenizer's split as one Python regex, about 3x faster than `pre_tokenize_str` per document:
    `[S]|[^\\s S]+` with S = the characters split off alone (BERT's CJK ranges, ASCII symbols, Unicode
    punctuation). The non-ASCII punctuation joins S when it is first seen (a class of every Unicode P*
    code point takes a second to build), always before the document holding it is split."""

    def __init__(self):
        self._fixed = "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in BERT_CJK_RANGES) + char_class(
            (c for c in map(chr, range(128)) if is_bert_punct(c)), python=True)
        self._punct: set[str] = set()
        self._compile()

    def _compile(self) -> None:
        cls = self._fixed + (char_class(self._punct, python=True) if self._punct else "")
        self._re = re.compile(f"[{cls}]|[^\\s{cls}]+")

    def learn(self, chars: Iterable[str]) -> None:
        new = {c for c in chars if ord(c) > 127 and is_bert_punct(c)}
        if new - self._punct:
            self._punct |= new
            self._compile()

    def findall(self, text: str) -> list[str]:
        return self._re.findall(text)


def _jieba_cut():
    try:
        import rjieba

        return rjieba.cut
    except ImportError:  # pragma: no cover - rjieba is a dependency, jieba the fallback
        import jieba

        return jieba.lcut


def continuation_counts(words: collections.Counter) -> collections.Counter:
    """'##x' for every non-CJK character x seen inside a word (not first): WordPiece needs it to spell out
    any Latin/digit word it has no piece for; without it the whole word becomes [UNK]. Every word of two or
    more characters is such a run ('bert' words: CJK and punctuation are words of one character)."""
    out: collections.Counter = collections.Counter()
    for w, n in words.items():
        for c in w[1:]:
            out[c] += n
    return collections.Counter({"##" + c: n for c, n in out.items()})


def by_frequency(counts: collections.Counter, min_frequency: int) -> list[str]:
    """Keys seen >= min_frequency times, most frequent first, ties in code-point order (deterministic)."""
    return [k for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_frequency]


class CorpusStream:
    """The corpus's documents, streamed from its files on each pass (never held), counted as they go by for
    zh_bert_vocab.json; the first 20 are kept for `verify_tokdir`. An empty corpus is refused up front."""

    def __init__(self, paths: list[str], max_docs: Optional[int]):
        self.paths, self.max_docs = list(paths), max_docs
        self.head = list(itertools.islice(iter_documents(self.paths), min(20, max_docs or 20)))
        if not self.head:
            raise ZhBertError(f"{', '.join(map(str, self.paths))}: empty corpus (no text to evaluate or learn from)")
        self.docs = self.chars = 0

    def __iter__(self) -> Iterator[str]:
        self.docs = self.chars = 0
        for doc in itertools.islice(iter_documents(self.paths), self.max_docs):
            self.docs += 1
            self.chars += len(doc)
            yield doc
