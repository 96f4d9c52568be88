"""fp16's dynamic loss scaler, and a disabled one for every other precision (nanoGPT's `GradScaler(enabled=…)`):
the step calls scale / unscale_ / step / update whatever the precision, and a disabled scaler passes the loss
through and calls optimizer.step() itself, so fp32 and bf16 need no branch."""

from __future__ import annotations

import torch


def make_scaler(precision: str, device, recipe) -> torch.amp.GradScaler:
    """zh-bert's own dynamic loss scaler, one code path on CPU and CUDA (Accelerate makes none on a CPU, and its
    autocast there ignores fp16); enabled for fp16 only."""
    return torch.amp.GradScaler(device.type, init_scale=recipe.loss_scale_init, growth_factor=2.0,
                                backoff_factor=0.5, growth_interval=recipe.loss_scale_growth_interval,
                                enabled=precision == "fp16")


#: the scaler of a step that none was given for (fp32 / bf16 callers, plan --measure, benches)
NO_SCALING = torch.amp.GradScaler("cpu", enabled=False)
