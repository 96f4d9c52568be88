"""`zh-bert shard`, ShardDataset/ShardLoader and `zh-bert inspect` on real Chinese text with Google's vocab."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _shard_helpers import write_jsonl
from zh_bert.core.errors import ZhBertError


@pytest.fixture(scope="module")
def tok(google_tokdir):
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    t = load_tokenizer(google_tokdir)
    assert t.convert_tokens_to_ids("中") == 704 and t.mask_token_id == 103
    return t


@pytest.fixture(scope="module")
def shards(build_shards, sample_jsonl, google_tokdir):
    return build_shards(sample_jsonl, google_tokdir, "--valid-docs", "20")


@pytest.fixture(scope="module")
def nsp_shards(build_shards, sample_jsonl, google_tokdir):
    return build_shards(sample_jsonl, google_tokdir, "--pairs", "nsp",
                        "--seq-len", "64", "--valid-docs", "0")


def run_cli(argv, capsys):
    from zh_bert.cli import main

    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ---------------------------------------------------------------------------------------------- encoding
def test_char_lookup_ids_equal_the_tokenizer(tok, sample_docs):
    """The fast char->id path must give exactly BertTokenizer's ids, odd characters included."""
    from zh_bert.corpus.segment import Segmenter
    from zh_bert.corpus.shard import TextEncoder

    odd = ["含有[MASK]和[SEP]的文本",
           "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３ café naïve 中\u0301文",
           "\x00控 \u200b零宽 😀 ①② \t tab",
           "ℌ𝔢𝔩𝔩𝔬 ﬁ 㐀 𠀀 豈 ＯＫ！「引号」……——", ""]
    texts = sample_docs[:200] + odd
    enc = TextEncoder(tok, Segmenter("none"))
    assert enc.fast
    e = enc.encode(texts)
    for d, t in enumerate(texts):
        ref = tok(t, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert e.ids[e.doc_tok[d]:e.doc_tok[d + 1]].tolist() == ref, t[:60]


@pytest.fixture(scope="module")
def jieba_seg():
    from zh_bert.corpus.segment import Segmenter

    return Segmenter("jieba")


def test_word_starts_follow_jieba_on_the_original_text(tok, sample_docs, jieba_seg):
    from zh_bert.corpus.shard import TextEncoder

    enc = TextEncoder(tok, jieba_seg)
    checked = 0
    for text in sample_docs[:80]:
        e = enc.encode([text])
        if len(e.ids) != len(text) or 100 in e.ids:   # only docs where token i is character i
            continue
        starts = np.zeros(len(text), bool)
        pos = 0
        for w in jieba_seg.words(text):   # jieba's own lcut
            starts[pos] = True
            pos += len(w)
        assert (e.word_start == starts).all()
        checked += 1
    assert checked >= 5


def test_rjieba_agrees_with_jieba(sample_docs, jieba_seg):
    from zh_bert.corpus.segment import Segmenter

    text = "\n".join(sample_docs[:150])
    a, b = jieba_seg.word_start_mask(text), Segmenter("rjieba").word_start_mask(text)
    assert (a == b).mean() >= 0.99


def test_user_dict(tmp_path):
    from zh_bert.corpus.segment import Segmenter

    d = tmp_path / "user.txt"
    d.write_text("北京大学学习 10 n\n", encoding="utf-8")
    for name in ("jieba", "rjieba"):
        assert Segmenter(name, d).words("我在北京大学学习") == ["我", "在", "北京大学学习"]
    with pytest.raises(ZhBertError, match="not found"):
        Segmenter("jieba", tmp_path / "nope.txt")


# ---------------------------------------------------------------------------------------------- shards
def test_packing_fills_every_sequence_but_the_last(shards, tok):
    from zh_bert.train.data import ShardDataset

    ds = ShardDataset(shards, "train", tokenizer_fingerprint=tok)
    meta = ds.meta
    assert meta["ids_dtype"] == "uint16" and ds.ids.dtype == np.uint16 and ds.vocab_size == 21128
    assert meta["counts"]["valid"]["documents"] == 20 and meta["counts"]["train"]["documents"] == 580
    L = ds.seq_len
    assert L == 128 and len(ds) > 100
    assert (ds.lengths[:-1] == L).all() and 2 < ds.lengths[-1] <= L
    ids = np.asarray(ds.ids)
    assert (ids[:, 0] == ds.cls_id).all()
    assert (ids[np.arange(len(ds)), ds.lengths - 1] == ds.sep_id).all()
    assert (ids[:-1] != ds.pad_id).all() and (ids[-1, ds.lengths[-1]:] == ds.pad_id).all()
    # documents joined by [SEP]: the token before every document start (after the first) is [SEP]
    flat = ids.ravel()
    starts = ds.doc_starts
    assert len(starts) == 580 and starts[0] == 1 and (np.diff(starts) > 0).all()
    prev = starts[1:] - 1
    prev = np.where(prev % L == 0, prev - 2, prev)  # a document starting a row: its [SEP] ended the last row
    assert (flat[prev] == ds.sep_id).all()
    item = ds[3]
    assert item["input_ids"].dtype == np.int64 and item["word_start"].dtype == bool
    assert item["attention_mask"].sum() == L and (item["token_type_ids"] == 0).all()
    assert item["word_start"][0] and ds[len(ds) - 1]["attention_mask"].sum() == ds.lengths[-1]
    # the text round-trips: first document of the corpus
    n = int(starts[1] - starts[0] - 1) if starts[1] - starts[0] - 1 < L - 2 else L - 2
    first = tok.decode(flat[1:1 + n].tolist()).replace(" ", "")
    with open(meta["sources"][0]["path"], encoding="utf-8") as f:
        docs = [json.loads(line)["text"].lower().replace(" ", "") for line in f]
    assert len(first) >= 5 and any(first[:20] in d for d in docs)


def test_unigram_counts_are_the_train_token_frequencies(shards):
    from zh_bert.train.data import ShardDataset

    ds = ShardDataset(shards)
    counts = np.bincount(np.asarray(ds.ids).ravel(), minlength=ds.vocab_size)
    counts[ds.special_ids] = 0
    p = ds.unigram_probs()
    assert p.dtype == np.float64 and abs(p.sum() - 1) < 1e-9 and (p[ds.special_ids] == 0).all()
    assert np.allclose(p, counts / counts.sum())


def test_rerun_is_a_noop_and_workers_do_not_change_the_output(build_shards, tmp_path, sample_jsonl, google_tokdir, capsys):
    out = tmp_path / "s"
    args = ["shard", str(sample_jsonl), "--tokenizer", str(google_tokdir), "-o", str(out), "--seq-len", "64"]
    assert run_cli(args + ["--workers", "2"], capsys)[0] == 0
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "meta.json"}
    mtime = (out / "meta.json").stat().st_mtime_ns
    rc, stdout, _ = run_cli(args + ["--workers", "1"], capsys)
    assert rc == 0 and "up to date" in stdout and (out / "meta.json").stat().st_mtime_ns == mtime
    single = build_shards(sample_jsonl, google_tokdir, "--seq-len", "64")
    assert {p.name: p.read_bytes() for p in single.iterdir() if p.name != "meta.json"} == files
    # a different setting rebuilds
    rc, stdout, _ = run_cli(args + ["--workers", "1", "--segmenter", "none"], capsys)
    assert rc == 0 and "up to date" not in stdout and json.loads((out / "meta.json").read_text())["segmenter"] == "none"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_nsp_pairs_are_50_50_with_the_right_segment_ids(nsp_shards, tok, sample_jsonl):
    from zh_bert.train.data import ShardDataset
    from zh_bert.corpus.segment import Segmenter
    from zh_bert.corpus.shard import TextEncoder

    ds = ShardDataset(nsp_shards)
    assert ds.pairs == "nsp" and len(ds) > 500
    b = ds.batch(np.arange(len(ds)))
    labels = b["next_sentence_label"]
    n = len(labels)
    assert abs(labels.mean() - 0.5) < 3.5 * np.sqrt(0.25 / n)      # binomial, |z| < 3.5
    ids, tt, am = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    docs = [json.loads(line)["text"] for line in open(sample_jsonl, encoding="utf-8")]
    stream = TextEncoder(tok, Segmenter("none")).encode(docs).ids.astype(np.uint16).tobytes()
    contiguous = []
    for r in range(n):
        length, bs = int(am[r].sum()), int(ds.b_start[r])
        assert ids[r, 0] == ds.cls_id and ids[r, bs - 1] == ds.sep_id and ids[r, length - 1] == ds.sep_id
        assert (ids[r, 1:length - 1] != ds.sep_id).sum() == length - 3          # exactly two [SEP]
        assert (tt[r, :bs] == 0).all() and (tt[r, bs:length] == 1).all() and (tt[r, length:] == 0).all()
        if r < 300:   # label 0: B continues A in the document; label 1: B comes from elsewhere
            ab = np.concatenate([ids[r, 1:bs - 1], ids[r, bs:length - 1]]).astype(np.uint16).tobytes()
            at = stream.find(ab)
            contiguous.append((labels[r], at >= 0 and at % 2 == 0))
    assert all(c for lab, c in contiguous if lab == 0)
    assert np.mean([c for lab, c in contiguous if lab == 1]) < 0.05


def test_sop_pairs_swap_order(build_shards, tmp_path, sample_jsonl, google_tokdir, tok):
    from zh_bert.train.data import ShardDataset
    from zh_bert.corpus.segment import Segmenter
    from zh_bert.corpus.shard import TextEncoder

    docs = [json.loads(line)["text"] for line in open(sample_jsonl, encoding="utf-8")][:150]
    sh = build_shards(write_jsonl(tmp_path / "d.jsonl", docs), google_tokdir, "--pairs", "sop",
                      "--seq-len", "64", "--valid-docs", "0")
    ds = ShardDataset(sh)
    b = ds.batch(np.arange(len(ds)))
    assert ds.pairs == "sop" and abs(b["next_sentence_label"].mean() - 0.5) < 3.5 * np.sqrt(0.25 / len(ds))
    stream = TextEncoder(tok, Segmenter("none")).encode(docs).ids.astype(np.uint16).tobytes()
    for r in range(60):
        bs, length = int(ds.b_start[r]), int(b["attention_mask"][r].sum())
        a, bb = b["input_ids"][r, 1:bs - 1], b["input_ids"][r, bs:length - 1]
        order = np.concatenate([bb, a] if b["next_sentence_label"][r] else [a, bb]).astype(np.uint16).tobytes()
        at = stream.find(order)
        assert at >= 0 and at % 2 == 0, r


# ---------------------------------------------------------------------------------------------- loader
def test_loader_fast_forward_equals_uninterrupted(shards):
    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig

    ds = ShardDataset(shards)
    bs = 97  # does not divide len(ds): batches straddle epoch ends
    full = ShardLoader(ds, bs, MaskingConfig("wwm"), seed=7)
    it = iter(full)
    steps = 2 * len(ds) // bs + 3         # past two epoch boundaries
    ref = [next(it) for _ in range(steps)]
    for k in (0, 1, 5, len(ds) // bs, steps - 2):
        a = ShardLoader(ds, bs, MaskingConfig("wwm"), seed=7)
        b = ShardLoader(ds, bs, MaskingConfig("wwm"), seed=7)
        for _ in range(k):
            a.next_numpy()
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))   # survives a JSON round trip
        got = next(iter(b))
        for key in ("input_ids", "labels", "attention_mask", "token_type_ids"):
            assert (got[key] == ref[k][key]).all(), (k, key)
    # every sample once per epoch
    lo = ShardLoader(ds, bs, MaskingConfig("token"), seed=7)
    seen = np.concatenate([lo.next_numpy() and lo.last_indices for _ in range(len(ds) // bs)])
    assert len(np.unique(seen)) == len(seen)
    # a different seed or epoch gives a different order
    assert not (ShardLoader(ds, bs, MaskingConfig(), seed=8).next_numpy()["labels"] == ref[0]["labels"].numpy()).all()


def test_two_ranks_see_disjoint_data(shards):
    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig

    ds = ShardDataset(shards)
    r0 = ShardLoader(ds, 16, MaskingConfig(), seed=1, rank=0, world_size=2)
    r1 = ShardLoader(ds, 16, MaskingConfig(), seed=1, rank=1, world_size=2)
    one = ShardLoader(ds, 32, MaskingConfig(), seed=1)
    seen0, seen1 = [], []
    for _ in range(len(ds) // 32):
        r0.next_numpy(), r1.next_numpy(), one.next_numpy()
        assert not set(r0.last_indices) & set(r1.last_indices)
        assert sorted(np.concatenate([r0.last_indices, r1.last_indices])) == sorted(one.last_indices)
        seen0 += r0.last_indices.tolist()
        seen1 += r1.last_indices.tolist()
    assert not set(seen0) & set(seen1) and len(set(seen0) | set(seen1)) == 2 * 16 * (len(ds) // 32)
    assert r0.state_dict() == r1.state_dict() == one.state_dict()


def test_one_pass_is_fixed(shards):
    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig

    lo = ShardLoader(ShardDataset(shards, "valid"), 8, MaskingConfig(), seed=3)
    a, b = list(lo.one_pass()), list(lo.one_pass())
    assert sum(len(x["input_ids"]) for x in a) == len(lo.dataset)
    assert all((x["labels"] == y["labels"]).all() for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------- bad input
def test_shards_from_another_tokenizer_are_refused(shards, tmp_path, tok):
    from transformers import BertTokenizer

    from zh_bert.train.data import ShardDataset

    vocab = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])][:8000]
    other = tmp_path / "other_tok"
    BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}).save_pretrained(str(other))
    with pytest.raises(ZhBertError) as e:
        ShardDataset(shards, "train", tokenizer_fingerprint=other)
    msg = str(e.value)
    assert str(shards) in msg and str(other) in msg and ShardDataset(shards).meta["tokenizer_fingerprint"] in msg
    with pytest.raises(ZhBertError, match="fingerprint"):
        ShardDataset(shards, tokenizer_fingerprint="0123456789abcdef")


def test_truncated_shard_file_fails_at_open(shards, tmp_path):
    import shutil

    from zh_bert.train.data import ShardDataset

    for name in ("train.ids.bin", "train.word_start.bin", "train.lengths.npy"):
        bad = tmp_path / name
        shutil.copytree(shards, bad)
        data = (bad / name).read_bytes()
        (bad / name).write_bytes(data[: len(data) - 100])
        with pytest.raises(ZhBertError, match="truncated"):
            ShardDataset(bad)


def test_bad_inputs_give_one_line_errors(tmp_path, sample_jsonl, google_tokdir, capsys, shards):
    from zh_bert.train.data import ShardDataset

    base = ["shard", "--tokenizer", str(google_tokdir), "-o", str(tmp_path / "o")]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    blank = write_jsonl(tmp_path / "blank.jsonl", ["", "   "])
    notjson = tmp_path / "bad.jsonl"
    notjson.write_text('{"text": "好"}\n{oops\n', encoding="utf-8")
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes('{"text": "café"}\n'.encode("latin-1"))
    cases = [
        ([str(latin1)], "not UTF-8"),
        ([str(empty)], "empty corpus"),
        ([str(blank)], "empty corpus"),
        ([str(notjson)], "bad.jsonl:2"),
        ([str(tmp_path / "missing.jsonl")], "not found"),
        ([str(sample_jsonl), "--seq-len", "4"], "--seq-len 4 is too short"),
        ([str(sample_jsonl), "--seq-len", "1024"], "longer than the model's positions"),
        ([str(sample_jsonl), "--seq-len", "256", "--max-positions", "128"], "--max-positions 128"),
        ([str(sample_jsonl), "--segmenter", "jeiba"], "did you mean 'jieba'"),
        ([str(sample_jsonl), "--valid-docs", "600"], "--valid-docs"),
    ]
    for extra, expect in cases:
        rc, _, err = run_cli(base + extra, capsys)
        assert rc == 2 and expect in err and err.count("\n") == 1, (extra, err)
        assert not (tmp_path / "o").exists()
    with pytest.raises(ZhBertError, match="max_position_embeddings 64"):
        ShardDataset(shards).check_positions(64)
    ShardDataset(shards).check_positions(512)
    (tmp_path / "notshards").mkdir()
    (tmp_path / "notshards" / "keep.txt").write_text("mine")
    rc, _, err = run_cli(["shard", str(sample_jsonl), "--tokenizer", str(google_tokdir), "-o",
                          str(tmp_path / "notshards")], capsys)
    assert rc == 2 and "refusing to overwrite" in err


# ---------------------------------------------------------------------------------------------- inspect
def test_inspect_json_and_text(shards, google_tokdir, capsys):
    rc, out, _ = run_cli(["inspect", str(shards), "--tokenizer", str(google_tokdir), "--masking", "wwm",
                          "--samples", "4", "--seed", "2", "--json"], capsys)
    assert rc == 0
    rows = [json.loads(line) for line in out.strip().split("\n")]
    assert len(rows) == 4
    for r in rows:
        assert {"tokens", "input_ids", "labels", "word_start"} <= set(r)
        assert len(r["tokens"]) == len(r["input_ids"]) == len(r["labels"]) == len(r["word_start"])
        assert r["tokens"][0] == "[CLS]" and all(isinstance(w, bool) for w in r["word_start"])
        pred = [i for i, l in enumerate(r["labels"]) if l != -100]
        assert pred and all(r["labels"][i] == r["original_ids"][i] for i in pred)
        assert all(r["input_ids"][i] == r["original_ids"][i] for i in range(len(r["labels"])) if i not in pred)
    rc, out, _ = run_cli(["inspect", str(shards), "--samples", "2", "--masking", "ngram"], capsys)
    assert rc == 0 and "【" in out and "words :" in out and out.count("#") >= 2
    rc, _, err = run_cli(["inspect", str(shards), "--masking", "wwn"], capsys)
    assert rc == 2 and "did you mean 'wwm'" in err


@pytest.mark.parametrize("kind", ["sentencepiece", "word"])
def test_other_vocab_kinds_take_the_tokenizer_path(build_shards, kind, tmp_path, sample_docs):
    """Multi-character tokens (`zh-bert vocab --kind sentencepiece|word`): ids still equal the tokenizer's,
    and a token is a word start iff a jieba word starts within or right before it."""
    from zh_bert.train.data import ShardDataset
    from zh_bert.corpus.segment import Segmenter
    from zh_bert.corpus.shard import TextEncoder
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.corpus.vocab import main as vocab_main

    corpus = write_jsonl(tmp_path / "d.jsonl", sample_docs[:150] + sample_docs[300:400])
    tokdir = tmp_path / "tok"
    assert vocab_main([str(corpus), "-o", str(tokdir), "--kind", kind, "--size", "3000", "-q"]) == 0
    tok = load_tokenizer(tokdir)
    enc = TextEncoder(tok, Segmenter("rjieba"))
    assert not enc.fast
    texts = sample_docs[:40]
    e = enc.encode(texts)
    for d, t in enumerate(texts):
        ref = tok(t, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert e.ids[e.doc_tok[d]:e.doc_tok[d + 1]].tolist() == ref
    assert 0.5 < e.word_start.mean() < 1.0     # multi-char tokens, some words split into several
    sh = build_shards(corpus, tokdir, "--seq-len", "64", "--valid-docs", "5")
    ds = ShardDataset(sh, tokenizer_fingerprint=tokdir)
    assert ds.meta["tokenizer_kind"] == kind and not ds.meta["char_lookup"]
    assert (ds.lengths[:-1] == 64).all() and (np.asarray(ds.ids)[:, 0] == tok.cls_token_id).all()


# ---------------------------------------------------------------------------------------------- Python API
def test_shard_config_validates_like_the_cli(sample_jsonl, google_tokdir):
    from zh_bert.corpus.shard import ShardConfig

    base = {"corpus": [str(sample_jsonl)], "tokenizer": str(google_tokdir), "output": "unused"}
    for kw, msg in (({"seq_len": 4}, "--seq-len 4 is too short"), ({"seq_len": 256, "max_positions": 128},
                    "--max-positions 128"), ({"workers": 0}, "--workers"), ({"segmenter": "jeiba"},
                    "did you mean 'jieba'"), ({"pairs": "nxp"}, "--pairs"), ({"valid_docs": -1}, "--valid-docs")):
        with pytest.raises(ZhBertError, match=msg):
            ShardConfig(**base, **kw)


def test_pipeline_builds_through_the_stage_functions_and_reuses_its_cache(tmp_path, sample_docs, monkeypatch):
    """Raw text -> clean -> vocab -> shard via `prepare_data`; the clean report it returns (and the one the
    shards record) is the file `zh-bert clean` wrote; a second call rebuilds nothing."""
    import zh_bert.corpus.pipeline as pipeline
    from zh_bert.corpus.clean.report import report_path
    from zh_bert.corpus.sharddir import read_meta
    from zh_bert.train.recipe import load_recipe

    raw = tmp_path / "raw.txt"
    raw.write_text("\n".join(sample_docs[:150]) + "\n", encoding="utf-8")
    recipe = load_recipe(None, {"out_dir": str(tmp_path / "run"), "data": str(raw), "seq_len": 64,
                                "valid_docs": 5, "vocab_size": 3000})
    said: list[str] = []
    prepared = pipeline.prepare_data(recipe, log=said.append)
    assert [s.split()[1] for s in said] == ["clean", "vocab", "shard"]
    docs = prepared.sharddir.parent / "docs.jsonl"
    written = json.loads(report_path(docs).read_text(encoding="utf-8"))
    assert sorted(p.name for p in docs.parent.iterdir()) == ["docs.jsonl", "docs.report.json", "shards", "tokenizer"]
    assert prepared.clean_report == written and written["output"] == str(docs)
    meta = read_meta(prepared.sharddir)
    assert meta["sources"][0]["clean_report"] == written and meta["seq_len"] == 64
    assert meta["tokenizer"] == str(prepared.tokdir.resolve()) and meta["counts"]["valid"]["documents"] == 5
    assert json.loads((prepared.tokdir / "zh_bert_vocab.json").read_text(encoding="utf-8"))["vocab_size"] <= 3000

    def no_rerun(*_a, **_k):
        raise AssertionError("a cached stage ran again")

    for name in ("clean", "build_vocab", "build_shards"):
        monkeypatch.setattr(pipeline, name, no_rerun)
    said.clear()
    again = pipeline.prepare_data(recipe, log=said.append)
    assert said == [] and again == prepared
