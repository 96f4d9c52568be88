"""`zh-bert plan`: will this model fit on that GPU, with which micro-batch, and how long will it take?

Answered before the run starts, from first principles:

- memory per device = weights + grads + AdamW states (fp32, 16 bytes/param) + the autocast weight cache
  under AMP (2 bytes/param) + activations (derived per BERT layer below) + framework overhead (CUDA
  context, allocator slack);
- micro-batch = the largest divisor of the per-device batch that fits; accumulation = global batch /
  (micro-batch × devices), so every device count trains with the same global batch;
- precision = `zh_bert.hardware.decide_precision`, the same rule `pretrain` applies to its torch.device;
- time = training FLOPs (`zh_bert.model.flops_per_token`: 6 × matmul params per token + attention, MLM
  head only at masked positions) ÷ (peak × assumed utilisation) + gradient all-reduce per step.
  `--measure` runs real steps on this machine and replaces the assumed utilisation by the measured one.

Activation bytes per token per encoder layer (post-LN BERT, tensors autograd saves for backward):
fp32: QKV input 4h, Q/K/V 12h, attention output 4h, LayerNorm inputs 2×4h, FFN input 4h, FFN hidden
before/after GELU 2×16h, two dropout masks 2×1h = 66h. AMP (autocast): matmul inputs/outputs in half,
LayerNorm inputs in fp32 = 38h. A fused SDPA kernel keeps no s×s attention matrix; without one (Kepler;
a CPU with attention dropout > 0, which PyTorch's CPU flash kernel does not support) the probabilities
add 4·heads·s bytes per token, with attention dropout 9·heads·s (mask + dropped copy; 6 / 11 under AMP). The sparse MLM head stores per *masked* token its 4 h-sized inputs and
2 V-sized fp32 tensors (logits, log-softmax), plus 2 more V-sized gradients at the start of backward.

`--objective electra` plans both networks (`zh_bert.model.electra_configs`): parameters = discriminator +
generator with the embeddings counted once; FLOPs = `model.electra_flops_per_token` (the generator's encoder
and sparse head, the discriminator's encoder and per-token RTD head); activations = the generator's encoder at
its width (its embeddings E = the discriminator's hidden size, plus the projection input) and sparse head with
E in place of h, plus the discriminator's encoder and RTD head (3 h-sized inputs per token: 12h bytes fp32, 6h
under AMP).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from typing import Literal, Optional

from zh_bert.config import build_parser as derive_parser
from zh_bert.config import check_finite, config_from_args, option
from zh_bert.errors import ZhBertError
from zh_bert.hardware import KNOWN_DEVICES, GPUSpec, decide_precision, device_key, get_spec

GiB = 2 ** 30
BERT_PHASE1_STEPS = 900_000          # BERT's 128-token phase: 900k steps × 256 × 128 tokens
CUDA_CONTEXT_BYTES = 0.5 * GiB       # CUDA context + cuBLAS workspace + kernels, outside the allocator
ALLOCATOR_SLACK = 0.10               # caching-allocator fragmentation on top of live tensors
PRESET_ORDER = ("tiny", "mini", "small", "medium", "base", "large")
RECOMPUTE = 4 / 3                    # compute with gradient checkpointing: one extra forward of the encoder


@dataclass
class PlanArgs:
    """What to plan: the `zh-bert plan` options (validated here, so `make_plan` gets only sound values)."""
    gpu: str = option("cpu", help=f"device: {', '.join(KNOWN_DEVICES)}")
    gpus: int = option(1, help="devices (a K80 board counts as 2)")
    model: str = option("base", help="preset (tiny, mini, small, medium, base, large) or config.json")
    seq_len: int = option(128)
    global_batch: int = option(256, help="sequences per optimizer step (all devices)")
    tokens: Optional[float] = option(None, help="training tokens (default: BERT's 128-token phase, 900k steps "
                                                "× global batch × seq-len)")
    vocab_size: int = option(21128)
    precision: Literal["auto", "fp32", "fp16", "bf16"] = option("auto")
    mask_rate: float = option(0.15)
    attention_dropout: float = option(0.0, help="recipe key attention_dropout; > 0 on a CPU stores the s×s "
                                                "attention matrix")
    objective: Literal["mlm", "mlm+nsp", "mlm+sop", "electra"] = option("mlm")
    generator_ratio: float = option(0.25, help="objective electra: generator hidden size / discriminator's")
    grad_checkpointing: Literal["auto", "on", "off"] = option("auto", help="auto: only when nothing fits "
                                                                           "without it")
    utilisation: Optional[float] = option(None, help="override the assumed fraction of peak")
    days: float = option(7.0, help="budget for 'largest preset that finishes'")
    measure: bool = option(False, help="run real steps on this machine's device and use the measured utilisation")
    measure_steps: int = option(3)
    measure_micro_batch: Optional[int] = option(None, help="micro-batch for --measure (default: the planned "
                                                           "one; capped at 8 on a CPU)")
    json: bool = option(False, help="print the plan as JSON")

    def __post_init__(self):
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
        if not 0 < self.generator_ratio <= 1:
            raise ZhBertError(f"--generator-ratio must be in (0, 1], got {self.generator_ratio}")
        if self.measure_steps < 1:
            raise ZhBertError(f"--measure-steps must be at least 1, got {self.measure_steps}")

    @property
    def device(self) -> str:
        """'cpu' or the `hardware.GPUS` key of --gpu."""
        return device_key(self.gpu)


@dataclass
class ModelShape:
    """The numbers the memory and FLOP models need, from a BertConfig."""
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int
    positions: int
    dropout: float                   # hidden dropout: two masks per layer
    attention_dropout: float
    params: int                      # BertForMaskedLM (tied decoder), or BertForPreTraining with pairs
    # ^ counted from the config, so a plan never builds the model (a large one takes GBs and seconds);
    #   tests/test_plan.py checks it equals model.count_params of the built model
    generator: Optional["ModelShape"] = None   # electra: the generator (its params: only what it adds)
    embedding: int = 0                         # electra: the generator's embedding width (= hidden here)

    @classmethod
    def from_config(cls, cfg, pairs: bool = False) -> "ModelShape":
        h, i, v, l = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
        p = cfg.max_position_embeddings
        emb = v * h + p * h + cfg.type_vocab_size * h + 2 * h
        layer = (4 * h * h + 4 * h) + (2 * h * i + i + h) + 2 * 2 * h
        head = h * h + h + 2 * h + v                     # transform + LayerNorm + decoder bias (weight tied)
        extra = (h * h + h + 2 * h + 2) if pairs else 0  # pooler + seq_relationship
        return cls(l, h, cfg.num_attention_heads, i, v, p, cfg.hidden_dropout_prob,
                   cfg.attention_probs_dropout_prob, emb + l * layer + head + extra)

    @classmethod
    def from_electra(cls, disc, gen) -> "ModelShape":
        """Discriminator (ElectraForPreTraining) + generator (ElectraForMaskedLM, tied output layer) sharing one
        embedding module of width E = disc.embedding_size; `params` = both, the shared embeddings once."""
        h, i, v, l, e = disc.hidden_size, disc.intermediate_size, disc.vocab_size, disc.num_hidden_layers, disc.embedding_size
        emb = v * e + disc.max_position_embeddings * e + disc.type_vocab_size * e + 2 * e
        d_params = emb + l * _layer_params(h, i) + (h * h + h + h + 1)             # RTD head: dense + prediction
        hg, ig, lg = gen.hidden_size, gen.intermediate_size, gen.num_hidden_layers
        g_params = ((e * hg + hg) if e != hg else 0) + lg * _layer_params(hg, ig) + (hg * e + e + 2 * e) + v
        g = cls(lg, hg, gen.num_attention_heads, ig, v, gen.max_position_embeddings, gen.hidden_dropout_prob,
                gen.attention_probs_dropout_prob, g_params, embedding=e)
        return cls(l, h, disc.num_attention_heads, i, v, disc.max_position_embeddings, disc.hidden_dropout_prob,
                   disc.attention_probs_dropout_prob, d_params + g_params, generator=g, embedding=e)

    def label(self) -> str:
        own = f"L{self.layers}/H{self.hidden}/A{self.heads}"
        return own if self.generator is None else f"{own} + generator {self.generator.label()}"


def _layer_params(h: int, i: int) -> int:
    """One post-LN encoder layer: attention (qkvo + biases), FFN, two LayerNorms."""
    return (4 * h * h + 4 * h) + (2 * h * i + i + h) + 2 * 2 * h


def model_config(model: str, vocab_size: int, dropout: float = 0.1, attention_dropout: float = 0.0):
    """The BertConfig a run of preset/config `model` trains (`model.build_config`, imported lazily: torch)."""
    from zh_bert.model import build_config

    return build_config(model, vocab_size, dropout=dropout, attention_dropout=attention_dropout)


@dataclass
class Memory:
    """Bytes per device, by what holds them."""
    weights: float
    grads: float
    optimizer: float
    autocast_cache: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.autocast_cache + self.activations
                + self.overhead)


def activation_bytes(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, *,
                     mask_rate: float = 0.15, fused_attention: bool = True,
                     grad_checkpointing: bool = False) -> float:
    """Bytes autograd keeps for backward in one micro-batch (see module docstring for the derivation)."""
    if shape.generator is not None:
        kw = dict(fused_attention=fused_attention, grad_checkpointing=grad_checkpointing)
        half, tokens, h = precision in ("fp16", "bf16"), micro_batch * seq_len, shape.hidden
        discriminator = activation_bytes(dataclasses.replace(shape, generator=None), seq_len, micro_batch,
                                         precision, mask_rate=0.0, **kw) + tokens * (6 if half else 12) * h
        generator = activation_bytes(shape.generator, seq_len, micro_batch, precision, mask_rate=mask_rate, **kw)
        return discriminator + generator
    h, a, s, v = shape.hidden, shape.heads, seq_len, shape.vocab
    e = shape.embedding or h
    half = precision in ("fp16", "bf16")
    drop = 1 if shape.dropout > 0 else 0
    per_layer = (38 if half else 64) * h + 2 * drop * h
    if not fused_attention:                                 # probabilities (+ dropout mask and output)
        per_layer += ((11 if half else 9) if shape.attention_dropout > 0 else (6 if half else 4)) * a * s
    else:
        per_layer += 4 * a                                  # softmax log-sum-exp per head
    tokens = micro_batch * seq_len
    if grad_checkpointing:                                  # layer inputs kept; one layer recomputed at a time
        encoder = tokens * (shape.layers * 4 * h + per_layer)
    else:
        encoder = tokens * shape.layers * per_layer
    embeddings = tokens * (4 + drop) * e + (tokens * (2 if half else 4) * e if e != h else 0)   # + projection input
    masked = tokens * mask_rate
    head = masked * ((10 * e + 18 * v) if half else (16 * e + 16 * v))
    return encoder + embeddings + head


def estimate_memory(shape: ModelShape, seq_len: int, micro_batch: int, precision: str, *,
                    device: str = "cuda", mask_rate: float = 0.15, fused_attention: bool = True,
                    grad_checkpointing: bool = False) -> Memory:
    """Peak bytes per device of a training step with gradient accumulation (grads live across micro-steps).

    device 'cpu' counts live tensors only (no CUDA context, no caching-allocator slack): what
    `bench/plan_memory_check.py` measures.
    """
    p = shape.params
    acts = activation_bytes(shape, seq_len, micro_batch, precision, mask_rate=mask_rate,
                            fused_attention=fused_attention, grad_checkpointing=grad_checkpointing)
    cache = 2 * p if precision in ("fp16", "bf16") else 0   # autocast's half copies of the weights
    dynamic = 4 * p + 4 * p + 8 * p + cache + acts
    overhead = 0.0 if device == "cpu" else CUDA_CONTEXT_BYTES + ALLOCATOR_SLACK * dynamic
    return Memory(4 * p, 4 * p, 8 * p, cache, acts, overhead)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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


def make_plan(args: PlanArgs, spec: GPUSpec, utilisation: float | None = None,
              utilisation_source: str = "given") -> Plan:
    """The plan for `args` on devices of `spec` (`get_spec(args.gpu)`); `utilisation` None = `args.utilisation`,
    or the spec's assumed one when that is None too."""
    model, gpus, seq_len, global_batch = args.model, args.gpus, args.seq_len, args.global_batch
    precision, mask_rate, attention_dropout = args.precision, args.mask_rate, args.attention_dropout
    utilisation = args.utilisation if utilisation is None else utilisation
    cfg = model_config(model, args.vocab_size, attention_dropout=attention_dropout)
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

    choices = [False, True] if args.grad_checkpointing == "auto" else [args.grad_checkpointing == "on"]
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
        gpu_hours=days * 24 * gpus, install=spec.torch_wheel, notes=notes)


def shape_and_flops(args: PlanArgs, cfg) -> tuple[ModelShape, float]:
    """(what trains, its training FLOPs per token) for `args.objective` on the BertConfig `cfg`."""
    from zh_bert.model import electra_configs, electra_flops_per_token, flops_per_token

    if args.objective == "electra":
        disc, gen = electra_configs(cfg, args.generator_ratio)
        return ModelShape.from_electra(disc, gen), electra_flops_per_token(disc, gen, args.seq_len, args.mask_rate)
    return ModelShape.from_config(cfg, pairs=args.objective != "mlm"), flops_per_token(cfg, args.seq_len, args.mask_rate)


def largest_within(args: PlanArgs, spec: GPUSpec, utilisation: float | None = None,
                   utilisation_source: str = "given") -> Plan | None:
    """The largest preset whose run (as `args` otherwise) fits in memory and finishes within `args.days`."""
    best = None
    for name in PRESET_ORDER:
        p = make_plan(dataclasses.replace(args, model=name), spec, utilisation, utilisation_source)
        if p.fits and p.days <= args.days:
            best = p
    return best


# ---------------------------------------------------------------- measuring on this machine

def measure(model: str, seq_len: int, micro_batch: int, precision: str, *, vocab_size: int = 21128,
            steps: int = 3, mask_rate: float = 0.15, dropout: float = 0.1, attention_dropout: float = 0.0,
            device: str | None = None, grad_checkpointing: bool = False, objective: str = "mlm",
            generator_ratio: float = 0.25) -> dict:
    """Time real training steps (`pretrain.train_step` with its model, optimizer and precision handling) on
    the local device ('cpu' or 'cuda'; None = the GPU if there is one).

    Returns tokens/s and, on CUDA, the peak allocated memory; the first step (allocations, kernel
    selection) is not timed.
    """
    import time

    import torch
    from transformers import BertForMaskedLM

    from zh_bert.model import ElectraPretrainModel, PretrainModel, build_electra
    from zh_bert.pretrain import StepStats, lr_lambda, make_accelerator, make_optimizer, train_step
    from zh_bert.recipe import Recipe

    acc = make_accelerator(precision, cpu=(device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu")
    dev = acc.device
    recipe = Recipe(lr=1e-4, warmup_steps=0, max_steps=steps + 1, global_batch=micro_batch, micro_batch=micro_batch,
                    objective=objective, generator_ratio=generator_ratio)
    torch.manual_seed(0)
    cfg = model_config(model, vocab_size, dropout, attention_dropout)
    net = (ElectraPretrainModel(*build_electra(cfg, generator_ratio)) if objective == "electra"
           else PretrainModel(BertForMaskedLM(cfg)))
    for hf in (net.hf, getattr(net, "generator", None)):
        if grad_checkpointing and hf is not None:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt, _ = make_optimizer(net, recipe)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
    net, opt = acc.prepare(net, opt)
    net.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab_size, (micro_batch, seq_len), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < mask_rate, ids, torch.full_like(ids, -100))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "labels": labels}
    stats = StepStats()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    train_step(net, opt, sched, acc, [batch], recipe, stats)
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for k in range(steps):
        train_step(net, opt, sched, acc, [batch], recipe, stats, k + 1)
    sync()
    dt = time.perf_counter() - t0
    result = {"device": str(dev), "model": model, "micro_batch": micro_batch, "seq_len": seq_len,
              "precision": precision, "steps": steps, "seconds": dt,
              "tokens_per_s": steps * micro_batch * seq_len / dt}
    if dev.type == "cuda":
        result["peak_allocated_gb"] = torch.cuda.max_memory_allocated(dev) / GiB
        result["device_name"] = torch.cuda.get_device_name(dev)
        result["capability"] = list(torch.cuda.get_device_capability(dev))
    return result


# ---------------------------------------------------------------- CLI

def render(p: Plan, best: Plan | None, budget_days: float) -> str:
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
                         "pretraining run on a GPU.", PlanArgs)


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


def _measure_utilisation(args: PlanArgs, spec: GPUSpec, plan: Plan) -> dict:
    """`--measure`: real steps on this machine's device; the result carries the utilisation they imply."""
    dev = _check_measure_device(args.device, spec)
    mb = args.measure_micro_batch or (min(plan.micro_batch, 8) if dev == "cpu" else plan.micro_batch)
    measured = measure(args.model, args.seq_len, mb, plan.precision, vocab_size=args.vocab_size,
                       steps=args.measure_steps, mask_rate=args.mask_rate, device=dev,
                       attention_dropout=args.attention_dropout, grad_checkpointing=plan.grad_checkpointing,
                       objective="electra" if args.objective == "electra" else "mlm",
                       generator_ratio=args.generator_ratio)
    recompute = RECOMPUTE if plan.grad_checkpointing else 1.0
    measured["utilisation"] = measured["tokens_per_s"] * plan.flops_per_token * recompute / (plan.peak_tflops * 1e12)
    if dev == "cuda":
        shape, _ = shape_and_flops(args, model_config(args.model, args.vocab_size, 0.1, args.attention_dropout))
        est = estimate_memory(shape, args.seq_len, mb, plan.precision, device="cpu", mask_rate=args.mask_rate,
                              fused_attention=spec.sdpa_fused)
        measured["estimated_allocated_gb"] = est.total / GiB
    return measured


def main(argv: list[str]) -> int:
    args = config_from_args(PlanArgs, build_parser().parse_args(argv))
    spec = get_spec(args.gpu)
    plan = make_plan(args, spec)
    measured = None
    if args.measure:
        measured = _measure_utilisation(args, spec, plan)
        plan = make_plan(args, spec, measured["utilisation"], "measured")
    best = largest_within(args, spec, plan.utilisation if measured else None, plan.utilisation_source)
    if args.json:
        out = asdict(plan)
        out["largest_within_days"] = {"days_budget": args.days, "model": best.model if best else None,
                                      "days": best.days if best else None}
        out["measured"] = measured
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(render(plan, best, args.days))
        if measured:
            print(f"  measured       {measured['tokens_per_s']:,.0f} tokens/s on {measured['device']} "
                  f"(micro-batch {measured['micro_batch']}, {measured['steps']} steps) -> utilisation "
                  f"{measured['utilisation']:.0%}"
                  + (f"; peak allocated {measured['peak_allocated_gb']:.2f} GB vs modelled "
                     f"{measured['estimated_allocated_gb']:.2f} GB" if "peak_allocated_gb" in measured else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
