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

This module holds the options and the TOKDIR; the work is below it, each module importing only those under
it: `tokenizer_json` (specials, normaliser, tokenizer.json pipelines, config files) <- `counts` (the
streaming pass) <- `wordpiece` (the learner); `tokenizer_json` <- `spm` (sample, train, export).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    atomic_dir,
    claim_dir,
    read_vocab_txt,
    recover,
    write_bytes,
    write_text,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.vocab.counts import (
    CorpusCounts,
    CorpusStream,
    by_frequency,
    continuation_counts,
    count_corpus,
)
from zh_bert.corpus.vocab.spm import SPM_SAMPLE_MB, spm_tokenizer, train_sentencepiece
from zh_bert.corpus.vocab.tokenizer_json import (
    SPECIALS,
    bert_tokenizer,
    special_layout,
    special_tokens_map,
    tokenizer_config,
    word_tokenizer,
)
from zh_bert.corpus.vocab.wordpiece import train_wordpieces

DEFAULT_SIZE = {"char": 21128, "wordpiece": 21128, "sentencepiece": 21128, "word": 40000}
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
    max_docs: Optional[int] = option_of(Shared, "max_docs")
    force: bool = option_of(Shared, "force", help="replace TOKDIR if it exists (only a TOKDIR zh-bert wrote)")
    quiet: bool = option_of(Shared, "quiet", help="no summary line")

    def __post_init__(self):
        if self.max_docs is not None and self.max_docs < 1:
            raise ZhBertError(f"--max-docs must be a positive integer, got '{self.max_docs}'")


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


def build_tokenizer(docs: Iterable[str], o: VocabOptions):
    """-> (tokenizers.Tokenizer, tokens by id, extra files {name: bytes}, stats). One pass over `docs` (a
    list, or documents streamed from files): only counts, or a bounded sample for sentencepiece, are kept."""
    if o.kind == "sentencepiece":
        proto, stats = train_sentencepiece(
            docs, o.size or DEFAULT_SIZE["sentencepiece"], exact_size=o.size is not None, model_type=o.model_type,
            unused=o.unused, character_coverage=o.character_coverage, sample_mb=o.sample_mb)
        tk, tokens = spm_tokenizer(proto, o.model_type)
        return tk, tokens, {"spiece.model": proto}, stats
    builder = {"char": build_char, "wordpiece": build_wordpiece, "word": build_word}[o.kind]
    counts = count_corpus(docs, "jieba" if o.kind == "word" else "pretokenizer")
    tokens, stats = builder(counts, o)
    if counts.pruned_below:
        stats["words_pruned_below"] = counts.pruned_below + 1
    tk = word_tokenizer(tokens) if o.kind == "word" else bert_tokenizer(tokens)
    return tk, tokens, {}, stats


META_FILE = "zh_bert_vocab.json"
# Every file `write_tokdir` may write: `--force` replaces a dir holding these and nothing else.
TOKDIR_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                          "spiece.model", META_FILE})


def _tokdir_entry(name: str, is_dir: bool) -> bool:
    return not is_dir and name in TOKDIR_FILES


def write_tokdir(out: Path, tk, tokens: list[str], kind: str, extra: dict[str, bytes], meta: dict) -> None:
    """Write every file of a TOKDIR into `out` (a fresh temp dir: the caller renames it when complete)."""
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)  # a temp dir is created 0700; the TOKDIR is meant to be shared like any model dir
    # tokenizers' own save() reports a full disk as a bare Exception; Python's write gives the OSError (errno)
    # that atomic_dir turns into the one-line disk error. Same bytes as save().
    write_text(out / "tokenizer.json", tk.to_str(pretty=True))
    write_text(out / "tokenizer_config.json", json.dumps(tokenizer_config(kind), ensure_ascii=False, indent=2) + "\n")
    write_text(out / "special_tokens_map.json", json.dumps(special_tokens_map(), indent=2) + "\n")
    if kind != "sentencepiece":  # BERT-style: vocab.txt for transformers 4.x / original BERT code
        write_text(out / "vocab.txt", "\n".join(tokens) + "\n")
    for name, data in extra.items():
        write_bytes(out / name, data)
    write_text(out / "zh_bert_vocab.json", json.dumps(meta, ensure_ascii=False, indent=2) + "\n")


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
    if out.exists() and not config.force:   # the hint first; what --force may replace is the layer's to say
        raise ZhBertError(f"{out}: output directory exists; pass --force to replace it")
    claim_dir(out, inputs=[*config.corpus, o.base_vocab], legacy=_tokdir_entry, force=config.force, need_force=True,
              proof=lambda p: (p / META_FILE).is_file(), what="a tokenizer dir written by zh-bert vocab")
    if o.base_vocab:
        load_base_vocab(o.base_vocab)  # a bad --base-vocab is refused before the corpus is read
    t0 = time.perf_counter()
    docs = CorpusStream(config.corpus, config.max_docs)
    tk, tokens, extra, stats = build_tokenizer(docs, o)
    meta = {
        "kind": o.kind, "vocab_size": len(tokens),
        "special_ids": {s: tokens.index(s) for s in SPECIALS},
        "corpus": [str(p) for p in config.corpus], "corpus_docs": docs.docs, "corpus_chars": docs.chars,
        "options": dataclasses.asdict(o), "build_seconds": round(time.perf_counter() - t0, 3),
        "tokenizer_class": tokenizer_config(o.kind)["tokenizer_class"],
        "encoding": ENCODING_NOTE[o.kind], **{k: v for k, v in stats.items() if v is not None},
    }
    with atomic_dir(out, overwrite=config.force, legacy=_tokdir_entry) as tmp:
        write_tokdir(tmp, tk, tokens, o.kind, extra, meta)
        verify_tokdir(tmp, tk, tokens, docs.head)
    return out


ENCODING_NOTE = {
    "char": "BERT uncased WordPiece; every CJK character one token (identical to Google's BertTokenizer)",
    "wordpiece": "BERT uncased WordPiece (the tokenizers trainer's algorithm); CJK characters split before training",
    "sentencepiece": "NFKC + lowercase, then the SentencePiece model (no dummy prefix)",
    "word": "greedy longest-match over jieba words and characters within each run between spaces/punctuation",
}
