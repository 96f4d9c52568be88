"""`zh-bert plan --measure`: real training steps on this machine's device, timed, and the utilisation of the
device's peak that they imply."""

from __future__ import annotations

import dataclasses
import time

from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import GPUSpec
from zh_bert.plan.memory_model import (
    RECOMPUTE,
    GiB,
    estimate_memory,
    model_config,
    plan_config,
    shape_and_flops,
)
from zh_bert.train.arch import of_config


def measure(model: str, seq_len: int, micro_batch: int, precision: str, *, vocab_size: int = 21128,
            steps: int = 3, mask_rate: float = 0.15, dropout: float = 0.1, attention_dropout: float = 0.0,
            device: str | None = None, grad_checkpointing: bool = False, objective: str = "mlm",
            generator_ratio: float = 0.25, architecture: str = "bert", global_attn_every_n_layers: int = 3,
            local_attention: int = 128, teacher: str | None = None) -> dict:
    """Time real training steps (`training.train_step` with its model, optimizer and precision handling) on
    the local device ('cpu' or 'cuda'; None = the GPU if there is one), of the model `architecture`'s object
    builds for pretrain (`memory_model.model_config`: `Architecture.config` of the same recipe keys).

    Returns tokens/s and, on CUDA, the peak allocated memory; the first step (allocations, kernel
    selection) is not timed.
    """

    import torch

    from zh_bert.train.recipe import Recipe
    from zh_bert.train.training import (
        StepStats,
        lr_lambda,
        make_accelerator,
        make_optimizer,
        make_scaler,
        train_step,
    )

    acc = make_accelerator(precision, cpu=(device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu")
    dev = acc.device
    recipe = Recipe(lr=1e-4, warmup_steps=0, max_steps=steps + 1, global_batch=micro_batch, micro_batch=micro_batch,
                    objective=objective, generator_ratio=generator_ratio, teacher=teacher)
    torch.manual_seed(0)

    def config_of(name: str, arch_name: str):
        return model_config(name, vocab_size, dropout, attention_dropout, architecture=arch_name,
                            global_attn_every_n_layers=global_attn_every_n_layers, local_attention=local_attention)

    cfg = config_of(model, architecture)
    nets = recipe.objective_spec.random_networks(recipe, cfg, of_config(cfg), config_of)
    net = recipe.objective_spec.module(nets, recipe)
    for hf in (nets.hf, *nets.trained.values()):
        if grad_checkpointing:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt, _ = make_optimizer(net, recipe)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
    net, opt = acc.prepare(net, opt)
    recipe.objective_spec.place(nets, dev, precision)
    net.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab_size, (micro_batch, seq_len), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < mask_rate, ids, torch.full_like(ids, -100))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "labels": labels}
    stats = StepStats()
    scaler = make_scaler(precision, dev, recipe)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    train_step(net, opt, sched, acc, [batch], recipe, stats, 0, scaler)
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for k in range(steps):
        train_step(net, opt, sched, acc, [batch], recipe, stats, k + 1, scaler)
    sync()
    dt = time.perf_counter() - t0
    result = {"device": str(dev), "model": model, "architecture": architecture, "micro_batch": micro_batch,
              "seq_len": seq_len, "precision": precision, "steps": steps, "seconds": dt,
              "tokens_per_s": steps * micro_batch * seq_len / dt}
    if dev.type == "cuda":
        result["peak_allocated_gb"] = torch.cuda.max_memory_allocated(dev) / GiB
        result["device_name"] = torch.cuda.get_device_name(dev)
        result["capability"] = list(torch.cuda.get_device_capability(dev))
    return result


def _check_measure_device(device_key: str, spec: GPUSpec) -> str:
    import torch

    if device_key == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise ZhBertError(f"--measure runs on this machine's device, which has no CUDA GPU; "
                          f"use --gpu cpu here or run it on the {device_key}")
    cap = tuple(torch.cuda.get_device_capability(0))
    if cap != spec.capability:
        raise ZhBertError(f"--measure: this machine's GPU is {torch.cuda.get_device_name(0)} (sm_{cap[0]}{cap[1]}), "
                          f"not a {device_key} (sm_{spec.capability[0]}{spec.capability[1]}); plan with its name")
    return "cuda"


def measure_utilisation(args, spec: GPUSpec, plan) -> dict:
    """`--measure` of `plan` (a `zh_bert.plan.Plan` of `args`, its PlanArgs): real steps on this machine's
    device; the result carries the utilisation they imply."""
    dev = _check_measure_device(args.device, spec)
    mb = args.measure_micro_batch or (min(plan.micro_batch, 8) if dev == "cpu" else plan.micro_batch)
    measured = measure(args.model, args.seq_len, mb, plan.precision, vocab_size=args.vocab_size,
                       steps=args.measure_steps, mask_rate=args.mask_rate, device=dev,
                       attention_dropout=args.attention_dropout, grad_checkpointing=plan.grad_checkpointing,
                       objective=args.objective, generator_ratio=args.generator_ratio, teacher=args.teacher,
                       architecture=args.architecture,
                       global_attn_every_n_layers=args.global_attn_every_n_layers,
                       local_attention=args.local_attention)
    recompute = RECOMPUTE if plan.grad_checkpointing else 1.0
    measured["utilisation"] = measured["tokens_per_s"] * plan.flops_per_token * recompute / (plan.peak_tflops * 1e12)
    if dev == "cuda":
        shape, _ = shape_and_flops(args, plan_config(args))
        est = estimate_memory(shape, args.seq_len, mb, plan.precision, device="cuda", mask_rate=args.mask_rate,
                              fused_attention=spec.sdpa_fused)   # CUDA's bool dropout masks (modernbert) ...
        est = dataclasses.replace(est, overhead=0.0)              # ... but allocated bytes only: no context, slack
        measured["estimated_allocated_gb"] = est.total / GiB
    return measured
