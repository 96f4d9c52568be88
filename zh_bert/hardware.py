"""What the hardware can do: GPU specs for `zh-bert plan`, and the precision `pretrain` actually runs.

Why this exists: Accelerate accepts fp16 on a CPU and silently does nothing, bf16 on Pascal is emulated,
fp16 on Kepler buys nothing, and PyTorch wheels drop old GPUs without a word. We decide the precision
ourselves, say which one is in effect and why, and warn before a run starts rather than days into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GPUSpec:
    name: str
    arch: str                # generation
    capability: tuple[int, int]
    memory_gb: float         # per device (a K80 board is two 12 GB devices)
    fp32_tflops: float       # peak, boost clock
    fp16_tflops: float       # peak for AMP matmuls (tensor cores where present; 0 = no fp16 speed-up)
    bf16: bool               # native bf16 arithmetic
    torch_wheel: str         # newest PyTorch install line that still has kernels for it


GPUS: dict[str, GPUSpec] = {
    "k80": GPUSpec("Tesla K80 (one GK210 die)", "Kepler", (3, 7), 12, 4.37, 0.0, False,
                   "pip install torch==1.12.1+cu113 --extra-index-url https://download.pytorch.org/whl/cu113"),
    "1080ti": GPUSpec("GeForce GTX 1080 Ti", "Pascal", (6, 1), 11, 11.3, 0.0, False,
                      "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cu126"),
    "p100": GPUSpec("Tesla P100 16GB (PCIe)", "Pascal", (6, 0), 16, 9.3, 18.7, False,
                    "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cu126"),
    "t4": GPUSpec("Tesla T4", "Turing", (7, 5), 16, 8.1, 65.0, False, "pip install torch"),
    "v100": GPUSpec("Tesla V100 16GB (SXM2)", "Volta", (7, 0), 16, 15.7, 125.0, False, "pip install torch"),
    "a100": GPUSpec("A100 80GB (SXM)", "Ampere", (8, 0), 80, 19.5, 312.0, True, "pip install torch"),
    "h100": GPUSpec("H100 80GB (SXM)", "Hopper", (9, 0), 80, 67.0, 989.0, True, "pip install torch"),
}


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 dot products (avx512_bf16 / amx_bf16): autocast then pays off."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(requested: str, device) -> tuple[str, list[str]]:
    """(precision actually used: 'fp32'|'fp16'|'bf16', warnings) for `requested` on a torch.device.

    auto: bf16 where the device computes it natively; fp16 + dynamic loss scaling on CUDA GPUs without bf16
    that run fp16 at least as fast as fp32 (Pascal and newer: memory saved even where not time);
    fp32 on Kepler and on CPUs without bf16.
    """
    import torch

    warnings: list[str] = []
    if requested not in ("auto", "fp32", "fp16", "bf16"):
        from zh_bert.errors import ZhBertError
        raise ZhBertError(f"precision must be one of auto, fp32, fp16, bf16; got '{requested}'")
    if device.type == "cpu":
        bf16_ok = cpu_supports_bf16()
        if requested == "auto":
            return ("bf16" if bf16_ok else "fp32"), warnings
        if requested == "fp16":
            warnings.append("precision fp16 was requested, but fp16 autocast does nothing on a CPU "
                            "(Accelerate accepts it silently); running fp32")
            return "fp32", warnings
        if requested == "bf16" and not bf16_ok:
            warnings.append("precision bf16 on a CPU without avx512_bf16/amx: emulated and slow")
        return requested, warnings
    if device.type != "cuda":
        return ("fp32" if requested == "auto" else requested), warnings
    major, minor = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    arch = f"sm_{major}{minor}"
    built = torch.cuda.get_arch_list()
    if built and arch not in built and not any(a.startswith("compute_") for a in built):
        warnings.append(f"this PyTorch build has kernels for {', '.join(built)} but {name} is {arch}: "
                        f"it will fail or run slowly; see README 'Hardware' for an install line that supports it")
    bf16_native = major >= 8
    if requested == "auto":
        if bf16_native:
            return "bf16", warnings
        return ("fp16" if major >= 6 else "fp32"), warnings
    if requested == "bf16" and not bf16_native:
        warnings.append(f"bf16 requested on {name} ({arch}) which has no native bf16: it is emulated and slow; "
                        f"use precision: fp16 (or auto)")
    if requested == "fp16" and major < 6:
        warnings.append(f"fp16 requested on {name} ({arch}, Kepler or older): no fp16 speed-up there, only "
                        f"loss-scaling risk; use precision: fp32 (or auto)")
    return requested, warnings
