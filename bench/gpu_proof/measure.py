"""gpu_proof sections that time and weigh single steps: the device and its measured matmul peaks, training
throughput beside the transformers Trainer, and `zh-bert plan`'s memory model against the allocator.

Every function takes the run's context `ctx` (bench.gpu_proof.Context: device, quick, peaks, deadline) and returns
the section's JSON; figures are measured here, never copied from a datasheet, except where a field says
`datasheet` (the `zh-bert plan` spec it is compared with)."""

from __future__ import annotations

import gc
import platform
import subprocess
import time
from pathlib import Path

import torch

PRECISION_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# --------------------------------------------------------------------------- device and matmul peaks

def matmul_peak(device: torch.device, precision: str, n: int, seconds: float) -> float:
    """Best FLOP/s of an n×n matmul over three windows of `seconds`/3 (after a warm-up): the practical peak
    of this device in `precision`, the denominator of every utilisation here."""
    from bench.train_throughput import set_tf32

    set_tf32(precision == "tf32")
    a = torch.randn(n, n, dtype=PRECISION_DTYPES[precision], device=device)
    b = torch.randn(n, n, dtype=PRECISION_DTYPES[precision], device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        a @ b
    sync()
    best = 0.0
    for _ in range(3):
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            for _ in range(8 if device.type == "cuda" else 1):
                a @ b
                reps += 1
            sync()
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0))
    set_tf32(False)
    return best


def precisions(device: torch.device) -> list[str]:
    """The precisions this device computes natively: fp32 everywhere; TF32 and bf16 from Ampere on; fp16
    on every GPU (Pascal's GP102 slowly) and, through zh-bert's own scaler, on a CPU."""
    if device.type == "cpu":
        from zh_bert.core.hardware import cpu_supports_bf16

        return ["fp32", "fp16"] + (["bf16"] if cpu_supports_bf16() else [])
    major, _ = torch.cuda.get_device_capability(device)
    return ["fp32"] + (["tf32"] if major >= 8 else []) + ["fp16"] + (["bf16"] if major >= 8 else [])


def _nvidia_smi() -> dict:
    """Driver and clocks as nvidia-smi reports them (empty where it is missing)."""
    fields = "driver_version,name,clocks.max.sm,power.limit,temperature.gpu"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(fields.split(","), (v.strip() for v in out[0].split(",")))) if out else {}


def device_section(ctx) -> dict:
    """Device, driver, versions, capability and the measured matmul peak per precision (`ctx.peaks`)."""
    import accelerate
    import transformers

    from bench.timing import machine

    dev = ctx.device
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "accelerate": accelerate.__version__,
           "python": platform.python_version(), "cpu": machine(), "torch_threads": torch.get_num_threads()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        smi = _nvidia_smi()
        out.update(name=p.name, capability=f"sm_{p.major}{p.minor}", memory_gib=round(p.total_memory / 2**30, 1),
                   multiprocessors=p.multi_processor_count, cuda_runtime=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(), driver=smi.get("driver_version") or _proc_driver(),
                   nvidia_smi=smi)
    else:
        out.update(name="cpu", capability=None, driver=None)
    n, seconds = (8192, 1.5) if dev.type == "cuda" else (512, 0.3)
    out["matmul"] = {"n": n, "tflops": {}}
    for prec in precisions(dev):
        ctx.peaks[prec] = matmul_peak(dev, prec, n, seconds)
        out["matmul"]["tflops"][prec] = round(ctx.peaks[prec] / 1e12, 4)
    if "tf32" not in ctx.peaks:
        out["matmul"]["tf32"] = "not measured: TF32 exists on Ampere+ GPUs only"
    ctx.headline = "matmul peak " + ", ".join(f"{k} {v:.3g}" for k, v in out["matmul"]["tflops"].items()) + " TFLOP/s"
    return out


def _proc_driver() -> str | None:
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except OSError:
        return None


# --------------------------------------------------------------------------- throughput beside the Trainer

def _plan_spec(device: torch.device):
    """The `zh-bert plan` spec of this GPU's class (same compute capability), or None: its datasheet peak and
    assumed utilisation are what the measurement corrects."""
    if device.type != "cuda":
        return None
    from zh_bert.core.hardware import GPUS

    cap = tuple(torch.cuda.get_device_capability(device))
    return next((s for s in GPUS.values() if s.capability == cap), None)


def throughput_section(ctx) -> dict:
    """zh-bert's `train_step` vs the Trainer, same model, batches and precision, steps interleaved; useful-FLOP
    utilisation against the matmul peak measured in the device section."""
    from bench.train_throughput import bench_pair, real_batches
    from transformers.utils import logging as hf_logging

    from zh_bert.train.arch.bert import build_config, flops_per_token

    hf_logging.set_verbosity_error()
    cuda = ctx.device.type == "cuda"
    models, batch, seq, warmup, steps = (["tiny"], 8, 64, 1, 2) if ctx.quick else (["base", "small"], 32, 128, 3, 10)
    batches = real_batches(warmup + steps, batch, seq)
    mask_rate = float(sum((b["labels"] != -100).float().mean() for b in batches) / len(batches))
    spec = _plan_spec(ctx.device)
    rows, skipped = [], []
    for name in models:
        cfg = build_config(name, 21128, dropout=0.1, attention_dropout=0.0)
        fpt = flops_per_token(cfg, seq, mask_rate)
        for prec in precisions(ctx.device):
            if not ctx.has_time(30 if cuda else 5):
                skipped.append(f"{name} {prec}: time budget")
                continue
            trainer_side = cuda or prec != "fp16"   # Accelerate runs a CPU Trainer's fp16 in fp32, silently
            if trainer_side:
                base, ours, _ = bench_pair(cfg, batches, prec, warmup, device=ctx.device.type,
                                           matmul_n=4096 if cuda else 512)
            else:
                base, ours = None, _zh_bert_alone(name, batch, seq, prec, steps)
            row = {"model": name, "precision": prec, "zh_bert_tokens_per_s": round(ours),
                   "trainer_tokens_per_s": round(base) if trainer_side else None,
                   "ratio": round(ours / base, 3) if trainer_side else None,
                   "useful_flop_utilisation": round(ours * fpt / ctx.peaks[prec], 4),
                   "trainer_useful_flop_utilisation": round(base * fpt / ctx.peaks[prec], 4) if trainer_side else None}
            if not trainer_side:
                row["trainer_note"] = ("Trainer not run for fp16 on a CPU (Accelerate would compute it in fp32); "
                                       "zh-bert timed alone (zh_bert.plan.measure.measure, random ids)")
            if spec is not None and prec in ("fp32", "tf32", "fp16", "bf16"):
                key = "fp32" if prec == "tf32" else prec
                peak = spec.peak_tflops(key) * 1e12
                row["plan"] = {"spec": spec.name, "datasheet_tflops": spec.peak_tflops(key),
                               "assumed_utilisation": spec.utilisation.get(key),
                               "measured_utilisation_of_datasheet": round(ours * fpt / peak, 4),
                               "plan_tokens_per_s": round(peak * spec.utilisation.get(key, 0) / fpt)}
            rows.append(row)
            ctx.log(f"[throughput] {name} {prec}: zh-bert {ours:,.0f} tokens/s, Trainer "
                    f"{base if trainer_side else float('nan'):,.0f} tokens/s")
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    ctx.headline = (f"{len(rows)} rows, zh-bert / Trainer {min(ratios):.2f}x to {max(ratios):.2f}x" if ratios
                    else f"{len(rows)} rows")
    return {"batch": batch, "seq_len": seq, "warmup_steps": warmup, "timed_steps": steps, "vocab": 21128,
            "masked_fraction": round(mask_rate, 4), "batches": "zhwiki sample, packed, token masking 15%",
            "rows": rows, "skipped": skipped}


def _zh_bert_alone(model: str, batch: int, seq: int, precision: str, steps: int) -> float:
    from zh_bert.plan.measure import measure

    return measure(model, seq, batch, precision, steps=steps, device="cpu")["tokens_per_s"]


# --------------------------------------------------------------------------- memory: plan vs allocator

MEMORY_CASES = [("base", 32, 128), ("base", 64, 128), ("large", 16, 128),
                ("base", 32, 512), ("base", 64, 512), ("large", 16, 512)]
QUICK_MEMORY_CASES = [("tiny", 8, 64), ("tiny", 16, 64), ("mini", 4, 64)]   # the same three shapes, toy size


def memory_section(ctx) -> dict:
    """`zh-bert plan`'s memory model (memory_model.estimate_memory) against the measured peak of real
    training steps: torch.cuda.max_memory_allocated on a GPU, peak RSS above a warmed-up baseline on a CPU
    (bench/plan_memory_check.py's method; the allocator's figure does not exist there)."""
    rows = []
    if ctx.device.type == "cuda":
        from zh_bert.core.hardware import decide_precision

        auto, _ = decide_precision("auto", tuple(torch.cuda.get_device_capability(ctx.device)))
        for prec in dict.fromkeys([auto, "fp32"]):
            for model, mb, seq in QUICK_MEMORY_CASES if ctx.quick else MEMORY_CASES:
                if not ctx.has_time(25):
                    rows.append({"model": model, "micro_batch": mb, "seq_len": seq, "precision": prec,
                                 "skipped": "time budget"})
                    continue
                rows.append(_cuda_case(ctx, model, mb, seq, prec))
        method = "torch.cuda.max_memory_allocated over 2 timed steps (zh_bert.plan.measure.measure)"
    else:
        from bench import plan_memory_check as pmc

        peaks = pmc.measure_all([dict(model=model, micro_batch=mb, seq_len=seq, precision="fp32")
                                 for model, mb, seq in QUICK_MEMORY_CASES], timeout=300)
        for (model, mb, seq), got in zip(QUICK_MEMORY_CASES, peaks):
            want = pmc.estimate(model, mb, seq, "fp32")
            rows.append({"model": model, "micro_batch": mb, "seq_len": seq, "precision": "fp32",
                         "measured_gib": round(got / 2**30, 4), "planned_gib": round(want / 2**30, 4),
                         "error_pct": round((want - got) / got * 100, 1)})
            ctx.log(f"[memory] {model} mb {mb} seq {seq}: measured {got / 2**20:.0f} MiB, planned {want / 2**20:.0f}")
        method = ("peak RSS above a warmed-up baseline (bench/plan_memory_check.py's child: VmHWM reset per case, "
                  "freed buffers returned to the OS), one fresh process for all cases")
    errors = [abs(r["error_pct"]) for r in rows if "error_pct" in r]
    ctx.headline = f"{len(errors)} cases, worst plan error {max(errors):.1f}%" if errors else "no case measured"
    return {"method": method, "planned": "memory_model.estimate_memory(device='cpu'): live tensors, as plan "
            "--measure compares them; plan_total_gib adds the CUDA context and allocator slack", "rows": rows}


def _cuda_case(ctx, model: str, mb: int, seq: int, prec: str) -> dict:
    """One shape on the GPU: measured peak allocated/reserved and device use vs the plan's figures."""
    from zh_bert.plan.memory_model import GiB, ModelShape, estimate_memory, model_config
    from zh_bert.plan.measure import measure

    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(ctx.device)
    row = {"model": model, "micro_batch": mb, "seq_len": seq, "precision": prec}
    try:
        got = measure(model, seq, mb, prec, steps=2, device="cuda")
    except torch.cuda.OutOfMemoryError:
        return {**row, "skipped": "out of memory"}
    free, total = torch.cuda.mem_get_info(ctx.device)
    shape = ModelShape.from_config(model_config(model, 21128, 0.1, 0.0))
    live = estimate_memory(shape, seq, mb, prec, device="cpu").total / GiB
    plan_total = estimate_memory(shape, seq, mb, prec, device="cuda").total / GiB
    measured = got["peak_allocated_gb"] - before / GiB
    row.update(measured_gib=round(measured, 3), planned_gib=round(live, 3),
               error_pct=round((live - measured) / measured * 100, 1),
               peak_reserved_gib=round(torch.cuda.max_memory_reserved(ctx.device) / GiB, 3),
               device_used_gib=round((total - free) / GiB, 3), plan_total_gib=round(plan_total, 3),
               left_allocated_before_gib=round(before / GiB, 3), tokens_per_s=round(got["tokens_per_s"]))
    ctx.log(f"[memory] {model} mb {mb} seq {seq} {prec}: measured {measured:.2f} GiB, planned {live:.2f} "
            f"({row['error_pct']:+.1f}%)")
    return row
