"""`zh-bert plan`, the precision rules shared with `pretrain`, the hardware recipes, and the memory model
checked against a real measurement on this CPU."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

from zh_bert.cli import main as cli
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import GPUS, KNOWN_DEVICES, build_supports, decide_precision, get_spec, resolve_precision
from zh_bert.core.config import config_from_args
from zh_bert.plan.memory_model import ModelShape, estimate_memory, model_config
from zh_bert.plan import PlanArgs, build_parser, make_plan

HARDWARE_RECIPES = ["base-1080ti", "base-4xk80", "small-2xp100", "large-a100"]


def run_plan(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli(["plan", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("gpu,gpus", [("k80", 8), ("1080ti", 1), ("p100", 2), ("t4", 1), ("v100", 1),
                                      ("a100", 1), ("h100", 1), ("cpu", 1)])
def test_plan_prints_micro_batch_accumulation_precision_and_time(capsys, gpu, gpus):
    rc, out, _ = run_plan(capsys, "--gpu", gpu, "--gpus", str(gpus), "--model", "base", "--seq-len", "128",
                          "--global-batch", "256", "--tokens", "3.3e9")
    assert rc == 0
    for label in ("precision", "micro-batch", "accumulation", "memory/device", "throughput", "time", "install"):
        assert f"  {label}" in out, (label, out)
    assert " days (" in out and "GPU-hours" in out


def test_unknown_gpu_is_refused_with_the_known_list(capsys):
    rc, out, err = run_plan(capsys, "--gpu", "gtx980")
    assert rc == 2 and out == ""
    assert "unknown GPU 'gtx980'" in err and "known: " + ", ".join(KNOWN_DEVICES) in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = run_plan(capsys, "--gpu", "1080-Ti")       # spelling variants are accepted
    assert rc == 0
    rc, _, err = run_plan(capsys, "--gpu", "p100", "--gpus", "3")
    assert rc == 2 and "not divisible by --gpus 3" in err


def test_json_plan_is_consistent(capsys):
    rc, out, _ = run_plan(capsys, "--gpu", "1080ti", "--model", "base", "--global-batch", "256", "--json")
    assert rc == 0
    p = json.loads(out)
    assert (p["precision"], p["micro_batch"], p["accumulation"]) == ("fp32", 64, 4)
    assert p["micro_batch"] * p["gpus"] * p["accumulation"] == p["global_batch"] == 256
    assert p["memory_gb"]["total"] <= p["device_memory_gb"] < p["next_micro_batch_gb"]
    assert p["steps"] == 900_000 and p["tokens"] == 900_000 * 256 * 128   # BERT's 128-token phase by default
    assert p["utilisation_source"] == "assumed" and 0 < p["utilisation"] < 1
    assert p["days"] == pytest.approx(p["tokens"] / p["tokens_per_s"] / 86400)
    assert p["largest_within_days"]["model"] == "small"
    k80 = make_plan(PlanArgs(gpu="k80", model="base", gpus=8, global_batch=256), GPUS["k80"])
    assert k80.allreduce_s_per_step > 0 and k80.micro_batch * 8 * k80.accumulation == 256
    big = make_plan(PlanArgs(gpu="1080ti", model="large", global_batch=256), GPUS["1080ti"])
    assert big.fits and big.micro_batch < 64                      # large fits with a smaller micro-batch


def test_precision_rules_shared_by_planner_and_trainer():
    assert decide_precision("auto", (3, 7))[0] == "fp32"          # Kepler: fp16 buys nothing
    assert decide_precision("auto", (6, 1))[0] == "fp32"          # 1080 Ti: fp16 at 1/64 rate
    assert decide_precision("auto", (6, 0))[0] == "fp16"          # P100: fast fp16, no bf16
    assert decide_precision("auto", (7, 5))[0] == "fp16"
    assert decide_precision("auto", (8, 0))[0] == "bf16"
    p, w = decide_precision("fp16", (3, 7), name="Tesla K80")
    assert p == "fp16" and "no fp16 speed-up" in w[0]
    p, w = decide_precision("bf16", (6, 1), name="GeForce GTX 1080 Ti")
    assert p == "bf16" and "no native bf16" in w[0] and "fp32" in w[0]
    p, w = decide_precision("fp16", None, cpu_bf16=True)
    assert p == "fp16" and "meant for checking the GPU path" in w[0]   # real fp16 + loss scaling, with a warning
    assert decide_precision("auto", None, cpu_bf16=False) == ("fp32", [])
    with pytest.raises(ZhBertError, match="precision must be one of"):
        decide_precision("fp8", (8, 0))
    import torch

    assert resolve_precision("fp16", torch.device("cpu"))[0] == "fp16"
    assert resolve_precision("auto", torch.device("cpu"))[0] in ("fp32", "bf16")   # never fp16 on a CPU
    for key in ("k80", "1080ti", "p100", "a100"):
        assert make_plan(PlanArgs(gpu=key, model="tiny"), GPUS[key]).precision == decide_precision("auto", GPUS[key].capability)[0]


def test_build_kernel_check():
    cu126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    cu128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    cu118 = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert build_supports((6, 1), cu126)          # sm_60 cubin runs on sm_61
    assert not build_supports((6, 1), cu128)
    assert build_supports((3, 7), cu118) and not build_supports((3, 7), cu126)
    assert build_supports((8, 9), cu126)          # sm_86 cubin runs on sm_89
    assert build_supports((12, 0), ["sm_90", "compute_90"])   # PTX JIT forward
    assert not build_supports((9, 0), ["sm_100"])


@pytest.mark.parametrize("model,objective", [("tiny", "mlm"), ("mini", "mlm"), ("tiny", "mlm+nsp")])
def test_param_count_matches_the_real_model(model, objective):
    from zh_bert.train.arch import get as get_architecture
    from zh_bert.train.model import count_params

    cfg = model_config(model, 21128)
    assert ModelShape.from_config(cfg, pairs=objective != "mlm").params == count_params(get_architecture("bert").model_class(objective)(cfg))


def _modernbert(model: str, vocab: int = 21128):
    """The ModernBertForMaskedLM that pretrain builds for preset `model` (stock transformers, no zh-bert wrapper)."""
    from transformers import ModernBertForMaskedLM

    from zh_bert.train.arch.modernbert import build_modernbert_config

    cfg = build_modernbert_config(model, vocab, special_ids={"pad": 0, "cls": 101, "sep": 102})
    return cfg, ModernBertForMaskedLM(cfg)


@pytest.mark.parametrize("model", ["tiny", "mini"])
def test_modernbert_param_count_matches_the_built_model(model, capsys):
    cfg, net = _modernbert(model)
    rc, out, _ = run_plan(capsys, "--gpu", "cpu", "--model", model, "--architecture", "modernbert", "--json")
    assert rc == 0
    p = json.loads(out)
    assert p["architecture"] == "modernbert" and p["model_shape"].startswith("ModernBERT ")
    assert p["params"] == sum(t.numel() for t in net.parameters())
    bert = make_plan(PlanArgs(gpu="cpu", model=model), get_spec("cpu"))
    assert abs(p["params"] / bert.params - 1) < 0.01      # sized to the BERT preset's parameter count


@pytest.mark.parametrize("keys", [{}, {"global_attn_every_n_layers": 2, "local_attention": 64, "dropout": 0.0}])
def test_modernbert_config_is_the_one_pretrain_builds(keys):
    """plan may not import pretrain, so it rebuilds the config pretrain trains (`recipe.arch.config`) from the
    same recipe keys."""
    from zh_bert.train.recipe import Recipe

    recipe = Recipe(architecture="modernbert", model="mini", **keys)
    mine = model_config("mini", 21128, recipe.dropout, architecture="modernbert",
                        global_attn_every_n_layers=recipe.global_attn_every_n_layers,
                        local_attention=recipe.local_attention)
    assert mine.to_dict() == recipe.arch.config(recipe, 21128).to_dict()


def test_modernbert_flops_per_token():
    from zh_bert.train.arch.modernbert import modernbert_flops_per_token

    args = PlanArgs(gpu="cpu", model="tiny", architecture="modernbert", seq_len=512)
    plan = make_plan(args, get_spec("cpu"))
    cfg, _ = _modernbert("tiny")
    assert plan.flops_per_token > 0
    assert plan.flops_per_token == modernbert_flops_per_token(cfg, 512, 0.15)
    wider = make_plan(dataclasses.replace(args, local_attention=512), get_spec("cpu"))
    assert wider.flops_per_token > plan.flops_per_token   # local layers attend over their window only
    assert any("local layers over their 128-token window" in n for n in plan.notes)


@pytest.mark.parametrize("objective, match", [("mlm+nsp", "needs token-type embeddings"),
                                              ("mlm+sop", "needs token-type embeddings"),
                                              ("electra", "builds ELECTRA's own BERT-style")])
def test_modernbert_with_a_pair_or_electra_objective_is_one_line(objective, match, capsys):
    rc, out, err = run_plan(capsys, "--architecture", "modernbert", "--objective", objective)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zh-bert plan: error:") and match in lines[0], err
    with pytest.raises(ZhBertError, match=match):
        PlanArgs(architecture="modernbert", objective=objective)
    rc, _, err = run_plan(capsys, "--architecture", "modernbert", "--local-attention", "7")
    assert rc == 2 and "'local_attention' must be an even number" in err


def _plan_from_recipe_header(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# zh-bert plan "), f"{path.name} must open with the plan line it was sized with"
    args = config_from_args(PlanArgs, build_parser().parse_args(shlex.split(first[len("# zh-bert plan "):])))
    return args, make_plan(args, GPUS[args.device])


@pytest.mark.parametrize("name", HARDWARE_RECIPES)
def test_hardware_recipes_follow_their_plan_line(name):
    from zh_bert.train.recipe import KEYS, load_recipe

    path = REPO / "recipes" / f"{name}.yaml"
    recipe = load_recipe(path)
    assert set(yaml.safe_load(path.read_text(encoding="utf-8"))) <= set(KEYS)
    args, plan = _plan_from_recipe_header(path)
    assert (recipe.model, recipe.seq_len, recipe.global_batch) == (args.model, args.seq_len, args.global_batch)
    assert recipe.micro_batch == plan.micro_batch and plan.fits
    assert recipe.attention_dropout == args.attention_dropout
    assert recipe.precision == plan.precision
    assert f"{plan.days:.1f} days" in path.read_text() or f"≈ {round(plan.days)} days" in path.read_text()
    text = path.read_text(encoding="utf-8")
    if args.gpus > 1:                      # multi-GPU recipes name their accelerate config, sized to --gpus
        cfg_name = text.split("--config_file ")[1].split()[0]
        cfg = yaml.safe_load((REPO / cfg_name).read_text())
        assert cfg["num_processes"] == args.gpus and cfg["distributed_type"] == "MULTI_GPU"
        assert cfg["mixed_precision"] == "no"
    assert plan.install.split("#")[0].strip() in text


@pytest.mark.slow
def test_memory_model_matches_a_measured_cpu_step():
    """One case of bench/plan_memory_check.py (peak RSS of real training steps in a fresh process)."""
    from bench import plan_memory_check as bench

    measured = bench.measure("tiny", 16)
    planned = bench.estimate("tiny", 16)
    assert abs(planned / measured - 1) <= 0.25, (planned / 2**20, measured / 2**20)
    shape = ModelShape.from_config(model_config("base", 21128))
    fp32 = estimate_memory(shape, 128, 64, "fp32", device="cpu").activations
    bf16 = estimate_memory(shape, 128, 64, "bf16", device="cpu").activations
    assert 0.5 < bf16 / fp32 < 0.75          # AMP keeps LayerNorm inputs in fp32: not quite half


def _modernbert_peak_child(model: str, micro_batch: int, seq_len: int = 128) -> int:
    """bench/plan_memory_check.py's `child` with ModernBERT (runs in a fresh process: peak RSS above a warmed-up
    baseline of two AdamW steps of two accumulated micro-batches, fp32)."""
    import torch

    from bench.plan_memory_check import _status_kb

    from zh_bert.train.arch import MODERNBERT
    from zh_bert.train.model import PretrainModel

    torch.set_num_threads(2)

    def run(cfg, mb, steps, accumulation=2):
        torch.manual_seed(0)
        net = PretrainModel(MODERNBERT.model_class("mlm")(cfg)).train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(0)
        for micro_step in range(1, steps * accumulation + 1):
            ids = torch.randint(1000, cfg.vocab_size, (mb, seq_len), generator=g)
            labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, torch.full_like(ids, -100))
            out = net(ids, attention_mask=torch.ones_like(ids), labels=labels)
            (out["mlm_loss_sum"] / out["mlm_count"]).backward()
            if micro_step % accumulation == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)

    run(model_config("tiny", 2000, architecture="modernbert"), 2, 1)     # warm-up, then freed
    baseline = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")                     # reset VmHWM to the current RSS
    run(model_config(model, 21128, 0.1, architecture="modernbert"), micro_batch, 2)
    return (_status_kb("VmHWM") - baseline) * 1024


@pytest.mark.slow
def test_modernbert_memory_model_matches_a_measured_cpu_step():
    """The BERT case above for ModernBERT (tiny, micro-batch 16, seq 128, fp32), with the same ±25% bar."""
    from zh_bert.plan.memory_model import plan_config, shape_and_flops

    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = (f"import sys; sys.path[:0] = [{str(REPO / 'tests')!r}]; from test_plan import _modernbert_peak_child; "
            f"print(_modernbert_peak_child('tiny', 16))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    measured = int(out.stdout.strip().splitlines()[-1])
    args = PlanArgs(model="tiny", seq_len=128, architecture="modernbert")
    shape, _ = shape_and_flops(args, plan_config(args))
    planned = estimate_memory(shape, 128, 16, "fp32", device="cpu").total
    assert abs(planned / measured - 1) <= 0.25, (planned / 2**20, measured / 2**20)


def test_measure_on_this_cpu(capsys):
    rc, out, _ = run_plan(capsys, "--gpu", "cpu", "--model", "tiny", "--seq-len", "64", "--global-batch", "8",
                          "--measure", "--measure-steps", "1", "--json")
    assert rc == 0
    p = json.loads(out)
    assert p["utilisation_source"] == "measured" and p["measured"]["tokens_per_s"] > 0
    assert p["utilisation"] == pytest.approx(p["measured"]["utilisation"])
    import torch

    if not torch.cuda.is_available():
        rc, _, err = run_plan(capsys, "--gpu", "1080ti", "--measure")
        assert rc == 2 and "no CUDA GPU" in err
    rc, out, _ = run_plan(capsys, "--gpu", "cpu", "--model", "tiny", "--seq-len", "64", "--global-batch", "8",
                          "--architecture", "modernbert", "--measure", "--measure-steps", "1", "--json")
    assert rc == 0
    p = json.loads(out)
    assert p["measured"]["architecture"] == "modernbert" and p["measured"]["tokens_per_s"] > 0


@pytest.mark.parametrize("kw, match", [
    (dict(gpu="gtx980"), "unknown GPU 'gtx980'"),
    (dict(gpu="p100", gpus=3), "not divisible by --gpus 3"),
    (dict(mask_rate=1.5), "--mask-rate must be in"),
    (dict(temperature=-1.0), "--temperature must be > 0"),
    (dict(seq_len=4), "--seq-len must be >= 8"),
    (dict(utilisation=0), "--utilisation must be in"),
    (dict(days=float("inf")), "--days must be a finite number"),
    (dict(tokens=float("nan")), "--tokens must be a finite number"),
])
def test_python_api_refuses_what_the_cli_refuses(kw, match):
    with pytest.raises(ZhBertError, match=match):
        PlanArgs(**kw)


@pytest.mark.parametrize("config, match", [
    ({"hidden_size": "abc", "num_attention_heads": 2}, "hidden_size"),
    ({"hidden_size": 130, "num_attention_heads": 4}, "hidden_size 130 is not a multiple of num_attention_heads 4"),
    ({"hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 0}, "'num_hidden_layers' must be a positive"),
    ({"hidden_size": 128, "num_attention_heads": 2, "hidden_act": "gleu"}, "unknown hidden_act 'gleu'"),
    ([1, 2], "not a BERT config"),
])
def test_a_model_config_no_model_can_have_is_one_line(config, match, tmp_path, capsys):
    """`--model config.json` with sizes no BERT can have: exit 2 and one line (the same check as pretrain's)."""
    from zh_bert.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    assert main(["plan", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zh-bert plan: error:") and match in err[0], err
