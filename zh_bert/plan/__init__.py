"""`zh-bert plan`: will this model fit on that GPU, with which micro-batch, and how long will it take?

Answered before the run starts, from first principles:

- memory per device = weights + grads + AdamW states (fp32, 16 bytes/param) + the autocast weight cache
  under AMP (2 bytes/param) + activations (derived per BERT layer in `zh_bert.plan.memory_model`) + framework
  overhead (CUDA context, allocator slack);
- micro-batch = the largest divisor of the per-device batch that fits; accumulation = global batch /
  (micro-batch × devices), so every device count trains with the same global batch;
- precision = `zh_bert.core.hardware.decide_precision`, the same rule `pretrain` applies to its torch.device;
- time = training FLOPs (`zh_bert.train.arch.bert.flops_per_token`: 6 × matmul params per token + attention, MLM
  head only at masked positions; `--architecture modernbert`: `zh_bert.train.arch.modernbert.modernbert_flops_per_token`,
  GeGLU and windowed local layers) ÷ (peak × assumed utilisation) + gradient all-reduce per step.
  `--measure` runs real steps on this machine and replaces the assumed utilisation by the measured one.

Parameters, memory and FLOPs are counted in `zh_bert.plan.memory_model`; `--measure`'s timed steps run in
`zh_bert.plan.measure`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from typing import Optional

from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.config import (
    check_finite,
    config_from_args,
    keys_of,
    option,
    option_of,
)
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import (
    KNOWN_DEVICES,
    GPUSpec,
    decide_precision,
    device_key,
    get_spec,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.vocab.build import DEFAULT_SIZE
from zh_bert.plan.measure import measure_utilisation
from zh_bert.plan.memory_model import (
    RECOMPUTE,
    GiB,
    divisors,
    estimate_memory,
    plan_config,
    plan_recipe,
    shape_and_flops,
)
from zh_bert.train.objectives import objective_named
from zh_bert.train.recipe import Recipe

BERT_PHASE1_STEPS = 900_000          # BERT's 128-token phase: 900k steps × 256 × 128 tokens
PRESET_ORDER = ("tiny", "mini", "small", "medium", "base", "large")


#: the recipe keys a plan depends on: the same declarations as `zh-bert pretrain`'s (type, default, help)
RecipeKeys = keys_of(Recipe, "model", "architecture", "global_attn_every_n_layers", "local_attention",
                     "objective", "generator_ratio", "teacher", "temperature", "hidden_weight", "projection", "mask_rate", "seq_len",
                     "global_batch", "attention_dropout", "precision", "grad_checkpointing", "vocab_size",
                     name="RecipeKeys")


@dataclass
class PlanArgs(RecipeKeys):
    """What to plan: a run's recipe keys (those that decide its memory and time) and the device. Validated
    here, so `make_plan` gets only sound values; `grad_checkpointing` off lets the plan turn it on when nothing
    fits without it (the plan then says to set it)."""
    gpu: str = option("cpu", help=f"device: {', '.join(KNOWN_DEVICES)}")
    gpus: int = option(1, help="devices (a K80 board counts as 2)")
    tokens: Optional[float] = option(None, help="training tokens (default: BERT's 128-token phase, 900k steps "
                                                "× global batch × seq-len)")
    utilisation: Optional[float] = option(None, help="override the assumed fraction of peak")
    days: float = option(7.0, help="budget for 'largest preset that finishes'")
    measure: bool = option(False, help="run real steps on this machine's device and use the measured utilisation")
    measure_steps: int = option(3)
    measure_micro_batch: Optional[int] = option(None, help="micro-batch for --measure (default: the planned "
                                                           "one; capped at 8 on a CPU)")
    json: bool = option_of(Shared, "json", help="print the plan as JSON")

    def __post_init__(self):
        if self.vocab_size is None:     # the recipe's null: the vocab builder's default size
            self.vocab_size = DEFAULT_SIZE["char"]
        check_finite(self)
        device_key(self.gpu)                      # unknown names are refused here, listing the known ones
        if self.gpus < 1:
            raise ZhBertError(f"--gpus must be at least 1, got {self.gpus}")
        if self.seq_len < 8 or self.global_batch < 1:
            raise ZhBertError("--seq-len must be >= 8 and --global-batch >= 1")
        if self.global_batch % self.gpus:
            raise ZhBertError(f"--global-batch {self.global_batch} is not divisible by --gpus {self.gpus}: every "
                              f"device must get the same share of the global batch")
        if not 0 < self.mask_rate < 1:
            raise ZhBertError(f"--mask-rate must be in (0, 1), got {self.mask_rate}")
        if self.tokens is not None and self.tokens <= 0:
            raise ZhBertError(f"--tokens must be positive, got {self.tokens}")
        if self.utilisation is not None and not 0 < self.utilisation <= 1:
            raise ZhBertError(f"--utilisation must be in (0, 1], got {self.utilisation}")
        if not self.temperature > 0:
            raise ZhBertError(f"--temperature must be > 0 (softmax(logits / T)), got {self.temperature}")
        if not 0 < self.generator_ratio <= 1:
            raise ZhBertError(f"--generator-ratio must be in (0, 1], got {self.generator_ratio}")
        if self.measure_steps < 1:
            raise ZhBertError(f"--measure-steps must be at least 1, got {self.measure_steps}")
        plan_recipe(self.model, 0.1, self.attention_dropout, self.global_attn_every_n_layers,   # what pretrain
                    self.local_attention, self.objective, self.architecture, self.teacher)  # would refuse

    @property
    def device(self) -> str:
        """'cpu' or the `hardware.GPUS` key of --gpu."""
        return device_key(self.gpu)


@dataclass
class Plan:
    device: str
    device_name: str
    arch: str
    gpus: int
    model: str
    model_shape: str
    params: int
    vocab_size: int
    seq_len: int
    global_batch: int
    tokens: float
    steps: int
    precision: str
    precision_warnings: list
    fits: bool
    micro_batch: int
    accumulation: int
    grad_checkpointing: bool
    memory_gb: dict                 # per device, GB (2^30 bytes), by component
    device_memory_gb: float
    next_micro_batch_gb: float | None
    flops_per_token: float
    peak_tflops: float
    utilisation: float
    utilisation_source: str         # "assumed" | "given" (--utilisation) | "measured" (--measure)
    allreduce_s_per_step: float
    tokens_per_s: float
    step_s: float
    days: float
    gpu_hours: float
    install: str
    notes: list = field(default_factory=list)
    architecture: str = "bert"


def make_plan(args: PlanArgs, spec: GPUSpec, utilisation: float | None = None,
              utilisation_source: str = "given") -> Plan:
    """The plan for `args` on devices of `spec` (`get_spec(args.gpu)`); `utilisation` None = `args.utilisation`,
    or the spec's assumed one when that is None too."""
    model, gpus, seq_len, global_batch = args.model, args.gpus, args.seq_len, args.global_batch
    precision, mask_rate, attention_dropout = args.precision, args.mask_rate, args.attention_dropout
    utilisation = args.utilisation if utilisation is None else utilisation
    cfg = plan_config(args)
    if seq_len > cfg.max_position_embeddings:
        raise ZhBertError(f"--seq-len {seq_len} exceeds the model's {cfg.max_position_embeddings} positions")
    shape, fpt = shape_and_flops(args, cfg)
    is_cpu = args.device == "cpu"
    prec, warns = decide_precision(precision, None if is_cpu else spec.capability,
                                   cpu_bf16=spec.bf16 if is_cpu else False, name=spec.name)
    fused = spec.sdpa_fused and not (is_cpu and attention_dropout > 0)   # CPU SDPA: fused only without dropout
    tokens = float(args.tokens if args.tokens is not None else BERT_PHASE1_STEPS * global_batch * seq_len)
    steps = math.ceil(tokens / (global_batch * seq_len))
    per_device = global_batch // gpus
    capacity = spec.memory_gb * GiB

    def mem(mb, ckpt):
        return estimate_memory(shape, seq_len, mb, prec, device="cpu" if is_cpu else "cuda",
                               mask_rate=mask_rate, fused_attention=fused, grad_checkpointing=ckpt)

    choices = [True] if args.grad_checkpointing else [False, True]
    micro, ckpt, fits = 1, choices[0], False
    for ck in choices:
        fitting = [d for d in divisors(per_device) if mem(d, ck).total <= capacity]
        if fitting:
            micro, ckpt, fits = max(fitting), ck, True
            break
    m = mem(micro, ckpt)
    larger = [d for d in divisors(per_device) if d > micro]
    next_gb = mem(larger[0], ckpt).total / GiB if larger else None

    recompute = RECOMPUTE if ckpt else 1.0
    util = spec.utilisation.get(prec, 0.3) if utilisation is None else utilisation
    achieved = spec.peak_tflops(prec) * 1e12 * util
    tokens_per_step = global_batch * seq_len
    compute_s = tokens_per_step / gpus * fpt * recompute / achieved
    allreduce_s = 0.0 if gpus == 1 else 2 * (gpus - 1) / gpus * 4 * shape.params / (spec.link_gbs * 1e9)
    step_s = compute_s + allreduce_s
    tps = tokens_per_step / step_s
    days = tokens / tps / 86400
    notes = [spec.note] if spec.note else []
    if ckpt:
        notes.append("gradient checkpointing on (recipe key grad_checkpointing: true): ~33% more compute")
    if not fits:
        notes.append(f"does not fit: even micro-batch 1 needs {m.total / GiB:.1f} GB of {spec.memory_gb} GB")
    if not fused:
        notes.append("no fused SDPA kernel here: the s×s attention matrix is stored (counted above)")
    if shape.sliding_layers and seq_len > shape.window:
        notes.append(f"FLOPs count {shape.sliding_layers} local layers over their {shape.window}-token "
                     f"window (an exact kernel); SDPA with a mask computes all {seq_len} keys and discards")
    return Plan(
        device=args.device, device_name=spec.name, arch=f"{spec.arch} sm_{spec.capability[0]}{spec.capability[1]}"
        if not is_cpu else "CPU", gpus=gpus, model=model, model_shape=shape.label(), params=shape.params,
        vocab_size=args.vocab_size, seq_len=seq_len, global_batch=global_batch, tokens=tokens, steps=steps,
        precision=prec, precision_warnings=warns, fits=fits, micro_batch=micro,
        accumulation=per_device // micro, grad_checkpointing=ckpt,
        memory_gb={k: round(v / GiB, 3) for k, v in {**asdict(m), "total": m.total}.items()},
        device_memory_gb=spec.memory_gb, next_micro_batch_gb=None if next_gb is None else round(next_gb, 2),
        flops_per_token=fpt, peak_tflops=spec.peak_tflops(prec), utilisation=util,
        utilisation_source="assumed" if utilisation is None else utilisation_source,
        allreduce_s_per_step=allreduce_s, tokens_per_s=tps, step_s=step_s, days=days,
        gpu_hours=days * 24 * gpus, install=spec.torch_wheel, notes=notes, architecture=args.architecture)


def largest_within(args: PlanArgs, spec: GPUSpec, utilisation: float | None = None,
                   utilisation_source: str = "given") -> Plan | None:
    """The largest preset whose run (as `args` otherwise) fits in memory and finishes within `args.days`."""
    best = None
    for name in PRESET_ORDER:
        p = make_plan(dataclasses.replace(args, model=name), spec, utilisation, utilisation_source)
        if p.fits and p.days <= args.days:
            best = p
    return best


# ---------------------------------------------------------------- CLI

def render_plan(p: Plan, best: Plan | None, budget_days: float) -> str:
    gb = p.memory_gb
    devs = f"{p.gpus} × {p.device_name}" if p.gpus > 1 else p.device_name
    lines = [
        f"zh-bert plan: {p.model} ({p.model_shape}, {p.params / 1e6:.1f}M params, vocab {p.vocab_size}) "
        f"on {devs} [{p.arch}, {p.device_memory_gb:g} GB each]",
        f"  seq_len {p.seq_len}, global batch {p.global_batch}, {p.tokens:.3g} tokens = {p.steps:,} steps",
        "",
        f"  precision      {p.precision}" + (f"   ({'; '.join(p.precision_warnings)})" if p.precision_warnings else ""),
        f"  micro-batch    {p.micro_batch}" + ("" if p.fits else "   DOES NOT FIT")
        + (f"   (next size up needs {p.next_micro_batch_gb:.1f} GB)" if p.next_micro_batch_gb else ""),
        f"  accumulation   {p.accumulation}   ({p.micro_batch} × {p.gpus} device{'s' if p.gpus > 1 else ''} "
        f"× {p.accumulation} = {p.global_batch})",
        f"  memory/device  {gb['total']:.2f} GB of {p.device_memory_gb:g}: weights {gb['weights']:.2f}, grads "
        f"{gb['grads']:.2f}, AdamW {gb['optimizer']:.2f}, autocast cache {gb['autocast_cache']:.2f}, "
        f"activations {gb['activations']:.2f}, overhead {gb['overhead']:.2f}",
        f"  compute        {p.flops_per_token / 1e6:.0f} MFLOP/token; {p.peak_tflops:.3g} TFLOP/s peak × "
        f"{p.utilisation:.0%} utilisation ({p.utilisation_source})"
        + (f"; all-reduce {p.allreduce_s_per_step * 1e3:.0f} ms/step" if p.gpus > 1 else ""),
        f"  throughput     {p.tokens_per_s:,.0f} tokens/s ({p.step_s:.2f} s/step)",
        f"  time           {p.days:.1f} days ({p.gpu_hours:,.0f} GPU-hours)",
    ]
    if best is not None:
        lines.append(f"  within {budget_days:g} days  largest preset: {best.model} ({best.model_shape}, "
                     f"{best.params / 1e6:.1f}M) in {best.days:.1f} days, micro-batch {best.micro_batch} "
                     f"× accumulation {best.accumulation}")
    else:
        lines.append(f"  within {budget_days:g} days  no preset finishes")
    lines.append(f"  install        {p.install}")
    lines += [f"  note           {n}" for n in p.notes]
    return "\n".join(lines)


def build_parser():
    return derive_parser("zh-bert plan", "Memory, micro-batch, accumulation, precision and time of a BERT "
                         "or ModernBERT pretraining run on a GPU.", PlanArgs)


def main(argv: list[str]) -> int:
    args = config_from_args(PlanArgs, build_parser().parse_args(argv))
    spec = get_spec(args.gpu)
    plan = make_plan(args, spec)
    measured = None
    if args.measure:
        measured = measure_utilisation(args, spec, plan)
        plan = make_plan(args, spec, measured["utilisation"], "measured")
    best = largest_within(args, spec, plan.utilisation if measured else None, plan.utilisation_source)
    if args.json:
        out = asdict(plan)
        out["largest_within_days"] = {"days_budget": args.days, "model": best.model if best else None,
                                      "days": best.days if best else None}
        out["measured"] = measured
        out["objective_notes"] = objective_named(args.objective).recipe_notes(args)
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(render_plan(plan, best, args.days))
        for line in objective_named(args.objective).recipe_notes(args):
            print(f"  {line}")
        if measured:
            print(f"  measured       {measured['tokens_per_s']:,.0f} tokens/s on {measured['device']} "
                  f"(micro-batch {measured['micro_batch']}, {measured['steps']} steps) -> utilisation "
                  f"{measured['utilisation']:.0%}"
                  + (f"; peak allocated {measured['peak_allocated_gb']:.2f} GB vs modelled "
                     f"{measured['estimated_allocated_gb']:.2f} GB" if "peak_allocated_gb" in measured else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
