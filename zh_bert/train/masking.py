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
                     table (``zh_bert.corpus.similar_words``) learned from the shard dir's own train split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence, Union

import numpy as np

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.corpus.segment import special_cuts, word_units

# one generator for a whole batch, or one per row (masks keyed per sequence)
Rng = Union[np.random.Generator, Sequence[np.random.Generator]]

# the masking strategies: what each picks as its unit and what replaces it
STRATEGY_HELP = {
    "token": "token (BERT)",
    "wwm": "wwm = whole jieba words",
    "ngram": "ngram = spans of 1..max_ngram words (MacBERT)",
    "unigram-noise": "unigram-noise = token with random replacements drawn from the corpus unigram distribution",
    "correction": "correction = words replaced by similar words instead of [MASK] (MacBERT)",
}
STRATEGIES = tuple(STRATEGY_HELP)
Strategy = Literal[STRATEGIES]
# strategies whose unit is one jieba word
WORD_STRATEGIES = ("wwm", "correction")

# MacBERT's n-gram masking probabilities for 1..4 words (Cui et al. 2020, §3.2).
MACBERT_NGRAM_PROBS = (0.4, 0.3, 0.2, 0.1)


@dataclass
class MaskingConfig:
    """How tokens are picked and replaced; the fields are also the `--masking/--mask-rate/...` options of
    every command that masks (eval mlm, inspect) and the masking keys of a recipe."""
    strategy: Strategy = option("wwm", flags=("--masking",), help="unit of masking: " + "; ".join(STRATEGY_HELP.values()))
    mask_rate: float = option(0.15, help="fraction of maskable tokens predicted")
    mask_token_prob: float = option(0.8, help="of predicted tokens: replaced by [MASK] (correction: of predicted "
                                         "words, replaced by a similar word)")
    random_token_prob: float = option(0.1, help="of predicted tokens: replaced by a random token (correction: "
                                           "words by random tokens); the rest kept")
    max_ngram: int = option(3, help=f"longest span of words for masking ngram (1..{len(MACBERT_NGRAM_PROBS)})")

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
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


def scheduled_mask_rate(kind: str, base: float, peak: float, warmup: int, total: int, step: int) -> float:
    """The mask rate at optimizer step `step` (0-based): `base` (kind constant), or rise-decay's linear rise to
    `peak` over `warmup` steps and linear fall back to `base` at `total` (Chinese ModernBERT, arXiv 2510.12285).
    A function of the step alone, so a resumed run, and any number of processes, masks as an uninterrupted one."""
    if kind == "constant":
        return base
    if step < warmup:
        return base + (peak - base) * (step + 1) / warmup
    return peak - (peak - base) * min(1.0, (step - warmup) / max(1, total - warmup))


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
    """(B, L) bool: where a masking unit begins: at every token (``token``, ``unigram-noise``), at every
    word (``wwm``, ``correction``) or at every n-gram span of words (``ngram``). Special tokens are always
    units of their own, so no unit ever contains one."""
    if cfg.strategy in ("token", "unigram-noise"):
        return np.ones(special.shape, dtype=bool)
    words = word_units(word_start, special)
    if cfg.strategy in WORD_STRATEGIES:
        return words
    return _ngram_starts(words, special_cuts(special), cfg, rng)


def _ngram_starts(words: np.ndarray, cuts: np.ndarray, cfg: MaskingConfig, rng: Rng) -> np.ndarray:
    """(B, L) bool: where an n-gram span begins. Each row's words are cut, left to right, into spans of
    n words, n ~ MacBERT's probabilities: one uniform per word of the row, the j-th draw sizing the j-th
    span (the draws left over after the last span go unused), so a row's draws do not depend on the
    sizes. `cuts` (special tokens) also end a span."""
    B, L = words.shape
    word_pos = np.flatnonzero(words.ravel())              # flat position of every word start, row by row
    per_row = words.sum(axis=1)                           # (B,) words per row
    cdf = np.cumsum(cfg.ngram_probs())
    u = _draw(rng, per_row, lambda g, k: g.random(k))
    n = 1 + np.searchsorted(cdf / cdf[-1], u, side="right")   # what Generator.choice(p=...) computes
    first = np.cumsum(per_row) - per_row                  # index of each row's first word
    row = np.repeat(np.arange(B), per_row)
    before = np.cumsum(n) - n
    local = before - before[first][row]                   # word index in its row where each span begins
    out = np.zeros(B * L, dtype=bool)
    keep = local < per_row[row]
    out[word_pos[(first[row] + local)[keep]]] = True
    out |= cuts.ravel()
    return out.reshape(B, L)


@dataclass
class _Units:
    """The units of a batch, numbered in flat (row, position) order: `of_token` (B*L,) the unit of every
    token; per unit its first flat position `start`, `length` in tokens, batch `row`, and `maskable` (it
    holds no special token)."""
    of_token: np.ndarray
    start: np.ndarray
    length: np.ndarray
    row: np.ndarray
    maskable: np.ndarray


def _units(starts: np.ndarray, special: np.ndarray) -> _Units:
    """The units that begin at `starts` (B, L), as flat arrays, so that picking them is array arithmetic."""
    of_token = np.cumsum(starts.ravel()) - 1
    n = int(of_token[-1]) + 1 if of_token.size else 0
    start = np.flatnonzero(starts.ravel())
    return _Units(of_token=of_token, start=start, length=np.bincount(of_token, minlength=n),
                  row=start // starts.shape[1],
                  maskable=np.bincount(of_token, weights=special.ravel(), minlength=n) == 0)


def _pick_units(units: _Units, budget: np.ndarray, B: int, rng: Rng) -> np.ndarray:
    """(n_units,) bool: the units each row predicts, `budget[b]` tokens of row b in expectation.

    A row's units are visited in random order (one uniform key per unit; units holding a special token
    sort last and are never taken). A unit is taken when it fits in what is left of the budget (the
    budget minus the tokens of the maskable units visited before it); the one unit that crosses the
    budget is taken with probability (left / its length), tested with a second uniform per unit of the
    row (its k-th draw for the k-th unit visited), so the expected count is exactly the budget."""
    per_row = np.bincount(units.row, minlength=B)
    key = _draw(rng, per_row, lambda g, k: g.random(k)) + (~units.maskable) * 2.0
    order = np.lexsort((key, units.row))                  # row by row, each row in random order
    ok = units.maskable[order]
    lens = np.where(ok, units.length[order], 0)
    left = budget[units.row[order]] - _before_in_row(lens, units.row[order], B)
    take = ok & (left >= lens)
    crossing = ok & (left > 0) & (left < lens)
    take |= crossing & (_draw(rng, per_row, lambda g, k: g.random(k)) * np.maximum(lens, 1) < left)
    chosen = np.zeros(len(units.length), dtype=bool)
    chosen[order[take]] = True
    return chosen


def _before_in_row(lens: np.ndarray, row: np.ndarray, B: int) -> np.ndarray:
    """Sum of `lens` over the earlier entries of the same row (`row` sorted): tokens visited before."""
    cum = np.cumsum(lens)
    row_first = np.searchsorted(row, np.arange(B))        # first entry of each row
    row_base = np.where(row_first > 0, cum[np.maximum(row_first - 1, 0)], 0)
    return cum - lens - row_base[row]


def mask_batch(input_ids: np.ndarray, word_start: np.ndarray, cfg: MaskingConfig, rng: Rng,
               *, mask_id: int, special_ids, vocab_size: int, unigram_probs: np.ndarray | None = None,
               similar=None) -> tuple[np.ndarray, np.ndarray]:
    """Mask a (B, L) batch. Returns (masked input ids, labels) as int64, labels -100 where not predicted.

    `rng` is one generator for the batch, or a list of B generators, one per row: then each row's mask
    depends on its own generator only, which is how the training loader keys masks to places in the
    sample stream (exact resume, same masks on any number of processes) while masking a batch at once.

    `word_start[b, t]` is True where token t begins a jieba word. `unigram_probs` (vocab_size,) is required
    for ``unigram-noise``; special ids get zero probability there and are never drawn as random tokens.
    `similar` (a `zh_bert.corpus.similar_words.SimilarWords`) is required for ``correction``.

    The steps, each drawing from `rng` in this order: the units (`_unit_starts`; ``ngram`` draws its span
    sizes), picking units until the budget (`_pick_units`), then replacing the picked tokens
    (`_replace_tokens`) or, for ``correction``, the picked words (`_correct`).
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
    units = _units(_unit_starts(np.asarray(word_start, dtype=bool).reshape(B, L), special, cfg, rng), special)
    chosen = _pick_units(units, cfg.mask_rate * (~special).sum(axis=1), B, rng)
    selected = chosen[units.of_token].reshape(B, L) & ~special
    labels = np.where(selected, ids, -100)
    masked = ids.copy()
    if cfg.strategy == "correction":
        _correct(masked.ravel(), units.start[chosen], units.length[chosen], units.row[chosen], B, cfg, rng,
                 similar, special_ids, vocab_size)
    else:
        _replace_tokens(masked, selected, cfg, rng, mask_id, special_ids, vocab_size, unigram_probs)
    return masked, labels


def _replace_tokens(masked: np.ndarray, selected: np.ndarray, cfg: MaskingConfig, rng: Rng, mask_id: int,
                    special_ids: np.ndarray, vocab_size: int, unigram_probs: np.ndarray | None) -> None:
    """BERT's 80/10/10, in place on the (B, L) ids: one uniform per token of the row (picked or not, so the
    draws do not depend on the picks); a picked token becomes [MASK] below `mask_token_prob`, a random
    token in the next `random_token_prob`, else stays. The random tokens are drawn after, in position order."""
    B, L = masked.shape
    u = _draw(rng, np.full(B, L), lambda g, k: g.random(k)).reshape(B, L)
    to_mask = selected & (u < cfg.mask_token_prob)
    to_random = selected & (u >= cfg.mask_token_prob) & (u < cfg.mask_token_prob + cfg.random_token_prob)
    masked[to_mask] = mask_id
    if to_random.any():
        masked[to_random] = _random_tokens(to_random.sum(axis=1), cfg, rng, special_ids, vocab_size, unigram_probs)


def _correction_choices(flat: np.ndarray, start: np.ndarray, length: np.ndarray, row: np.ndarray, B: int,
                        cfg: MaskingConfig, rng: Rng, similar) -> tuple[np.ndarray, np.ndarray]:
    """What becomes of each picked word (flat `start`, `length`, batch `row`, in flat order): the table row
    of its substitute (-1: none) and whether it gets random tokens.

    One uniform per word: below `mask_token_prob` a similar word, in the next `random_token_prob` random
    tokens, else kept. Then one uniform per word that goes similar and has similar words in the table
    picks one of them uniformly; a word going similar that has none gets random tokens instead."""
    u = _draw(rng, np.bincount(row, minlength=B), lambda g, k: g.random(k))
    to_similar = np.flatnonzero(u < cfg.mask_token_prob)
    to_random = (u >= cfg.mask_token_prob) & (u < cfg.mask_token_prob + cfg.random_token_prob)
    rows = similar.find(flat, start[to_similar], length[to_similar])     # -1: no similar word
    found = rows >= 0
    replacement = np.full(len(start), -1, dtype=np.int64)               # table row of each word's substitute
    pick_u = _draw(rng, np.bincount(row[to_similar[found]], minlength=B), lambda g, k: g.random(k))
    replacement[to_similar[found]] = similar.pick(rows[found], pick_u)
    to_random[to_similar[~found]] = True                                # fallback: random tokens
    return replacement, to_random


def _correct(flat: np.ndarray, start: np.ndarray, length: np.ndarray, row: np.ndarray, B: int,
             cfg: MaskingConfig, rng: Rng, similar, special_ids: np.ndarray, vocab_size: int) -> None:
    """MacBERT's replacement, in place on the flat ids: one decision per picked word
    (`_correction_choices`), so a word is replaced as a whole, by a similar word of the same length in
    tokens or by random tokens (drawn last, in position order)."""
    replacement, to_random = _correction_choices(flat, start, length, row, B, cfg, rng, similar)
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
