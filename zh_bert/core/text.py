"""Pure Chinese text utilities shared by the stages: which code points are Han characters, which are
punctuation, and where sentences end.

No state, no I/O. Every stage asks these questions through this module, so cleaning, vocabulary building,
sharding and evaluation agree on them.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

# The code points BERT's BasicTokenizer (`_is_chinese_char`) and the tokenizers BertNormalizer
# (handle_chinese_chars) put spaces around: each is a token of its own in every BERT vocab. (The Rust
# BertNormalizer starts the 2B820 block at 2B920: 256 rare extension-E characters on which they differ.)
BERT_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# Han characters for counting and filtering: BERT's ranges, the newer extensions (C..H) and the
# ideographic zero 〇.
CJK_RANGES = (
    (0x3007, 0x3007),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2EBEF),
    (0x2F800, 0x2FA1F),
    (0x30000, 0x323AF),
)
CJK_CLASS = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in CJK_RANGES)  # regex character-class body

SENTENCE_ENDS = "。！？；…!?;"
CLOSING_QUOTES = "”’」』）"  # not ASCII quotes: they may open the next sentence
# A sentence ends after one or more end marks plus any closing quotes/brackets that follow them ("……",
# "？！" and `。”` stay attached to their sentence), or at a newline.
SENTENCE_END_RE = re.compile(f"[{re.escape(SENTENCE_ENDS)}]+[{re.escape(CLOSING_QUOTES)}]*|\n")
_SENT_RE = re.compile(f"[^{SENTENCE_ENDS}\n]*(?:[{SENTENCE_ENDS}]+[{re.escape(CLOSING_QUOTES)}]*|\n|$)")


def is_cjk(ch: str) -> bool:
    """True for a Han ideograph (CJK Unified Ideographs incl. extensions, compatibility ideographs, 〇)."""
    cp = ord(ch)
    return any(a <= cp <= b for a, b in CJK_RANGES)


def is_bert_cjk(ch: str) -> bool:
    """True for the characters BERT's tokenizer splits off as single tokens (its `_is_chinese_char`)."""
    cp = ord(ch)
    return any(a <= cp <= b for a, b in BERT_CJK_RANGES)


def is_bert_punct(ch: str) -> bool:
    """BERT's `_is_punctuation`: ASCII symbols plus every Unicode P* character (split off by BertPreTokenizer)."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


# Lookup table over all code points (1.1 MB, built once): one fancy-indexing pass per document,
# ~5x faster than a regex findall or a searchsorted over the range bounds.
_CJK_TABLE = np.zeros(0x110000, dtype=bool)
for _a, _b in CJK_RANGES:
    _CJK_TABLE[_a:_b + 1] = True


def count_cjk(text: str) -> int:
    """Number of Han characters."""
    if not text:
        return 0
    return int(np.count_nonzero(_CJK_TABLE[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)]))


def cjk_ratio(text: str) -> float:
    """Han characters / non-whitespace characters (0.0 for text without any)."""
    n = sum(map(len, text.split()))
    return count_cjk(text) / n if n else 0.0


def sentence_end_offsets(text: str) -> list[int]:
    """Offsets just after each sentence end of `text` (the same ends `split_sentences` cuts at)."""
    return [m.end() for m in SENTENCE_END_RE.finditer(text)]


def split_sentences(text: str) -> list[str]:
    """Split Chinese text into sentences after 。！？；… (and ASCII !?;), keeping closing quotes with the
    sentence they close (`他说：“好。”` is one sentence). Newlines are hard boundaries; whitespace around
    sentences is stripped and empty pieces are dropped, so ''.join(result) equals the text without the
    newlines and the whitespace at sentence edges."""
    out = []
    for m in _SENT_RE.finditer(text):
        s = m.group().strip()
        if s:
            out.append(s)
    return out
