"""Vocabulary builders: documents -> ordered token list (or a SentencePiece model) -> stock HF tokenizer dir.

Four kinds, all with BERT's special tokens so `BertForMaskedLM` trains on any of them:
- `char`: Google's bert-base-chinese recipe. Every CJK character is its own token (the BERT normaliser puts
  spaces around CJK characters), Latin/digit words get WordPiece pieces. Ids are frequency ordered and can
  extend an existing vocab.txt without moving any id (`--base-vocab`).
- `wordpiece`: the `tokenizers` WordPiece trainer's algorithm (`train_wordpieces`, reproducible ties), CJK
  characters split before training.
- `sentencepiece`: unigram or BPE from the `sentencepiece` library, exported as a `tokenizers` model.
- `word`: WoBERT style, frequent jieba words plus all characters; encoding is greedy longest-match over
  each run of text between spaces/punctuation (see `word_tokenizer`).

Every kind is deterministic: the same corpus and options give byte-identical vocab.txt / tokenizer.json /
spiece.model on every run and machine (the `tokenizers` trainer itself is not; sentencepiece runs a fixed
number of threads).

Memory does not grow with the corpus: documents are streamed once; char/wordpiece/word keep counts only (word
tables bounded by `COUNT_CAP`), sentencepiece a reproducible sample of at most `--sample-mb` MB of sentences.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import io
import itertools
import json
import random
import re
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Literal, Optional

from zh_bert.config import option
from zh_bert.corpus_io import iter_documents
from zh_bert.errors import ZhBertError
from zh_bert.fileio import atomic_dir, check_replaceable, read_vocab_txt, recover
from zh_bert.text import BERT_CJK_RANGES, is_bert_punct, sentence_end_offsets

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_SIZE = {"char": 21128, "wordpiece": 21128, "sentencepiece": 21128, "word": 40000}
MODEL_MAX_LENGTH = 512
WORD_MAX_CHARS = 512  # longest run between punctuation that `word` still matches (longer -> one [UNK])
# sentencepiece splits the corpus into this many chunks and sums their statistics in float: the model depends on
# the thread count (6,000-piece unigram and BPE models differ for 1, 2, 4 and 8 threads), so it is fixed, never
# os.cpu_count(): the same corpus and options give the same spiece.model on every machine.
SPM_THREADS = 8
# Memory bounds (counts and samples, never documents, are held: peak RSS does not grow with the corpus):
# a word-count table holds at most this many distinct words; past it the rarest are dropped (`_prune`). jieba
# words (`word`) cost ~150 bytes each; BERT words (`char`/`wordpiece`: Latin/digit runs, CJK characters) are
# also spelled out token by token for the WordPiece learner (~1 KB each), hence the smaller bound. The bundled
# sample corpora (84k jieba words, 15k BERT words) are far below both: counted exactly.
COUNT_CAP = {"jieba": 1 << 18, "bert": 1 << 16}
# sentencepiece trains on at most --sample-mb MB of sentences (a reproducible uniform sample, `sample_sentences`).
SPM_SAMPLE_MB = 50.0


Kind = Literal["char", "wordpiece", "sentencepiece", "word"]
KINDS = typing.get_args(Kind)


@dataclass
class VocabOptions:
    """What the vocabulary is made of; recorded in zh_bert_vocab.json."""
    kind: Kind = option("char", help="char: one token per CJK character + WordPiece for Latin (bert-base-chinese "
                        "style); wordpiece: tokenizers WordPiece trainer; sentencepiece: unigram/BPE; word: jieba "
                        "words + all characters (WoBERT style)")
    size: Optional[int] = option(None, help="vocabulary size including special tokens (default: "
                                 + ", ".join(f"{k} {v}" for k, v in DEFAULT_SIZE.items())
                                 + "; with --base-vocab: base + every new character). char/word stop early when "
                                   "the corpus has nothing more to add")
    min_frequency: int = option(1, help="drop characters/pieces seen fewer times (word kind: words need max(2, this))")
    unused: int = option(99, help="number of [unusedN] slots after [PAD] (99: Google's ids [UNK]=100 [CLS]=101 "
                         "[SEP]=102 [MASK]=103; 0 gives [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4)")
    base_vocab: Optional[str] = option(None, metavar="vocab.txt", help="char/word: start from this vocab (e.g. "
                                       "Google's) and append new entries; no id moves")
    model_type: Literal["unigram", "bpe"] = option("unigram", help="sentencepiece model type")
    character_coverage: float = option(0.9995, help="sentencepiece: share of character occurrences covered "
                                       "(rarer ones -> [UNK])")
    sample_mb: float = option(SPM_SAMPLE_MB, help="sentencepiece: train on at most this many MB (UTF-8) of "
                              "sentences, a reproducible uniform sample of a bigger corpus (its memory grows with "
                              "this (~1.4 GB at 50), not with the corpus; like spm's input_sentence_size)")

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ZhBertError(f"--kind must be one of {', '.join(KINDS)}, got '{self.kind}'")
        if self.size is not None and self.size < 1:
            raise ZhBertError(f"--size must be a positive integer, got {self.size}")
        if self.min_frequency < 1:
            raise ZhBertError(f"--min-frequency must be >= 1, got {self.min_frequency}")
        if not 0 <= self.unused <= 10000:
            raise ZhBertError(f"--unused must be between 0 and 10000, got {self.unused}")
        if self.model_type not in ("unigram", "bpe"):
            raise ZhBertError(f"--model-type must be unigram or bpe, got '{self.model_type}'")
        if self.base_vocab and self.kind not in ("char", "word"):
            raise ZhBertError(f"--base-vocab works with --kind char or word, not {self.kind}")
        if not 0.9 <= self.character_coverage <= 1.0:
            raise ZhBertError(f"--character-coverage must be in [0.9, 1], got {self.character_coverage}")
        if not 1 <= self.sample_mb <= 1e6:
            raise ZhBertError(f"--sample-mb must be between 1 and 1000000 (MB), got {self.sample_mb}")


@dataclass
class VocabConfig:
    """`zh-bert vocab CORPUS... -o TOKDIR [options]` as one value: `build_vocab(VocabConfig(...))`."""
    corpus: list[str] = option(positional=True, metavar="CORPUS",
                               help='docs.jsonl ({"text", "source"} per line), .txt (one document per line) '
                                    'or a directory of parts (*.jsonl, *.jsonl.gz: a `zh-bert clean` OUTDIR)')
    output: str = option(flags=("-o",), metavar="TOKDIR", help="output tokenizer dir (must not exist)")
    options: VocabOptions = field(default_factory=VocabOptions)
    max_docs: Optional[int] = option(None, help="use only the first N documents")
    force: bool = option(False, help="replace TOKDIR if it exists")
    quiet: bool = option(False, flags=("-q",), help="no summary line")

    def __post_init__(self):
        if self.max_docs is not None and self.max_docs < 1:
            raise ZhBertError(f"--max-docs must be a positive integer, got '{self.max_docs}'")


def special_layout(unused: int) -> list[str]:
    """[PAD], [unused1..N], [UNK], [CLS], [SEP], [MASK]: with N=99 exactly Google's ids 0..103."""
    return ["[PAD]"] + [f"[unused{i}]" for i in range(1, unused + 1)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def bert_normalizer(split_cjk: bool):
    from tokenizers import normalizers

    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=split_cjk, strip_accents=None,
                                      lowercase=True)


class CorpusCounts:
    """What one pass over the documents leaves: character counts and word counts.

    Documents are read one at a time and only counts are kept, so memory depends on the number of distinct
    characters and words, not on the corpus size; the word table is bounded too (`COUNT_CAP`, `_prune`)."""

    def __init__(self, words: Optional[str] = None):
        self.chars: collections.Counter = collections.Counter()   # every non-whitespace character
        self.words: collections.Counter = collections.Counter()   # 'bert' or 'jieba' words (see `count_corpus`)
        self.kind, self.pruned_below = words, 0
        self._norm = bert_normalizer(split_cjk=False)
        self._splitter = _BertWords() if words == "bert" else None
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
    'bert' = the words BertPreTokenizer makes once the normaliser has put spaces around CJK characters
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
        self._fixed = "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in BERT_CJK_RANGES) + _char_class(
            (c for c in map(chr, range(128)) if is_bert_punct(c)), python=True)
        self._punct: set[str] = set()
        self._compile()

    def _compile(self) -> None:
        cls = self._fixed + (_char_class(self._punct, python=True) if self._punct else "")
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


def load_base_vocab(path: str | Path) -> list[str]:
    """A vocab.txt to extend; duplicates, blank entries and missing specials are refused (they break ids)."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"--base-vocab {path}: no such file")
    try:
        tokens = read_vocab_txt(path)
    except UnicodeDecodeError:
        raise ZhBertError(f"--base-vocab {path}: not UTF-8 text") from None
    if not tokens:
        raise ZhBertError(f"--base-vocab {path}: empty vocabulary")
    first: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if tok == "":
            raise ZhBertError(f"--base-vocab {path}:{i + 1}: blank entry (id {i})")
        if tok in first:
            raise ZhBertError(f"--base-vocab {path}: duplicate entry {tok!r} at lines {first[tok] + 1} and {i + 1} "
                              f"(the second id {i} could never be produced)")
        first[tok] = i
    missing = [s for s in SPECIALS if s not in first]
    if missing:
        raise ZhBertError(f"--base-vocab {path}: missing special token(s) {', '.join(missing)}; "
                          f"a BERT vocab needs all of {', '.join(SPECIALS)}")
    return tokens


def _size_error(size: int, n_special: int, counts: collections.Counter, need: int, what: str) -> ZhBertError:
    """`--size` too small: say how big it must be and which --min-frequency would make it fit."""
    hint = ""
    for k in (2, 3, 5, 10, 20, 50, 100, 200, 500, 1000):
        if n_special + sum(1 for n in counts.values() if n >= k) <= size:
            hint = f", or --min-frequency {k} to drop rarer characters"
            break
    return ZhBertError(f"--size {size} is smaller than the {n_special} special tokens plus the {need - n_special:,} "
                       f"{what} of this corpus; use --size >= {need}{hint}")


def _join(left: str, right: str) -> str:
    return left + right.removeprefix("##")


def train_wordpieces(docs: Iterable[str], vocab_size: int, min_frequency: int, specials: list[str],
                     limit_alphabet: Optional[int] = None,
                     word_counts: Optional[collections.Counter] = None) -> list[str]:
    """What the `tokenizers` WordPieceTrainer learns (BERT normalisation, CJK characters split), but
    deterministic: tokens by id.

    The `tokenizers` trainer is BPE with a '##' continuation prefix, and it is not reproducible: it gives
    '##x' continuations ids in Rust HashMap order (random per process), breaks ties between pairs of equal
    count by those ids, and breaks count ties in `limit_alphabet` arbitrarily, so two runs on the same corpus
    reorder pieces and disagree on the piece at the size cut-off. Re-ranking its output afterwards cannot fix
    that (which pieces exist at all already depends on the ties), so this is the same algorithm with every
    tie broken by strings:
    - words: `count_corpus(docs, 'bert')` (the trainer's normaliser and pre-tokenizer, exact counts);
    - alphabet: every character of the words (with `limit_alphabet`: the most frequent, ties by code point),
      in code-point order, after `specials`; then the '##x' continuations, in code-point order;
    - merges: repeatedly the adjacent pair with the highest count (summed over words x word counts), ties
      by the ids of (left, right), lowest first: the trainer's own rule, now on reproducible ids (it favours
      pairs of older, shorter tokens among equal counts); 'ab' + '##c' -> 'abc', a new piece takes the next
      id. Stops at `vocab_size` tokens or when the best pair is seen fewer than `min_frequency` times. Like
      the trainer, the alphabet is always kept whole, so the result can be longer than `vocab_size`.
    Quality is the trainer's: same counts, same greedy merges, same tie rule; on the 1,616-document zhwiki
    sample at 8,000 tokens it differs from a trainer run by about as much as two trainer runs differ from
    each other (a few dozen pieces at the cut-off). Only multi-character non-CJK words ever merge, so this
    runs in about a second in Python.
    """
    wc = word_counts if word_counts is not None else count_corpus(docs, "bert").words
    tokens, words, freqs = _wordpiece_alphabet(wc, specials, limit_alphabet)
    return _merge_pairs(tokens, words, freqs, vocab_size, min_frequency)


def _wordpiece_alphabet(wc: collections.Counter, specials: list[str], limit_alphabet: Optional[int]
                        ) -> tuple[list[str], list[list[str]], list[int]]:
    """(specials + characters + '##' continuations, every multi-token word spelled in them, word counts)."""
    alpha: collections.Counter = collections.Counter()
    for w, n in wc.items():
        for ch in w:
            alpha[ch] += n
    kept = sorted(alpha.items(), key=lambda kv: (-kv[1], kv[0]))
    if limit_alphabet is not None and len(kept) > limit_alphabet:
        kept = kept[:limit_alphabet]
    alphabet = {c for c, _ in kept}
    tokens = list(dict.fromkeys(specials))
    seen = set(tokens)
    for c in sorted(alphabet):
        if c not in seen:
            seen.add(c)
            tokens.append(c)
    words: list[list[str]] = []
    freqs: list[int] = []
    conts: set[str] = set()
    cont = {c: "##" + c for c in alphabet}  # one string per continuation, shared by every word
    for w, n in sorted(wc.items()):
        toks = [c if i == 0 else cont[c] for i, c in enumerate(w) if c in alphabet]
        conts.update(t for t in toks if t.startswith("##"))
        if len(toks) > 1:
            words.append(toks)
            freqs.append(n)
    for t in sorted(conts):
        if t not in seen:
            seen.add(t)
            tokens.append(t)
    return tokens, words, freqs


def _merge_pairs(tokens: list[str], words: list[list[str]], freqs: list[int], vocab_size: int,
                 min_frequency: int) -> list[str]:
    """Greedy merges of the most frequent adjacent pair (ties by ids) until `vocab_size` tokens; `words`
    are rewritten in place. A heap with lazy deletion: an entry whose count changed is re-pushed."""
    pairs: collections.Counter = collections.Counter()
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, toks in enumerate(words):
        for p in zip(toks, toks[1:]):
            pairs[p] += freqs[i]
            where[p].add(i)
    ids = {t: i for i, t in enumerate(tokens)}
    heap = [(-n, ids[a], ids[b], a, b) for (a, b), n in pairs.items()]
    heapq.heapify(heap)
    while heap and len(tokens) < vocab_size:
        neg, ia, ib, a, b = heapq.heappop(heap)
        n = pairs.get((a, b), 0)
        if n != -neg:  # stale entry: the count changed since it was pushed
            if n > 0:
                heapq.heappush(heap, (-n, ia, ib, a, b))
            continue
        if n < max(1, min_frequency):
            break
        piece = _join(a, b)
        if piece not in ids:
            ids[piece] = len(tokens)
            tokens.append(piece)
        touched = set()
        for i in where.pop((a, b)):
            old, new = words[i], _merge_word(words[i], a, b, piece)
            if len(new) == len(old):
                continue
            for p in zip(old, old[1:]):
                pairs[p] -= freqs[i]
                touched.add(p)
            for p in zip(new, new[1:]):
                pairs[p] += freqs[i]
                where[p].add(i)
                touched.add(p)
            words[i] = new
        pairs.pop((a, b), None)
        touched.discard((a, b))
        for p in touched:
            if pairs[p] > 0:
                heapq.heappush(heap, (-pairs[p], ids[p[0]], ids[p[1]], *p))
            else:
                del pairs[p]
    return tokens


def _merge_word(old: list[str], a: str, b: str, piece: str) -> list[str]:
    """`old` with every (a, b) replaced by `piece`: non-overlapping, left to right (as the trainer merges)."""
    new, k = [], 0
    while k < len(old):
        if k + 1 < len(old) and old[k] == a and old[k + 1] == b:
            new.append(piece)
            k += 2
        else:
            new.append(old[k])
            k += 1
    return new


def _extend(tokens: list[str], new: Iterable[str], limit: int) -> list[str]:
    seen = set(tokens)
    out = list(tokens)
    for t in new:
        if len(out) >= limit:
            break
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def build_char(cc: CorpusCounts, o: VocabOptions) -> tuple[list[str], dict]:
    """specials (or base vocab) + characters by frequency + '##x' continuations + Latin/digit pieces."""
    counts, words = cc.chars, cc.words
    conts_all = continuation_counts(words)
    chars = by_frequency(counts, o.min_frequency)
    conts = by_frequency(conts_all, o.min_frequency)
    base = load_base_vocab(o.base_vocab) if o.base_vocab else None
    if base:
        size = o.size or len(_extend(base, chars + conts, 1 << 30))
        if size < len(base):
            raise ZhBertError(f"--size {size} is smaller than --base-vocab's {len(base)} entries; "
                              f"ids can only be kept, never dropped")
        tokens = _extend(base, chars + conts, size)
    else:
        size = o.size or DEFAULT_SIZE["char"]
        tokens = special_layout(o.unused) + chars + conts
        if size < len(tokens):
            raise _size_error(size, o.unused + len(SPECIALS), counts, len(tokens),
                              "characters and '##' continuations")
    extra = size - len(tokens) + 100
    for _ in range(4):  # Latin/digit pieces from the WordPiece learner (CJK chars are single-char words)
        if len(tokens) >= size:
            break
        trainer_size = len(SPECIALS) + len(counts) + len(conts_all) + extra
        pieces = train_wordpieces((), trainer_size, o.min_frequency, special_layout(0), word_counts=words)
        tokens = _extend(tokens, [p for p in pieces if len(p.removeprefix("##")) > 1 and p not in SPECIALS], size)
        if len(pieces) < trainer_size:
            break  # the corpus has no more pieces to give
        extra *= 4  # many pieces were already in --base-vocab: train more
    return tokens, {"characters": sum(1 for t in tokens if len(t) == 1),
                    "added_to_base": len(tokens) - len(base) if base else None}


def build_wordpiece(cc: CorpusCounts, o: VocabOptions) -> tuple[list[str], dict]:
    size = o.size or DEFAULT_SIZE["wordpiece"]
    head = special_layout(o.unused)
    limit = None
    if o.min_frequency > 1:  # the trainer keeps every character unless limit_alphabet says otherwise
        limit = len(by_frequency(cc.chars, o.min_frequency))
    tokens = train_wordpieces((), size, o.min_frequency, head, limit_alphabet=limit, word_counts=cc.words)
    if len(tokens) > size:  # the trainer always keeps its whole alphabet
        raise ZhBertError(f"--size {size} is smaller than the {len(head)} special tokens plus the "
                          f"{len(tokens) - len(head):,}-entry alphabet (characters and '##' continuations) of this "
                          f"corpus; use --size >= {len(tokens)}, or a higher --min-frequency")
    return tokens, {"characters": len([t for t in tokens if len(t) == 1])}


def build_word(cc: CorpusCounts, o: VocabOptions) -> tuple[list[str], dict]:
    """specials (or base vocab) + every character by frequency + jieba words by frequency up to --size."""
    counts = cc.chars
    chars = by_frequency(counts, o.min_frequency)
    base = load_base_vocab(o.base_vocab) if o.base_vocab else None
    head = base or special_layout(o.unused)
    size = o.size or max(DEFAULT_SIZE["word"], len(head) + len(chars))
    if base and size < len(base):
        raise ZhBertError(f"--size {size} is smaller than --base-vocab's {len(base)} entries; "
                          f"ids can only be kept, never dropped")
    if not base and size < len(head) + len(chars):
        raise _size_error(size, len(head), counts, len(head) + len(chars), "characters")
    wc = cc.words
    known = set(chars) | {t for t in head if len(t) == 1}
    words = [w for w in by_frequency(wc, max(2, o.min_frequency)) if all(c in known for c in w)]
    tokens = _extend(_extend(head, chars, size), words, size)
    return tokens, {"characters": len([t for t in tokens if len(t) == 1]),
                    "words": len([t for t in tokens if len(t) > 1 and not t.startswith(("[", "##"))]),
                    "added_to_base": len(tokens) - len(base) if base else None}


# ---------------------------------------------------------------------------------------------- tokenizers


def _post_processor(token_to_id: dict[str, int]):
    from tokenizers import processors

    return processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", token_to_id["[CLS]"]), ("[SEP]", token_to_id["[SEP]"])])


def _add_specials(tk) -> None:
    """Specials are matched before normalisation, so '[MASK]' in text is never lowercased into pieces."""
    from tokenizers import AddedToken

    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])


def bert_tokenizer(tokens: list[str]):
    """Exactly what transformers' BertTokenizer builds from a vocab.txt (uncased, CJK chars split)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = bert_normalizer(split_cjk=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece(prefix="##")
    tk.post_processor = _post_processor(vocab)
    _add_specials(tk)
    return tk


def _char_class(chars: Iterable[str], python: bool = False) -> str:
    """A regex character-class body covering `chars` as escaped code-point ranges (compact, nothing
    to mis-escape); `\\x{..}` for the tokenizers (Oniguruma) engine, `\\U........` for Python's re."""
    esc = (lambda cp: f"\\U{cp:08X}") if python else (lambda cp: f"\\x{{{cp:X}}}")
    cps = sorted({ord(c) for c in chars})
    parts, i = [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(esc(cps[i]) + (f"-{esc(cps[j])}" if j > i else ""))
        i = j + 1
    return "".join(parts)


def word_tokenizer(tokens: list[str]):
    """Word vocab as a stock `tokenizers` pipeline that round-trips through tokenizer.json.

    jieba cannot run inside tokenizer.json, so segmentation is greedy longest-match (forward maximum
    matching) over each run between whitespace/punctuation: a WordPiece model with an empty continuation
    prefix. Characters missing from the vocab are split off first, so one rare character costs one [UNK]
    instead of turning the whole run into [UNK] (WordPiece's all-or-nothing rule).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="",
                                    max_input_chars_per_word=WORD_MAX_CHARS))
    tk.normalizer = bert_normalizer(split_cjk=False)
    singles = [t for t in tokens if len(t) == 1 and not t.isspace()]
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.BertPreTokenizer(),
        pre_tokenizers.Split(Regex(f"[^{_char_class(singles)}]"), behavior="isolated"),
    ])
    tk.decoder = decoders.WordPiece(prefix="##")
    tk.post_processor = _post_processor(vocab)
    _add_specials(tk)
    return tk


def spm_normalizer():
    """NFKC + BERT-uncased cleaning: applied to the training text *and* stored in tokenizer.json, so the
    pieces were learned on exactly what the tokenizer sees (spm itself trains with the identity rule)."""
    from tokenizers import normalizers

    return normalizers.Sequence([normalizers.NFKC(), bert_normalizer(split_cjk=False)])


def _sentences_with_spaces(text: str) -> list[str]:
    """`text` cut after each sentence end, whitespace kept: spm trains on pieces exactly as the tokenizer
    will see them (a space after '。' is a '▁' it has to learn)."""
    cuts = [0, *sentence_end_offsets(text), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if text[a:b].strip()]


def sample_sentences(sentences: Iterable[str], max_bytes: int, seed: int = 0) -> tuple[list[str], int]:
    """(a uniform sample of `sentences` of at most `max_bytes` UTF-8 bytes, in corpus order; how many were
    seen), in memory bounded by `max_bytes`: each sentence gets a seeded random key and those with the
    smallest keys are kept (bottom-k sampling with a byte budget), so the same corpus gives the same sample.
    When everything fits, the sample is every sentence, in order."""
    rng = random.Random(seed)
    heap: list[tuple[float, int, str, int]] = []
    total = n = 0
    for n, text in enumerate(sentences, 1):
        size = len(text.encode("utf-8"))
        heapq.heappush(heap, (-rng.random(), n, text, size))
        total += size
        while total > max_bytes:
            total -= heapq.heappop(heap)[3]
    heap.sort(key=lambda e: e[1])
    return [e[2] for e in heap], n


def _drain(items: list[str]) -> Iterator[str]:
    """`items` in order, each dropped from the list once handed over (sentencepiece copies what it reads:
    the sample is not held twice)."""
    items.reverse()
    while items:
        yield items.pop()


def train_sentencepiece(docs: Iterable[str], o: VocabOptions) -> tuple[bytes, dict]:
    """spm on at most `o.sample_mb` MB of the corpus's sentences (`sample_sentences`, streamed: one
    document at a time), as spm's own `input_sentence_size` bounds its memory, but in bytes and reproducible."""
    import sentencepiece as spm

    size = o.size or DEFAULT_SIZE["sentencepiece"]
    norm = spm_normalizer()
    sentences, seen = sample_sentences((s for d in docs for s in _sentences_with_spaces(norm.normalize_str(d))),
                                       int(o.sample_mb * 1e6))
    stats = {"sentences": len(sentences), "sentences_sampled_from": seen if seen > len(sentences) else None}
    unused = [f"[unused{i}]" for i in range(1, o.unused + 1)]
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_drain(sentences), model_writer=model, vocab_size=size, model_type=o.model_type,
            pad_id=0, pad_piece="[PAD]", unk_id=o.unused + 1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            user_defined_symbols=unused + ["[CLS]", "[SEP]", "[MASK]"], add_dummy_prefix=False,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            character_coverage=o.character_coverage, max_sentence_length=1 << 16,
            num_threads=SPM_THREADS, minloglevel=2,
            hard_vocab_limit=o.size is not None)  # default size on a small corpus: as many pieces as it has
    except RuntimeError as e:  # spm reports "Vocabulary size is smaller than required_chars", "too high", ...
        msg = str(e).strip().splitlines()[-1]
        small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", msg)
        large = re.search(r"too high \((\d+)\)\. Please set it to a value <= (\d+)", msg)
        if small:
            raise ZhBertError(f"--size {size} is smaller than the {int(small.group(1)):,} pieces sentencepiece must "
                              f"keep ({len(unused) + 5} special tokens plus the characters that cover "
                              f"{o.character_coverage} of the text); use --size >= {int(small.group(1)):,} or a "
                              f"lower --character-coverage") from None
        if large:
            raise ZhBertError(f"--size {size} is more pieces than this corpus supports (at most "
                              f"{int(large.group(2)):,}); use a smaller --size or a bigger corpus") from None
        raise ZhBertError(f"--size {size}: sentencepiece refused to train: {msg}") from None
    return model.getvalue(), stats


def _spm_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """BPE merges implied by an spm BPE vocab: every split of a piece into two pieces, ranked by the id
    of the result (spm ids are in merge order), as transformers' converter does."""
    merges = []
    for piece, pid in vocab.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((pid, vocab[left], vocab[right], left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def spm_tokenizer(model_proto: bytes, model_type: str = "unigram"):
    """The spm model as a `tokenizers` Unigram/BPE with the same normaliser and whitespace handling
    (no dummy prefix: spaces become '▁' at the start of the following piece)."""
    import sentencepiece as spm
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    if sp.unk_id() < 0:  # pragma: no cover - we always train with an unk piece
        raise RuntimeError("sentencepiece model without an unknown piece")
    if model_type == "bpe":
        model = models.BPE(vocab, _spm_merges(vocab), unk_token="[UNK]", fuse_unk=True, byte_fallback=False)
    else:
        model = models.Unigram(pieces, unk_id=sp.unk_id(), byte_fallback=False)
    tk = Tokenizer(model)
    tk.normalizer = spm_normalizer()
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tk.post_processor = _post_processor(vocab)
    _add_specials(tk)
    return tk, [p for p, _ in pieces]


# ---------------------------------------------------------------------------------------------- TOKDIR


def tokenizer_config(kind: str) -> dict:
    """char/wordpiece: BertTokenizer (what every BERT user expects; transformers 5 rebuilds it from the vocab
    with these flags, 4.x reads tokenizer.json). word/sentencepiece: PreTrainedTokenizerFast, which loads
    tokenizer.json verbatim in 4.x and 5.x (BertTokenizer would re-split every CJK character)."""
    cfg = {"tokenizer_class": "BertTokenizer" if kind in ("char", "wordpiece") else "PreTrainedTokenizerFast",
           "model_max_length": MODEL_MAX_LENGTH, "clean_up_tokenization_spaces": False}
    if kind in ("char", "wordpiece"):
        cfg.update(do_lower_case=True, tokenize_chinese_chars=True, strip_accents=None)
    cfg.update(special_tokens_map())
    cfg["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    return cfg


def special_tokens_map() -> dict:
    return {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
            "mask_token": "[MASK]"}


def build_tokenizer(docs: Iterable[str], o: VocabOptions):
    """-> (tokenizers.Tokenizer, tokens by id, extra files {name: bytes}, stats). One pass over `docs` (a
    list, or documents streamed from files): only counts, or a bounded sample for sentencepiece, are kept."""
    if o.kind == "sentencepiece":
        proto, stats = train_sentencepiece(docs, o)
        tk, tokens = spm_tokenizer(proto, o.model_type)
        return tk, tokens, {"spiece.model": proto}, stats
    builder = {"char": build_char, "wordpiece": build_wordpiece, "word": build_word}[o.kind]
    counts = count_corpus(docs, "jieba" if o.kind == "word" else "bert")
    tokens, stats = builder(counts, o)
    if counts.pruned_below:
        stats["words_pruned_below"] = counts.pruned_below + 1
    tk = word_tokenizer(tokens) if o.kind == "word" else bert_tokenizer(tokens)
    return tk, tokens, {}, stats


META_FILE = "zh_bert_vocab.json"
# Every file `write_tokdir` may write: `--force` replaces a dir holding these and nothing else.
TOKDIR_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                          "spiece.model", META_FILE})


def write_tokdir(out: Path, tk, tokens: list[str], kind: str, extra: dict[str, bytes], meta: dict) -> None:
    """Write every file of a TOKDIR into `out` (a fresh temp dir: the caller renames it when complete)."""
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)  # a temp dir is created 0700; the TOKDIR is meant to be shared like any model dir
    # tokenizers' own save() reports a full disk as a bare Exception; Python's write gives the OSError (errno)
    # that atomic_dir turns into the one-line disk error. Same bytes as save().
    (out / "tokenizer.json").write_text(tk.to_str(pretty=True), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(kind), ensure_ascii=False, indent=2)
                                               + "\n", encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(special_tokens_map(), indent=2) + "\n",
                                                 encoding="utf-8")
    if kind != "sentencepiece":  # BERT-style: vocab.txt for transformers 4.x / original BERT code
        (out / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    for name, data in extra.items():
        (out / name).write_bytes(data)
    (out / "zh_bert_vocab.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n",
                                            encoding="utf-8")


def verify_tokdir(tokdir: Path, tk, tokens: list[str], sample: list[str]) -> None:
    """Load the dir back with AutoTokenizer and compare with the tokenizer we built: catches the silent
    failures of transformers 5 (vocab file ignored, ids rebuilt differently) before anyone trains on it."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tokdir))
    problems = []
    if len(hf) != len(tokens):
        problems.append(f"{len(hf)} tokens loaded, {len(tokens)} written")
    for s in SPECIALS:
        if hf.convert_tokens_to_ids(s) != tokens.index(s):
            problems.append(f"{s} -> {hf.convert_tokens_to_ids(s)}, expected {tokens.index(s)}")
    for text in sample:
        text = text[:256]  # keep under model_max_length: no length warning
        if hf(text)["input_ids"] != tk.encode(text).ids:
            problems.append(f"AutoTokenizer encodes {text[:30]!r} differently from tokenizer.json")
            break
    if problems:  # a bug in this module, not a user error
        raise RuntimeError(f"{tokdir}: tokenizer does not load back as built: {'; '.join(problems)}")


def build_vocab(config: VocabConfig) -> Path:
    """Build the TOKDIR `config.output` (atomically: nothing appears unless every file was written and
    verified); returns its path. Its zh_bert_vocab.json says what was built."""
    out, o = Path(config.output), config.options
    recover(out)
    if out.exists() and not config.force:
        raise ZhBertError(f"{out}: output directory exists; pass --force to replace it")
    check_replaceable(out, META_FILE, TOKDIR_FILES.__contains__, "a tokenizer dir written by zh-bert vocab")
    if o.base_vocab:
        load_base_vocab(o.base_vocab)  # a bad --base-vocab is refused before the corpus is read
    t0 = time.perf_counter()
    docs = _Tally(config.corpus, config.max_docs)
    tk, tokens, extra, stats = build_tokenizer(docs, o)
    meta = {
        "kind": o.kind, "vocab_size": len(tokens),
        "special_ids": {s: tokens.index(s) for s in SPECIALS},
        "corpus": [str(p) for p in config.corpus], "corpus_docs": docs.docs, "corpus_chars": docs.chars,
        "options": dataclasses.asdict(o), "build_seconds": round(time.perf_counter() - t0, 3),
        "tokenizer_class": tokenizer_config(o.kind)["tokenizer_class"],
        "encoding": ENCODING_NOTE[o.kind], **{k: v for k, v in stats.items() if v is not None},
    }
    with atomic_dir(out, overwrite=config.force) as tmp:
        write_tokdir(tmp, tk, tokens, o.kind, extra, meta)
        verify_tokdir(tmp, tk, tokens, docs.head)
    return out


class _Tally:
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


ENCODING_NOTE = {
    "char": "BERT uncased WordPiece; every CJK character one token (identical to Google's BertTokenizer)",
    "wordpiece": "BERT uncased WordPiece (the tokenizers trainer's algorithm); CJK characters split before training",
    "sentencepiece": "NFKC + lowercase, then the SentencePiece model (no dummy prefix)",
    "word": "greedy longest-match over jieba words and characters within each run between spaces/punctuation",
}
