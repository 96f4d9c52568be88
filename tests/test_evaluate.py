"""`zh-bert eval mlm|cloze` and eval_results.json, on real text with real tiny models.

The cloze test uses a model whose MLM head ignores the context: the head's LayerNorm is zeroed, so every
masked position's logits are exactly the output bias, which we set by hand. The log-probability of each
candidate is then known in closed form and the sum- and mean-scored winners can be made to differ.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from conftest import SAMPLE, read_lines
from zh_bert import cli
from zh_bert.evaluation.eval_results import entry, load, record
from zh_bert.train.rundir import find_run_dir

BIAS = {"好": 10.0, "很": 8.0, "坏": 6.0}


@pytest.fixture(scope="module")
def biased_model_dir(tmp_path_factory, tiny_model_dir):
    """tiny_model_dir with an MLM head whose logits are the hand-set bias vector at every position."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    out = tmp_path_factory.mktemp("biased")
    for f in tiny_model_dir.iterdir():
        shutil.copy(f, out / f.name)
    model = BertForMaskedLM.from_pretrained(str(tiny_model_dir))
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    bias = torch.zeros(model.config.vocab_size)
    for ch, b in BIAS.items():
        bias[tok.convert_tokens_to_ids(ch)] = b
    head = model.cls.predictions
    with torch.no_grad():
        head.transform.LayerNorm.weight.zero_()
        head.transform.LayerNorm.bias.zero_()
        head.bias.copy_(bias)
        head.decoder.bias.copy_(bias)
    model.save_pretrained(str(out))
    reloaded = BertForMaskedLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        logits = reloaded(**tok("今天[MASK]天气", return_tensors="pt")).logits[0]
    assert torch.allclose(logits, bias.expand_as(logits), atol=1e-5), "bias did not survive save/load"
    return out


def log_softmax_of(ch: str, vocab_size: int = 21128) -> float:
    z = (vocab_size - len(BIAS)) + sum(math.exp(b) for b in BIAS.values())
    return BIAS.get(ch, 0.0) - math.log(z)


def run_cli(argv, capsys) -> tuple[int, dict | None, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    last = cap.out.strip().split("\n")[-1] if cap.out.strip() else ""
    return rc, (json.loads(last) if last.startswith("{") else None), cap.err


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- cloze

def test_cloze_known_probabilities(biased_model_dir, tmp_path):
    from zh_bert.corpus.cloze_items import read_cloze
    from zh_bert.evaluation.heads.cloze import eval_cloze, load_mlm

    data = write_jsonl(tmp_path / "cloze.jsonl", [
        # ChID style: all candidates 4 characters; 好好好好 has the highest probability.
        {"content": "他做事一向#idiom#，大家都很放心。", "candidates": ["坏坏坏坏", "好好好好", "很很很很"], "answer": 1},
        # different lengths: sum prefers the short 很 (-2.75), mean prefers 好好坏 (-2.08 per token).
        {"text": "这家店的菜[MASK]好吃。", "candidates": ["很", "好好坏"], "answer": "很"},
        # no candidates: greedy fill of a one-token blank; the argmax is always 好.
        {"text": "今天天气很[MASK]。", "answer": "好"},
    ])
    model, tok, _ = load_mlm(biased_model_dir)
    items = read_cloze(data)
    res, preds = eval_cloze(model, tok, items, score="sum")
    lp = {c: log_softmax_of(c) for c in "好很坏"}
    assert preds[1]["scores"]["很"] == pytest.approx(lp["很"], abs=1e-4)
    assert preds[1]["scores"]["好好坏"] == pytest.approx(2 * lp["好"] + lp["坏"], abs=1e-4)
    assert [p["prediction"] for p in preds] == ["好好好好", "很", "好"]
    assert res == {"accuracy": 1.0, "n": 3, "score": "sum", "accuracy_sum": 1.0, "accuracy_mean": pytest.approx(2 / 3)}
    res_mean, preds_mean = eval_cloze(model, tok, items, score="mean")
    assert preds_mean[1]["prediction"] == "好好坏" and res_mean["accuracy"] == pytest.approx(2 / 3)


def test_cloze_cli_records_in_run_dir(biased_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(biased_model_dir, run / "final")
    (run / "run.json").write_text("{}", encoding="utf-8")
    data = write_jsonl(tmp_path / "c.jsonl", [{"text": "天气很[MASK]。", "candidates": ["好", "坏"], "answer": 0}])
    for _ in range(2):  # re-evaluating replaces the entry instead of appending a duplicate
        rc, res, _ = run_cli(["eval", "cloze", str(run / "final"), "--data", str(data)], capsys)
        assert rc == 0 and res["accuracy"] == 1.0 and res["n"] == 1
    entries = load(run)
    assert len(entries) == 1 and entries[0]["metric_value"] == 1.0 and entries[0]["task_type"] == "fill-mask"
    from huggingface_hub import EvalResult

    EvalResult(**entries[0])  # the card's model-index takes entries as they are


@pytest.mark.parametrize("row, message", [
    ("not json", ":1: not JSON"),
    ({"content": "没有空位", "candidates": ["一"], "answer": 0}, "exactly one #idiom# blank"),
    ({"content": "#idiom#和#idiom#", "candidates": ["一"], "answer": 0}, "found 2"),
    ({"text": "好[MASK]", "candidates": ["一", "二"], "answer": "三"}, "not among the candidates"),
    ({"text": "好[MASK]", "candidates": ["一"], "answer": 5}, "out of range"),
    ({"text": "没有空位", "answer": "好"}, "exactly one [MASK] blank"),
])
def test_cloze_bad_input(tiny_model_dir, tmp_path, capsys, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(row if isinstance(row, str) else json.dumps(row, ensure_ascii=False), encoding="utf-8")
    rc, res, err = run_cli(["eval", "cloze", str(tiny_model_dir), "--data", str(path)], capsys)
    assert rc == 2 and res is None
    assert message in err and str(path) in err and len(err.strip().split("\n")) == 1


# --------------------------------------------------------------------------- mlm

@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    path = tmp_path_factory.mktemp("heldout") / "heldout.txt"
    path.write_text("\n".join(read_lines(SAMPLE / "zhwiki_sampled.txt")[-8:]) + "\n", encoding="utf-8")
    return path


def test_eval_mlm_deterministic(tiny_model_dir, heldout, capsys):
    base = ["eval", "mlm", str(tiny_model_dir), "--text", str(heldout), "--no-record"]
    _, a, _ = run_cli(base + ["--seed", "3"], capsys)
    _, b, _ = run_cli(base + ["--seed", "3"], capsys)
    _, c, _ = run_cli(base + ["--seed", "3", "--batch-size", "5"], capsys)
    _, d, _ = run_cli(base + ["--seed", "4"], capsys)
    assert a == b                                             # same seed: identical figures
    assert c["n_masked"] == a["n_masked"] and c["mlm_loss"] == pytest.approx(a["mlm_loss"], rel=1e-6)
    assert (d["n_masked"], d["mlm_loss"]) != (a["n_masked"], a["mlm_loss"])  # another seed, other blanks
    assert {"mlm_loss", "mlm_acc", "mlm_top5", "perplexity"} <= a.keys()
    assert a["perplexity"] == pytest.approx(math.exp(a["mlm_loss"]))
    assert 0.12 < a["n_masked"] / a["n_tokens"] < 0.17   # 15% of non-special tokens
    # a random 21,128-way model: loss near log(V)
    assert abs(a["mlm_loss"] - math.log(21128)) < 1.0


def test_eval_mlm_known_accuracy(biased_model_dir, heldout, capsys):
    """With the bias-only head, top-1 is 好 and top-5 is {好, 很, 坏, two ties}: accuracy = share of 好."""
    from transformers import AutoTokenizer

    from zh_bert.evaluation.heads.cloze import encode_and_pack
    from zh_bert.train.masking import MaskingConfig, mask_batch

    rc, res, _ = run_cli(["eval", "mlm", str(biased_model_dir), "--text", str(heldout), "--masking", "token",
                          "--seed", "0", "--no-record"], capsys)
    tok = AutoTokenizer.from_pretrained(str(biased_model_dir))
    ids, ws = encode_and_pack([l for l in heldout.read_text(encoding="utf-8").split("\n") if l], tok, 128)
    _, labels = mask_batch(ids, ws, MaskingConfig(strategy="token"), np.random.default_rng(0),
                           mask_id=tok.mask_token_id, special_ids=tok.all_special_ids, vocab_size=21128)
    gold = labels[labels != -100]
    assert res["n_masked"] == len(gold)
    assert res["mlm_acc"] == pytest.approx(np.mean(gold == tok.convert_tokens_to_ids("好")))
    expected_loss = -np.mean([log_softmax_of(tok.convert_ids_to_tokens(int(g))) for g in gold])
    assert res["mlm_loss"] == pytest.approx(expected_loss, abs=1e-4)


def test_eval_mlm_order_check(tiny_model_dir, heldout, tmp_path, capsys):
    """--order-check scores the same blanks with shuffled context: exactly no gain for a model that cannot
    see positions (position embeddings zeroed: BERT is then permutation-equivariant), a change otherwise."""
    import torch
    from transformers import BertForMaskedLM

    blind = tmp_path / "blind"
    shutil.copytree(tiny_model_dir, blind)
    model = BertForMaskedLM.from_pretrained(str(tiny_model_dir))
    with torch.no_grad():
        model.bert.embeddings.position_embeddings.weight.zero_()
    model.save_pretrained(str(blind))
    args = ["--text", str(heldout), "--masking", "token", "--order-check", "--no-record"]
    _, b, _ = run_cli(["eval", "mlm", str(blind)] + args, capsys)
    assert b["mlm_loss_shuffled"] == pytest.approx(b["mlm_loss"], abs=1e-4)
    assert b["order_gain"] == pytest.approx(0.0, abs=1e-9)
    _, a, _ = run_cli(["eval", "mlm", str(tiny_model_dir)] + args, capsys)
    assert a["mlm_loss_shuffled"] != pytest.approx(a["mlm_loss"], abs=1e-4)   # positions change the output
    assert a["order_gain"] == pytest.approx(a["mlm_acc"] - a["mlm_acc_shuffled"])


def test_eval_mlm_bad_input(tiny_model_dir, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    rc, _, err = run_cli(["eval", "mlm", str(tiny_model_dir), "--text", str(empty)], capsys)
    assert rc == 2 and "no text to evaluate" in err
    text = tmp_path / "t.txt"
    text.write_text("今天天气很好。\n", encoding="utf-8")
    rc, _, err = run_cli(["eval", "mlm", str(tmp_path / "nope"), "--text", str(text)], capsys)
    assert rc == 2 and "no such checkpoint" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "好"}\n{"txt": "坏"}\n', encoding="utf-8")
    rc, _, err = run_cli(["eval", "mlm", str(tiny_model_dir), "--text", str(bad)], capsys)
    assert rc == 2 and f"{bad}:2:" in err


def test_eval_packs_rows_exactly_as_the_shards(sample_docs, sample_jsonl, google_tokdir, build_shards):
    """`encode_and_pack` and a SHARDDIR built by `zh-bert shard` from the same documents hold identical rows:
    `[CLS] doc [SEP] doc ... [SEP]`, full rows, only the last one padded."""
    from zh_bert.train.data import ShardDataset
    from zh_bert.evaluation.heads.cloze import encode_and_pack
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    sharddir = build_shards(sample_jsonl, google_tokdir, "--seq-len", "64", "--valid-docs", "0")
    shards = ShardDataset(sharddir, "train")
    tok = load_tokenizer(google_tokdir)
    ids, ws = encode_and_pack(sample_docs, tok, 64)
    assert ids.shape == (shards.n, 64) and shards.n > 100
    np.testing.assert_array_equal(ids, np.asarray(shards.ids, dtype=np.int64))
    np.testing.assert_array_equal(ws, np.asarray(shards.word_start, dtype=bool))
    assert (ids[:, 0] == tok.cls_token_id).all()
    assert (ids[np.arange(len(ids)), shards.lengths - 1] == tok.sep_token_id).all()   # every row closes with [SEP]
    assert (ids[:-1] != tok.pad_token_id).all() and (ids[-1, shards.lengths[-1]:] == tok.pad_token_id).all()


def test_eval_mlm_masking_options(tiny_model_dir, heldout, capsys):
    """--masking/--mask-rate are MaskingConfig's options; the results name the masking that was used."""
    base = ["eval", "mlm", str(tiny_model_dir), "--text", str(heldout), "--no-record", "--masking", "token"]
    _, a, _ = run_cli(base, capsys)
    _, b, _ = run_cli(base + ["--mask-rate", "0.3"], capsys)
    assert (a["masking"], a["mask_rate"], b["masking"], b["mask_rate"]) == ("token", 0.15, "token", 0.3)
    assert 1.7 < b["n_masked"] / a["n_masked"] < 2.3


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--seq-len", "4"], "--seq-len must be >= 8, got 4"),
    (["--mask-rate", "1.5"], "mask_rate must be in (0, 1), got 1.5"),
])
def test_eval_mlm_refuses_bad_options(tiny_model_dir, heldout, capsys, argv, message):
    rc, res, err = run_cli(["eval", "mlm", str(tiny_model_dir), "--text", str(heldout)] + argv, capsys)
    assert rc == 2 and res is None and message in err


def test_eval_configs_validate_like_the_cli():
    from zh_bert.core.errors import ZhBertError
    from zh_bert.evaluation.commands.evaluate import ClozeEvalConfig
    from zh_bert.evaluation.heads.cloze import MlmEvalConfig

    with pytest.raises(ZhBertError, match="--batch-size must be >= 1"):
        MlmEvalConfig(batch_size=0)
    with pytest.raises(ZhBertError, match="--batch-size must be >= 1"):
        ClozeEvalConfig(data="x.jsonl", batch_size=0)
    assert MlmEvalConfig(mask_rate=0.3).masking.mask_rate == 0.3   # shorthand for masking.mask_rate


# --------------------------------------------------------------------------- eval_results.json

def test_eval_results_newest_wins(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-0000010").mkdir(parents=True)
    (run / "recipe.yaml").write_text("seed: 0\n", encoding="utf-8")
    assert find_run_dir(run / "checkpoints" / "step-0000010") == run.resolve()
    assert find_run_dir(tmp_path) is None
    e1 = entry("text-classification", "t", "chnsenticorp", "ChnSentiCorp", "accuracy", "test accuracy", 0.8)
    e2 = entry("text-classification", "t", "chnsenticorp", "ChnSentiCorp", "f1", "test macro-F1", 0.7)
    record(run, [e1, e2])
    record(run, [dict(e1, metric_value=0.9)])
    got = load(run)
    assert [g["metric_value"] for g in got] == [0.9, 0.7]
