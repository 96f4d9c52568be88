"""`architecture: modernbert` through the real `zh-bert pretrain`: a stock ModernBertForMaskedLM `final/` that
AutoModelForMaskedLM and pipeline("fill-mask") load, the same logits in transformers 4.x, exact resume after
kill -9 with the rise-decay mask rate, 2 processes = 1 process with doubled accumulation, wsd's
checkpoints/nodecay/ and continuing from it, and one-line refusals before any data work."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _run_helpers import kill_then_resume, metrics, save_recipe
from conftest import CHAR_SEQ, REPO
from zh_bert.cli import main as cli

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}
TF4 = os.environ.get("ZH_BERT_TF4_PYTHON")
pytestmark = pytest.mark.usefixtures("one_thread")


def write_recipe(path: Path, tokdir, sharddir, **over) -> Path:
    """A 20-step tiny ModernBERT on 64-token shards; a 32-token window, so the local layer is local."""
    recipe = {"out_dir": str(path.parent / "run"), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
              "architecture": "modernbert", "local_attention": 32, "masking": "wwm", "seq_len": CHAR_SEQ,
              "global_batch": 16, "micro_batch": 16, "lr": 3e-3, "warmup_steps": 4, "max_steps": 20,
              "log_every": 1, "eval_every": 10, "eval_batches": 2, "save_every": 8, "keep_last": 3, "seed": 7,
              "precision": "fp32", "schedule": "wsd", "decay_fraction": 0.25, "mask_rate_schedule": "rise-decay",
              "mask_rate": 0.15, "mask_rate_peak": 0.3}
    return save_recipe(path, {**recipe, **over})


@pytest.fixture(scope="module")
def mb_run(tmp_path_factory, char_shards):
    """One uninterrupted 20-step run (in process): its run dir and per-step losses."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("modernbert")
    assert cli(["pretrain", str(write_recipe(root / "r.yaml", *char_shards))]) == 0
    return root / "run"


@pytest.mark.slow
def test_a_20_step_run_gives_a_stock_modernbert_that_fill_mask_loads(mb_run):
    from transformers import AutoModelForMaskedLM, ModernBertForMaskedLM, pipeline

    final = mb_run / "final"
    model = AutoModelForMaskedLM.from_pretrained(str(final))
    assert type(model) is ModernBertForMaskedLM
    cfg = json.loads((final / "config.json").read_text())
    assert cfg["layer_types"] == ["full_attention", "sliding_attention"] and cfg["global_attn_every_n_layers"] == 2
    assert cfg["global_rope_theta"] == cfg["rope_parameters"]["full_attention"]["rope_theta"] == 160000.0
    assert cfg["local_attention"] == 32 and cfg["reference_compile"] is False
    assert {"vocab.txt", "tokenizer.json", "model.safetensors"} <= {p.name for p in final.iterdir()}
    fill = pipeline("fill-mask", model=str(final), tokenizer=str(final), device="cpu")
    preds = fill("中华人民共和国的首[MASK]是北京。", top_k=5)
    assert len(preds) == 5
    summary = json.loads((mb_run / "run.json").read_text())
    assert summary["steps"] == 20 and summary["parameters"] == sum(p.numel() for p in model.parameters())
    rows = [r for r in metrics(mb_run) if "loss" in r]
    assert rows[-1]["loss"] < rows[0]["loss"]


@pytest.mark.slow
def test_wsd_keeps_the_weights_at_the_start_of_the_decay_and_the_schedules_have_their_shape(mb_run):
    """decay_fraction 0.25 of 20 steps: peak lr over steps 4-14, decay from 15; nodecay = the state after 15."""
    state = json.loads((mb_run / "checkpoints" / "nodecay" / "trainer_state.json").read_text())
    assert state["step"] == 15
    rows = {r["step"]: r for r in metrics(mb_run) if "loss" in r}
    lrs = [rows[s]["lr"] for s in range(1, 21)]
    assert lrs[3:15] == [3e-3] * 12 and lrs[19] == 0.0 and all(a > b for a, b in zip(lrs[15:], lrs[16:]))
    rates = [rows[s]["mask_rate"] for s in range(1, 21)]   # the rate of the step just taken
    assert rates[3] == pytest.approx(0.3) and rates[0] == pytest.approx(0.15 + 0.15 / 4)
    assert all(a > b for a, b in zip(rates[4:], rates[5:])) and rates[-1] > 0.15


@pytest.mark.slow
def test_kill9_then_resume_reproduces_losses_and_masks(tmp_path, char_shards, mb_run):
    """Killed after the step-8 checkpoint, `--resume auto` logs the uninterrupted run's per-step losses: the
    same weights and the same masks (the mask rate is a function of the step)."""
    expected = {r["step"]: r["loss"] for r in metrics(mb_run) if "loss" in r}
    recipe = write_recipe(tmp_path / "r.yaml", *char_shards)
    cmd = [sys.executable, "-m", "zh_bert", "pretrain", str(recipe)]
    got = {r["step"]: r["loss"] for r in kill_then_resume(cmd, tmp_path / "run", ONE_THREAD, REPO, last_step=20,
                                                          step=8)}
    assert sorted(got) == list(range(1, 21))
    assert max(abs(got[s] - expected[s]) for s in expected) <= 1e-5


@pytest.mark.slow
def test_continuing_from_nodecay_follows_the_schedule_asked_for(tmp_path, mb_run):
    """From nodecay (step 15) with max_steps 28: the peak lr until the new decay start (28 - 7 = 21), a new
    nodecay there, and the branch recorded."""
    recipe = mb_run.parent / "r.yaml"
    out = tmp_path / "longer"
    assert cli(["pretrain", str(recipe), "--resume", str(mb_run / "checkpoints" / "nodecay"), "--set",
                f"out_dir={out}", "--set", "max_steps=28"]) == 0
    rows = {r["step"]: r for r in metrics(out) if "loss" in r}
    assert [rows[s]["lr"] for s in range(16, 22)] == [3e-3] * 6 and rows[22]["lr"] < 3e-3
    assert json.loads((out / "checkpoints" / "nodecay" / "trainer_state.json").read_text())["step"] == 21
    summary = json.loads((out / "run.json").read_text())
    assert summary["steps"] == 28


@pytest.mark.slow
def test_two_processes_equal_one_process_with_double_accumulation(tmp_path, char_shards):
    from test_ddp import TOL, launch, load_params

    recipe = write_recipe(tmp_path / "r.yaml", *char_shards, max_steps=4, micro_batch=4, log_every=1,
                          eval_every=0, save_every=0, lr=1e-3, warmup_steps=0, schedule="constant", dropout=0.0,
                          mask_rate_schedule="constant")
    launch("single", recipe, tmp_path / "one")
    launch("torchrun", recipe, tmp_path / "two")
    one, two = load_params(tmp_path / "one"), load_params(tmp_path / "two")
    assert set(one) == set(two)
    worst = max(float(abs(one[k] - two[k]).max()) for k in one)
    assert worst <= TOL, worst


PROBE = r'''
import sys, torch
from transformers import AutoModelForMaskedLM
m = AutoModelForMaskedLM.from_pretrained(sys.argv[1]).eval()
ids = torch.randint(200, 3000, (2, 64), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    out = m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
print(type(m).__name__)
torch.save(out, sys.argv[2])
'''


@pytest.mark.slow
def test_transformers_4_loads_the_same_model(tmp_path, mb_run):
    """The same logits (within 1e-4) from transformers 4.x and 5.x on a 64-token input, longer than the window."""
    if not TF4:
        if os.environ.get("CI"):
            pytest.fail("ZH_BERT_TF4_PYTHON is not set: .ci/run must create the transformers 4.x venv")
        pytest.skip("no transformers 4.x python (set ZH_BERT_TF4_PYTHON; .ci/run does)")
    import torch

    out = {}
    for name, python in (("tf5", sys.executable), ("tf4", TF4)):
        p = subprocess.run([python, "-c", PROBE, str(mb_run / "final"), str(tmp_path / f"{name}.pt")],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1"))
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.strip().splitlines()[-1] == "ModernBertForMaskedLM"
        out[name] = torch.load(tmp_path / f"{name}.pt")
    assert float((out["tf4"] - out["tf5"]).abs().max()) <= 1e-4


# ------------------------------------------------------------------------------ bad input, before any data work


def _refused(tmp_path, capsys, tokdir, sharddir, **over) -> str:
    recipe = write_recipe(tmp_path / "r.yaml", tokdir, sharddir, **over)
    assert cli(["pretrain", str(recipe)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists(), "refused before the run dir was made"
    return err


def _modernbert_config(path: Path, **over) -> Path:
    cfg = {"model_type": "modernbert", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": 256, "vocab_size": 100, "max_position_embeddings": 512, "local_attention": 32}
    path.write_text(json.dumps({**cfg, **over}))
    return path


@pytest.mark.parametrize("over, expect", [
    ({"architecture": "modernbrt"}, "'architecture' must be one of 'bert', 'modernbert'"),
    ({"objective": "mlm+nsp"}, "needs token-type embeddings"),
    ({"objective": "mlm+sop"}, "needs token-type embeddings"),
    ({"objective": "electra"}, "objective electra builds ELECTRA's own"),
    ({"attention_init": "neighbour"}, "attention_init: stock"),
    ({"local_attention": 33}, "'local_attention' must be an even number"),
    ({"global_attn_every_n_layers": 0}, "'global_attn_every_n_layers' must be at least 1"),
    ({"mask_rate_peak": 0.1}, "'mask_rate_peak' must be in (mask_rate 0.15, 1)"),
    ({"decay_fraction": 0}, "'decay_fraction' must be in (0, 1]"),
])
def test_bad_modernbert_recipes_are_one_line(tmp_path, capsys, over, expect):
    assert expect in _refused(tmp_path, capsys, tmp_path / "tok", tmp_path / "shards", **over)


def test_shapes_that_do_not_fit_are_one_line(tmp_path, capsys):
    heads = _modernbert_config(tmp_path / "heads.json", num_attention_heads=3)
    assert "must be a whole, even head size" in _refused(tmp_path, capsys, "tok", "shards", model=str(heads))
    bert = _modernbert_config(tmp_path / "bert.json", model_type="bert")
    assert "model_type 'bert', but architecture is modernbert" in _refused(tmp_path, capsys, "t", "s", model=str(bert))
    short = _modernbert_config(tmp_path / "short.json", max_position_embeddings=32)
    assert "seq_len 64 exceeds" in _refused(tmp_path, capsys, "tok", "shards", model=str(short))


def test_init_from_the_other_architecture_is_one_line(tmp_path, capsys, tiny_model_dir, tiny_modernbert_dir):
    err = _refused(tmp_path, capsys, "tok", "shards", init_from=str(tiny_model_dir))
    assert "is a bert checkpoint, but the recipe says architecture: modernbert" in err
    err = _refused(tmp_path, capsys, "tok", "shards", init_from=str(tiny_modernbert_dir), architecture="bert")
    assert "is a modernbert checkpoint, but the recipe says architecture: bert" in err


@pytest.mark.slow
def test_continued_pretraining_from_a_modernbert_checkpoint(tmp_path, sample_jsonl, build_shards, google_tokdir,
                                                            tiny_modernbert_dir):
    """`init_from` a released-style ModernBERT folder (Google's 21,128 vocab): it trains on, and final/ is the
    same class with the checkpoint's shape."""
    from transformers import AutoConfig

    shards = build_shards(sample_jsonl, google_tokdir, "--seq-len", str(CHAR_SEQ), "--valid-docs", "20")
    recipe = write_recipe(tmp_path / "r.yaml", google_tokdir, shards, init_from=str(tiny_modernbert_dir),
                          tokenizer=None, max_steps=4, save_every=0, eval_every=0, schedule="linear",
                          mask_rate_schedule="constant", warmup_steps=1, local_attention=128)   # the checkpoint's
    assert cli(["pretrain", str(recipe)]) == 0
    cfg = AutoConfig.from_pretrained(str(tmp_path / "run" / "final"))
    assert cfg.model_type == "modernbert" and cfg.vocab_size == 21128 and cfg.intermediate_size == 416
    assert json.loads((tmp_path / "run" / "run.json").read_text())["model"]["init_from"] == str(tiny_modernbert_dir)


def test_init_from_refuses_only_shape_keys_that_differ_from_the_checkpoint(tmp_path):
    """init_from keeps the checkpoint's window, global layers, RoPE, shape and dropout: a recipe value that differs
    is one line naming the key and init_from; the default, the checkpoint's own value, or another period giving
    the same layout (5 in a 2-layer model) is not refused."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.train.pretrain import check_init_keys
    from zh_bert.train.recipe import Recipe

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    _modernbert_config(ckpt / "config.json", local_attention=128, global_attn_every_n_layers=3, mlp_dropout=0.0,
                       layer_types=["full_attention", "sliding_attention"], global_rope_theta=160000.0)
    base = dict(architecture="modernbert", init_from=str(ckpt))
    for ok in ({}, {"local_attention": 128}, {"global_attn_every_n_layers": 5}, {"dropout": 0.0}, {"model": "tiny"}):
        check_init_keys(Recipe(**base, **ok))
    for over, says in (({"local_attention": 64}, "local_attention 64 with init_from"),
                       ({"global_attn_every_n_layers": 1}, "global_attn_every_n_layers 1 with init_from"),
                       ({"global_rope_theta": 80000.0}, "global_rope_theta 80000.0 with init_from"),
                       ({"dropout": 0.2}, "dropout 0.2 with init_from"),
                       ({"model": "mini"}, "model mini (L4/H256/A4) with init_from")):
        with pytest.raises(ZhBertError, match=re.escape(says)) as e:
            check_init_keys(Recipe(**base, **over))
        assert str(ckpt) in str(e.value) and "\n" not in str(e.value)


def test_vocab_extension_grows_a_modernbert_and_its_decoder_bias(tiny_modernbert_dir):
    import torch
    from transformers import ModernBertForMaskedLM

    from zh_bert.train.model import extend_vocab

    model = ModernBertForMaskedLM.from_pretrained(str(tiny_modernbert_dir))
    old = model.config.vocab_size
    tokens = [f"t{i}" for i in range(old)] + ["中国", "新词"]
    tokens[100:102] = ["中", "国"]
    with torch.no_grad():
        model.decoder.bias[:old] = torch.arange(old, dtype=torch.float32) / old
    extend_vocab(model, tokens, old)
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == old + 2 and model.decoder.weight is emb          # still tied
    assert torch.allclose(emb[old], emb[100:102].mean(0))                    # 中国 = mean(中, 国)
    assert torch.allclose(model.decoder.bias[old:], model.decoder.bias[:old].mean())


@pytest.mark.slow
@pytest.mark.parametrize("masking", ["token", "ngram", "unigram-noise", "correction"])
def test_every_masking_strategy_trains_a_modernbert(tmp_path, char_shards, masking):
    """3 steps per strategy, precision auto (bf16 where the CPU has it), accumulation 2."""
    recipe = write_recipe(tmp_path / "r.yaml", *char_shards, masking=masking, max_steps=3, micro_batch=8,
                          save_every=0, eval_every=0, precision="auto", mask_rate_schedule="constant")
    assert cli(["pretrain", str(recipe)]) == 0
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["status"] == "finished" and summary["model"]["architecture"] == "modernbert"
    assert all(r["loss"] > 0 for r in metrics(tmp_path / "run") if "loss" in r)


def test_the_main_recipe_switches_architecture_with_one_key():
    """`attention_init: auto` (the main recipe's) is what each family applies: neighbour for BERT, the stock init
    for ModernBERT, so `--set architecture=modernbert` alone is a valid recipe."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.train.recipe import load_recipe

    bert = load_recipe(REPO / "recipes/tiny-cpu.yaml")
    modern = load_recipe(REPO / "recipes/tiny-cpu.yaml", ["architecture=modernbert"])
    assert bert.attention_init == modern.attention_init == "auto"
    assert (bert.arch.attention_init(bert), modern.arch.attention_init(modern)) == ("neighbour", "stock")
    with pytest.raises(ZhBertError, match="attention_init neighbour writes BERT's learned position embeddings"):
        load_recipe(REPO / "recipes/tiny-cpu.yaml", ["architecture=modernbert", "attention_init=neighbour"])
