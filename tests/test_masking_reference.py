"""A row-by-row reference for `zh_bert.train.masking.mask_batch`: plain loops over one sequence, written from the
module docstring of `zh_bert.train.masking`, must give the same masks (input ids and labels) as the vectorised
code for every strategy, on real shards of the sample corpus (Google's vocab, rjieba word boundaries).

The reference masks one sequence with its own generator, so it is compared with `mask_batch` given one
generator per row (as the training loader calls it) and given one generator for a one-row batch. From that
generator it draws, in this order:

1. ``ngram`` only: one uniform per word of the row; the j-th sizes the j-th span;
2. one uniform per unit: the random order in which units are visited;
3. one uniform per unit: the coin of the unit that crosses the budget (the k-th for the k-th unit visited);
4. ``token``, ``wwm``, ``ngram``, ``unigram-noise``: one uniform per token (80/10/10), then one random
   token per token that gets one, in position order;
   ``correction``: one uniform per picked word, in position order; one uniform per word that goes similar
   and has similar words (which one); one random token per token of the words that get random tokens.
"""

from __future__ import annotations

import bisect
import functools
import shutil

import numpy as np
import pytest

from zh_bert.train.masking import STRATEGIES, MaskingConfig, mask_batch

SETTINGS = (dict(mask_rate=0.15, max_ngram=3), dict(mask_rate=0.4, max_ngram=4),
            dict(mask_rate=0.15, max_ngram=1, mask_token_prob=0.5, random_token_prob=0.4))
BATCH, N_BATCHES, SEEDS = 24, 3, (0, 1)


def reference_units(word_start, special, cfg, g) -> list[tuple[int, int]]:
    """(start, length) of every unit of one sequence, left to right."""
    L = len(special)
    cut = [t == 0 or special[t] or special[t - 1] for t in range(L)]    # no unit holds a special token
    if cfg.strategy in ("token", "unigram-noise"):
        starts = list(range(L))
    else:
        words = [t for t in range(L) if word_start[t] or cut[t]]
        starts = words
        if cfg.strategy == "ngram":
            cdf = np.cumsum(cfg.ngram_probs())
            cdf = cdf / cdf[-1]
            spans, j = [], 0
            for u in g.random(len(words)):              # the j-th draw sizes the j-th span
                if j >= len(words):
                    break
                spans.append(words[j])
                j += 1 + sum(c <= u for c in cdf)       # n words with probability ngram_probs()[n - 1]
            starts = sorted(set(spans) | {t for t in range(L) if cut[t]})
    ends = starts[1:] + [L]
    return [(s, e - s) for s, e in zip(starts, ends)]


def reference_pick(units, special, mask_rate, g) -> list[tuple[int, int]]:
    """The units to predict, in position order: visited in random order, each taken while it fits in the
    budget (mask_rate x maskable tokens), the one crossing it with probability (budget left / length)."""
    maskable = [not any(special[s:s + n]) for s, n in units]
    budget = mask_rate * (len(special) - sum(special))
    key, coin = g.random(len(units)), g.random(len(units))
    order = sorted(range(len(units)), key=lambda i: (not maskable[i], key[i]))
    picked, seen = [], 0                                # seen: tokens of the maskable units visited so far
    for k, i in enumerate(order):
        if not maskable[i]:
            continue
        n, left = units[i][1], budget - seen
        if left >= n or (left > 0 and coin[k] * n < left):
            picked.append(units[i])
        seen += n
    return sorted(picked)


@functools.lru_cache(maxsize=4)
def non_special(vocab_size: int, specials: frozenset) -> list[int]:
    return [i for i in range(vocab_size) if i not in specials]


def random_tokens(k, cfg, g, specials, vocab_size, unigram_probs) -> list[int]:
    """k random tokens, never a special one: from the unigram distribution (``unigram-noise``), else
    uniformly."""
    if k == 0:
        return []
    if cfg.strategy == "unigram-noise":
        p = np.array(unigram_probs, dtype=np.float64)
        p[sorted(specials)] = 0.0
        cdf = np.cumsum(p)
        return [bisect.bisect_right(cdf, u * cdf[-1]) for u in g.random(k)]
    allowed = non_special(vocab_size, frozenset(specials))
    return [allowed[d] for d in g.integers(0, len(allowed), size=k)]


def reference_replace(out, picked, cfg, g, mask_id, draw_random) -> None:
    """80/10/10 per picked token: [MASK], a random token, or kept."""
    u = g.random(len(out))
    to_random = []
    for s, n in picked:
        for t in range(s, s + n):
            if u[t] < cfg.mask_token_prob:
                out[t] = mask_id
            elif u[t] < cfg.mask_token_prob + cfg.random_token_prob:
                to_random.append(t)
    for t, tok in zip(to_random, draw_random(len(to_random))):
        out[t] = tok


def reference_correct(out, picked, cfg, g, table, word_rows, draw_random) -> None:
    """Per picked word: a similar word of the same length (80%), random tokens (10%, and every word without
    a similar word), or kept."""
    ids = list(out)
    u = g.random(len(picked))
    to_similar, to_random = [], []
    for w, (s, n) in enumerate(picked):
        if u[w] < cfg.mask_token_prob:
            row = word_rows.get(tuple(ids[s:s + n]))
            if row is None:
                to_random.append(w)
            else:
                to_similar.append((w, row))
        elif u[w] < cfg.mask_token_prob + cfg.random_token_prob:
            to_random.append(w)
    for (w, row), v in zip(to_similar, g.random(len(to_similar))):
        sub = table.neighbours[row, int(v * table.n_neighbours[row])]   # uniformly among its neighbours
        s, n = picked[w]
        assert table.lengths[sub] == n
        out[s:s + n] = table.tokens[sub, :n].tolist()
    positions = []
    for w in sorted(to_random):                          # in position order
        s, n = picked[w]
        positions += range(s, s + n)
    for t, tok in zip(positions, draw_random(len(positions))):
        out[t] = tok


def reference_mask(ids, word_start, cfg, g, *, specials, mask_id, vocab_size, unigram_probs, table,
                   word_rows):
    """(masked ids, labels) of one sequence."""
    ids = [int(t) for t in ids]
    special = [t in specials for t in ids]
    picked = reference_pick(reference_units(word_start, special, cfg, g), special, cfg.mask_rate, g)
    labels = [-100] * len(ids)
    for s, n in picked:
        labels[s:s + n] = ids[s:s + n]
    out = list(ids)
    draw_random = functools.partial(random_tokens, cfg=cfg, g=g, specials=specials, vocab_size=vocab_size,
                                    unigram_probs=unigram_probs)
    if cfg.strategy == "correction":
        reference_correct(out, picked, cfg, g, table, word_rows, draw_random)
    else:
        reference_replace(out, picked, cfg, g, mask_id, draw_random)
    return out, labels


@pytest.fixture(scope="module")
def ds(build_shards, sample_jsonl, google_tokdir, tmp_path_factory):
    """The sample shards, in a private copy (the similar-word table is written into the shard dir)."""
    from zh_bert.train.data import ShardDataset

    dst = tmp_path_factory.mktemp("masking_reference") / "shards"
    shutil.copytree(build_shards(sample_jsonl, google_tokdir, "--valid-docs", "20"), dst)
    return ShardDataset(dst, "train")


@pytest.fixture(scope="module")
def table(ds):
    from zh_bert.corpus.similar_words import load_or_build

    return load_or_build(ds)


@pytest.fixture(scope="module")
def word_rows(table) -> dict:
    """Word tokens -> row of the table, for the words that have similar words."""
    return {tuple(table.tokens[r, :table.lengths[r]].tolist()): r for r in range(len(table.keys))
            if table.n_neighbours[r] > 0}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_reference_gives_the_same_masks(ds, table, word_rows, strategy, setting):
    cfg = MaskingConfig(strategy, **setting)
    kw = dict(mask_id=ds.mask_id, vocab_size=ds.vocab_size, unigram_probs=ds.unigram_probs())
    specials = set(int(s) for s in ds.special_ids)
    replaced = 0
    for seed in SEEDS:
        for b in range(N_BATCHES):
            rows = ds.batch(np.arange(b * BATCH, (b + 1) * BATCH) * 7 % len(ds))
            ids, ws = rows["input_ids"], rows["word_start"]
            gens = lambda: [np.random.default_rng([seed, b, j]) for j in range(len(ids))]  # noqa: E731
            got = mask_batch(ids, ws, cfg, gens(), special_ids=ds.special_ids, similar=table, **kw)
            want = [reference_mask(ids[j], ws[j], cfg, g, specials=specials, table=table,
                                   word_rows=word_rows, **kw)
                    for j, g in enumerate(gens())]
            assert got[0].tolist() == [w[0] for w in want]
            assert got[1].tolist() == [w[1] for w in want]
            alone = mask_batch(ids[:1], ws[:1], cfg, gens()[0], special_ids=ds.special_ids, similar=table, **kw)
            assert alone[0].tolist() == [want[0][0]] and alone[1].tolist() == [want[0][1]]
            replaced += int(((got[0] != ids) & (got[1] != -100)).sum())
    assert replaced > 100      # the masks compared are not trivial
