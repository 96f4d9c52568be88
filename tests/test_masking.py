"""Masking strategies on real shards (sample corpus, Google's vocab, rjieba word boundaries)."""

from __future__ import annotations

import numpy as np
import pytest

from _shard_helpers import chi2_critical, chi2_stat
from zh_bert.core.errors import ZhBertError
from zh_bert.train.masking import STRATEGIES, MaskingConfig, mask_batch

# the strategies that show [MASK]; `correction` (similar words instead) is tested in test_correction.py
MASK_STRATEGIES = tuple(s for s in STRATEGIES if s != "correction")


@pytest.fixture(scope="module")
def ds(build_shards, sample_jsonl, google_tokdir):
    from zh_bert.train.data import ShardDataset

    return ShardDataset(build_shards(sample_jsonl, google_tokdir,
                                     "--valid-docs", "20"))


@pytest.fixture(scope="module")
def rows(ds):
    """All train rows (~1.2k x 128) as one batch, plus a padded copy with [SEP]s inside."""
    return ds.batch(np.arange(len(ds)))


def masked(ds, rows, cfg, seed=0, n_rep=1):
    """Mask all rows n_rep times (fresh randomness each time): (orig, word_start, masked, labels) stacked."""
    rng = np.random.default_rng(seed)
    outs = [mask_batch(rows["input_ids"], rows["word_start"], cfg, rng, mask_id=ds.mask_id,
                       special_ids=ds.special_ids, vocab_size=ds.vocab_size,
                       unigram_probs=ds.unigram_probs()) for _ in range(n_rep)]
    rep = lambda a: np.concatenate([a] * n_rep)  # noqa: E731
    return (rep(rows["input_ids"]), rep(rows["word_start"]), np.concatenate([o[0] for o in outs]),
            np.concatenate([o[1] for o in outs]))


def word_ids(ws, special):
    """Per token: index of its word (a new word at every word start and around special tokens)."""
    prev = np.zeros_like(special)
    prev[:, 1:] = special[:, :-1]
    starts = ws | special | prev
    starts[:, 0] = True
    return (np.cumsum(starts.ravel()) - 1).reshape(ws.shape)


@pytest.mark.parametrize("strategy", MASK_STRATEGIES)
def test_rate_specials_and_labels(ds, rows, strategy):
    """15% ± 1% of maskable tokens over 10k sequences; no special token ever masked or replaced."""
    n_rep = -(-10_000 // len(rows["input_ids"]))
    orig, ws, inp, lab = masked(ds, rows, MaskingConfig(strategy=strategy), n_rep=n_rep)
    assert len(orig) >= 10_000
    special = np.isin(orig, ds.special_ids)
    pred = lab != -100
    assert not pred[special].any() and (inp[special] == orig[special]).all()
    assert not np.isin(inp[~special], [ds.pad_id, ds.cls_id, ds.sep_id, ds.unk_id]).any()
    rate = pred.sum() / (~special).sum()
    assert abs(rate - 0.15) < 0.01, rate
    per_seq = pred.sum(1) / np.maximum((~special).sum(1), 1)
    assert abs(np.median(per_seq) - 0.15) < 0.02
    assert (lab[pred] == orig[pred]).all() and (inp[~pred] == orig[~pred]).all()
    # 80 / 10 / 10
    is_mask = inp[pred] == ds.mask_id
    same = inp[pred] == orig[pred]
    assert abs(is_mask.mean() - 0.8) < 0.01 and abs(same.mean() - 0.1) < 0.01
    assert abs((~is_mask & ~same).mean() - 0.1) < 0.01


@pytest.mark.parametrize("strategy", ["wwm", "ngram"])
def test_every_word_fully_masked_or_untouched(ds, rows, strategy):
    orig, ws, inp, lab = masked(ds, rows, MaskingConfig(strategy=strategy), n_rep=2)
    special = np.isin(orig, ds.special_ids)
    wid = word_ids(ws, special).ravel()
    pred = (lab != -100).ravel()
    per_word = np.bincount(wid, weights=pred, minlength=wid.max() + 1)
    size = np.bincount(wid, minlength=wid.max() + 1)
    assert ((per_word == 0) | (per_word == size)).all()
    multi = size[per_word > 0] > 1
    assert multi.mean() > 0.3   # real multi-character words are being masked as a whole


def test_token_masking_splits_words(ds, rows):
    orig, ws, inp, lab = masked(ds, rows, MaskingConfig(strategy="token"))
    wid = word_ids(ws, np.isin(orig, ds.special_ids)).ravel()
    pred = (lab != -100).ravel()
    per_word = np.bincount(wid, weights=pred)
    size = np.bincount(wid)
    assert ((per_word > 0) & (per_word < size)).sum() > 1000


def test_ngram_spans_are_contiguous_whole_words_with_macbert_lengths(ds, rows):
    from zh_bert.train.masking import _unit_starts

    cfg = MaskingConfig(strategy="ngram", max_ngram=3)
    assert np.allclose(cfg.ngram_probs(), [4 / 9, 3 / 9, 2 / 9])
    special = np.isin(rows["input_ids"], ds.special_ids)
    ws = rows["word_start"]
    starts = _unit_starts(ws, special, cfg, np.random.default_rng(0))
    boundary = special | np.roll(special, 1, 1)
    assert starts[:, 0].all() and not (starts & ~(ws | boundary)).any()   # spans begin at word starts
    # words per span, measured on one long row of real word boundaries (no specials, so no span is cut
    # except the last one, which is dropped)
    flat_ws = ws[~special][None, :]
    long_starts = _unit_starts(flat_ws, np.zeros_like(flat_ws), cfg, np.random.default_rng(1))
    span = np.cumsum(long_starts.ravel()) - 1
    n_words = np.bincount(span, weights=flat_ws.ravel()).astype(int)[:-1]
    obs = np.bincount(n_words, minlength=4)[1:4]
    assert obs.sum() > 5000 and (n_words <= 3).all()
    assert chi2_stat(obs, cfg.ngram_probs()) < chi2_critical(2)
    # selected tokens form spans of whole words: 2- and 3-word masked runs appear much more than in wwm
    o, w, i, lab = masked(ds, rows, cfg)
    o2, w2, i2, lab2 = masked(ds, rows, MaskingConfig(strategy="wwm"))

    def multiword_runs(lab, ws):
        pred = lab != -100
        run_start = pred & ~np.roll(pred, 1, 1)
        inner_word_starts = pred & ws & ~run_start
        return inner_word_starts.sum() / run_start.sum()

    assert multiword_runs(lab, w) > 1.5 * multiword_runs(lab2, w2)


def test_unigram_noise_replacements_follow_corpus_frequencies(ds, rows):
    """Chi-square goodness of fit of the random replacements against the shard's unigram distribution
    (top 200 tokens + 'other'); uniform replacements (strategy token) must fail the same test."""
    p = ds.unigram_probs()
    top = np.argsort(p)[::-1][:200]
    expected = np.append(p[top], 1 - p[top].sum())

    def replacements(strategy):
        cfg = MaskingConfig(strategy=strategy, mask_rate=0.5, mask_token_prob=0.0, random_token_prob=1.0)
        orig, ws, inp, lab = masked(ds, rows, cfg, seed=5)
        r = inp[lab != -100]
        counts = np.bincount(r, minlength=ds.vocab_size)
        return np.append(counts[top], counts.sum() - counts[top].sum()), r

    obs, r = replacements("unigram-noise")
    assert obs.sum() > 50_000 and not np.isin(r, ds.special_ids).any()
    assert chi2_stat(obs, expected) < chi2_critical(len(expected) - 1)
    obs_u, _ = replacements("token")
    assert chi2_stat(obs_u, expected) > 100 * chi2_critical(len(expected) - 1)
    with pytest.raises(ZhBertError, match="unigram"):
        mask_batch(rows["input_ids"][:2], rows["word_start"][:2], MaskingConfig("unigram-noise"),
                   np.random.default_rng(0), mask_id=103, special_ids=ds.special_ids, vocab_size=ds.vocab_size)


def test_uniform_replacements_skip_special_ids():
    from zh_bert.train.masking import _random_tokens

    r = _random_tokens(200_000, MaskingConfig("token"), np.random.default_rng(0), np.array([0, 1, 5, 9]), 10, None)
    assert set(np.unique(r)) == {2, 3, 4, 6, 7, 8}
    assert chi2_stat(np.bincount(r, minlength=10)[[2, 3, 4, 6, 7, 8]], np.full(6, 1 / 6)) < chi2_critical(5)


def test_deterministic_from_rng(ds, rows):
    for s in MASK_STRATEGIES:
        a = masked(ds, rows, MaskingConfig(strategy=s), seed=3)
        b = masked(ds, rows, MaskingConfig(strategy=s), seed=3)
        assert all((x == y).all() for x, y in zip(a, b))


def per_row_matches_row_at_a_time(ds, rows, cfg, **kw):
    """A batch masked with one generator per row == each row masked alone with its generator: the training
    loader masks a whole batch at once yet keys every sequence's mask to its place in the sample stream."""
    ids, ws = rows["input_ids"][:48], rows["word_start"][:48]
    kw = dict(mask_id=ds.mask_id, special_ids=ds.special_ids, vocab_size=ds.vocab_size, **kw)
    gens = lambda: [np.random.default_rng([9, 0, j]) for j in range(len(ids))]  # noqa: E731
    batch = mask_batch(ids, ws, cfg, gens(), **kw)
    alone = [mask_batch(ids[j:j + 1], ws[j:j + 1], cfg, g, **kw) for j, g in enumerate(gens())]
    for k in (0, 1):
        assert np.array_equal(batch[k], np.concatenate([a[k] for a in alone]))
    assert (batch[1] != -100).any()


@pytest.mark.parametrize("strategy", MASK_STRATEGIES)
def test_one_generator_per_row_masks_each_row_as_if_alone(ds, rows, strategy):
    per_row_matches_row_at_a_time(ds, rows, MaskingConfig(strategy=strategy, mask_rate=0.3),
                                  unigram_probs=ds.unigram_probs())
    with pytest.raises(ValueError, match="3 generators for 2 rows"):
        mask_batch(rows["input_ids"][:2], rows["word_start"][:2], MaskingConfig(strategy),
                   [np.random.default_rng(0)] * 3, mask_id=ds.mask_id, special_ids=ds.special_ids,
                   vocab_size=ds.vocab_size, unigram_probs=ds.unigram_probs())


def test_config_validation():
    with pytest.raises(ZhBertError, match="did you mean 'wwm'"):
        MaskingConfig(strategy="wmm")
    for bad in (dict(mask_rate=0), dict(mask_rate=1.2), dict(mask_token_prob=0.9, random_token_prob=0.2),
                dict(max_ngram=0), dict(max_ngram=5)):
        with pytest.raises(ZhBertError):
            MaskingConfig(**bad)
    from zh_bert.core.config import from_dict

    assert from_dict(MaskingConfig, {"strategy": "ngram", "mask_rate": "0.2"}).mask_rate == 0.2
