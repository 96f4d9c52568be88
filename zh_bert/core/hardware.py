"""What the hardware can do: GPU specs for `zh-bert plan`, the precision `pretrain` actually runs, and the
CPU runtime settings it makes before the first step (OpenMP wait policy, malloc).

Why this exists: Accelerate accepts fp16 on a CPU and silently does nothing, bf16 on Pascal is emulated,
fp16 on Kepler buys nothing, and PyTorch wheels drop old GPUs without a word. We decide the precision
ourselves (one pure function, `decide_precision`, used by both the planner and the training loop), say
which one is in effect and why, and warn before a run starts rather than days into it.

Spec figures are the vendors' datasheet peaks (boost clock, dense, no sparsity). `utilisation` is the
fraction of that peak an eager PyTorch BERT training step realistically reaches (model FLOPs utilisation);
it is an assumption stated in docs/hardware.md and replaced by a measured figure with `zh-bert plan --measure`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from zh_bert.core.errors import ZhBertError, suggest

# PyTorch's own wheel build scripts (.ci/manywheel/build_cuda.sh) decide which GPUs a wheel runs on:
# cu118 builds (last: 2.7) still carry sm_37; cu126 builds carry sm_50/sm_60 (Maxwell/Pascal) and sm_70;
# cu128+ builds start at Turing (sm_75). transformers 5 needs torch >= 2.6.
WHEEL_KEPLER = "pip install torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118"
WHEEL_PASCAL = 'pip install "torch>=2.6,<2.15" --index-url https://download.pytorch.org/whl/cu126'
WHEEL_CURRENT = "pip install torch  # PyPI's default CUDA build (Turing sm_75 and newer)"


@dataclass(frozen=True)
class GPUSpec:
    name: str
    arch: str                     # generation
    capability: tuple[int, int]
    memory_gb: float              # per device, GB as sold (a K80 board is two 12 GB devices)
    fp32_tflops: float            # datasheet peak, boost clock
    half_tflops: float            # peak of AMP (fp16/bf16) matmuls in PyTorch: tensor cores where present;
                                  # = fp32 where half GEMMs accumulate on the fp32 units (Pascal, Kepler)
    bf16: bool                    # native bf16 arithmetic (Ampere+)
    fast_fp16: bool               # fp16 arithmetic at >= fp32 rate (P100, Volta+); not GP102/GP104 (1/64)
    utilisation: dict = field(default_factory=dict)   # precision -> assumed fraction of peak, BERT training
    link_gbs: float = 10.0        # achieved all-reduce bus bandwidth between devices of one node, GB/s
    torch_wheel: str = WHEEL_CURRENT
    sdpa_fused: bool = True       # a fused SDPA kernel (no s×s attention matrix stored) exists for it
    note: str = ""

    def peak_tflops(self, precision: str) -> float:
        return self.fp32_tflops if precision == "fp32" else self.half_tflops


# Datasheet figures: NVIDIA Tesla K80 / GTX 1080 Ti / Tesla P100 PCIe / T4 / V100 SXM2 / A100 SXM / H100 SXM.
GPUS: dict[str, GPUSpec] = {
    "k80": GPUSpec("Tesla K80 (one GK210 die)", "Kepler", (3, 7), 12, 4.37, 4.37, False, False,
                   {"fp32": 0.40}, link_gbs=8.0, torch_wheel=WHEEL_KEPLER, sdpa_fused=False,
                   note="a K80 board is two GK210 devices: four K80s = --gpus 8; driver <= 470 (CUDA 11.4; "
                        "cu118 wheels run through CUDA minor-version compatibility)"),
    "1080ti": GPUSpec("GeForce GTX 1080 Ti", "Pascal", (6, 1), 11, 11.3, 11.3, False, False,
                      {"fp32": 0.55, "fp16": 0.55}, link_gbs=10.0, torch_wheel=WHEEL_PASCAL,
                      note="fp16 arithmetic runs at 1/64 rate: AMP saves activation memory, not time"),
    "p100": GPUSpec("Tesla P100 16GB (PCIe)", "Pascal", (6, 0), 16, 9.3, 9.3, False, True,
                    {"fp32": 0.55, "fp16": 0.70}, link_gbs=10.0, torch_wheel=WHEEL_PASCAL,
                    note="no tensor cores: fp16 pays through halved memory traffic, not matmul peak"),
    "t4": GPUSpec("Tesla T4", "Turing", (7, 5), 16, 8.1, 65.0, False, True,
                  {"fp32": 0.55, "fp16": 0.25}, link_gbs=10.0,
                  note="70 W card: clocks drop under sustained tensor-core load"),
    "v100": GPUSpec("Tesla V100 16GB (SXM2)", "Volta", (7, 0), 16, 15.7, 125.0, False, True,
                    {"fp32": 0.55, "fp16": 0.35}, link_gbs=100.0, torch_wheel=WHEEL_PASCAL,
                    note="cu128+ wheels dropped Volta in PyTorch 2.11: use the cu126 wheel"),
    "a100": GPUSpec("A100 80GB (SXM)", "Ampere", (8, 0), 80, 19.5, 312.0, True, True,
                    {"fp32": 0.55, "bf16": 0.40, "fp16": 0.40}, link_gbs=200.0),
    "h100": GPUSpec("H100 80GB (SXM)", "Hopper", (9, 0), 80, 67.0, 989.0, True, True,
                    {"fp32": 0.45, "bf16": 0.35, "fp16": 0.35}, link_gbs=350.0),
}
KNOWN_DEVICES = (*GPUS, "cpu")
Precision = Literal["auto", "fp32", "fp16", "bf16"]   # what a run asks for; `decide_precision` says what it gets
PRECISIONS = typing.get_args(Precision)


@functools.lru_cache(maxsize=1)
def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 dot products (avx512_bf16 / amx_bf16): autocast then pays off. Read
    once per process: fine-tuning resolves its precision at every dev evaluation."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def machine_line() -> str:
    """'CPU model, N cores, flags: ...' for the record that goes beside each measured figure."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and ":" in line:
                    flags = set(line.split(":", 1)[1].split())
                if model and flags:
                    break
    except OSError:
        pass
    shown = [f for f in FLAGS_OF_INTEREST if f in flags] or ["none of " + "/".join(FLAGS_OF_INTEREST)]
    return f"{model}, {os.cpu_count()} cores, flags: {' '.join(shown)}"


def _cpu_memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return 8.0


def matmul_tflops(dtype: str = "fp32", n: int = 1024, seconds: float = 0.3) -> float:
    """Measured TFLOP/s of an n×n matmul on this CPU: the CPU's practical 'peak'."""

    import torch

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    a @ b
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12


def cpu_spec(measure_peak: bool = True) -> GPUSpec:
    """This machine's CPU as a 'device': RAM as memory, a measured matmul rate as peak."""
    bf16 = cpu_supports_bf16()
    fp32 = matmul_tflops("fp32") if measure_peak else 0.1
    half = matmul_tflops("bf16") if (measure_peak and bf16) else fp32
    return GPUSpec(f"CPU ({os.cpu_count()} logical cores, matmul peak measured)", "CPU", (0, 0),
                   round(_cpu_memory_gb(), 1), round(fp32, 4), round(half, 4), bf16, False,
                   {"fp32": 0.50, "bf16": 0.35}, link_gbs=5.0, torch_wheel="pip install torch==2.13.0",
                   note="peak = measured n×n matmul rate of this CPU, not a datasheet figure")


def device_key(name: str) -> str:
    """The `GPUS` key (or 'cpu') for `--gpu NAME`, spelling variants accepted ("1080-Ti"); unknown names are
    an error listing the known ones."""
    key = name.lower().replace(" ", "").replace("-", "").replace("_", "")
    if key != "cpu" and key not in GPUS:
        raise ZhBertError(f"unknown GPU '{name}'{suggest(key, KNOWN_DEVICES)}; known: {', '.join(KNOWN_DEVICES)}")
    return key


def get_spec(name: str, measure_peak: bool = True) -> GPUSpec:
    """The spec for `--gpu NAME` (this machine's CPU, its peak measured, for 'cpu')."""
    key = device_key(name)
    return cpu_spec(measure_peak) if key == "cpu" else GPUS[key]


def decide_precision(requested: str, capability: tuple[int, int] | None, *, cpu_bf16: bool = False,
                     name: str = "") -> tuple[str, list[str]]:
    """(precision in effect, warnings): the one rule for planner (GPUSpec) and trainer (torch.device).

    `capability` None = CPU. auto: bf16 where computed natively (Ampere+, CPUs with avx512_bf16/AMX);
    fp16 + dynamic loss scaling on GPUs with fast fp16 but no bf16 (P100, Volta, Turing); fp32 where fp16
    buys no time (Kepler, Maxwell, GP102/GP104 such as the 1080 Ti) and on other CPUs.
    """

    warnings: list[str] = []
    if requested not in PRECISIONS:
        raise ZhBertError(f"precision must be one of {', '.join(PRECISIONS)}; got '{requested}'")
    if capability is None:
        if requested == "auto":
            return ("bf16" if cpu_bf16 else "fp32"), warnings
        if requested == "fp16":
            warnings.append("precision fp16 on a CPU: real fp16 autocast with dynamic loss scaling, several times "
                            "slower than fp32 here; it is meant for checking the GPU path (auto never picks it on "
                            "a CPU)")
            return "fp16", warnings
        if requested == "bf16" and not cpu_bf16:
            warnings.append("precision bf16 on a CPU without avx512_bf16/amx: emulated and slow")
        return requested, warnings
    major, minor = capability
    arch = f"sm_{major}{minor}"
    who = f"{name} ({arch})" if name else arch
    bf16_native = major >= 8
    fast_fp16 = major >= 7 or capability in ((6, 0), (6, 2))
    if requested == "auto":
        if bf16_native:
            return "bf16", warnings
        return ("fp16" if fast_fp16 else "fp32"), warnings
    if requested == "bf16" and not bf16_native:
        warnings.append(f"bf16 requested on {who}, which has no native bf16: it is emulated and slow; "
                        f"use precision: {'fp16' if fast_fp16 else 'fp32'} (or auto)")
    if requested == "fp16" and major < 6:
        warnings.append(f"fp16 requested on {who} (Kepler/Maxwell): no fp16 speed-up there, only "
                        f"loss-scaling risk; use precision: fp32 (or auto)")
    elif requested == "fp16" and not fast_fp16:
        warnings.append(f"fp16 requested on {who}: fp16 arithmetic runs at 1/64 rate on this Pascal chip, "
                        f"so AMP saves activation memory but no time (and adds loss scaling)")
    return requested, warnings


def build_supports(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Whether a PyTorch build compiled for `arch_list` (torch.cuda.get_arch_list()) can run on `capability`.

    A cubin for sm_XY runs on sm_XZ with Z >= Y (same major); PTX compute_XY JIT-compiles for any
    capability >= XY. An empty list (unknown build) is given the benefit of the doubt.
    """
    if not arch_list:
        return True
    major, minor = capability
    for a in arch_list:
        kind, _, num = a.partition("_")
        if not num.isdigit():
            continue
        m, n = int(num[:-1]), int(num[-1])
        if kind == "sm" and m == major and n <= minor:
            return True
        if kind == "compute" and (m, n) <= (major, minor):
            return True
    return False


def resolve_precision(requested: str, device) -> tuple[str, list[str]]:
    """(precision actually used: 'fp32'|'fp16'|'bf16', warnings) for `requested` on a torch.device.

    Also warns when this PyTorch build has no kernels for the GPU's compute capability (the classic
    "no kernel image is available" days into setup), with the install line that does.
    """
    import torch

    if device.type == "cpu":
        return decide_precision(requested, None, cpu_bf16=cpu_supports_bf16())
    if device.type != "cuda":
        return ("fp32" if requested == "auto" else requested), []
    capability = tuple(torch.cuda.get_device_capability(device))
    name = torch.cuda.get_device_name(device)
    precision, warnings = decide_precision(requested, capability, name=name)
    built = torch.cuda.get_arch_list()
    if not build_supports(capability, built):
        wheel = WHEEL_KEPLER if capability[0] < 5 else WHEEL_PASCAL if capability < (7, 5) else WHEEL_CURRENT
        warnings.insert(0, f"this PyTorch {torch.__version__} has kernels for {' '.join(built)} but {name} is "
                           f"sm_{capability[0]}{capability[1]}: CUDA calls will fail with 'no kernel image'; "
                           f"install a build that has it: {wheel}")
    return precision, warnings


# ---------------------------------------------------------------------------------------------------------
# CPU runtime tuning: set by pretrain before the first step


def omp_wait_policy(loadavg: str = "/proc/loadavg", samples: int = 10, interval: float = 0.03) -> str:
    """ACTIVE when this process is alone on the machine, else PASSIVE.

    Between the ~600 small ops of a CPU training step, spinning OpenMP threads are ready at once, sleeping ones
    must be woken: on an idle 2-core machine `tiny-cpu` ran 16.3-17.5k tokens/s spinning vs 11.6-14.2k
    sleeping. With one other busy process, spinning threads steal its core and the order flips (5.0k vs 8.6k).
    "Alone" = another runnable task in at most a third of a few /proc/loadavg samples (a busy process is
    runnable in nearly all of them, a kernel thread in few), and one process, not a multi-process launch.
    Without /proc: PASSIVE, the safe choice."""
    busy = 0
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            return "PASSIVE"
        for i in range(samples):
            with open(loadavg, encoding="ascii") as f:
                busy += int(f.read().split()[3].split("/")[0]) > 1   # runnable tasks, this reader included
            if i + 1 < samples:
                time.sleep(interval)
    except (OSError, ValueError, IndexError):
        return "PASSIVE"
    return "PASSIVE" if busy * 3 > samples else "ACTIVE"


# glibc mallopt() parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20   # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit


def keep_freed_memory() -> str:
    """Let glibc's malloc keep freed blocks up to 32 MiB for reuse instead of returning them to the kernel.

    Every step allocates and frees the same buffers (the MLM head's [masked tokens, vocab] logits and their
    gradient: 16 MB each in `tiny-cpu`). By default glibc serves such blocks with mmap and unmaps them on free,
    or trims them off the heap top, so each step page-faults the same memory in again: 14.8 M minor page
    faults in 2,000 `tiny-cpu` steps, 0.18 M with this, and 1.13x the tokens/s on a 2-core CPU (less in runs
    that fault less; bench/cpu_runtime.py). The price: the process keeps its peak heap instead of shrinking
    between steps. Skipped when the user tunes malloc
    (MALLOC_*_ or GLIBC_TUNABLES variables) and where the C library is not glibc. Returns what was done,
    for run.json."""
    if any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ) or "malloc" in os.environ.get(
            "GLIBC_TUNABLES", ""):
        return "unchanged: set by the environment"

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):
        return "unchanged: not glibc"
    if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)):
        return "unchanged: mallopt refused"
    return "glibc: mmap_threshold 32 MiB, no trim"


# ---------------------------------------------------------------------------------------------------------
# kernel settings: set by pretrain before the first step, recorded in run.json


def kernel_settings(recipe, device) -> dict:
    """Apply what the recipe's `deterministic` and `tf32` ask for on `device` before the first kernel runs;
    return what is in effect, for run.json. A CPU's kernels are deterministic already; on CUDA, deterministic
    means torch.use_deterministic_algorithms (warn-only: an op without a deterministic kernel warns rather
    than stops a run) and the cuBLAS workspace setting it needs, at some cost in speed."""
    import torch

    cuda = device.type == "cuda"
    deterministic = (not cuda) if recipe.deterministic is None else bool(recipe.deterministic)
    settings = {"deterministic": deterministic, "tf32": False, "pinned_memory": cuda, "compile": recipe.compile}
    if not cuda:
        return settings
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.backends.cudnn.benchmark = not deterministic
    tf32 = recipe.tf32 and tuple(torch.cuda.get_device_capability(device)) >= (8, 0)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    settings["tf32"] = tf32
    if deterministic:
        settings["deterministic_cost"] = ("deterministic CUDA kernels (use_deterministic_algorithms, "
                                          "CUBLAS_WORKSPACE_CONFIG=:4096:8): slower steps, exact resume")
    return settings


def check_compile(device) -> None:
    """Refuse `compile: true` where torch.compile cannot generate kernels: Triton needs sm_70 or newer."""
    import torch


    if device.type == "cuda" and tuple(torch.cuda.get_device_capability(device)) < (7, 0):
        major, minor = torch.cuda.get_device_capability(device)
        raise ZhBertError(f"compile: true needs Triton, which supports sm_70 and newer, but "
                          f"{torch.cuda.get_device_name(device)} is sm_{major}{minor}; set compile: false")


def sdpa_backend(config, device, precision: str, seq_len: int) -> str:
    """The scaled-dot-product-attention kernel torch picks for this model's attention shape and precision
    (packed rows: no mask): FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION or MATH."""
    import torch
    from torch.nn.attention import SDPBackend

    heads = config.num_attention_heads
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    q = torch.zeros(1, heads, seq_len, config.hidden_size // heads, device=device, dtype=dtype)
    dropout = float(getattr(config, "attention_probs_dropout_prob", 0.0) or 0.0)
    try:   # torch's own choice function (private: a torch without it gets "unknown")
        return SDPBackend(torch._fused_sdp_choice(q, q, q, None, dropout, False)).name
    except (AttributeError, RuntimeError, ValueError):
        return "unknown"
