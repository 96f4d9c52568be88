"""fp16 with dynamic loss scaling, exercised on a CPU: the path every Pascal/Volta/Turing user runs. zh-bert owns
the scaler (`scaler.make_scaler`), so the same code runs here and on CUDA: real fp16 matmuls, overflowed steps
skipped and the scale halved, the scale grown after `loss_scale_growth_interval` good steps, and exact resume."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from _run_helpers import kill_then_resume, metrics, save_recipe
from conftest import CHAR_SEQ, REPO

pytestmark = pytest.mark.usefixtures("one_thread")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _parts(char_shards, micro: int = 8, **recipe_keys):
    """(model, optimizer, scheduler, fp16 accelerator, scaler, recipe, batches) for in-process steps."""
    from transformers import BertForMaskedLM

    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig
    from zh_bert.train.arch.bert import build_config
    from zh_bert.train.model import PretrainModel
    from zh_bert.train.recipe import Recipe
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.train.training import lr_lambda, make_accelerator, make_optimizer, make_scaler

    tokdir, sharddir = char_shards
    loader = iter(ShardLoader(ShardDataset(sharddir, "train"), micro, MaskingConfig(strategy="wwm"), seed=3))
    torch.manual_seed(0)
    model = PretrainModel(BertForMaskedLM(build_config("tiny", len(load_tokenizer(tokdir)), dropout=0.0)))
    recipe = Recipe(lr=1e-3, warmup_steps=0, max_steps=50, global_batch=micro, micro_batch=micro, precision="fp16",
                    **recipe_keys)
    acc = make_accelerator("fp16", cpu=True)
    opt, _ = make_optimizer(model, recipe)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
    return model, opt, sched, acc, make_scaler("fp16", acc.device, recipe), recipe, loader


def test_fp16_on_a_cpu_computes_in_fp16_with_a_live_scaler(char_shards):
    from zh_bert.train.training import StepStats, train_step

    model, opt, sched, acc, scaler, recipe, loader = _parts(char_shards)
    seen = []
    layer = model.hf.bert.encoder.layer[0].attention.self.query
    hook = layer.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    res = train_step(model, opt, sched, acc, [next(loader)], recipe, StepStats(), 0, scaler)
    hook.remove()
    assert seen == [torch.float16], "the encoder's matmuls run in fp16 inside the step"
    assert scaler.is_enabled() and scaler.get_scale() == recipe.loss_scale_init
    assert res["finite"] and not res["skipped"]
    assert all(p.dtype == torch.float32 for p in model.parameters()), "master weights stay fp32"


def test_an_overflow_skips_the_step_leaves_the_weights_and_halves_the_scale(char_shards, monkeypatch):
    from zh_bert.train.training import StepStats, train_step

    model, opt, sched, acc, scaler, recipe, loader = _parts(char_shards)
    stats = StepStats()
    train_step(model, opt, sched, acc, [next(loader)], recipe, stats, 0, scaler)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    monkeypatch.setenv("ZH_BERT_FAULT", "inf-gradient@2")   # logged step 2 = train_step index 1
    res = train_step(model, opt, sched, acc, [next(loader)], recipe, stats, 1, scaler)
    assert res["skipped"] and res["loss_finite"] and not res["finite"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "a skipped step changes no weight"
    assert scaler.get_scale() == recipe.loss_scale_init / 2 and stats.skipped == 1
    res = train_step(model, opt, sched, acc, [next(loader)], recipe, stats, 2, scaler)
    assert not res["skipped"] and any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_the_scale_grows_after_growth_interval_good_steps(char_shards):
    from zh_bert.train.training import StepStats, train_step

    model, opt, sched, acc, scaler, recipe, loader = _parts(char_shards, loss_scale_init=1024.0,
                                                            loss_scale_growth_interval=3)
    scales = []
    for step in range(6):
        train_step(model, opt, sched, acc, [next(loader)], recipe, StepStats(), step, scaler)
        scales.append(scaler.get_scale())
    assert scales == [1024.0, 1024.0, 2048.0, 2048.0, 2048.0, 4096.0]


def test_accumulation_4x8_equals_1x32_under_fp16(char_shards):
    """One step of 4 micro-batches of 8 against one of 32, both in fp16 with a loss scaler: the loss and the
    unscaled gradient the optimizer receives are equal within fp16 rounding (activations are rounded to fp16
    per micro-batch, so the sums are not bit-identical; Adam's first update, ±lr per weight, would turn that
    rounding into sign flips, so the gradients are compared)."""
    from zh_bert.train.training import StepStats, train_step

    _, _, _, acc, _, recipe, loader = _parts(char_shards)
    micro = [next(loader) for _ in range(4)]
    whole = {k: torch.cat([m[k] for m in micro]) for k in micro[0]}
    grads, losses = {}, {}
    for name, batches, mb in (("4x8", micro, 8), ("1x32", [whole], 32)):
        model, opt, sched, _, scaler, _, _ = _parts(char_shards)   # the same seeded init each time
        opt.register_step_pre_hook(lambda o, a, k, name=name: grads.__setitem__(name, torch.cat(
            [p.grad.flatten() for g in o.param_groups for p in g["params"] if p.grad is not None])))
        stats = StepStats()
        train_step(model, opt, sched, acc, batches, dataclasses.replace(recipe, global_batch=32, micro_batch=mb),
                   stats, 0, scaler)
        losses[name] = float(stats.loss) / stats.masked
    assert abs(losses["4x8"] - losses["1x32"]) <= 1e-3 * abs(losses["1x32"])
    error = (grads["4x8"] - grads["1x32"]).norm() / grads["1x32"].norm()
    assert grads["1x32"].norm() > 0 and error <= 1e-2, error


def _recipe(path, char_shards, **over):
    tokdir, sharddir = char_shards
    recipe = {"out_dir": str(path.parent / "run"), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
              "masking": "wwm", "seq_len": CHAR_SEQ, "global_batch": 4, "micro_batch": 4, "lr": 3e-3,
              "warmup_steps": 5, "max_steps": 14, "log_every": 1, "eval_every": 0, "eval_batches": 4,
              "save_every": 4, "keep_last": 3, "seed": 7, "precision": "fp16", "loss_scale_growth_interval": 5,
              "dropout": 0.0}
    return save_recipe(path, {**recipe, **over})


@pytest.mark.slow
def test_fp16_run_logs_the_scale_and_kill9_resume_reproduces_its_losses(tmp_path, char_shards, monkeypatch):
    """A real fp16 `zh-bert pretrain` (with one injected overflow) logs `loss_scale` and `skipped_steps` and
    records the scaler in run.json; killed with SIGKILL after its first checkpoint, `--resume auto` logs
    exactly the per-step losses and scales of the uninterrupted run (the scaler state is in the checkpoint)."""
    import json
    import os

    from zh_bert.train.pretrain import main

    monkeypatch.setenv("ZH_BERT_FAULT", "inf-gradient@7")
    ref = _recipe(tmp_path / "ref" / "r.yaml", char_shards)
    assert main([str(ref)]) == 0
    rows = [r for r in metrics(tmp_path / "ref" / "run") if "loss" in r]
    scale = {r["step"]: r["loss_scale"] for r in rows}
    assert scale[5] == 2 * 65536.0 and scale[7] == 65536.0, scale   # grown after 5 good steps, halved by step 7
    assert rows[-1]["skipped_steps"] == 1
    summary = json.loads((tmp_path / "ref" / "run" / "run.json").read_text(encoding="utf-8"))
    assert summary["skipped_steps"] == 1 and summary["status"] == "finished"
    assert summary["hardware"]["precision"] == "fp16"
    assert summary["hardware"]["loss_scaler"]["growth_interval"] == 5
    assert summary["hardware"]["loss_scaler"]["final_scale"] == rows[-1]["loss_scale"]

    killed = _recipe(tmp_path / "killed" / "r.yaml", char_shards)
    cmd = [sys.executable, "-m", "zh_bert", "pretrain", str(killed)]
    env = {**os.environ, **ONE_THREAD, "ZH_BERT_FAULT": "inf-gradient@7"}
    got = kill_then_resume(cmd, tmp_path / "killed" / "run", env, REPO, last_step=14)
    assert [r["step"] for r in got] == list(range(1, 15))
    assert [r["loss_scale"] for r in got] == [r["loss_scale"] for r in rows]
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(got, rows)) <= 1e-5


@pytest.mark.slow
def test_200_tiny_steps_in_fp16_end_within_2_percent_of_fp32(tmp_path, char_shards):
    """Same init, same batches: fp16 with loss scaling trains like fp32 (final validation loss within 2%)."""
    import json

    from zh_bert.train.pretrain import main

    val = {}
    for precision in ("fp32", "fp16"):
        r = _recipe(tmp_path / precision / "r.yaml", char_shards, precision=precision, max_steps=200, log_every=50,
                    save_every=0, eval_batches=8, loss_scale_growth_interval=2000)
        assert main([str(r)]) == 0
        summary = json.loads((tmp_path / precision / "run" / "run.json").read_text(encoding="utf-8"))
        val[precision] = summary["final_validation"]["mlm_loss"]
    assert abs(val["fp16"] - val["fp32"]) <= 0.02 * val["fp32"], val


@pytest.mark.parametrize("value", ["1e38", "1e-30", "0.5", "33554432"])
def test_loss_scale_init_outside_its_bounds_is_one_line(value):
    """fp16 silent failure: 1e38 skipped every step, 1e-30 zeroed every gradient, both 'finished' with exit 0.
    The schema bounds loss_scale_init to [1, 2^24]; a value outside is refused on load, naming the key."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.train.recipe import load_recipe

    with pytest.raises(ZhBertError, match=r"'loss_scale_init' must be in \[1, 16777216\]"):
        load_recipe(None, {"data": "x", "loss_scale_init": float(value)})


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_an_fp16_run_that_mostly_overflows_exits_non_zero_naming_loss_scale_init(tmp_path, char_shards, capsys,
                                                                                 objective):
    """A scale inside the bounds that still overflows most steps of a short run (MLM, or ELECTRA, whose every
    step overflows here): exit 1, one `error:` line, no final/."""
    from zh_bert.cli import main

    recipe = _recipe(tmp_path / "r.yaml", char_shards, max_steps=4, loss_scale_init=2.0 ** 24, warmup_steps=1,
                     objective=objective)
    capsys.readouterr()
    assert main(["pretrain", str(recipe)]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "loss_scale_init" in errors[0] and "skipped for overflow" in errors[0], errors
    assert not (tmp_path / "run" / "final").exists()


def test_an_fp16_run_whose_every_gradient_is_zero_is_an_error():
    """The other end (gradients underflowing to 0): checked on the tally the training loop keeps."""
    from types import SimpleNamespace

    from zh_bert.train.training import Fp16Tally

    warned = []
    run = SimpleNamespace(scaler=SimpleNamespace(is_enabled=lambda: True), recipe=SimpleNamespace(loss_scale_init=1.0), status="finished",
                          warn=warned.append)
    tally = Fp16Tally()
    for _ in range(6):
        tally.add(run, {"skipped": False, "loss_finite": True, "zero_norm": True})
    tally.check(run)
    assert run.status == "diverged" and len(warned) == 1 and "loss_scale_init 1" in warned[0]
    ok = Fp16Tally()
    run.status, warned[:] = "finished", []
    for zero in (True, False, True):
        ok.add(run, {"skipped": False, "loss_finite": True, "zero_norm": zero})
    ok.check(run)
    assert run.status == "finished" and not warned
