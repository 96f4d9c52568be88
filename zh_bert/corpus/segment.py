"""Chinese word boundaries for whole-word and n-gram masking: jieba (Python) or rjieba (jieba-rs).

Both segment the same way (same dictionary and HMM); rjieba is ~20x faster. Measured agreement on the
bundled sample corpus is in README § shard (`bench/shard_throughput.py`), which is why rjieba is the
default. A segmenter only answers "at which character positions do words start"; mapping that onto
tokens is `token_word_starts`, so any tokenizer (char, WordPiece, SentencePiece, word) works the same.
`word_units` turns those token word starts into the words that masking and the similar-word table
see, with special tokens as words of their own.
"""

from __future__ import annotations

import logging
import typing
from pathlib import Path
from typing import Literal

import numpy as np

from zh_bert.core.errors import ZhBertError, suggest

SegmenterName = Literal["rjieba", "jieba", "none"]
SEGMENTERS = typing.get_args(SegmenterName)
DEFAULT_SEGMENTER = "rjieba"


def read_user_dict(path: str | Path) -> list[tuple[str, int | None, str | None]]:
    """jieba user-dictionary lines `word [freq] [tag]` -> (word, freq, tag)."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: user dictionary not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ZhBertError(f"{path}: user dictionary is not UTF-8 text") from None
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        parts = line.strip().split()
        if not parts:
            continue
        freq = None
        if len(parts) > 1:
            try:
                freq = int(parts[1])
            except ValueError:
                raise ZhBertError(f"{path}:{n}: frequency '{parts[1]}' is not an integer "
                                  f"(format: word [freq] [tag])") from None
        out.append((parts[0], freq, parts[2] if len(parts) > 2 else None))
    return out


def check_segmenter(name: str) -> None:
    """A ZhBertError naming --segmenter (and the nearest valid name) unless `name` is one of SEGMENTERS."""
    if name not in SEGMENTERS:
        raise ZhBertError(f"--segmenter '{name}' is not one of {', '.join(SEGMENTERS)}{suggest(name, SEGMENTERS)}")


class Segmenter:
    """`word_start_mask(text)`: (len(text),) bool, True where a word begins. `none`: every character."""

    def __init__(self, name: str = DEFAULT_SEGMENTER, user_dict: str | Path | None = None):
        check_segmenter(name)
        self.name = name
        self._cut = None
        words = read_user_dict(user_dict) if user_dict else []
        if name == "jieba":
            import jieba

            jieba.setLogLevel(logging.WARNING)
            tk = jieba.Tokenizer()  # own instance: no global dictionary state
            for w, f, t in words:
                tk.add_word(w, f, t)
            self._cut = tk.lcut
        elif name == "rjieba":
            import rjieba

            tk = rjieba.Jieba()
            for w, f, t in words:
                tk.add_word(w, f, t)
            self._cut = tk.cut
        elif words:
            raise ZhBertError("--user-dict needs --segmenter jieba or rjieba (not none)")

    def words(self, text: str) -> list[str]:
        return list(text) if self._cut is None else self._cut(text)

    def word_start_mask(self, text: str) -> np.ndarray:
        mask = np.ones(len(text), dtype=bool)
        if self._cut is None or not text:
            return mask
        words = self._cut(text)
        lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        starts = np.cumsum(lens) - lens
        if starts.size and lens.sum() != len(text):
            raise RuntimeError(f"{self.name} lost characters: {lens.sum()} of {len(text)}")
        mask[:] = False
        mask[starts] = True
        return mask


def token_word_starts(char_start_mask: np.ndarray, tok_start: np.ndarray, tok_end: np.ndarray) -> np.ndarray:
    """Token t starts a word iff a word begins anywhere in [end of token t-1, start of token t].

    So a token spanning a boundary inside itself (a SentencePiece piece across two jieba words) does not
    split them: the next token continues the merged unit, and masking takes the union as one word.
    `tok_start`/`tok_end` are character offsets into the text `char_start_mask` was computed on.
    """
    if tok_start.size == 0:
        return np.zeros(0, dtype=bool)
    cum = np.concatenate([[0], np.cumsum(char_start_mask, dtype=np.int64)])  # cum[x] = starts before x
    prev_end = np.concatenate([[0], tok_end[:-1]])
    prev_end = np.minimum(prev_end, tok_start)
    out = cum[tok_start + 1] - cum[prev_end] > 0
    out[0] = True
    return out


def special_cuts(special: np.ndarray) -> np.ndarray:
    """(B, L) bool: where special tokens force a new masking unit, whatever the words: at the first token
    of a row, at every special token and right after it, so that no unit ever contains one."""
    cuts = special.astype(bool)
    cuts[:, 1:] |= special[:, :-1]
    cuts[:, 0] = True
    return cuts


def word_units(word_start: np.ndarray, special: np.ndarray) -> np.ndarray:
    """(B, L) bool: where a word begins for whole-word masking (``wwm``, ``correction``) and for the
    similar-word table, which must see the same words: the segmenter's word starts (`word_start`, from
    `token_word_starts`) plus `special_cuts`, so special tokens are words of their own."""
    return word_start.astype(bool) | special_cuts(special)
