"""Which masked-position head trains a ModernBERT faster: zh-bert's (`model.PretrainModel`: the stock head run on
the masked rows, loss as a sum) or transformers' own `sparse_prediction=True` (`ModernBertForMaskedLM(labels=)`),
with the dense head (`sparse_prediction=False`, what `run_mlm` computes) as the baseline; and the same-size BERT
through zh-bert's head beside them (tokens/s of the two architectures). Forward + backward + AdamW step on the
same masked batch, the four interleaved in each repeat.

    python -m bench.modernbert_head [--models tiny mini] [--batch 16] [--seq-len 128] [--repeat 30]
                                    [--precision fp32|bf16] [--quick]

Prints tokens/s per head and the ratios against the dense head in the same run. `--quick`: tiny, 3 repeats
(a smoke test, tests/test_bench.py; its figures mean nothing).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Literal

import torch

from bench.cli import parse
from bench.timing import machine
from zh_bert.core.config import option
from zh_bert.train.arch.bert import build_config
from zh_bert.train.arch.modernbert import build_modernbert_config
from zh_bert.train.model import PretrainModel

VOCAB = 8000   # the main command's char vocab


@dataclass
class Options:
    models: list[str] = option(default_factory=lambda: ["tiny", "mini"], help="presets")
    batch: int = option(16, help="rows per step")
    seq_len: int = option(128)
    repeat: int = option(30, help="timed steps per head (median)")
    precision: Literal["fp32", "bf16"] = option("fp32")
    quick: bool = option(False, help="tiny, 3 repeats: a smoke test")


def batch(rows: int, seq_len: int, rate: float = 0.25) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(200, VOCAB, (rows, seq_len), generator=g)
    chosen = torch.rand(rows, seq_len, generator=g) < rate
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return {"input_ids": torch.where(chosen, torch.full_like(ids, 103), ids), "attention_mask": torch.ones_like(ids),
            "labels": labels}


def steps(name: str, model, b: dict, bf16: bool):
    """One training step of head `name` on `model` (a fresh copy per head, its own optimizer)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    wrapped = PretrainModel(model) if name.startswith(("zh-bert", "bert")) else None

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if wrapped is not None:
                out = wrapped(**b)
                loss = out["mlm_loss_sum"] / out["mlm_count"]
            else:
                loss = model(**b).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def measure(preset: str, rows: int, seq_len: int, repeat: int, bf16: bool) -> dict[str, float]:
    from transformers import BertForMaskedLM, ModernBertForMaskedLM

    b = batch(rows, seq_len)
    runs = {}
    for name, sparse in (("dense", False), ("transformers sparse_prediction", True), ("zh-bert", False)):
        torch.manual_seed(0)
        cfg = build_modernbert_config(preset, VOCAB, special_ids={"pad": 0, "cls": 101, "sep": 102})
        cfg.sparse_prediction = sparse
        runs[name] = steps(name, ModernBertForMaskedLM(cfg).train(), b, bf16)
    torch.manual_seed(0)
    bert = BertForMaskedLM(build_config(preset, VOCAB, dropout=0.0)).train()
    runs["bert, zh-bert head"] = steps("bert", bert, {**b, "token_type_ids": torch.zeros_like(b["input_ids"])}, bf16)
    for step in runs.values():
        step()   # warm-up
    times: dict[str, list[float]] = {n: [] for n in runs}
    for _ in range(repeat):
        for name, step in runs.items():
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    return {n: rows * seq_len / statistics.median(t) for n, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    a = parse(Options, "modernbert_head", __doc__, argv)
    if a.quick:
        a.models, a.repeat = ["tiny"], 3
    print(f"machine: {machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads; batch {a.batch} × "
          f"{a.seq_len}, 25% masked, vocab {VOCAB}, {a.precision}")
    for preset in a.models:
        tps = measure(preset, a.batch, a.seq_len, a.repeat, a.precision == "bf16")
        base = tps["dense"]
        for name, v in tps.items():
            print(f"{preset:5s} {name:31s} {v:>10,.0f} tokens/s  {v / base:.2f}x dense")
        print(f"{preset}: zh-bert / transformers sparse_prediction = "
              f"{tps['zh-bert'] / tps['transformers sparse_prediction']:.2f}x; "
              f"modernbert / bert (zh-bert head) = {tps['zh-bert'] / tps['bert, zh-bert head']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
