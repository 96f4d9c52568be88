"""`objective: electra` on real Chinese text: the replaced-token labels, the sampler, exact accumulation,
stock checkpoints (final/ = discriminator, final/generator/ = masked LM) that transformers 4 and 5 load and
that fill-mask, `eval mlm`, `demo`, `finetune` and `publish` use, plan's FLOP/parameter count, kill -9 +
`--resume auto`, and 2 CPU processes against 1."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _run_helpers import kill_then_resume, metrics, save_recipe
from conftest import CHAR_SEQ, REPO

pytestmark = pytest.mark.usefixtures("one_thread")   # identical arithmetic here and in the subprocesses

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
TF4 = os.environ.get("ZH_BERT_TF4_PYTHON")




def write_recipe(path: Path, char_shards, **over) -> Path:
    tokdir, sharddir = char_shards
    recipe = {"out_dir": str(path.parent / "run"), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
              "objective": "electra", "masking": "wwm", "seq_len": CHAR_SEQ, "global_batch": 16, "micro_batch": 8,
              "lr": 3e-3, "warmup_steps": 2, "max_steps": 20, "log_every": 5, "eval_every": 10, "eval_batches": 2,
              "save_every": 10, "keep_last": 2, "seed": 7, "precision": "fp32"}
    return save_recipe(path, {**recipe, **over})


def tiny_electra(char_shards, dropout: float = 0.0):
    from zh_bert.train.arch.bert import build_config
    from zh_bert.train.objectives.electra_net import ElectraPretrainModel, build_electra
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    torch.manual_seed(0)
    cfg = build_config("tiny", len(load_tokenizer(char_shards[0])), dropout=dropout)
    return ElectraPretrainModel(*build_electra(cfg))


def loader_batches(char_shards, n: int, size: int, seed: int = 3) -> list[dict]:
    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig

    it = iter(ShardLoader(ShardDataset(char_shards[1], "train"), size, MaskingConfig(strategy="wwm"), seed=seed))
    return [next(it) for _ in range(n)]


# ------------------------------------------------------------------------------------------------ the pieces

def test_sampler_draws_from_the_softmax_and_a_sure_generator_replaces_nothing():
    from zh_bert.train.objectives.electra_net import replaced_token_labels, sample_replacements

    probs = torch.tensor([0.5, 0.0, 0.25, 0.25])
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0))
    picks = sample_replacements(probs.log().expand(len(u), 4), u)
    freq = torch.bincount(picks, minlength=4).float() / len(u)
    assert freq[1] == 0 and torch.allclose(freq, probs, atol=0.015), freq
    target = torch.tensor([5, 9, 0, 3])
    sure = torch.nn.functional.one_hot(target, 12).float() * 1e4    # all mass on the original token
    for edge in (torch.zeros(4), torch.full((4,), 1 - 2 ** -24), torch.rand(4)):
        assert torch.equal(sample_replacements(sure, edge), target)
    assert replaced_token_labels(target, target).sum() == 0
    assert replaced_token_labels(target, torch.tensor([5, 8, 0, 2])).tolist() == [0, 1, 0, 1]


def test_rtd_labels_are_one_exactly_where_the_sampled_token_differs(char_shards):
    """A real tiny generator/discriminator on a real masked batch: the discriminator sees the original text
    with the masked positions replaced by the generator's samples, and its labels are 1 exactly where that
    differs from the original; a generator whose logits put all mass on the original gives all zeros."""
    from zh_bert.train.objectives.electra_net import add_sampling_noise

    model = tiny_electra(char_shards)
    batch = add_sampling_noise(loader_batches(char_shards, 1, 8), seed=7, step=0, rank=0, world=1)[0]
    seen = {}
    corrupt = model.corrupt

    def recording(input_ids, labels, pos, logits, sample_u):
        seen["pos"], seen["logits"] = pos, logits
        seen["original"], seen["disc_ids"], seen["rtd"] = out = corrupt(input_ids, labels, pos, logits, sample_u)
        return out

    model.corrupt = recording
    out = model(**batch)
    labels, ids = batch["labels"].reshape(-1), batch["input_ids"].reshape(-1)
    masked = labels != -100
    original, disc_ids, rtd = seen["original"], seen["disc_ids"], seen["rtd"]
    assert torch.equal(original[masked], labels[masked]) and torch.equal(original[~masked], ids[~masked])
    assert torch.equal(disc_ids[~masked], original[~masked])            # only masked positions are replaced
    assert torch.equal(rtd, (disc_ids != original).long())
    assert 0 < int(rtd.sum()) <= int(masked.sum()) and int(out["replaced"]) == int(rtd.sum())
    assert int(out["rtd_count"]) == ids.numel() and int(out["mlm_count"]) == int(masked.sum())
    # the same batch through a generator that is sure of the original token: nothing is replaced
    target = labels[seen["pos"]]
    sure = torch.nn.functional.one_hot(target, seen["logits"].shape[-1]).float() * 1e4
    original, disc_ids, rtd = corrupt(batch["input_ids"], batch["labels"], seen["pos"], sure, batch["sample_u"])
    assert int(rtd.sum()) == 0 and torch.equal(disc_ids, original)
    model.corrupt = lambda *a: (original, disc_ids, rtd)
    out = model(**batch)
    assert int(out["replaced"]) == 0 and float(out["rtd_loss_sum"].detach()) > 0


def test_accumulation_4x8_equals_1x32(char_shards):
    """One ELECTRA step on 32 sequences as 4 micro-batches of 8 equals one batch of 32: the samples are keyed
    by each sequence's place in the global batch, the MLM loss is normalised by the global masked count and
    the RTD loss by the global token count. Tolerance 1e-6 per parameter (fp32 summation order)."""
    from zh_bert.train.training import StepStats, lr_lambda, make_accelerator, make_optimizer, train_step
    from zh_bert.train.recipe import Recipe

    micro = loader_batches(char_shards, 4, 8)
    whole = {k: torch.cat([m[k] for m in micro]) for k in micro[0]}
    base = tiny_electra(char_shards)
    acc = make_accelerator("fp32", cpu=True)
    params, rows = {}, {}
    for name, batches, mb in (("4x8", micro, 8), ("1x32", [whole], 32)):
        recipe = Recipe(lr=1e-3, warmup_steps=0, max_steps=10, global_batch=32, micro_batch=mb, objective="electra")
        model = copy.deepcopy(base)
        opt, _ = make_optimizer(model, recipe)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
        stats = StepStats()
        train_step(model, opt, sched, acc, batches, recipe, stats, step=5)
        params[name] = {k: v.detach().clone() for k, v in model.named_parameters()}
        rows[name] = (float(stats.loss) / stats.masked, float(stats.sums["rtd_loss_sum"]) / stats.tokens,
                      float(stats.sums["replaced"]))
    assert rows["4x8"][2] == rows["1x32"][2] > 0                     # the very same samples
    assert all(abs(a - b) < 1e-5 for a, b in zip(rows["4x8"][:2], rows["1x32"][:2])), rows
    worst = max((params["4x8"][k] - params["1x32"][k]).abs().max().item() for k in params["4x8"])
    moved = max((params["4x8"][k] - dict(base.named_parameters())[k]).abs().max().item() for k in params["4x8"])
    assert moved > 1e-4 and worst <= 1e-6, (worst, moved)
    # the generator's embeddings are the discriminator's (one parameter, trained by both losses)
    assert base.generator.electra.embeddings is base.hf.electra.embeddings
    assert base.generator.generator_lm_head.weight is base.hf.electra.embeddings.word_embeddings.weight


def test_plan_counts_both_networks(capsys):
    """plan's parameter count equals the built pair's, and its FLOPs are the generator's encoder + embedding
    projection + sparse head plus the discriminator's encoder + RTD head, counted by hand here."""
    from zh_bert.cli import main
    from zh_bert.train.model import count_params
    from zh_bert.train.objectives.electra_net import build_electra, electra_configs, electra_flops_per_token
    from zh_bert.plan.memory_model import ModelShape, model_config

    for preset in ("tiny", "mini"):
        cfg = model_config(preset, 21128)
        disc, gen = build_electra(cfg)
        pair = torch.nn.ModuleDict({"d": disc, "g": gen})
        assert ModelShape.from_electra(*electra_configs(cfg)).params == count_params(pair)
    d, g = electra_configs(model_config("mini", 21128))
    assert (g.hidden_size, g.num_attention_heads, g.intermediate_size, g.num_hidden_layers) == (64, 1, 256, 4)
    s, m = 128, 0.15
    gen_macs = 4 * (4 * 64 * 64 + 2 * 64 * 256 + 2 * s * 64) + 256 * 64 + m * (64 * 256 + 256 * 21128)
    disc_macs = 4 * (4 * 256 * 256 + 2 * 256 * 1024 + 2 * s * 256) + 256 * 256 + 256
    assert electra_flops_per_token(d, g, s, m) == pytest.approx(6 * (gen_macs + disc_macs))
    assert main(["plan", "--model", "mini", "--objective", "electra", "--gpu", "1080ti", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["flops_per_token"] == pytest.approx(6 * (gen_macs + disc_macs))
    assert p["model_shape"] == "L4/H256/A4 + generator L4/H64/A1"
    assert main(["plan", "--model", "mini", "--gpu", "1080ti", "--json"]) == 0
    mlm = json.loads(capsys.readouterr().out)
    assert p["memory_gb"]["activations"] > mlm["memory_gb"]["activations"] and p["params"] > mlm["params"] * 0.9


# ------------------------------------------------------------------------------------------------ a real run

@pytest.fixture(scope="module")
def electra_run(tmp_path_factory, char_shards):
    """A 20-step tiny ELECTRA run (in process): its run dir."""
    from zh_bert.train.pretrain import main

    root = tmp_path_factory.mktemp("electra")
    torch.set_num_threads(1)
    assert main([str(write_recipe(root / "r.yaml", char_shards))]) == 0
    return root / "run"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nonfinite_gradient_guard_huge_rtd_weight_stops_with_one_line_at_the_first_step(tmp_path, char_shards,
                                                                                       capsys, precision):
    """rtd_weight 1e30: the weighted loss is finite but its gradient norm is not. Every such step is skipped
    (never applied), counted, reported on stderr at the first one, and the streak guard stops the run
    (status diverged, exit 1 as for a NaN streak); before, it ended "finished" with skipped_steps 0."""
    from zh_bert.train.pretrain import main

    capsys.readouterr()
    rc = main([str(write_recipe(tmp_path / "r.yaml", char_shards, rtd_weight=1e30, max_nan_streak=3,
                                precision=precision, log_every=1))])
    out, err = capsys.readouterr()
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("warning: precision")]
    assert rc == 1
    assert lines and lines[0].startswith("warning: step 1 skipped") and "gradient norm inf" in lines[0], err
    assert "rtd_weight (1e+30)" in lines[0]
    assert lines[-1].startswith("error: 3 step(s) in a row skipped") and len(lines) == 2, err
    run = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert run["status"] == "diverged" and run["steps"] == 3 and run["skipped_steps"] == 3
    assert not (tmp_path / "run" / "final").exists()


def test_nonfinite_gradient_guard_streak_of_one_is_one_line(tmp_path, char_shards, capsys):
    """max_nan_streak 1: the run stops at the first non-finite gradient with exactly one stderr line."""
    from zh_bert.train.pretrain import main

    capsys.readouterr()
    rc = main([str(write_recipe(tmp_path / "r.yaml", char_shards, rtd_weight=1e30, max_nan_streak=1))])
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert rc == 1 and len(err) == 1 and err[0].startswith("error: 1 step(s) in a row skipped"), err
    assert "(step 1: loss " in err[0] and "gradient norm inf)" in err[0]


def test_run_logs_rtd_metrics_and_writes_discriminator_and_generator(electra_run):
    from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, ElectraForMaskedLM,
                              ElectraForPreTraining, ElectraModel, pipeline)

    from zh_bert.train.rundir import masked_lm_dir, model_dir

    rows = metrics(electra_run)
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_rtd_acc" in r]
    assert [r["step"] for r in train] == [5, 10, 15, 20] and [r["step"] for r in val] == [10, 20]
    for r in train:
        assert {"rtd_loss", "rtd_acc", "replaced_frac", "mlm_acc"} <= set(r)
        assert 0 < r["replaced_frac"] < 0.2 and 0 <= r["rtd_acc"] <= 1 and r["rtd_loss"] > 0
    assert train[-1]["loss"] < train[0]["loss"] and train[-1]["rtd_loss"] < train[0]["rtd_loss"]
    summary = json.loads((electra_run / "run.json").read_text(encoding="utf-8"))
    assert summary["objective"] == "electra" and summary["model"]["class"] == "ElectraForPreTraining"
    assert summary["generator"]["hidden_size"] == 32 and summary["generator"]["folder"] == "final/generator"
    assert {"mlm_loss", "mlm_acc", "rtd_loss", "rtd_acc"} == set(summary["final_validation"])
    final, gen_dir = electra_run / "final", electra_run / "final" / "generator"
    for folder in (final, gen_dir):
        assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= {p.name for p in folder.iterdir()}
    assert type(AutoModelForPreTraining.from_pretrained(final)) is ElectraForPreTraining
    assert type(AutoModel.from_pretrained(final)) is ElectraModel
    disc = ElectraForPreTraining.from_pretrained(final)
    gen = AutoModelForMaskedLM.from_pretrained(gen_dir)
    assert type(gen) is ElectraForMaskedLM and gen.config.hidden_size == 32 and gen.config.embedding_size == 128
    assert torch.equal(disc.electra.embeddings.word_embeddings.weight, gen.electra.embeddings.word_embeddings.weight)
    assert torch.equal(gen.generator_lm_head.weight, gen.electra.embeddings.word_embeddings.weight)
    ckpt = electra_run / "checkpoints" / "step-0000010"
    assert "generator/model.safetensors" in json.loads((ckpt / "manifest.json").read_text())["files"]
    # commands that need a masked LM find the generator; the rest take the discriminator
    assert masked_lm_dir(electra_run) == gen_dir and masked_lm_dir(final) == gen_dir
    assert masked_lm_dir(ckpt) == ckpt / "generator" and model_dir(electra_run) == final
    fill = pipeline("fill-mask", model=str(gen_dir), tokenizer=str(gen_dir), device="cpu")
    preds = fill("中华人民共和国的首[MASK]是北京。", top_k=5)
    assert len(preds) == 5 and fill.tokenizer.convert_tokens_to_ids("中") != fill.tokenizer.unk_token_id


def test_eval_demo_finetune_and_publish_take_the_right_network(electra_run, tmp_path, capsys):
    from zh_bert.cli import main
    from zh_bert.release.demo import load_model

    capsys.readouterr()
    assert main(["eval", "mlm", str(electra_run), "--text", str(REPO / "corpora/sample/zhwiki_sampled.txt"),
                 "--max-seqs", "8", "--seq-len", str(CHAR_SEQ), "--no-record"]) == 0
    res = json.loads(capsys.readouterr().out.strip().split("\n")[-1])
    assert res["checkpoint"].endswith("final/generator") and res["n_masked"] > 0
    model, _ = load_model(str(electra_run))
    assert type(model).__name__ == "ElectraForMaskedLM"
    rows = [f"{i % 2}\t{'好' if i % 2 else '差'}的东西，第{i}号。" for i in range(16)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("\n".join(rows[:6]) + "\n", encoding="utf-8")
    for pooling in ("cls", "mean"):
        assert main(["finetune", str(electra_run), "--task", f"tsv:{tmp_path / 'train.tsv'},{tmp_path / 'dev.tsv'}",
                     "--epochs", "1", "--seq-len", "24", "--batch-size", "8", "--pooling", pooling,
                     "--no-record"]) == 0
        res = json.loads(capsys.readouterr().out.strip().split("\n")[-1])
        assert res["checkpoint"].endswith("final") and 0 <= res["dev_acc"] <= 1
    assert main(["publish", str(electra_run), "--repo-id", "me/tiny-electra", "--dry-run",
                 "-o", str(tmp_path / "staged")]) == 0
    staged = tmp_path / "staged"
    assert (staged / "generator" / "model.safetensors").is_file() and (staged / "generator" / "vocab.txt").is_file()
    card = (staged / "README.md").read_text(encoding="utf-8")
    assert "ElectraForPreTraining" in card and "the discriminator" in card and "the generator" in card
    assert 'subfolder="generator"' in card and "pipeline_tag: fill-mask" not in card


@pytest.mark.slow
def test_both_networks_load_as_stock_classes_in_transformers_4(electra_run):
    if not TF4:
        if os.environ.get("CI"):
            pytest.fail("ZH_BERT_TF4_PYTHON is not set: .ci/run must create the transformers 4.x venv")
        pytest.skip("no transformers 4.x python (set ZH_BERT_TF4_PYTHON; .ci/run does)")
    probe = r'''
import json, sys, torch, transformers
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer, pipeline
final = sys.argv[1]
d = AutoModelForPreTraining.from_pretrained(final)
g = AutoModelForMaskedLM.from_pretrained(final + "/generator")
tok = AutoTokenizer.from_pretrained(final + "/generator")
fill = pipeline("fill-mask", model=g, tokenizer=tok)
ids = tok("北京是中国的首都。", return_tensors="pt")
with torch.no_grad():
    rtd = d(**ids).logits[0].tolist()
print(json.dumps({"version": transformers.__version__, "classes": [type(d).__name__, type(g).__name__],
                  "fill": [r["token"] for r in fill("北京是中国的[MASK]都。")], "rtd": rtd}))
'''
    runs = {}
    for python in (TF4, sys.executable):
        p = subprocess.run([python, "-c", probe, str(electra_run / "final")], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1"})
        assert p.returncode == 0, p.stderr[-3000:]
        runs[python] = json.loads(p.stdout.strip().split("\n")[-1])
    old, new = runs[TF4], runs[sys.executable]
    assert old["version"].startswith("4.") and new["version"].startswith("5.")
    assert old["classes"] == new["classes"] == ["ElectraForPreTraining", "ElectraForMaskedLM"]
    assert old["fill"] == new["fill"]
    assert max(abs(a - b) for a, b in zip(old["rtd"], new["rtd"])) < 1e-4


# ------------------------------------------------------------------------------------------------ guarantees

@pytest.mark.slow
def test_kill9_then_resume_auto_reproduces_the_losses(tmp_path, char_shards):
    """A real ELECTRA `zh-bert pretrain` killed with SIGKILL after its first checkpoint; `--resume auto` logs
    exactly the per-step MLM and RTD losses of an uninterrupted run (CPU, fp32, 1e-5)."""
    from zh_bert.train.pretrain import main

    common = dict(max_steps=12, save_every=4, log_every=1, eval_every=0, keep_last=3)
    ref = write_recipe(tmp_path / "ref" / "r.yaml", char_shards, **common)
    assert main([str(ref)]) == 0
    expected = {r["step"]: (r["loss"], r["rtd_loss"], r["replaced_frac"]) for r in metrics(tmp_path / "ref" / "run")
                if "loss" in r}
    assert sorted(expected) == list(range(1, 13))

    recipe = write_recipe(tmp_path / "killed" / "r.yaml", char_shards, **common)
    run = tmp_path / "killed" / "run"
    cmd = [sys.executable, "-m", "zh_bert", "pretrain", str(recipe)]
    rows = kill_then_resume(cmd, run, ONE_THREAD, REPO, last_step=12)
    got = {r["step"]: (r["loss"], r["rtd_loss"], r["replaced_frac"]) for r in rows}
    assert sorted(got) == list(range(1, 13)), "each step logged exactly once after resume"
    worst = max(abs(a - b) for s in expected for a, b in zip(got[s], expected[s]))
    assert worst <= 1e-5, (got, expected)


@pytest.mark.slow
def test_two_processes_equal_one_process_with_double_accumulation(tmp_path, char_shards):
    """torchrun with 2 gloo processes (micro 4 × accumulation 2 × 2) against 1 process (micro 4 × 4): the same
    per-step losses and, after 4 steps, the same discriminator and generator weights (2e-5, as test_ddp)."""
    from safetensors.numpy import load_file

    from test_ddp import one_and_two

    recipe = write_recipe(tmp_path / "r.yaml", char_shards, max_steps=4, log_every=1, eval_every=0, save_every=0,
                          micro_batch=4, lr=1e-3, warmup_steps=0, schedule="constant", dropout=0.0)
    runs = one_and_two(recipe, tmp_path, ONE_THREAD)
    one, two = ({r["step"]: (r["loss"], r["rtd_loss"], r["replaced_frac"]) for r in metrics(runs[k]) if "loss" in r}
                for k in ("one", "two"))
    assert sorted(one) == sorted(two) == [1, 2, 3, 4]
    assert max(abs(a - b) for s in one for a, b in zip(one[s], two[s])) <= 1e-5, (one, two)
    for sub in ("final/model.safetensors", "final/generator/model.safetensors"):
        p1, p2 = load_file(str(runs["one"] / sub)), load_file(str(runs["two"] / sub))
        assert p1.keys() == p2.keys()
        worst = max(float(abs(p1[k] - p2[k]).max()) for k in p1)
        assert worst <= 2e-5, (sub, worst)
