"""The training loop: one optimizer step (`train_step`), validation (`validation_metrics`) and the loop over
steps (`fit`) with its guard against steps that cannot train (`_guard`). Everything a step computes is here;
what a run keeps between steps (counters, metrics, checkpoints) is `zh_bert.train.training_run.TrainingRun`.

What makes it fast: the MLM head only at masked positions (`model.PretrainModel`), packed sequences from
the shards (no padding), SDPA attention, fused AdamW and few host<->device syncs. Counted on CUDA with
`torch.cuda.set_sync_debug_mode` (H200, torch 2.11), a step syncs: once for the finite-loss check that
decides whether the step is applied; once per micro-batch in the sparse head (`nonzero` finds the masked
positions); once more per padded micro-batch (the attention mask); in fp32 once more inside torch. The
batch's token counts come from host tensors before the batch moves. With several processes each step
also all-reduces those counts and the stop flag; logging (every `log_every` steps) and validation sync
when they run.

What makes it safe: the loss is normalised by the masked-token count of the whole global batch (so
accumulation and DDP give the same update as one big batch; ELECTRA's RTD loss by the batch's real-token
count, its generator samples keyed per sequence, see `objectives.electra_net.ElectraPretrainModel`), and steps whose
backpropagated loss or gradient norm is non-finite are skipped and a streak of them stops the run.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
import warnings
from typing import TYPE_CHECKING

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

from zh_bert.train.checkpoint import NODECAY
from zh_bert.train.model import decay_groups
from zh_bert.train.objectives import MLM
from zh_bert.train.scaler import NO_SCALING, make_scaler  # noqa: F401  (make_scaler: what callers of the step build)

if TYPE_CHECKING:
    from zh_bert.train.training_run import TrainingRun


def lr_lambda(recipe):
    """Multiplier of the peak lr at optimizer step s (0-based): linear warmup, then linear/cosine/constant, or
    wsd's peak until `decay_start` and a linear decay to 0 from there."""
    warm, total, kind = recipe.warmup_steps, recipe.max_steps, recipe.schedule
    start = decay_start(recipe) if kind == "wsd" else warm

    def f(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        if kind == "constant" or s < start:
            return 1.0
        progress = min(1.0, (s - start) / max(1, total - start))
        return 0.5 * (1.0 + math.cos(math.pi * progress)) if kind == "cosine" else 1.0 - progress

    return f


def decay_start(recipe) -> int:
    """wsd: the step at which the decay begins (never inside warmup); checkpoints/nodecay/ holds the weights
    after this many steps: the end of the stable phase, from which a longer run can continue at peak lr."""
    decay = max(1, round(recipe.decay_fraction * recipe.max_steps))
    return max(recipe.warmup_steps, recipe.max_steps - decay)


def reschedule(optimizer, scheduler, recipe) -> None:
    """Apply `recipe`'s lr and schedule to a restored optimizer/scheduler (whose state holds the old peak lr)
    from the current step on."""
    f = lr_lambda(recipe)
    scheduler.lr_lambdas = [f] * len(optimizer.param_groups)
    scheduler.base_lrs = [recipe.lr] * len(optimizer.param_groups)
    for group in optimizer.param_groups:
        group["initial_lr"] = recipe.lr
        group["lr"] = recipe.lr * f(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def make_optimizer(model, recipe):
    """AdamW without decay on biases and LayerNorm weights; fused kernel where this torch has one."""
    groups = decay_groups(model, recipe.weight_decay)
    kw = dict(lr=recipe.lr, betas=tuple(recipe.betas), eps=recipe.adam_eps)
    try:
        return torch.optim.AdamW(groups, fused=True, **kw), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


def make_accelerator(precision: str, cpu: bool):
    """An Accelerator for `precision` (fp32 | fp16 | bf16, already resolved), on the CPU(s) or the GPU(s).

    Accelerate keeps its settings in a process-wide singleton; a second run in one process (ablate, tests,
    `plan --measure`) with another precision must start from a clean one. The distributed state
    (PartialState) is kept.
    """
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    return Accelerator(mixed_precision="bf16" if precision == "bf16" else "no", cpu=cpu)   # fp16: make_scaler


MIN_LOSS_SCALE = 1.0   # below it, fp16 gradients overflow even unscaled: the run has diverged


def autocast(accelerator, fp16: bool):
    """fp16: torch's fp16 autocast on this device (real fp16 matmuls on a CPU too); else Accelerate's (bf16 or
    nothing)."""
    return torch.autocast(accelerator.device.type, dtype=torch.float16) if fp16 else accelerator.autocast()


def _inject_overflow(params: list, step: int) -> None:
    """The test hook for an fp16 overflow: ZH_BERT_FAULT=inf-gradient@STEP makes the gradients of step STEP
    as metrics.jsonl and the log number it (1-based; `step` here is 0-based) inf."""
    if params and os.environ.get("ZH_BERT_FAULT") == f"inf-gradient@{step + 1}":
        params[0].grad.fill_(float("inf"))


class StepStats:
    """Sums over a logging window, kept as device tensors: reading them (every log_every steps) syncs. `loss`
    and `correct` are the MLM ones; `sums` every sum the objective logs (`Objective.logged`)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.sums: dict = {}
        self.masked = self.tokens = self.seqs = self.steps = self.skipped = 0
        self.t0 = time.perf_counter()

    @property
    def loss(self):
        return self.sums.get("mlm_loss_sum", 0.0)

    @property
    def correct(self):
        return self.sums.get("mlm_correct", 0.0)

    def add(self, out: dict, keys: tuple[str, ...]):
        for key in keys:
            if key in out:
                value = out[key].detach()
                self.sums[key] = self.sums.get(key, 0.0) + (value.float() if key.endswith("_sum") else value)


def train_step(model, optimizer, scheduler, accelerator, micro_batches: list[dict], recipe, stats: StepStats,
               step: int = 0, scaler=NO_SCALING) -> dict:
    """Optimizer step `step` (0-based) over `micro_batches` (this process's share of the global batch, host
    tensors).

    Returns {'finite', 'loss_finite', 'grad_norm', 'loss' (device tensors: reading them syncs), 'skipped',
    'zero_norm' (the gradient norm is exactly 0: fp16 gradients that all underflowed), 'tokens' (of all
    processes)}. This is the whole training computation; `fit` runs it step by step.
    The loss is the objective's terms (`Objective.loss_terms`), each normalised by its count over the global
    batch: masked tokens (MLM, soft targets), sequences (NSP/SOP), real tokens (ELECTRA's RTD, hidden states).

    `finite`: the loss that was backpropagated (weighted, as summed here: a huge rtd_weight overflows it or
    only its gradient) and the gradient norm are both finite. A step that is not is never applied and comes
    back `skipped`, which `fit`'s guard counts. fp16 (`scaler`, from `make_scaler`; disabled otherwise): the loss is scaled for
    backward and the gradients unscaled before clipping; a finite loss with overflowed gradients is the
    scaler's business (it halves its scale, and doubles it after `loss_scale_growth_interval` good steps).
    """
    device = accelerator.device
    world = accelerator.num_processes
    objective = recipe.objective_spec
    micro_batches = objective.step_batches(micro_batches, recipe, step, accelerator.process_index, world)
    masked = sum(int((b["labels"] != -100).sum()) for b in micro_batches)   # host tensors: no device sync
    seqs = sum(int(b["input_ids"].shape[0]) for b in micro_batches)
    real = [int(b["attention_mask"].sum()) for b in micro_batches]
    tokens = sum(real)
    counts = torch.tensor([masked, seqs, tokens], dtype=torch.float64)
    if accelerator.num_processes > 1:  # normalise by the global batch's counts: DDP then averages exactly
        counts = accelerator.reduce(counts.to(device), reduction="sum").cpu()
    n = {"masked": max(counts[0].item(), 1.0), "sequences": max(counts[1].item(), 1.0),
         "tokens": max(counts[2].item(), 1.0)}
    terms, logged = objective.loss_terms(recipe), objective.logged
    step_loss = 0.0
    for i, batch in enumerate(micro_batches):
        # packed rows have no padding: without a mask SDPA takes its fused kernel instead of the math path
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()
                 if not (k == "attention_mask" and real[i] == v.numel())}
        last = i == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or world == 1 else accelerator.no_sync(model)
        with sync, autocast(accelerator, scaler.is_enabled()):
            out = model(**batch)
            loss = _weighted_sum(out, terms, world, n)
            accelerator.backward(scaler.scale(loss))
        stats.add(out, logged)
        step_loss = step_loss + loss.detach().float()   # what was backpropagated, weights included
    stats.masked += masked
    stats.seqs += seqs
    stats.tokens += tokens
    stats.steps += 1
    params = [p for p in model.parameters() if p.grad is not None]
    _inject_overflow(params, step)
    scaler.unscale_(optimizer)   # clipping and the finite check see the true gradients
    clip = recipe.grad_clip if recipe.grad_clip > 0 else float("inf")
    grad_norm = accelerator.clip_grad_norm_(params, clip)
    norm = torch.zeros(()) if grad_norm is None else torch.as_tensor(grad_norm)
    both = torch.stack([step_loss, norm.to(step_loss.device).float()])
    loss_finite, norm_finite, zero = torch.cat([torch.isfinite(both), both[1:] == 0]).tolist()
    finite = loss_finite and norm_finite    # the one sync per step (the zero-norm flag rides along)
    skipped = not finite                    # a NaN/inf step would poison the weights: never applied
    if finite:
        scaler.step(optimizer)
    scaler.update()             # an overflow halves the scale, growth_interval good steps double it
    with warnings.catch_warnings():   # a skipped step calls no optimizer.step(): torch's order warning is noise
        if skipped:
            warnings.simplefilter("ignore", UserWarning)
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    stats.skipped += int(skipped)
    return {"finite": finite, "loss_finite": loss_finite, "grad_norm": grad_norm, "loss": step_loss,
            "skipped": skipped, "zero_norm": bool(zero) and grad_norm is not None, "tokens": int(counts[2].item())}


def _weighted_sum(out: dict, terms, world: int, n: dict):
    """Σ out[key] × weight × world / n[per] over the loss terms the module returned (a pair objective's NSP
    term only where its batch carries the labels)."""
    loss = None
    for term in terms:
        if term.key in out:
            part = out[term.key] * (term.weight * world / n[term.per])
            loss = part if loss is None else loss + part
    return loss


STOP_SIGNALS = ("SIGINT", "SIGTERM")   # what stops a run cleanly (a checkpoint first), in this order under DDP


def exit_status(signal_name: str | None) -> int:
    """The exit status of a run stopped by `signal_name`: 128 + its number, as a shell reports a process that
    signal ended (143 for SIGTERM, 130 for SIGINT), so `zh-bert pretrain R && zh-bert publish R` stops there."""
    return 128 + int(signal.Signals[signal_name] if signal_name in STOP_SIGNALS else signal.SIGTERM)


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT/SIGTERM set a flag; the loop saves a checkpoint after the current step and stops, status
    interrupted (a second signal gives up waiting)."""
    flag = {"stop": None}

    def handler(signum, frame):
        if flag["stop"] is not None:       # second signal: give up waiting
            raise KeyboardInterrupt
        flag["stop"] = signal.Signals(signum).name

    old = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        try:
            old[s] = signal.signal(s, handler)
        except ValueError:                 # not the main thread (e.g. called from a worker thread)
            pass
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def validation_metrics(model, loader, accelerator, max_batches: int, fp16: bool = False, objective=None) -> dict:
    """Validation MLM loss/accuracy with fixed masks (same batches every call): comparable over time; and what
    the objective adds (`Objective.validated`, `validation_batch`): ELECTRA's RTD figures on fixed generator
    samples, distillation's agreement with the teacher."""
    objective = objective or MLM
    inner = accelerator.unwrap_model(model)   # no DDP hooks: ranks may see different batch counts
    was_training = inner.training
    inner.eval()
    keys = objective.validated
    sums = torch.zeros(len(keys), dtype=torch.float64, device=accelerator.device)
    with torch.no_grad(), autocast(accelerator, fp16):
        for k, batch in enumerate(loader.one_pass()):
            if k >= max_batches:
                break
            batch = objective.validation_batch(batch, k, accelerator.process_index, loader.seed)
            batch = {key: v.to(accelerator.device) for key, v in batch.items()}
            out = inner(**batch)
            sums += torch.stack([out[key].double() for key in keys])
    if accelerator.num_processes > 1:
        sums = accelerator.reduce(sums, reduction="sum")
    inner.train(was_training)
    got = dict(zip(keys, sums.tolist()))
    loss, correct, count = got["mlm_loss_sum"], got["mlm_correct"], max(got["mlm_count"], 1.0)
    val = {"val_mlm_loss": loss / count, "val_mlm_acc": correct / count,
           "val_ppl": math.exp(min(loss / count, 50.0)), "val_masked_tokens": int(count)}
    return {**val, **objective.validation_row(got)}


def validate(run: TrainingRun) -> dict:
    """Validation on the fixed-mask batches, logged; also kept as `run.val` for run.json."""
    run.val = validation_metrics(run.model, run.valid_loader, run.accelerator, run.recipe.eval_batches,
                                 fp16=run.scaler.is_enabled(), objective=run.recipe.objective_spec)
    run.metrics.write({"step": run.step, **run.val})
    return run.val


def _due(every: int, step: int, last: int) -> bool:
    """Periodic work (validation, checkpoint) at every `every`-th step except the last, which `finish` does."""
    return bool(every) and step % every == 0 and step < last


def _train_row(run: TrainingRun, stats: StepStats, res: dict) -> dict:
    """The metrics line for the logging window in `stats` (summed over processes): the logging sync."""
    acc, objective = run.accelerator, run.recipe.objective_spec
    keys = [k for k in objective.logged if k not in ("mlm_loss_sum", "mlm_correct")]
    sums = torch.tensor([float(stats.loss), float(stats.correct), stats.masked, stats.seqs, stats.tokens,
                         *(float(stats.sums.get(k, 0.0)) for k in keys)], dtype=torch.float64)
    if acc.num_processes > 1:
        sums = acc.reduce(sums.to(acc.device), reduction="sum").cpu()
    loss_s, corr, masked, seqs, toks, *extra = sums.tolist()
    row = {"step": run.step, "loss": loss_s / max(masked, 1), "mlm_acc": corr / max(masked, 1),
           "lr": run.scheduler.get_last_lr()[0], "tokens_per_s": toks / max(time.perf_counter() - stats.t0, 1e-9),
           "grad_norm": float(res["grad_norm"]) if res["grad_norm"] is not None else None,
           "tokens_seen": run.tokens_seen, "epoch": run.loader.state_dict()["epoch"],
           "skipped_steps": run.skipped_steps, "elapsed_s": round(run.train_seconds, 3)}
    if run.scaler.is_enabled():
        row["loss_scale"] = run.scaler.get_scale()
    if run.recipe.mask_rate_schedule != "constant":
        row["mask_rate"] = run.loader.mask_rate
    row.update(objective.train_row(dict(zip(keys, extra)), {"masked": masked, "sequences": seqs, "tokens": toks}))
    return row


def progress_text(row: dict, fields: tuple[str, ...] = ()) -> str:
    """The progress line of a metrics row (without a terminal, or every log_every steps); `fields` the
    objective's (`Objective.progress_fields`)."""
    text = f"loss {row['loss']:.4f} mlm_acc {row['mlm_acc']:.4f} "
    text += "".join(f"{k} {row[k]:.4f} " for k in fields if k in row)
    if "loss_scale" in row:
        text += f"loss_scale {row['loss_scale']:g} skipped {row['skipped_steps']} "
    return text + f"lr {row['lr']:.3e} tokens/s {row['tokens_per_s']:.0f}"


def validation_text(val: dict) -> str:
    text = f"mlm_loss {val['val_mlm_loss']:.4f} mlm_acc {val['val_mlm_acc']:.4f}"
    return text + "".join(f" {k.removeprefix('val_')} {v:.4f}" for k, v in val.items()
                          if k not in ("val_mlm_loss", "val_mlm_acc", "val_ppl", "val_masked_tokens"))


def _stop_requested(run: TrainingRun, flag: dict) -> str | None:
    """The signal name if this process (or, under DDP, any process) was asked to stop: all stop together, and
    a process that got no signal itself takes the one another got (SIGINT first), so every rank exits alike."""
    stop, acc = flag["stop"], run.accelerator
    if acc.num_processes > 1:
        got = torch.tensor([float(stop == name) for name in STOP_SIGNALS], device=acc.device)
        got = acc.reduce(got, "sum").tolist()
        stop = stop or next((name for name, n in zip(STOP_SIGNALS, got) if n > 0), None)
    return stop


def _guard(run: TrainingRun, res: dict, streak: int) -> int:
    """The one guard against steps that cannot train, for every objective and precision: a step whose
    backpropagated loss or gradient norm is non-finite is skipped (`train_step`) and counted; the first one
    of a streak is reported at once, and `max_nan_streak` of them in a row stop the run (status diverged).
    fp16: a finite loss with overflowed gradients is the loss scaler's normal business and not counted,
    unless the scale has collapsed below MIN_LOSS_SCALE. Returns the new streak."""
    if not res["skipped"]:
        return 0
    if run.scaler.is_enabled() and res["loss_finite"]:
        scale = run.scaler.get_scale()
        if scale < MIN_LOSS_SCALE:
            run.status = "diverged"
            run.warn(f"error: the fp16 loss scale fell to {scale:.3g} at step {run.step}: the gradients overflow "
                     f"even unscaled; stopping. Lower lr, raise warmup_steps, or use precision: bf16/fp32.")
        return streak
    r, streak = run.recipe, streak + 1
    hint = ("Lower lr" + r.objective_spec.divergence_hint(r)
            + (", raise warmup_steps, or use precision: bf16/fp32 instead of fp16." if run.precision == "fp16"
               else " or raise warmup_steps."))
    norm = res["grad_norm"]
    what = f"loss {float(res['loss']):.3g}, gradient norm {'?' if norm is None else format(float(norm), '.3g')}"
    if streak >= r.max_nan_streak:
        run.status = "diverged"
        run.warn(f"error: {streak} step(s) in a row skipped for a non-finite loss or gradient norm (step "
                 f"{run.step}: {what}); stopping. {hint}")
    elif streak == 1:
        run.warn(f"warning: step {run.step} skipped, not applied: non-finite {what}; the run stops after "
                 f"{r.max_nan_streak} such steps in a row (max_nan_streak). {hint}")
    return streak


class Fp16Tally:
    """What the loss scaler did to the steps this command ran (a resume counts its own). A scale far too
    high skips step after step for overflow; one far too low rounds every gradient to 0 in fp16: either
    way the run 'finishes' having learned nothing, which must not end with exit 0 (`check`)."""

    def __init__(self):
        self.steps = self.overflows = self.applied = self.nonzero = 0

    def add(self, run: TrainingRun, res: dict) -> None:
        if not run.scaler.is_enabled():
            return
        self.steps += 1
        if res["skipped"] and res["loss_finite"]:
            self.overflows += 1
        elif not res["skipped"]:
            self.applied += 1
            self.nonzero += not res["zero_norm"]   # read in the step's one sync: no extra one

    def check(self, run: TrainingRun) -> None:
        init = run.recipe.loss_scale_init
        if self.steps and self.overflows * 2 > self.steps:
            run.status = "diverged"
            run.warn(f"error: {self.overflows} of {self.steps} fp16 steps were skipped for overflow "
                     f"(loss_scale_init {init:.10g}): the weights barely trained; lower loss_scale_init (default "
                     f"65536), or use precision: bf16/fp32")
        elif self.applied and not self.nonzero:
            run.status = "diverged"
            run.warn(f"error: every gradient norm of {self.applied} fp16 steps was 0 (loss_scale_init {init:.10g} "
                     f"lets them underflow): nothing trained; raise loss_scale_init (default 65536), or use "
                     f"precision: bf16/fp32")


def fit(run: TrainingRun) -> None:
    """Train from `run.step` to `recipe.max_steps`, logging, validating and checkpointing on schedule; stops
    early on a signal (after saving a checkpoint) or a streak of non-finite steps (`_guard`; `run.status` says
    which); an fp16 run whose loss scale let it learn nothing ends diverged too (`Fp16Tally`)."""
    from tqdm.auto import tqdm

    r, say = run.recipe, run.say
    tty = sys.stderr.isatty()
    bar = tqdm(total=r.max_steps, initial=run.step, disable=not (tty and run.accelerator.is_main_process),
               dynamic_ncols=True, unit="step")
    stats, nan_streak = StepStats(), 0
    fp16 = Fp16Tally()
    batches = iter(run.loader)
    run.model.train()
    with _stop_on_signals() as flag:
        while run.step < r.max_steps:
            t0 = time.perf_counter()
            run.loader.mask_rate = r.mask_rate_at(run.step)
            micro = [next(batches) for _ in range(run.accum)]
            res = train_step(run.model, run.optimizer, run.scheduler, run.accelerator, micro, r, stats, run.step,
                             run.scaler)
            run.step += 1
            run.tokens_seen += res["tokens"]
            run.train_seconds += time.perf_counter() - t0
            run.skipped_steps += int(res["skipped"])
            fp16.add(run, res)
            nan_streak = _guard(run, res, nan_streak)
            if run.status == "diverged":
                break
            if r.log_every and (run.step % r.log_every == 0 or run.step == r.max_steps):
                row = _train_row(run, stats, res)
                run.metrics.write(row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['mlm_acc']:.3f}", lr=f"{row['lr']:.2e}",
                                tok_s=f"{row['tokens_per_s']:.0f}")
                if not tty:
                    say(f"step {run.step}/{r.max_steps} {progress_text(row, r.objective_spec.progress_fields())}")
                stats.reset()
            bar.update(1)
            if run.valid_loader is not None and _due(r.eval_every, run.step, r.max_steps):
                val = validate(run)
                say(f"step {run.step}: validation {validation_text(val)}")
            stop = _stop_requested(run, flag)
            if stop:
                run.status, run.stopped_by = "interrupted", stop
                run.warn(f"{stop}: saved {run.save_checkpoint()} at step {run.step}; not finished (exit status "
                         f"{exit_status(stop)}): continue with --resume auto")
                break
            if _due(r.save_every, run.step, r.max_steps):
                run.save_checkpoint()
            if r.schedule == "wsd" and run.step == decay_start(r) and 0 < run.step < r.max_steps:
                say(f"step {run.step}: lr decay starts; kept {run.save_checkpoint(NODECAY)} to continue from")
    bar.close()
    if run.status == "finished":
        fp16.check(run)
