"""`masking: correction` (MacBERT, "MLM as correction") and its similar-word table, on real shards of the
sample corpus (zhwiki + CLUECorpusSmall, Google's vocab, rjieba word boundaries)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from zh_bert.corpus import similar_words as sw
from zh_bert.core.errors import ZhBertError
from zh_bert.train.masking import MaskingConfig, mask_batch


@pytest.fixture(scope="module")
def sharddir(build_shards, sample_jsonl, google_tokdir, tmp_path_factory):
    """A private copy of the sample shards (the table is written into the shard dir)."""
    src = build_shards(sample_jsonl, google_tokdir, "--valid-docs", "20")
    dst = tmp_path_factory.mktemp("correction") / "shards"
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def ds(sharddir):
    from zh_bert.train.data import ShardDataset

    return ShardDataset(sharddir, "train")


@pytest.fixture(scope="module")
def table(ds):
    return sw.load_or_build(ds)


@pytest.fixture(scope="module")
def rows(ds):
    return ds.batch(np.arange(len(ds)))


def mask(ds, rows, table, seed=0, n_rep=1, cfg=None):
    """Mask all rows n_rep times with correction: (orig, word_start, masked, labels) stacked."""
    rng, cfg = np.random.default_rng(seed), cfg or MaskingConfig("correction")
    outs = [mask_batch(rows["input_ids"], rows["word_start"], cfg, rng, mask_id=ds.mask_id,
                       special_ids=ds.special_ids, vocab_size=ds.vocab_size, similar=table) for _ in range(n_rep)]
    rep = lambda a: np.concatenate([a] * n_rep)  # noqa: E731
    return (rep(rows["input_ids"]), rep(rows["word_start"]), np.concatenate([o[0] for o in outs]),
            np.concatenate([o[1] for o in outs]))


def selected_words(ds, orig, ws, inp, lab):
    """Every picked word: (flat start, length, per-word outcome masks), checking that picks are whole words
    and that nothing outside them changed."""
    special = np.isin(orig, ds.special_ids)
    prev = np.zeros_like(special)
    prev[:, 1:] = special[:, :-1]
    starts = ws.astype(bool) | special | prev
    starts[:, 0] = True
    wid = np.cumsum(starts.ravel()) - 1
    pred = (lab != -100).ravel()
    n_pred = np.bincount(wid, weights=pred)
    size = np.bincount(wid)
    assert ((n_pred == 0) | (n_pred == size)).all()             # whole words only
    assert (inp.ravel()[~pred] == orig.ravel()[~pred]).all()      # nothing else replaced
    assert (lab.ravel()[pred] == orig.ravel()[pred]).all()        # labels are the original word
    picked = np.flatnonzero(n_pred > 0)
    return np.flatnonzero(starts.ravel())[picked], size[picked]


def outcomes(ds, table, orig, inp, start, length):
    """Per picked word: row of the original in the table (-1: no similar word), and whether it became one of
    its similar words, stayed, or became something else (random)."""
    row = table.find(orig.ravel(), start, length)
    new_key = sw.pack_keys(inp.ravel(), start, length, ds.vocab_size)
    new_row = np.searchsorted(table.keys, new_key).clip(0, len(table.keys) - 1)
    new_row = np.where(table.keys[new_row] == new_key, new_row, -2)
    similar = (row >= 0) & (table.neighbours[np.maximum(row, 0)] == new_row[:, None]).any(axis=1)
    kept = sw.pack_keys(orig.ravel(), start, length, ds.vocab_size) == new_key
    kept &= length <= sw.max_word_len(ds.vocab_size)
    long = length > sw.max_word_len(ds.vocab_size)
    if long.any():   # no key: compare the tokens themselves
        pos = np.repeat(start[long], length[long]) + np.concatenate([np.arange(n) for n in length[long]])
        same = np.bincount(np.repeat(np.arange(long.sum()), length[long]),
                           weights=inp.ravel()[pos] == orig.ravel()[pos]) == length[long]
        kept[long] = same
    return row, similar, kept, ~similar & ~kept


def test_table_from_the_shards(ds, table):
    """Sorted keys that decode to their tokens; neighbours of the same length, most similar first, never
    a special token, never the word itself; nearly every occurrence of a frequent word has similar words."""
    assert len(table.keys) > 3000 and (np.diff(table.keys) > 0).all()
    W = sw.max_word_len(ds.vocab_size)
    assert W == 4 and table.tokens.shape == (len(table.keys), W)
    for r in range(0, len(table.keys), 97):
        toks = table.tokens[r, :table.lengths[r]]
        assert (toks >= 0).all() and (table.tokens[r, table.lengths[r]:] == -1).all()
        assert sw.pack_keys(toks, np.array([0]), np.array([len(toks)]), ds.vocab_size)[0] == table.keys[r]
    assert not np.isin(table.tokens, ds.special_ids).any()
    has = table.n_neighbours > 0
    nb = table.neighbours[has]
    valid = nb >= 0
    assert (valid.sum(1) == table.n_neighbours[has]).all() and (valid[:, :-1] >= valid[:, 1:]).all()
    assert (table.lengths[np.where(valid, nb, 0)] == table.lengths[has][:, None])[valid].all()
    assert not (nb == np.flatnonzero(has)[:, None]).any()
    sim = table.similarity[has].astype(np.float32)
    assert (np.diff(np.where(valid, sim, -1), axis=1) <= 1e-3).all() and (sim[valid] >= sw.MIN_SIMILARITY - 1e-3).all()
    assert table.coverage() > 0.95


def test_80_10_10_of_whole_words_over_10k_sequences(ds, rows, table):
    """Over >= 10k sequences: 15% ± 1% of tokens predicted, only whole words; of the picked words that have
    similar words, 80% ± 2% become one of them (same length), 10% ± 2% random, 10% ± 2% kept; the others
    get random tokens (90%) or stay; no special token is ever picked or produced."""
    n_rep = -(-10_000 // len(rows["input_ids"]))
    orig, ws, inp, lab = mask(ds, rows, table, n_rep=n_rep)
    assert len(orig) >= 10_000
    special = np.isin(orig, ds.special_ids)
    assert (inp[special] == orig[special]).all() and not (lab[special] != -100).any()
    assert not np.isin(inp[~special], ds.special_ids).any()
    assert abs((lab != -100).sum() / (~special).sum() - 0.15) < 0.01
    start, length = selected_words(ds, orig, ws, inp, lab)
    row, similar, kept, random = outcomes(ds, table, orig, inp, start, length)
    has = row >= 0
    assert has.sum() > 50_000 and (~has).sum() > 1_000
    assert abs(similar[has].mean() - 0.8) < 0.02, similar[has].mean()
    assert abs(random[has].mean() - 0.1) < 0.02 and abs(kept[has].mean() - 0.1) < 0.02
    assert not similar[~has].any()                                          # fallback: random tokens
    assert abs(random[~has].mean() - 0.9) < 0.03 and abs(kept[~has].mean() - 0.1) < 0.03
    assert (length[~has] > sw.max_word_len(ds.vocab_size)).any()            # too-long words fall back too
    assert (length[similar] > 1).mean() > 0.3                               # multi-token words are replaced whole
    assert np.isin(inp, ds.mask_id).sum() == np.isin(orig, ds.mask_id).sum()   # no [MASK] is ever shown


def test_fallback_when_no_word_has_similar_words(ds, rows, table):
    from dataclasses import replace

    empty = replace(table, n_neighbours=np.zeros_like(table.n_neighbours),
                    neighbours=np.full_like(table.neighbours, -1))
    sub = {k: v[:400] for k, v in rows.items()}
    orig, ws, inp, lab = mask(ds, sub, empty, seed=1, n_rep=3)
    start, length = selected_words(ds, orig, ws, inp, lab)
    row, similar, kept, random = outcomes(ds, table, orig, inp, start, length)
    assert similar.mean() < 0.002 and abs(random.mean() + similar.mean() - 0.9) < 0.03   # random may hit one by chance
    assert not np.isin(inp[lab != -100], ds.special_ids).any()
    with pytest.raises(ZhBertError, match="similar-word table"):
        mask_batch(sub["input_ids"], sub["word_start"], MaskingConfig("correction"), np.random.default_rng(0),
                   mask_id=ds.mask_id, special_ids=ds.special_ids, vocab_size=ds.vocab_size)


def test_deterministic_for_a_seed(ds, rows, table):
    sub = {k: v[:300] for k, v in rows.items()}
    a, b, c = (mask(ds, sub, table, seed=s) for s in (7, 7, 8))
    assert all((x == y).all() for x, y in zip(a, b))
    assert not (a[2] == c[2]).all()


def test_one_generator_per_row_masks_each_row_as_if_alone(ds, rows, table):
    from test_masking import per_row_matches_row_at_a_time

    per_row_matches_row_at_a_time(ds, rows, MaskingConfig("correction", mask_rate=0.3), similar=table)


def test_table_is_cached_and_rebuilt_when_the_shards_change(sharddir, ds, table, monkeypatch):
    from zh_bert.train.data import ShardDataset

    path = sharddir / sw.TABLE_FILE
    assert path.is_file() and sw.SimilarWords.load(path).fingerprint == table.fingerprint
    before = path.stat().st_mtime_ns

    def no_build(_):
        raise AssertionError("rebuilt although nothing changed")

    monkeypatch.setattr(sw, "build", no_build)
    again = sw.load_or_build(ShardDataset(sharddir, "train"))
    assert path.stat().st_mtime_ns == before and (again.keys == table.keys).all()
    assert (again.neighbours == table.neighbours).all()
    monkeypatch.undo()
    # a changed shard dir (here: its meta.json) gets a new table
    meta = json.loads((sharddir / "meta.json").read_text(encoding="utf-8"))
    meta["seed"] = 12345
    (sharddir / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    built = []
    real_build = sw.build
    monkeypatch.setattr(sw, "build", lambda d: built.append(1) or real_build(d))
    fresh = sw.load_or_build(ShardDataset(sharddir, "train"))
    assert built and fresh.fingerprint != table.fingerprint
    assert sw.SimilarWords.load(path).fingerprint == fresh.fingerprint
    assert (fresh.keys == table.keys).all()          # same text: the same words


def test_too_small_a_corpus_is_one_line(tmp_path):
    with pytest.raises(ZhBertError, match=f"needs at least {sw.MIN_TRAIN_TOKENS:,}"):
        sw.check_possible({"counts": {"train": {"tokens": 5_000}}}, tmp_path)
    sw.check_possible({"counts": {"train": {"tokens": sw.MIN_TRAIN_TOKENS}}}, tmp_path)


def test_loader_masks_with_the_train_table_and_resumes_exactly(sharddir, ds, table):
    """ShardLoader builds/loads the table once (train and valid loaders share the train split's table);
    masks are keyed per sequence, so a loader restored from state_dict() gives the very same batches."""
    from zh_bert.train.data import ShardDataset, ShardLoader

    cfg = MaskingConfig("correction")
    a = ShardLoader(ds, 8, cfg, seed=3)
    assert a._similar.fingerprint == sw.fingerprint(sharddir)
    for _ in range(3):
        a.next_numpy()
    state = a.state_dict()
    want = [a.next_numpy() for _ in range(2)]
    b = ShardLoader(ShardDataset(sharddir, "train"), 8, cfg, seed=3)
    b.load_state_dict(json.loads(json.dumps(state)))
    got = [b.next_numpy() for _ in range(2)]
    assert all((w[k] == g[k]).all() for w, g in zip(want, got) for k in w)
    batch = want[0]
    pred = batch["labels"] != -100
    assert pred.any() and not (batch["input_ids"] == ds.mask_id).any()
    assert (batch["input_ids"][pred] != batch["labels"][pred]).mean() > 0.7     # replaced, not [MASK]ed
    valid = ShardLoader(ShardDataset(sharddir, "valid"), 8, cfg, seed=3)
    assert valid._similar.fingerprint == sw.fingerprint(sharddir)
    assert next(valid.one_pass())["labels"].ne(-100).any()


def test_too_few_distinct_words_is_one_line(tmp_path):
    """Enough tokens but one sentence over and over: too few distinct words for word vectors."""
    ids = np.array([101, 1266, 776, 3221, 704, 1744, 4638, 7674, 6963, 511, 102] + [0] * 5)

    class Repeated:     # the ShardDataset interface the table builder reads
        dir, split, seq_len, vocab_size, special_ids, pad_id = tmp_path, "train", 16, 21128, [0, 100, 101, 102, 103], 0
        meta = {"counts": {"train": {"tokens": 30_000}}}

        def __len__(self):
            return 3000

        def batch(self, idx):
            n = len(idx)
            ws = np.tile([1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1], (n, 1)).astype(bool)
            return {"input_ids": np.tile(ids, (n, 1)), "word_start": ws,
                    "attention_mask": np.tile((ids != 0).astype(np.int64), (n, 1))}

    with pytest.raises(ZhBertError, match=f"needs {sw.MIN_TABLE_WORDS} for a similar-word table"):
        sw.build(Repeated())
