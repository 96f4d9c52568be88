"""Every consumer of a checkpoint takes a ModernBERT `final/` (stock ModernBertForMaskedLM): `eval mlm|cloze`,
the demo's fill (sparse head = dense pipeline), `publish --dry-run` and its card, `download`'s folder
assembly, and `finetune` (pretrained and --random-init). Real tiny models, offline."""

from __future__ import annotations

import json
import shutil

import pytest

from _demo_helpers import SHOU
from _hub_helpers import make_run_dir
from conftest import SAMPLE, read_lines
from zh_bert import cli


def run_cli(argv, capsys) -> tuple[int, dict | None, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    lines = cap.out.strip().split("\n")
    return rc, json.loads(lines[-1]) if rc == 0 else None, cap.err


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    path = tmp_path_factory.mktemp("mb_heldout") / "heldout.txt"
    path.write_text("\n".join(read_lines(SAMPLE / "zhwiki_sampled.txt")[-8:]) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def no_token_types(monkeypatch):
    """ModernBertModel.forward refuses token_type_ids for the duration of a test (its own forward would take
    them silently into **kwargs); returns the list of calls seen."""
    from transformers import ModernBertModel

    calls = []
    real = ModernBertModel.forward

    def forward(self, *args, **kwargs):
        assert "token_type_ids" not in kwargs, "token_type_ids passed to ModernBERT"
        calls.append(kwargs.get("input_ids").shape if kwargs.get("input_ids") is not None else args[0].shape)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ModernBertModel, "forward", forward)
    return calls


# --------------------------------------------------------------------------- eval

def test_eval_mlm_on_modernbert(tiny_modernbert_dir, heldout, capsys, no_token_types):
    base = ["eval", "mlm", str(tiny_modernbert_dir), "--text", str(heldout), "--no-record"]
    rc, a, err = run_cli(base + ["--order-check"], capsys)
    assert rc == 0, err
    assert a["n_masked"] > 100 and a["n_sequences"] >= 2 and a["seq_len"] == 128
    assert 9.0 < a["mlm_loss"] < 11.0   # random init over 21,128 entries: ln(21128) = 9.96
    assert 0 <= a["mlm_acc"] <= a["mlm_top5"] <= 1 and "order_gain" in a and "mlm_acc_shuffled" in a
    rc, b, err = run_cli(base + ["--batch-size", "3"], capsys)   # blanks independent of batching, as for BERT
    assert rc == 0, err
    assert b["n_masked"] == a["n_masked"] and b["mlm_loss"] == pytest.approx(a["mlm_loss"], rel=1e-5)
    assert no_token_types   # ModernBertModel ran, never with token types


def test_modernbert_sparse_head_equals_dense_logits(tiny_modernbert_dir):
    """masked_logits (encoder, then head on the masked rows) = the stock forward's logits at those rows,
    with padding in the batch; and no token_type_ids reach it."""
    import torch

    from zh_bert.evaluation.heads.cloze import load_mlm, masked_logits, model_batch

    model, tok, _ = load_mlm(tiny_modernbert_dir)
    enc = tok(["北京是中国的[MASK]都。", "今天天气很[MASK]，我们去公园散步吧。"], padding=True, return_tensors="pt")
    batch = model_batch(model, enc["input_ids"], enc["attention_mask"])
    assert set(batch) == {"input_ids", "attention_mask"}
    pos = enc["input_ids"] == tok.mask_token_id
    sparse = masked_logits(model, batch, pos)
    with torch.no_grad():
        dense = model(**batch).logits[pos]
    assert sparse.shape == (2, 21128) and torch.allclose(sparse, dense, atol=1e-5)


def test_model_batch_keeps_token_types_for_bert(tiny_model_dir):
    import torch
    from transformers import AutoConfig

    from zh_bert.evaluation.heads.cloze import model_batch

    model = type("M", (), {"config": AutoConfig.from_pretrained(str(tiny_model_dir))})()
    ids = torch.ones((1, 4), dtype=torch.long)
    assert set(model_batch(model, ids, ids)) == {"input_ids", "attention_mask", "token_type_ids"}


def test_eval_cloze_on_modernbert(tiny_modernbert_dir, tmp_path, capsys, no_token_types):
    data = tmp_path / "cloze.jsonl"
    data.write_text(json.dumps({"content": "他做事总是#idiom#，从不马虎。",
                                "candidates": ["一丝不苟", "马马虎虎", "三心二意"], "answer": 0},
                               ensure_ascii=False) + "\n" +
                    json.dumps({"text": "北京是中国的[MASK]都。", "answer": "首"}, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    rc, res, err = run_cli(["eval", "cloze", str(tiny_modernbert_dir), "--data", str(data), "--no-record"], capsys)
    assert rc == 0, err
    assert res["n"] == 2 and 0 <= res["accuracy"] <= 1 and no_token_types


# --------------------------------------------------------------------------- demo

@pytest.fixture(scope="module")
def nudged_modernbert(tmp_path_factory, tiny_modernbert_dir):
    """tiny_modernbert_dir with its decoder bias nudged towards 首, so the top candidate is known."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("mb_demo") / "mb-nudged"
    shutil.copytree(tiny_modernbert_dir, out)
    state = load_file(str(out / "model.safetensors"))
    state["decoder.bias"][SHOU] += 9.0
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _pipeline_top(model_dir, text: str, k: int) -> list[tuple[str, float]]:
    from transformers import pipeline

    fill_mask = pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir), top_k=k, device="cpu")
    return [(r["token"], r["score"]) for r in fill_mask(text)]


@pytest.mark.parametrize("which", ["random", "nudged"])
def test_demo_fill_equals_dense_pipeline(tiny_modernbert_dir, nudged_modernbert, which, no_token_types):
    """k candidates from the sparse head; the same ranking and probabilities as the dense fill-mask pipeline
    (special tokens aside, which the demo never offers)."""
    from transformers import ModernBertForMaskedLM

    from zh_bert.release.demo import _token_text, fill, load_model
    from zh_bert.evaluation.heads.cloze import sparse_head

    folder = nudged_modernbert if which == "nudged" else tiny_modernbert_dir
    model, tok = load_model(str(folder))
    assert isinstance(model, ModernBertForMaskedLM) and sparse_head(model) is not None
    rows = []
    hook = model.decoder.register_forward_hook(lambda m, args, out: rows.append(args[0].shape))
    try:
        res = fill(model, tok, "北京是中国的[MASK]都。", top_k=5)
    finally:
        hook.remove()
    assert rows and all(r[-2] == 1 for r in rows)   # the head ran on the one blank position only
    cands = res[0]["candidates"]
    assert len(cands) == 5 and [c["prob"] for c in cands] == sorted((c["prob"] for c in cands), reverse=True)
    special = set(tok.all_special_ids)
    dense = [(_token_text(tok, [t]), p) for t, p in _pipeline_top(folder, "北京是中国的[MASK]都。", 12)
             if t not in special][:5]
    assert cands[0]["text"] == dense[0][0]
    assert [c["text"] for c in cands] == [t for t, _ in dense]
    # the demo renormalises over non-special tokens; with 5 special ids of 21,128 the scale is ~1
    assert cands[0]["prob"] == pytest.approx(dense[0][1], rel=1e-2)
    if which == "nudged":
        assert cands[0]["text"] == "首"


def test_demo_joint_blank_and_compare_with_bert(nudged_modernbert, tiny_model_dir, no_token_types):
    from zh_bert.release.demo import ModelPool, check_local_models, filled_text, run_fill

    check_local_models([str(nudged_modernbert)])   # config + weights check at start: no BERT-only assumption
    pool = ModelPool([str(nudged_modernbert)])
    r = run_fill(pool, "北京是中国的[MASK]都。他是＿＿。", str(nudged_modernbert), 3, str(tiny_model_dir))
    assert "error" not in r and "error" not in r["compare"], r
    assert [b["length"] for b in r["blanks"]] == [1, 2]
    assert r["blanks"][0]["candidates"][0]["text"] == "首" and len(r["blanks"][0]["candidates"]) == 3
    assert all(len(c["text"]) >= 2 for c in r["blanks"][1]["candidates"])
    assert r["filled"] == filled_text("北京是中国的[MASK]都。他是＿＿。", r["blanks"]) and r["filled"].startswith("北京是中国的首都")
    assert r["compare"]["model"] == str(tiny_model_dir) and len(r["compare"]["blanks"]) == 2


# --------------------------------------------------------------------------- publish

@pytest.fixture(scope="module")
def modernbert_run(tmp_path_factory, tiny_modernbert_dir):
    """A run dir as pretrain writes it for `architecture: modernbert` (recipe.yaml beside final/)."""
    run = make_run_dir(tmp_path_factory.mktemp("mb_publish"), tiny_modernbert_dir)
    (run / "recipe.yaml").write_text(
        "# written by zh-bert pretrain: the resolved recipe of this run dir, every key explicit\n"
        "out_dir: runs/modernbert-tiny\ndata:\n  - corpora/sample/zhwiki_sampled.txt\nmodel: tiny\n"
        "architecture: modernbert\nglobal_attn_every_n_layers: 3\nlocal_attention: 128\n"
        "global_rope_theta: 160000.0\nlocal_rope_theta: 10000.0\nobjective: mlm\nseq_len: 128\n", encoding="utf-8")
    summary = json.loads((run / "run.json").read_text())
    summary["model"].update({"class": "ModernBertForMaskedLM", "attention_init": None, "intermediate_size": 416})
    (run / "run.json").write_text(json.dumps(summary))
    return run


def test_publish_dry_run_modernbert_card(modernbert_run, tmp_path, capsys):
    from huggingface_hub import ModelCard

    rc = cli.main(["publish", str(modernbert_run), "--repo-id", "zh-org/modernbert-tiny", "--dry-run",
                   "-o", str(tmp_path / "staged")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    staged = tmp_path / "staged"
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "recipe.yaml", "README.md"} <= {
        p.name for p in staged.iterdir()}
    card = ModelCard.load(staged / "README.md")
    data = card.data.to_dict()
    assert "modernbert" in data["tags"] and "bert" not in data["tags"] and data["pipeline_tag"] == "fill-mask"
    body = card.text
    for needle in ("ModernBertForMaskedLM", "A Chinese ModernBERT masked language model", "GeGLU width 416",
                   "RoPE, θ 160,000 in global layers, 10,000 in local ones",
                   "global attention in layer 0 only (of 2), a sliding window of 128 tokens",
                   "architecture: modernbert", "global_attn_every_n_layers: 3", "transformers >= 4.48",
                   "AutoModelForMaskedLM.from_pretrained", 'pipeline("fill-mask"', "## Limitations"):
        assert needle in body, needle
    for wrong in ("BertForMaskedLM", "BertTokenizer", "neighbour attention", "FFN"):
        assert wrong not in body.replace("ModernBertForMaskedLM", ""), wrong
    # the staged folder is what users get: it loads as the same stock model
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(str(staged))
    assert type(model).__name__ == "ModernBertForMaskedLM"


def test_card_attention_for_deeper_modernbert(tmp_path, tiny_modernbert_dir):
    """A 6-layer config (the 4.x keys only, as an older writer would leave them): 'every 3 layers' and θ read."""
    from zh_bert.release.card import build_card

    folder = tmp_path / "m"
    shutil.copytree(tiny_modernbert_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    for k in ("layer_types", "rope_parameters"):
        cfg.pop(k)
    cfg.update(num_hidden_layers=6, global_attn_every_n_layers=3, global_rope_theta=80000.0)
    (folder / "config.json").write_text(json.dumps(cfg))
    body = build_card(folder, None, "a/b")
    assert "global attention every 3 layers (from layer 0)" in body and "θ 80,000 in global layers" in body
    assert "BertForMaskedLM" not in body.replace("ModernBertForMaskedLM", "") and "recipe.yaml" not in body


# --------------------------------------------------------------------------- download

@pytest.mark.parametrize("weights", ["safetensors", "pickle"])
def test_download_assembles_modernbert_folder(tiny_modernbert_dir, tmp_path, weights):
    """A downloaded ModernBERT snapshot becomes a stock folder (pickle weights converted, tied decoder
    included) that loads with the same logits."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM

    from zh_bert.hub.download import assemble

    snap = tmp_path / "snap"
    shutil.copytree(tiny_modernbert_dir, snap)
    if weights == "pickle":
        model = AutoModelForMaskedLM.from_pretrained(str(tiny_modernbert_dir))
        torch.save(model.state_dict(), snap / "pytorch_model.bin")
        (snap / "model.safetensors").unlink()
    out = assemble(snap, tmp_path / "out", origin={"source": "hf", "repo_id": "test/modernbert"})
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    ids = torch.tensor([[101, 1266, 776, 3221, 103, 6963, 102]])
    with torch.no_grad():
        want = AutoModelForMaskedLM.from_pretrained(str(tiny_modernbert_dir))(input_ids=ids).logits
        got_model = AutoModelForMaskedLM.from_pretrained(str(out))
        got = got_model(input_ids=ids).logits
    assert type(got_model).__name__ == "ModernBertForMaskedLM" and torch.allclose(got, want, atol=1e-6)
    assert load_file(str(out / "model.safetensors"))   # opens


# --------------------------------------------------------------------------- finetune

@pytest.mark.parametrize("random_init", [False, True])
def test_finetune_modernbert_tnews(tiny_modernbert_dir, capsys, random_init, no_token_types):
    import torch

    torch.set_num_threads(1)
    argv = ["finetune", str(tiny_modernbert_dir), "--task", "tnews", "--epochs", "1", "--max-train", "64",
            "--seq-len", "32", "--batch-size", "32", "--lr", "1e-3", "--no-record"]
    rc, res, err = run_cli(argv + (["--random-init"] if random_init else []), capsys)
    assert rc == 0, err
    assert 0 <= res["dev_acc"] <= 1 and 0 <= res["test_acc"] <= 1 and 0 <= res["test_macro_f1"] <= 1
    assert no_token_types and res["config"]["random_init"] is random_init and res["init"] == ("random" if random_init else "pretrained")
