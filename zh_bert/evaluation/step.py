"""The fine-tuning step every head shares (classifier `finetune`, span head `qa`, PET `prompts`): one
optimizer, loss scaler and schedule, one backward-clip-step, one autocast, so the three train alike and a change
to how zh-bert fine-tunes is made once."""

from __future__ import annotations

from zh_bert.core.hardware import resolve_precision
from zh_bert.train.recipe import Recipe

FINETUNE_ADAM_EPS = 1e-8   # torch's and the Trainer's AdamW default (pretraining uses 1e-6)


def precision_autocast(device, precision: str):
    """Autocast for a precision in effect (`resolve_precision`): fp16 or bf16 matmuls, or none for fp32."""
    import torch

    half = {"fp16": torch.float16, "bf16": torch.bfloat16}
    return torch.autocast(device.type, dtype=half.get(precision, torch.bfloat16), enabled=precision in half)


def no_tick(done: int = 1, more: int = 0) -> None:
    """A progress callback nobody watches (else `suite.TaskBar.tick`): `done` units finished, `more` found."""


def stepping(model, cfg, total_steps: int):
    """(optimizer, loss scaler, schedule, precision) of every fine-tuning loop (classifier, span, PET), so the
    three step alike: pretrain's AdamW (no decay on biases/LayerNorm, fused kernel) at fine-tuning's eps, fp16
    loss scaling at pretrain's defaults, linear warmup over `cfg.warmup` of the steps then linear decay. `cfg`:
    a `finetune.FinetuneConfig` (lr, weight_decay, warmup, precision)."""
    from transformers import get_linear_schedule_with_warmup

    from zh_bert.train.training import make_optimizer, make_scaler  # torch: imported when training

    recipe = Recipe(lr=cfg.lr, weight_decay=cfg.weight_decay, adam_eps=FINETUNE_ADAM_EPS)
    opt = make_optimizer(model, recipe)[0]
    precision = resolve_precision(cfg.precision, model.device)[0]
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup * total_steps), total_steps)
    return opt, make_scaler(precision, model.device, recipe), sched, precision


def optimizer_step(loss, model, opt, scaler, sched) -> None:
    """One fine-tuning step, the same for every head (classifier, span, PET): backward through the loss scaler,
    clip at 1.0, step (fp16: skipped when the gradients overflowed), schedule, clear."""
    import torch

    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    opt.zero_grad(set_to_none=True)
