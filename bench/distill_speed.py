"""Distillation tokens/s: zh-bert's step (`objective: distill`) against TextBrewer's `GeneralDistiller`, in the
same process, on the same teacher, student, batches and loss terms.

Both sides get deep copies of one teacher and one student (BertForMaskedLM presets of Google's 21,128-token
vocab, dropout 0 so that both compute the very same loss) and of one set of learned projections; real Chinese
batches (zhwiki sample packed to 128 tokens, 15% token masking done once up front: `bench.train_throughput`'s);
the loss MiniRBT and TextBrewer's general distillation use: soft cross-entropy at temperature 8 on the masked
positions (weight 1) + hidden-state MSE through a linear projection on the uniform layer map (weight 1 per pair).
TextBrewer's step is what its `train_with_num_steps` does per batch (`train_on_batch`, backward, gradient
clipping, `optimizer.step`, `zero_grad`) with `torch.optim.AdamW` on the student and its projections; zh-bert's
is `training.train_step` of `objectives.distill_net.DistillModel` (fused AdamW, Accelerate). Under bf16 both run
in the same autocast (TextBrewer itself offers only apex fp16). Steps alternate (TextBrewer, zh-bert, each
side's teacher forward alone) so all see the same load; medians are compared. The first step's losses of the
two sides are printed: they agree, so both compute the same thing. The teacher's share is its forward alone
(TextBrewer: the stock forward, every position's logits; zh-bert: the encoder and the head at the masked
positions) over that side's whole step.

    python -m bench.distill_speed                            # medium -> mini, fp32 (+ bf16 if the CPU has it)
    python -m bench.distill_speed --teacher base --student mini --steps 4
    python -m bench.distill_speed --quick                    # mini -> tiny, fp32, batch 8 × 64 (a smoke test)
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from bench.cli import parse
from bench.timing import machine
from bench.train_throughput import HALF, _reset_accelerate, real_batches
from zh_bert.core.config import at_least, option
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.train.arch.base import PRESETS


def _recipe(teacher: str, n: int, steps: int):
    from zh_bert.train.recipe import Recipe

    return Recipe(lr=1e-4, warmup_steps=0, max_steps=steps, global_batch=n, micro_batch=n, objective="distill",
                  teacher=teacher, temperature=8.0, kd_weight=1.0, hidden_weight=1.0, mlm_weight=0.0)


def textbrewer_distiller(teacher, student, pairs, projections, out_dir: str, masked: dict):
    """TextBrewer's GeneralDistiller for the same loss terms, its projections set to ours. The models see
    input_ids and attention_mask only (labels would make BertForMaskedLM add a full-vocabulary loss that no
    term uses); the adaptors take the masked positions of the current batch from `masked`."""
    from textbrewer import DistillationConfig, GeneralDistiller, TrainingConfig

    def adaptor(batch, outputs):
        return {"logits": outputs.logits, "logits_mask": masked["now"], "hidden": outputs.hidden_states,
                "inputs_mask": batch["attention_mask"]}

    hs, ht = student.config.hidden_size, teacher.config.hidden_size
    matches = [{"layer_T": t, "layer_S": s, "feature": "hidden", "loss": "hidden_mse", "weight": 1,
                "proj": ["linear", hs, ht]} for s, t in pairs]
    config = DistillationConfig(temperature=8, kd_loss_type="ce", kd_loss_weight=1, hard_label_weight=0,
                                intermediate_matches=matches)
    distiller = GeneralDistiller(TrainingConfig(device="cpu", output_dir=out_dir), config, teacher, student,
                                 adaptor, adaptor)
    for ours, theirs in zip(projections, distiller.projs):
        theirs.load_state_dict(ours.state_dict())
    return distiller


def _textbrewer_step(distiller, optimizer, batch, precision: str, masked: dict) -> float:
    """One step as TextBrewer's train_with_num_steps takes it (max_grad_norm 1, no accumulation)."""
    masked["now"] = batch["labels"] != -100
    with torch.autocast("cpu", dtype=HALF.get(precision, torch.bfloat16), enabled=precision in HALF):
        loss, _ = distiller.train_on_batch({"input_ids": batch["input_ids"],
                                            "attention_mask": batch["attention_mask"]}, {})
    loss.backward()
    torch.nn.utils.clip_grad_norm_(distiller.model_S.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    return float(loss.detach())


def _teacher_alone(teacher, batch, precision: str, sparse) -> None:
    """A side's teacher forward by itself: the stock forward (TextBrewer) or the encoder and the head at the
    masked positions (zh-bert, `sparse` = the DistillModel)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=HALF.get(precision, torch.bfloat16), enabled=precision in HALF):
        if sparse is None:
            teacher(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            return
        hidden = teacher.bert(input_ids=batch["input_ids"], output_hidden_states=True).hidden_states
        pos = (batch["labels"].reshape(-1) != -100).nonzero(as_tuple=True)[0]
        sparse.teacher_arch.mlm_logits(teacher, hidden[-1].reshape(-1, hidden[-1].shape[-1]).index_select(0, pos))


def bench_pair(t_cfg, s_cfg, batches, precision: str, warmup: int) -> dict:
    """Tokens/s of both sides and their teachers' shares, steps interleaved; the first step's two losses."""
    from zh_bert.core.fileio import scratch_dir
    from zh_bert.train.objectives import DISTILL
    from zh_bert.train.objectives.base import Networks
    from zh_bert.train.training import StepStats, lr_lambda, make_accelerator, make_optimizer, make_scaler, train_step
    from transformers import BertForMaskedLM

    _reset_accelerate()
    acc = make_accelerator(precision, cpu=True)
    n = len(batches[0]["input_ids"])
    recipe = _recipe("bench-teacher", n, len(batches))
    torch.manual_seed(0)
    teacher, student = BertForMaskedLM(t_cfg).eval().requires_grad_(False), BertForMaskedLM(s_cfg)
    ours = DISTILL.module(Networks(copy.deepcopy(student), frozen={"teacher": copy.deepcopy(teacher)}), recipe)
    DISTILL.place(Networks(ours.hf, frozen={"teacher": ours.teacher}), acc.device, precision)
    opt, _ = make_optimizer(ours, recipe)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
    ours, opt = acc.prepare(ours, opt)
    ours.train()
    scaler, stats = make_scaler(precision, acc.device, recipe), StepStats()
    theirs_student = copy.deepcopy(student)
    theirs_student.config.output_hidden_states = True
    theirs_teacher = copy.deepcopy(teacher)
    theirs_teacher.config.output_hidden_states = True
    times = {k: [] for k in ("textbrewer", "zh-bert", "textbrewer teacher", "zh-bert teacher")}
    losses, masked = {}, {}
    with scratch_dir("zh-bert-bench-textbrewer-") as out:
        tb = textbrewer_distiller(theirs_teacher, theirs_student.train(), ours.pairs, ours.projection, str(out),
                                  masked)
        tb_opt = torch.optim.AdamW(list(theirs_student.parameters()) + [p for m in tb.projs for p in m.parameters()],
                                   lr=1e-4, weight_decay=0.01, eps=1e-6)
        for step, batch in enumerate(batches):
            t = time.perf_counter()
            loss = _textbrewer_step(tb, tb_opt, batch, precision, masked)
            times["textbrewer"].append(time.perf_counter() - t)
            t = time.perf_counter()
            res = train_step(ours, opt, sched, acc, [batch], recipe, stats, step, scaler)
            times["zh-bert"].append(time.perf_counter() - t)
            if step == 0:
                losses = {"textbrewer": loss, "zh-bert": float(res["loss"])}
            for side, model, sparse in (("textbrewer", theirs_teacher, None), ("zh-bert", ours.teacher, ours)):
                t = time.perf_counter()
                _teacher_alone(model, batch, precision, sparse)
                times[f"{side} teacher"].append(time.perf_counter() - t)
    med = {k: float(np.median(v[warmup:])) for k, v in times.items()}
    tokens = batches[0]["input_ids"].numel()
    return {"textbrewer": tokens / med["textbrewer"], "zh-bert": tokens / med["zh-bert"], "losses": losses,
            "share": {k: med[f"{k} teacher"] / med[k] for k in ("textbrewer", "zh-bert")}}


@dataclass
class Options:
    teacher: str = option("medium", help="teacher preset (BertForMaskedLM, random weights)")
    student: str = option("mini", help="student preset")
    precisions: Optional[str] = option(None, metavar="A,B", help="default: fp32, plus bf16 when the CPU has "
                                       "avx512_bf16")
    steps: int = option(6, help="timed steps per side (after 2 warm-up steps)")
    threads: int = option(2, help="torch threads")
    quick: bool = option(False, help="mini -> tiny, fp32, batch 8 × 64, 2 timed steps: a smoke test")

    def __post_init__(self):
        at_least(self, 1, "steps", "threads")
        for flag, name in (("--teacher", self.teacher), ("--student", self.student)):
            if name not in PRESETS:
                raise ZhBertError(f"{flag}: unknown preset {name!r}{suggest(name, PRESETS)}; presets: {', '.join(PRESETS)}")


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "distill_speed", __doc__, argv)
    from transformers.utils import logging as hf_logging

    from zh_bert.core.hardware import cpu_supports_bf16
    from zh_bert.train.arch.bert import build_config

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    precisions = args.precisions.split(",") if args.precisions else ["fp32"] + (["bf16"] if cpu_supports_bf16() else [])
    warmup, batch, seq = 2, 32, 128
    if args.quick:
        args.teacher, args.student, precisions, args.steps, warmup, batch, seq = "mini", "tiny", ["fp32"], 2, 1, 8, 64
    batches = real_batches(warmup + args.steps, batch, seq)
    t_cfg, s_cfg = (build_config(name, 21128, dropout=0.0) for name in (args.teacher, args.student))
    print(f"{machine()}; torch {torch.__version__}, {args.threads} threads")
    print(f"teacher {args.teacher} L{t_cfg.num_hidden_layers}/H{t_cfg.hidden_size}, student {args.student} "
          f"L{s_cfg.num_hidden_layers}/H{s_cfg.hidden_size}, batch {batch} × {seq}, vocab 21128, T = 8, soft CE + "
          f"hidden MSE (uniform layer map), {args.steps} timed steps\n")
    print("| teacher → student | precision | TextBrewer tokens/s | zh-bert tokens/s | ratio | teacher share "
          "(TextBrewer) | teacher share (zh-bert) |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for prec in precisions:
        r = bench_pair(t_cfg, s_cfg, batches, prec, warmup)
        print(f"| {args.teacher} → {args.student} | {prec} | {r['textbrewer']:,.0f} | {r['zh-bert']:,.0f} | "
              f"**{r['zh-bert'] / r['textbrewer']:.2f}×** | {r['share']['textbrewer']:.0%} | "
              f"{r['share']['zh-bert']:.0%} |", flush=True)
        notes.append(f"{prec}: first-step loss TextBrewer {r['losses']['textbrewer']:.5f}, zh-bert "
                     f"{r['losses']['zh-bert']:.5f}")
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
