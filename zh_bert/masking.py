"""Dynamic masking for masked-LM pretraining: one vectorised function, five strategies.

Every strategy is the same algorithm on a different *unit*:

- ``token``          unit = one token (BERT's 80/10/10, Devlin et al. 2019);
- ``wwm``            unit = one jieba word: all its tokens are predicted together (Chinese BERT-wwm,
                     Cui et al. 2019), the budget is counted in tokens;
- ``ngram``          unit = a span of 1..``max_ngram`` consecutive jieba words, span lengths drawn with
                     MacBERT's word-level n-gram probabilities 40/30/20/10 % for 1..4-grams (Cui et al.
                     2020, "Revisiting Pre-Trained Models for Chinese NLP", §3.2), truncated to
                     ``max_ngram`` and renormalised (3 -> 4/9, 3/9, 2/9);
- ``unigram-noise``  unit = one token as in ``token``, but the "random token" replacements are drawn from
                     the corpus unigram distribution instead of uniformly (Xie et al. 2017, "Data Noising as
                     Smoothing in Neural Network Language Models"), so it differs from ``token`` in exactly
                     one thing.

Units are picked in random order until ``mask_rate`` of the maskable tokens of each sequence is reached;
the unit that crosses the budget is taken with probability (budget left / its length), which makes the
expected number of predicted tokens exactly ``mask_rate × maskable tokens`` whatever the word lengths
(Google's wwm skips words that overflow and so undershoots). Special tokens ([CLS], [SEP], [PAD], ...)
are never picked. Then each picked token independently becomes [MASK] (``mask_token_prob``), a random
token (``random_token_prob``) or stays unchanged, as in Google's create_pretraining_data.py.

- ``correction``     unit = one jieba word, picked exactly as in ``wwm``, but no ``[MASK]`` is ever shown:
                     MacBERT's "MLM as correction" (Cui et al. 2020, §3.2). Each picked *word* (not each
                     token) is replaced by a similar word of the same length in tokens
                     (``mask_token_prob``, 0.8), by random tokens (``random_token_prob``, 0.1) or kept (the
                     rest); a word without a similar word gets random tokens. Similar words come from a
                     table (``zh_bert.similar_words``) learned from the shard dir's own train split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence, Union

import numpy as np

from zh_bert.config import option
from zh_bert.errors import ZhBertError

# one generator for a whole batch, or one per row (masks keyed per sequence)
Rng = Union[np.random.Generator, Sequence[np.random.Generator]]

STRATEGIES = ("token", "wwm", "ngram", "unigram-noise", "correction")
# strategies whose unit is one jieba word
WORD_STRATEGIES = ("wwm", "correction")

# MacBERT's n-gram masking probabilities for 1..4 words (Cui et al. 2020, §3.2).
MACBERT_NGRAM_PROBS = (0.4, 0.3, 0.2, 0.1)


@dataclass
class MaskingConfig:
    """How tokens are picked and replaced; the fields are also the `--masking/--mask-rate/...` options of
    every command that masks (eval mlm, inspect) and the masking keys of a recipe."""
    strategy: Literal["token", "wwm", "ngram", "unigram-noise", "correction"] = option(
        "wwm", flags=("--masking",),
        help="unit of masking: token | wwm (jieba words) | ngram | unigram-noise | correction (MacBERT)")
    mask_rate: float = option(0.15, help="fraction of maskable tokens predicted")
    mask_token_prob: float = option(0.8, help="of predicted tokens: replaced by [MASK] (correction: of predicted "
                                         "words, replaced by a similar word)")
    random_token_prob: float = option(0.1, help="of predicted tokens: replaced by a random token (correction: "
                                           "words by random tokens); the rest kept")
    max_ngram: int = option(3, help=f"longest span of words for masking ngram (1..{len(MACBERT_NGRAM_PROBS)})")

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            from zh_bert.errors import suggest

            raise ZhBertError(f"masking strategy '{self.strategy}' is not one of {', '.join(STRATEGIES)}"
                              f"{suggest(self.strategy, STRATEGIES)}")
        if not 0.0 < self.mask_rate < 1.0:
            raise ZhBertError(f"masking mask_rate must be in (0, 1), got {self.mask_rate}")
        for name in ("mask_token_prob", "random_token_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ZhBertError(f"masking {name} must be in [0, 1], got {getattr(self, name)}")
        if self.mask_token_prob + self.random_token_prob > 1.0 + 1e-9:
            raise ZhBertError(f"masking mask_token_prob + random_token_prob must be <= 1, got "
                              f"{self.mask_token_prob} + {self.random_token_prob}")
        if not 1 <= self.max_ngram <= len(MACBERT_NGRAM_PROBS):
            raise ZhBertError(f"masking max_ngram must be 1..{len(MACBERT_NGRAM_PROBS)}, got {self.max_ngram}")

    def ngram_probs(self) -> np.ndarray:
        p = np.asarray(MACBERT_NGRAM_PROBS[: self.max_ngram], dtype=np.float64)
        return p / p.sum()


def _draw(rng: Rng, counts: np.ndarray, draw) -> np.ndarray:
    """`counts[b]` random values for each row b, concatenated in row order: `draw(generator, n)` called once
    on the one generator, or once per row on that row's own generator. Either way each generator sees the
    same calls whatever else is in the batch, so a row masked alone or beside others gets the same mask."""
    if isinstance(rng, np.random.Generator):
        return draw(rng, int(np.sum(counts)))
    if len(rng) != len(counts):
        raise ValueError(f"{len(rng)} generators for {len(counts)} rows")
    parts = [draw(g, int(c)) for g, c in zip(rng, counts)]
    return np.concatenate(parts) if parts else draw(np.random.default_rng(0), 0)


def _unit_starts(word_start: np.ndarray, special: np.ndarray, cfg: MaskingConfig, rng: Rng) -> np.ndarray:
    """(B, L) bool: where a masking unit (token / word / n-gram span) begins. Special tokens are
    always units of their own, so no unit ever contains one."""
    B, L = special.shape
    prev_special = np.zeros_like(special)
    prev_special[:, 1:] = special[:, :-1]
    boundary = special | prev_special
    boundary[:, 0] = True
    if cfg.strategy in ("token", "unigram-noise"):
        return np.ones((B, L), dtype=bool)
    starts = word_start.astype(bool) | boundary
    if cfg.strategy in WORD_STRATEGIES:
        return starts
    # ngram: partition each row's word stream into spans of n words, n ~ MacBERT probabilities (one draw
    # per word, the j-th draw sizing the j-th span); spans are also cut around special tokens.
    word_pos = np.flatnonzero(starts.ravel())             # flat position of every word start, row by row
    words = starts.sum(axis=1)                            # (B,) words per row
    cdf = np.cumsum(cfg.ngram_probs())
    u = _draw(rng, words, lambda g, k: g.random(k))
    n = 1 + np.searchsorted(cdf / cdf[-1], u, side="right")   # what Generator.choice(p=...) computes
    first = np.cumsum(words) - words                      # index of each row's first word
    row = np.repeat(np.arange(B), words)
    before = np.cumsum(n) - n
    local = before - before[first][row]                   # word index in its row where each span begins
    out = np.zeros(B * L, dtype=bool)
    keep = local < words[row]
    out[word_pos[(first[row] + local)[keep]]] = True
    out |= boundary.ravel()
    return out.reshape(B, L)


def word_units(word_start: np.ndarray, special: np.ndarray) -> np.ndarray:
    """(B, L) bool: where a jieba word begins, as ``wwm`` and ``correction`` pick them (special tokens are
    words of their own)."""
    return _unit_starts(word_start, special, MaskingConfig("wwm"), None)


def mask_batch(input_ids: np.ndarray, word_start: np.ndarray, cfg: MaskingConfig, rng: Rng,
               *, mask_id: int, special_ids, vocab_size: int, unigram_probs: np.ndarray | None = None,
               similar=None) -> tuple[np.ndarray, np.ndarray]:
    """Mask a (B, L) batch. Returns (masked input ids, labels) as int64, labels -100 where not predicted.

    `rng` is one generator for the batch, or a list of B generators, one per row: then each row's mask
    depends on its own generator only, which is how the training loader keys masks to places in the
    sample stream (exact resume, same masks on any number of processes) while masking a batch at once.

    `word_start[b, t]` is True where token t begins a jieba word. `unigram_probs` (vocab_size,) is required
    for ``unigram-noise``; special ids get zero probability there and are never drawn as random tokens.
    `similar` (a `zh_bert.similar_words.SimilarWords`) is required for ``correction``.
    """
    if cfg.strategy == "correction" and similar is None:
        raise ZhBertError("masking strategy 'correction' needs a similar-word table, which is learned from a "
                          "SHARDDIR's train split (zh-bert pretrain and inspect build it); this command has none")
    ids = np.asarray(input_ids).astype(np.int64, copy=False)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be (batch, seq_len), got shape {ids.shape}")
    B, L = ids.shape
    special_ids = np.asarray(sorted(set(int(s) for s in special_ids)), dtype=np.int64)
    special = np.isin(ids, special_ids)
    starts = _unit_starts(np.asarray(word_start, dtype=bool).reshape(B, L), special, cfg, rng)

    # Units: global id per token; length, row and "maskable" per unit.
    unit = np.cumsum(starts.ravel()) - 1
    n_units = int(unit[-1]) + 1 if unit.size else 0
    unit_len = np.bincount(unit, minlength=n_units)
    unit_row = np.flatnonzero(starts.ravel()) // L
    unit_ok = np.bincount(unit, weights=special.ravel(), minlength=n_units) == 0
    budget = cfg.mask_rate * (~special).sum(axis=1)      # (B,) tokens to predict, in expectation

    # Random order of units within each row (non-maskable last), cumulative token count in that order.
    units_per_row = np.bincount(unit_row, minlength=B)
    key = _draw(rng, units_per_row, lambda g, k: g.random(k)) + (~unit_ok) * 2.0
    order = np.lexsort((key, unit_row))
    lens = np.where(unit_ok[order], unit_len[order], 0)
    cum = np.cumsum(lens)
    row_sorted = unit_row[order]
    row_first = np.searchsorted(row_sorted, np.arange(B))  # first sorted unit of each row
    row_base = np.where(row_first > 0, cum[np.maximum(row_first - 1, 0)], 0)
    before = cum - lens - row_base[row_sorted]           # tokens already taken in this row
    left = budget[row_sorted] - before
    take = unit_ok[order] & (left >= lens)
    crossing = unit_ok[order] & (left > 0) & (left < lens)
    take |= crossing & (_draw(rng, units_per_row, lambda g, k: g.random(k)) * np.maximum(lens, 1) < left)
    chosen_unit = np.zeros(n_units, dtype=bool)
    chosen_unit[order[take]] = True
    selected = chosen_unit[unit].reshape(B, L) & ~special

    labels = np.where(selected, ids, -100)
    masked = ids.copy()
    if cfg.strategy == "correction":
        _correct(masked.ravel(), np.flatnonzero(starts.ravel())[chosen_unit], unit_len[chosen_unit],
                 unit_row[chosen_unit], B, cfg, rng, similar, special_ids, vocab_size)
        return masked, labels
    u = _draw(rng, np.full(B, L), lambda g, k: g.random(k)).reshape(B, L)
    to_mask = selected & (u < cfg.mask_token_prob)
    to_random = selected & (u >= cfg.mask_token_prob) & (u < cfg.mask_token_prob + cfg.random_token_prob)
    masked[to_mask] = mask_id
    if to_random.any():
        masked[to_random] = _random_tokens(to_random.sum(axis=1), cfg, rng, special_ids, vocab_size, unigram_probs)
    return masked, labels


def _correct(flat: np.ndarray, start: np.ndarray, length: np.ndarray, row: np.ndarray, B: int,
             cfg: MaskingConfig, rng: Rng, similar, special_ids: np.ndarray, vocab_size: int) -> None:
    """MacBERT's replacement, in place on the flat ids: each picked word (flat `start`, `length` in tokens,
    batch `row`, in flat order) becomes a similar word of the same length (`mask_token_prob`), random tokens
    (`random_token_prob`, and every word the table has no similar word for) or stays. One decision per word,
    all of it array lookups."""
    u = _draw(rng, np.bincount(row, minlength=B), lambda g, k: g.random(k))
    to_similar = np.flatnonzero(u < cfg.mask_token_prob)
    to_random = (u >= cfg.mask_token_prob) & (u < cfg.mask_token_prob + cfg.random_token_prob)
    rows = similar.find(flat, start[to_similar], length[to_similar])     # -1: no similar word
    found = rows >= 0
    replacement = np.full(len(start), -1, dtype=np.int64)               # table row of each word's substitute
    pick_u = _draw(rng, np.bincount(row[to_similar[found]], minlength=B), lambda g, k: g.random(k))
    replacement[to_similar[found]] = similar.pick(rows[found], pick_u)
    to_random[to_similar[~found]] = True                                # fallback: random tokens
    word = np.repeat(np.arange(len(start)), length)                     # every token of the picked words
    offset = np.arange(len(word)) - np.repeat(np.cumsum(length) - length, length)
    pos = start[word] + offset
    sub = replacement[word]
    take = sub >= 0
    flat[pos[take]] = similar.tokens[sub[take], offset[take]]
    rand = to_random[word]
    if rand.any():
        per_row = np.bincount(row[word[rand]], minlength=B)
        flat[pos[rand]] = _random_tokens(per_row, cfg, rng, special_ids, vocab_size, None)


def _random_tokens(per_row: np.ndarray, cfg: MaskingConfig, rng: Rng, special_ids: np.ndarray,
                   vocab_size: int, unigram_probs: np.ndarray | None) -> np.ndarray:
    """`per_row[b]` random token ids for each row b, concatenated in row order."""
    if cfg.strategy == "unigram-noise":
        if unigram_probs is None:
            raise ZhBertError("masking strategy 'unigram-noise' needs the corpus unigram distribution "
                              "(ShardDataset.unigram_probs())")
        p = np.array(unigram_probs, dtype=np.float64)
        if p.shape != (vocab_size,):
            raise ZhBertError(f"unigram_probs has shape {p.shape}, expected ({vocab_size},)")
        p[special_ids[special_ids < vocab_size]] = 0.0
        cdf = np.cumsum(p)
        if cdf[-1] <= 0:
            raise ZhBertError("unigram_probs has no mass outside the special tokens")
        u = _draw(rng, per_row, lambda g, k: g.random(k))
        return np.searchsorted(cdf, u * cdf[-1], side="right").clip(0, vocab_size - 1)
    # uniform over the non-special vocabulary: draw among (vocab_size - n_special) slots and skip specials
    specials = special_ids[(special_ids >= 0) & (special_ids < vocab_size)]
    draws = _draw(rng, per_row, lambda g, k: g.integers(0, vocab_size - len(specials), size=k))
    return draws + np.searchsorted(specials - np.arange(len(specials)), draws, side="right")
