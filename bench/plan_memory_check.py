"""Check the planner's memory model against the measured peak memory of real training steps on CPU.

For two model sizes × two micro-batches, each measurement runs in a fresh subprocess: import and warm up
torch (thread pools, oneDNN caches) on a throw-away model, take the resident set size as the baseline,
reset the kernel's peak-RSS counter (`/proc/self/clear_refs` ← 5), then build the model + AdamW and run
two optimizer steps of two accumulated micro-batches each (zh-bert's sparse-head `PretrainModel`). Peak =
VmHWM − baseline. glibc's malloc keeps freed memory unless large blocks are mmap'ed, so the child runs
with MALLOC_MMAP_THRESHOLD_=65536 (fixed threshold: every tensor buffer ≥ 64 KiB is its own mapping and
goes back to the OS when freed); then peak RSS tracks peak live tensor bytes. The planner's estimate is
`zh_bert.plan.memory_model.estimate_memory(..., device="cpu")` (live tensors, no CUDA context/allocator slack).
`--objective electra` does the same for a generator + discriminator pair (`ElectraPretrainModel`).

    python -m bench.plan_memory_check            # prints a table; exit 1 if any case is off by > 25%
    python -m bench.plan_memory_check --objective electra
    python -m bench.plan_memory_check --quick     # one case (mini, micro-batch 4, 64 tokens): a smoke test
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bench import REPO
from bench.cli import parse
from zh_bert.core.config import option
from zh_bert.core.fileio import parse_json

CASES = [("mini", 8), ("mini", 32), ("small", 8), ("small", 32)]
QUICK_CASES = [("mini", 4)]
TOLERANCE = 0.25


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(model: str, micro_batch: int, seq_len: int, precision: str, attention_dropout: float = 0.0,
          accumulation: int = 2, steps: int = 2, objective: str = "mlm") -> dict:
    """Runs in the fresh subprocess: returns the peak bytes of training above the warmed-up baseline."""
    import torch
    from transformers import BertForMaskedLM

    from zh_bert.train.model import PretrainModel
    from zh_bert.train.objectives.electra_net import ElectraPretrainModel, build_electra
    from zh_bert.plan.memory_model import model_config

    torch.set_num_threads(2)
    dtype = {"bf16": torch.bfloat16}.get(precision)
    electra = objective == "electra"

    def run(cfg, mb, n_steps):
        torch.manual_seed(0)
        net = (ElectraPretrainModel(*build_electra(cfg)) if electra else PretrainModel(BertForMaskedLM(cfg))).train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(0)
        for _ in range(n_steps):
            for _ in range(accumulation):
                ids = torch.randint(1000, cfg.vocab_size, (mb, seq_len), generator=g)
                labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, torch.full_like(ids, -100))
                extra = {"sample_u": torch.rand(ids.shape, generator=g)} if electra else {}
                with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                    out = net(ids, attention_mask=torch.ones_like(ids), labels=labels, **extra)
                loss = out["mlm_loss_sum"] / out["mlm_count"]
                if electra:
                    loss = loss + 50 * out["rtd_loss_sum"] / out["rtd_count"]
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    warm = model_config("tiny", 2000)
    run(warm, 2, 1)                                       # warm-up: pools and kernel caches, then freed
    baseline = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")         # reset VmHWM to the current RSS
    cfg = model_config(model, 21128, 0.1, attention_dropout)
    run(cfg, micro_batch, steps)
    peak = _status_kb("VmHWM")
    return {"peak_bytes": (peak - baseline) * 1024}


def measure_all(cases: list[dict], timeout: float | None = None) -> list[float]:
    """`child(**case)`'s peak bytes for every case, all in one fresh process (one torch import; VmHWM is
    reset per case), run with MALLOC_MMAP_THRESHOLD_ so that freed buffers go back to the OS."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = (f"import json; from bench import plan_memory_check as m; "
            f"print(json.dumps([m.child(**case)['peak_bytes'] for case in {cases!r}]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"memory child exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    return parse_json(out.stdout.strip().splitlines()[-1], "the memory child's output")


def measure(model: str, micro_batch: int, seq_len: int = 128, precision: str = "fp32",
            attention_dropout: float = 0.0, objective: str = "mlm") -> float:
    """The peak bytes of one case, in a fresh process of its own."""
    return measure_all([dict(model=model, micro_batch=micro_batch, seq_len=seq_len, precision=precision,
                             attention_dropout=attention_dropout, objective=objective)])[0]


def estimate(model: str, micro_batch: int, seq_len: int = 128, precision: str = "fp32",
             attention_dropout: float = 0.0, objective: str = "mlm") -> float:
    from zh_bert.plan.memory_model import estimate_memory, model_config, shape_and_flops
    from zh_bert.plan import PlanArgs

    args = PlanArgs(model=model, seq_len=seq_len, objective=objective, attention_dropout=attention_dropout)
    shape, _ = shape_and_flops(args, model_config(model, 21128, 0.1, attention_dropout))
    # CPU SDPA has no fused kernel with attention dropout > 0: the math path stores the s×s matrix.
    return estimate_memory(shape, seq_len, micro_batch, precision, device="cpu",
                           fused_attention=attention_dropout == 0).total


@dataclass
class Options:
    precision: Literal["fp32", "bf16"] = option("fp32")
    seq_len: int = option(128)
    attention_dropout: float = option(0.0, help="0 (zh-bert's default): CPU SDPA's fused kernel; > 0: the math path")
    objective: Literal["mlm", "electra"] = option("mlm")
    quick: bool = option(False, help="one small case, a smoke test")


def main(argv: list[str] | None = None) -> int:
    args = parse(Options, "plan_memory_check", __doc__, argv)
    cases = QUICK_CASES if args.quick else CASES
    if args.quick:
        args.seq_len = 64
    rows, ok = [], True
    print(f"{'model':<7}{'micro':>6}{'measured MB':>13}{'planned MB':>12}{'planned/measured':>18}")
    for model, mb in cases:
        got = measure(model, mb, args.seq_len, args.precision, args.attention_dropout, args.objective)
        want = estimate(model, mb, args.seq_len, args.precision, args.attention_dropout, args.objective)
        ratio = want / got
        ok &= abs(ratio - 1) <= TOLERANCE
        rows.append({"model": model, "micro_batch": mb, "measured_mb": got / 2**20, "planned_mb": want / 2**20,
                     "ratio": ratio})
        print(f"{model:<7}{mb:>6}{got / 2**20:>13.0f}{want / 2**20:>12.0f}{ratio:>18.2f}")
    print(f"{'all within' if ok else 'NOT all within'} ±{TOLERANCE:.0%} (precision {args.precision}, "
          f"seq_len {args.seq_len}, attention_dropout {args.attention_dropout}, objective {args.objective})")
    return 0 if ok or args.quick else 1   # a smoke test's toy case does not gate


if __name__ == "__main__":
    sys.exit(main())
