"""Pure Chinese text utilities shared by the stages: CJK detection and sentence splitting.

No state, no I/O: later stages (vocab, shard, eval) call these on cleaned documents.
"""

from __future__ import annotations

import re

import numpy as np

# CJK Unified Ideographs (+ Extension A..H, compatibility ideographs) and the ideographic zero 〇.
# These are what BERT's BasicTokenizer splits into single characters (its _is_chinese_char), plus 〇.
_CJK_RANGES = (
    (0x3007, 0x3007),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2EBEF),
    (0x2F800, 0x2FA1F),
    (0x30000, 0x323AF),
)
_CJK_CLASS = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _CJK_RANGES)
_CJK_RE = re.compile(f"[{_CJK_CLASS}]")

SENTENCE_ENDS = "。！？；…!?;"
CLOSING_QUOTES = "”’」』）"  # not ASCII quotes: they may open the next sentence
# A sentence ends after one or more end marks, plus any closing quotes/brackets that follow them;
# a run like "……" or "？！" stays attached to its sentence.
_SENT_RE = re.compile(f"[^{SENTENCE_ENDS}\n]*(?:[{SENTENCE_ENDS}]+[{re.escape(CLOSING_QUOTES)}]*|\n|$)")


def is_cjk(ch: str) -> bool:
    """True for a Han ideograph (CJK Unified Ideographs incl. extensions, compatibility ideographs, 〇)."""
    cp = ord(ch)
    return any(a <= cp <= b for a, b in _CJK_RANGES)


# Lookup table over all code points (1.1 MB, built once): one fancy-indexing pass per document,
# ~5x faster than a regex findall or a searchsorted over the range bounds.
_CJK_TABLE = np.zeros(0x110000, dtype=bool)
for _a, _b in _CJK_RANGES:
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
