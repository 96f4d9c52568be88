"""`zh-bert pretrain RECIPE.yaml [--set key=value ...] [--resume auto|PATH]`: masked-LM pretraining.

One Accelerate loop for 1 CPU, 1 GPU or N processes, in three parts: `build_run` (data, model, optimizer,
resume: everything the loop needs, in a `Run`), `fit` (the loop) and `finish` (final checkpoint and
validation, `final/`, curves, run.json); `train` = the three.

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
count, its generator samples keyed per sequence, see `model.ElectraPretrainModel`), steps whose
backpropagated loss or gradient norm is non-finite are skipped and a streak of them stops the run
(`_guard`), out_dir is written only when it is the run's own (`check_out_dir`), and checkpoints hold
everything needed to continue with exactly the losses of an uninterrupted run.

Resuming (`--resume auto|PATH`): `auto` takes the newest complete checkpoint of out_dir (incomplete ones
are skipped with a warning; see `zh_bert.checkpoint`), PATH must be complete. A checkpoint older than the
newest of its own run is refused: continuing it there would overwrite the later checkpoints. Continue it in
a new run dir (`--set out_dir=NEW`, which must hold no checkpoints) instead: NEW gets its own checkpoints,
`final/` and metrics (the old run's lines up to the checkpoint copied), and `--resume auto` in NEW reads only
NEW's. The recipe of a resumed run is compared with the checkpoint's: the keys in
`recipe.CHANGEABLE_ON_RESUME` (out_dir, max_steps, lr, warmup_steps, schedule, grad_clip, max_nan_streak,
save_every, keep_last, log_every, eval_every, eval_batches, micro_batch, precision, grad_checkpointing,
data_cache) take effect from the resumed step (a new lr or schedule is applied to the restored optimizer) and
are recorded in recipe.yaml, the next checkpoints and run.json (`resumes`); any other difference is refused,
naming the key.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from zh_bert.config import build_parser as derive_parser
from zh_bert.config import config_from_args, option
from zh_bert.curves import plot_curves, read_metrics
from zh_bert.errors import ZhBertError
from zh_bert.fileio import atomic_dir, atomic_write, write_json, write_vocab_txt
from zh_bert.recipe import Recipe, load_recipe, save_recipe
from zh_bert.rundir import GENERATOR


@dataclass
class PretrainArgs:
    """The `zh-bert pretrain` command line."""
    recipe: str = option(positional=True, help="recipe YAML (see recipes/)")
    set: list[str] = option(default_factory=list, action="append", metavar="KEY=VALUE",
                            help="override one recipe key (repeatable), e.g. --set max_steps=40")
    resume: Optional[str] = option(None, metavar="auto|PATH",
                                   help="continue from the newest complete checkpoint in out_dir/checkpoints "
                                        "(auto) or PATH (an older one of the same run only with --set "
                                        "out_dir=NEW)")


def build_parser():
    return derive_parser("zh-bert pretrain", __doc__.split("\n\n")[0], PretrainArgs,
                         epilog="Every recipe key is documented in recipes/tiny-cpu.yaml.\n"
                                "example: zh-bert pretrain recipes/tiny-cpu.yaml --set max_steps=40")


def main(argv: list[str]) -> int:
    args = config_from_args(PretrainArgs, build_parser().parse_args(argv))
    if "OMP_WAIT_POLICY" not in os.environ:   # before torch loads (OpenMP reads it then); the user's own wins
        os.environ["OMP_WAIT_POLICY"] = omp_wait_policy()
    summary = train(load_recipe(args.recipe, args.set), resume=args.resume)
    return 0 if summary.get("status") in ("finished", "interrupted") else 1


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
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):
        return "unchanged: not glibc"
    if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)):
        return "unchanged: mallopt refused"
    return "glibc: mmap_threshold 32 MiB, no trim"


# ---------------------------------------------------------------------------------------------------------
# pieces of the loop


def lr_lambda(recipe):
    """Multiplier of the peak lr at optimizer step s (0-based): linear warmup, then linear/cosine/constant."""
    warm, total, kind = recipe.warmup_steps, recipe.max_steps, recipe.schedule

    def f(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        if kind == "constant":
            return 1.0
        progress = min(1.0, (s - warm) / max(1, total - warm))
        return 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


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
    import torch

    from zh_bert.model import decay_groups

    groups = decay_groups(model, recipe.weight_decay)
    kw = dict(lr=recipe.lr, betas=tuple(recipe.betas), eps=recipe.adam_eps)
    try:
        return torch.optim.AdamW(groups, fused=True, **kw), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


class StepStats:
    """Sums over a logging window, kept as device tensors: reading them (every log_every steps) syncs."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.loss = self.correct = self.nsp_loss = self.nsp_correct = 0.0
        self.rtd_loss = self.rtd_correct = self.replaced = 0.0
        self.masked = self.tokens = self.seqs = self.steps = self.skipped = 0
        self.t0 = time.perf_counter()

    def add(self, out: dict):
        self.loss = self.loss + out["mlm_loss_sum"].detach().float()
        self.correct = self.correct + out["mlm_correct"].detach()
        if "nsp_loss_sum" in out:
            self.nsp_loss = self.nsp_loss + out["nsp_loss_sum"].detach().float()
            self.nsp_correct = self.nsp_correct + out["nsp_correct"].detach()
        if "rtd_loss_sum" in out:
            self.rtd_loss = self.rtd_loss + out["rtd_loss_sum"].detach().float()
            self.rtd_correct = self.rtd_correct + out["rtd_correct"].detach()
            self.replaced = self.replaced + out["replaced"].detach()


def train_step(model, optimizer, scheduler, accelerator, micro_batches: list[dict], recipe, stats: StepStats,
               step: int = 0) -> dict:
    """Optimizer step `step` (0-based) over `micro_batches` (this process's share of the global batch, host
    tensors).

    Returns {'finite', 'grad_norm', 'loss' (device tensors: reading them syncs), 'skipped', 'tokens' (of all
    processes)}. This is the whole training computation; everything else in this module is bookkeeping.
    ELECTRA adds the RTD loss, normalised by the global batch's real-token count as the MLM loss is by its
    masked-token count.

    `finite`: the loss that was backpropagated (weighted, as summed here: a huge rtd_weight overflows it or
    only its gradient) and the gradient norm are both finite. A step that is not is never applied (fp16:
    the GradScaler skips it and lowers its scale) and comes back `skipped`, which `fit`'s guard counts.
    """
    import torch

    device = accelerator.device
    world = accelerator.num_processes
    if recipe.objective == "electra":   # the generator's sampling noise, keyed per sequence (exact resume, N ranks)
        from zh_bert.model import add_sampling_noise
        micro_batches = add_sampling_noise(micro_batches, recipe.seed, step, accelerator.process_index, world)
    masked = sum(int((b["labels"] != -100).sum()) for b in micro_batches)   # host tensors: no device sync
    seqs = sum(int(b["input_ids"].shape[0]) for b in micro_batches)
    real = [int(b["attention_mask"].sum()) for b in micro_batches]
    tokens = sum(real)
    counts = torch.tensor([masked, seqs, tokens], dtype=torch.float64)
    if accelerator.num_processes > 1:  # normalise by the global batch's counts: DDP then averages exactly
        counts = accelerator.reduce(counts.to(device), reduction="sum").cpu()
    n_masked, n_seqs, n_tokens = max(counts[0].item(), 1.0), max(counts[1].item(), 1.0), max(counts[2].item(), 1.0)
    step_loss = 0.0
    for i, batch in enumerate(micro_batches):
        # packed rows have no padding: without a mask SDPA takes its fused kernel instead of the math path
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()
                 if not (k == "attention_mask" and real[i] == v.numel())}
        last = i == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or world == 1 else accelerator.no_sync(model)
        with sync, accelerator.autocast():
            out = model(**batch)
            loss = out["mlm_loss_sum"] * (world / n_masked)
            if "nsp_loss_sum" in out:
                loss = loss + out["nsp_loss_sum"] * (world / n_seqs)
            if "rtd_loss_sum" in out:
                loss = loss + out["rtd_loss_sum"] * (recipe.rtd_weight * world / n_tokens)
            accelerator.backward(loss)
        stats.add(out)
        step_loss = step_loss + loss.detach().float()   # what was backpropagated, weights included
    stats.masked += masked
    stats.seqs += seqs
    stats.tokens += tokens
    stats.steps += 1
    params = [p for p in model.parameters() if p.grad is not None]
    clip = recipe.grad_clip if recipe.grad_clip > 0 else float("inf")
    grad_norm = accelerator.clip_grad_norm_(params, clip)
    norm = torch.zeros(()) if grad_norm is None else torch.as_tensor(grad_norm)
    finite = bool(torch.isfinite(step_loss + norm.to(step_loss.device).float()).item())  # the one sync per step
    scaler = getattr(accelerator, "scaler", None)
    if scaler is None and not finite:   # fp32/bf16: a NaN/inf step would poison the weights; skip it
        skipped = True
    else:                                    # fp16: the GradScaler skips overflowed steps itself
        optimizer.step()
        skipped = bool(accelerator.optimizer_step_was_skipped)
    with warnings.catch_warnings():   # a skipped step calls no optimizer.step(): torch's order warning is noise
        if skipped:
            warnings.simplefilter("ignore", UserWarning)
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    stats.skipped += int(skipped)
    return {"finite": finite, "grad_norm": grad_norm, "loss": step_loss, "skipped": skipped,
            "tokens": int(counts[2].item())}


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT/SIGTERM set a flag; the loop saves a checkpoint after the current step and exits cleanly."""
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


def evaluate(model, loader, accelerator, max_batches: int) -> dict:
    """Validation MLM loss/accuracy with fixed masks (same batches every call): comparable over time. ELECTRA:
    the generator's MLM figures, and the discriminator's RTD loss/accuracy on fixed generator samples."""
    import torch

    from zh_bert.model import sampling_uniforms

    inner = accelerator.unwrap_model(model)   # no DDP hooks: ranks may see different batch counts
    was_training = inner.training
    inner.eval()
    keys = ("mlm_loss_sum", "mlm_correct", "mlm_count")
    electra = getattr(inner, "needs_noise", False)
    if electra:
        keys += ("rtd_loss_sum", "rtd_correct", "rtd_count")
    sums = torch.zeros(len(keys), dtype=torch.float64, device=accelerator.device)
    with torch.no_grad(), accelerator.autocast():
        for k, batch in enumerate(loader.one_pass()):
            if k >= max_batches:
                break
            if electra:   # fixed samples: (validation, batch k, rank, row)
                rows, seq_len = batch["input_ids"].shape
                batch["sample_u"] = torch.from_numpy(sampling_uniforms(
                    [(2**31 - 1, k, accelerator.process_index, j) for j in range(rows)], seq_len, loader.seed))
            batch = {key: v.to(accelerator.device) for key, v in batch.items()}
            out = inner(**batch)
            sums += torch.stack([out[key].double() for key in keys])
    if accelerator.num_processes > 1:
        sums = accelerator.reduce(sums, reduction="sum")
    inner.train(was_training)
    loss, correct, count = sums.tolist()[:3]
    count = max(count, 1.0)
    val = {"val_mlm_loss": loss / count, "val_mlm_acc": correct / count,
           "val_ppl": math.exp(min(loss / count, 50.0)), "val_masked_tokens": int(count)}
    if electra:
        rtd_loss, rtd_correct, tokens = sums.tolist()[3:]
        val.update(val_rtd_loss=rtd_loss / max(tokens, 1.0), val_rtd_acc=rtd_correct / max(tokens, 1.0))
    return val


def save_final(out: Path, hf_model, tokenizer, tokdir: Path | None, generator=None) -> Path:
    """`out/final/`: stock HF model (safetensors) + tokenizer files + vocab.txt, written atomically (a full
    disk leaves the previous `final/`, if any, and is one line). ELECTRA: `final/` is the discriminator and
    `final/generator/` the generator (a masked LM), each with the tokenizer files so either loads alone."""
    try:
        _write_final(out, hf_model, tokenizer, tokdir, generator)
    except OSError as e:
        raise ZhBertError(f"cannot write {out / 'final'}: {e.strerror or e}; the checkpoints in "
                          f"{out / 'checkpoints'} are intact") from None
    return out / "final"


def _write_final(out: Path, hf_model, tokenizer, tokdir: Path | None, generator=None) -> None:
    with atomic_dir(out / "final", overwrite=True) as tmp:
        _write_model_dir(tmp, hf_model, tokenizer, tokdir)
        if generator is not None:
            _write_model_dir(tmp / GENERATOR, generator, tokenizer, tokdir)


def _write_model_dir(folder: Path, hf_model, tokenizer, tokdir: Path | None) -> None:
    """One loadable model folder: weights, config, tokenizer files, vocab.txt."""
    hf_model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    for name in ("vocab.txt", "zh_bert_vocab.json", "spiece.model"):
        if tokdir is not None and (tokdir / name).is_file():
            shutil.copy(tokdir / name, folder / name)
    if not (folder / "vocab.txt").exists() and hasattr(tokenizer, "vocab"):
        vocab = tokenizer.get_vocab()
        write_vocab_txt(folder / "vocab.txt", [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])])


class MetricsLog:
    """`metrics.jsonl` (one JSON object per line) and TensorBoard scalars under `tb/`; only the main process
    writes, the others hold a log whose `write` does nothing."""

    def __init__(self, out: Path, enabled: bool, resume_step: int | None, history: Path | None = None):
        """`history`: the metrics.jsonl to take the lines up to `resume_step` from (a branch's old run)."""
        self.path, self.enabled = out / "metrics.jsonl", enabled
        self.file = self.writer = None
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        history = history or self.path
        if resume_step is None:
            self.path.unlink(missing_ok=True)
        elif history.is_file():   # drop lines a killed run logged after its last checkpoint: they come again
            rows = [r for r in read_metrics(history) if r.get("step", 0) <= resume_step]
            with atomic_write(self.path) as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out / "tb"))
        self.file = open(self.path, "a", encoding="utf-8")

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.file.flush()
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)):
                self.writer.add_scalar(k if k.startswith("val_") else f"train/{k}", v, row["step"])

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            self.writer.close()


# ---------------------------------------------------------------------------------------------------------
# the run


@dataclass
class Run:
    """Everything one pretraining run needs, built once by `build_run`; the counters are what a checkpoint
    restores."""
    recipe: Recipe
    accelerator: Any
    precision: str                  # fp32 | fp16 | bf16, as resolved for this device
    warnings: list[str]
    prepared: Any                   # pipeline.PreparedData: the SHARDDIR (and what built it)
    tokdir: Optional[Path]
    tokenizer: Any
    train_ds: Any                   # data.ShardDataset
    loader: Any                     # data.ShardLoader over train_ds
    valid_loader: Any               # data.ShardLoader over the valid split, or None
    model: Any                      # PretrainModel, prepared by Accelerate
    hf: Any                         # the stock HF model inside it (what checkpoints and final/ hold);
                                    # electra: the discriminator
    optimizer: Any
    scheduler: Any
    adam_kind: str                  # fused | foreach
    accum: int                      # micro-batches per optimizer step per process
    say: Callable[[str], None]
    warn: Callable[[str], None] = print    # warnings and the guard's error: stderr, main process
    generator: Any = None           # electra: the generator (checkpoints' and final/'s generator/)
    metrics: Optional[MetricsLog] = None   # opened by build_run once the resume step is known
    step: int = 0
    tokens_seen: int = 0            # all processes
    skipped_steps: int = 0
    train_seconds: float = 0.0
    status: str = "finished"        # finished | interrupted | diverged
    val: Optional[dict] = None      # the latest validation
    resumes: list = field(default_factory=list)   # [{step, from, changed: {key: [old, new]}}], oldest first
    malloc: str = "unchanged"       # what keep_freed_memory did
    t_start: float = field(default_factory=time.time)

    @property
    def out(self) -> Path:
        return Path(self.recipe.out_dir)

    @property
    def ckpt_root(self) -> Path:
        return self.out / "checkpoints"

    def save_checkpoint(self) -> Path:
        from zh_bert import checkpoint as ckpt

        state = {"loader": self.loader.state_dict(), "tokens_seen": self.tokens_seen,
                 "skipped_steps": self.skipped_steps, "train_seconds": self.train_seconds,
                 "recipe": self.recipe.to_dict(), "resumes": self.resumes, "train_sequences": len(self.train_ds)}
        return ckpt.save_checkpoint(self.ckpt_root, self.step, accelerator=self.accelerator, hf_model=self.hf,
                                    optimizer=self.optimizer, scheduler=self.scheduler, trainer_state=state,
                                    keep_last=self.recipe.keep_last, generator=self.generator)

    def resume_from(self, path: Path, changed: dict) -> None:
        """Restore the checkpoint at `path`; `changed` (recipe keys this run changes, checked) take effect."""
        from zh_bert import checkpoint as ckpt

        st = ckpt.load_checkpoint(path, accelerator=self.accelerator, hf_model=self.hf, optimizer=self.optimizer,
                                  scheduler=self.scheduler, generator=self.generator)
        if st.get("train_sequences", len(self.train_ds)) != len(self.train_ds):
            raise ZhBertError(f"{path}: the training data changed since this checkpoint ({st['train_sequences']} "
                              f"sequences then, {len(self.train_ds)} now in {self.prepared.sharddir})")
        self.loader.load_state_dict(st["loader"])
        self.step, self.tokens_seen = st["step"], st["tokens_seen"]
        self.skipped_steps, self.train_seconds = st.get("skipped_steps", 0), st.get("train_seconds", 0.0)
        self.resumes = list(st.get("resumes", [])) + [{"step": self.step, "from": str(path), "changed": changed}]
        if {"lr", "warmup_steps", "max_steps", "schedule"} & set(changed):
            reschedule(self.optimizer, self.scheduler, self.recipe)

    def validate(self) -> dict:
        """Validation on the fixed-mask batches, logged; also kept as `val` for run.json."""
        self.val = evaluate(self.model, self.valid_loader, self.accelerator, self.recipe.eval_batches)
        self.metrics.write({"step": self.step, **self.val})
        return self.val


def make_accelerator(precision: str, cpu: bool):
    """An Accelerator for `precision` (fp32 | fp16 | bf16, already resolved), on the CPU(s) or the GPU(s).

    Accelerate keeps its settings in a process-wide singleton; a second run in one process (ablate, tests,
    `plan --measure`) with another precision must start from a clean one. The distributed state
    (PartialState) is kept.
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    return Accelerator(mixed_precision={"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[precision], cpu=cpu)


def _accelerator(recipe: Recipe):
    """(Accelerator, precision, warnings) for this machine and `recipe.precision`."""
    import torch
    from accelerate import PartialState

    from zh_bert.hardware import resolve_precision

    # without CUDA, Accelerate sets up gloo data parallelism (torchrun / accelerate launch) only when told cpu=True
    cpu = not torch.cuda.is_available()
    precision, warnings = resolve_precision(recipe.precision, PartialState(cpu=cpu).device)
    return make_accelerator(precision, cpu), precision, warnings


def _datasets(recipe: Recipe, prepared):
    """(tokdir, tokenizer, train split, valid split or None), checked against the recipe."""
    from zh_bert.data import ShardDataset
    from zh_bert.tokenizer_files import load_tokenizer

    tokdir = Path(recipe.tokenizer) if recipe.tokenizer else prepared.tokdir or (
        Path(recipe.init_from) if recipe.init_from else None)
    if tokdir is None:
        raise ZhBertError(f"data {prepared.sharddir} is a SHARDDIR: set 'tokenizer' to the TOKDIR it was built with")
    tokenizer = load_tokenizer(tokdir)
    train_ds = ShardDataset(prepared.sharddir, "train", tokenizer_fingerprint=tokenizer)
    has_valid = train_ds.meta["counts"].get("valid", {}).get("sequences")
    valid_ds = ShardDataset(prepared.sharddir, "valid") if has_valid else None
    if train_ds.seq_len != recipe.seq_len:
        raise ZhBertError(f"seq_len {recipe.seq_len} in the recipe, but {prepared.sharddir} was built with "
                          f"seq_len {train_ds.seq_len}; set seq_len: {train_ds.seq_len} or re-shard")
    if recipe.pairs and train_ds.pairs != recipe.pairs:
        raise ZhBertError(f"objective {recipe.objective} needs shards built with --pairs {recipe.pairs}, but "
                          f"{prepared.sharddir} has pairs={train_ds.pairs}")
    return tokdir, tokenizer, train_ds, valid_ds


def _hf_model(recipe: Recipe, tokenizer, train_ds):
    """(the stock HF model to train: `init_from` fitted to the tokenizer, or a fresh preset (seeded); the
    ELECTRA generator, sharing its embeddings, or None)."""
    from accelerate.utils import set_seed

    from zh_bert.model import build_config, build_electra, load_init, model_class, neighbour_attention_init

    set_seed(recipe.seed)
    generator = None
    if recipe.init_from:
        hf = load_init(recipe.init_from, tokenizer, recipe.objective, recipe.seq_len)
    else:
        cfg = build_config(recipe.model, len(tokenizer), pad_token_id=train_ds.pad_id, dropout=recipe.dropout,
                           attention_dropout=recipe.attention_dropout, max_positions=max(512, recipe.seq_len))
        try:
            if recipe.objective == "electra":
                hf, generator = build_electra(cfg, recipe.generator_ratio)
            else:
                hf = model_class(recipe.objective)(cfg)
        except (ValueError, TypeError, KeyError, AttributeError) as e:   # a config.json build_config cannot vet
            raise ZhBertError(f"model {recipe.model}: cannot build the model: {str(e).splitlines()[0][:300]}") from None
        if recipe.attention_init == "neighbour":
            neighbour_attention_init(hf)
    if hf.config.vocab_size < train_ds.vocab_size:
        raise ZhBertError(f"model vocab_size {hf.config.vocab_size} < shard vocab_size {train_ds.vocab_size}")
    train_ds.check_positions(hf.config.max_position_embeddings)
    for net in (hf, generator):
        if recipe.grad_checkpointing and net is not None:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return hf, generator


def build_run(recipe: Recipe, resume: str | None = None, log: Callable[[str], None] | None = None) -> Run:
    """Accelerator, data (raw corpus -> shards first), model, optimizer and, with `resume`, the checkpoint's
    state: a `Run` ready for `fit`. Everything that can be checked without data work is checked before
    out_dir is touched; a start that fails before training leaves a new out_dir as it found it."""
    from transformers.utils import logging as hf_logging

    from zh_bert import checkpoint as ckpt

    t_start = time.time()
    malloc = keep_freed_memory()
    hf_logging.disable_progress_bar()   # "Writing model shards" bars at every checkpoint
    accelerator, precision, warnings = _accelerator(recipe)
    world = accelerator.num_processes
    say = log or (lambda *a: accelerator.print(*a, flush=True))
    warn = lambda m: accelerator.print(m, file=sys.stderr, flush=True)  # noqa: E731
    for w in warnings:
        warn(f"warning: {w}")
    if recipe.global_batch % (recipe.micro_batch * world):
        raise ZhBertError(f"global_batch {recipe.global_batch} is not divisible by micro_batch {recipe.micro_batch} "
                          f"× {world} processes = {recipe.micro_batch * world}")
    out = Path(recipe.out_dir)
    fresh = check_out_dir(recipe)
    if accelerator.is_main_process:   # in a folder that is the run's own: a killed save is undone first
        for done in ckpt.clean_leftovers(out / "checkpoints"):
            say(f"note: {done}")
    accelerator.wait_for_everyone()
    resume_from, branch_of, changed = resume_point(recipe, resume, warn)
    check_recipe(recipe)
    made = claim_out_dir(recipe) if accelerator.is_main_process else []
    accelerator.wait_for_everyone()
    try:
        run = _assemble(recipe, accelerator, precision, warnings, say, warn)
        run.t_start, run.malloc = t_start, malloc
        if resume_from is not None:
            run.resume_from(resume_from, changed)
            say(f"resumed from {resume_from} at step {run.step}" + "".join(
                f"; {k}: {a!r} -> {b!r}" for k, (a, b) in changed.items()))
    except ZhBertError:
        if accelerator.is_main_process:
            release_out_dir(out, made, fresh)
        raise
    run.metrics = MetricsLog(out, accelerator.is_main_process, run.step if resume_from is not None else None,
                             history=branch_of / "metrics.jsonl" if branch_of else None)
    if accelerator.is_main_process:
        save_recipe(recipe, out / "recipe.yaml")
    accelerator.wait_for_everyone()
    _say_model(run)
    return run


def _assemble(recipe: Recipe, accelerator, precision: str, warnings: list[str], say, warn) -> Run:
    """The data (prepared: raw corpus -> shards, cached), model, optimizer and loaders of a fresh `Run`."""
    import torch

    from zh_bert.data import ShardLoader
    from zh_bert.model import ElectraPretrainModel, PretrainModel
    from zh_bert.pipeline import prepare_data

    world, rank = accelerator.num_processes, accelerator.process_index
    with accelerator.main_process_first():   # the main process builds the shards, the others find the cache
        prepared = prepare_data(recipe, log=say)
    tokdir, tokenizer, train_ds, valid_ds = _datasets(recipe, prepared)
    hf, generator = _hf_model(recipe, tokenizer, train_ds)
    model = PretrainModel(hf) if generator is None else ElectraPretrainModel(hf, generator)
    optimizer, adam_kind = make_optimizer(model, recipe)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(recipe))
    model, optimizer = accelerator.prepare(model, optimizer)
    loader = ShardLoader(train_ds, recipe.micro_batch, recipe.masking, recipe.seed, rank=rank, world_size=world)
    valid_loader = (ShardLoader(valid_ds, recipe.micro_batch, recipe.masking, recipe.seed, rank=rank,
                                world_size=world) if valid_ds is not None else None)
    return Run(recipe=recipe, accelerator=accelerator, precision=precision, warnings=warnings, prepared=prepared,
               tokdir=tokdir, tokenizer=tokenizer, train_ds=train_ds, loader=loader, valid_loader=valid_loader,
               model=model, hf=accelerator.unwrap_model(model).hf, optimizer=optimizer, scheduler=scheduler,
               adam_kind=adam_kind, accum=recipe.global_batch // (recipe.micro_batch * world), say=say, warn=warn,
               generator=generator)


def _say_model(run: Run) -> None:
    from zh_bert.model import count_params

    recipe, generator, world = run.recipe, run.generator, run.accelerator.num_processes
    gen = "" if generator is None else (f" + generator ElectraForMaskedLM L{generator.config.num_hidden_layers}/H"
                                        f"{generator.config.hidden_size}, {count_params(generator) / 1e6:.1f}M "
                                        f"incl. the shared embeddings")
    run.say(f"model {recipe.model} ({type(run.hf).__name__}, {count_params(run.hf) / 1e6:.1f}M params{gen}, vocab "
            f"{run.hf.config.vocab_size}) | objective {recipe.objective}, masking {recipe.masking.strategy} | {world} "
            f"process(es) on {run.accelerator.device}, precision {run.precision} (requested {recipe.precision}) | "
            f"global batch {recipe.global_batch} = {recipe.micro_batch} × {run.accum} accumulation × {world} | AdamW "
            f"{run.adam_kind} | {len(run.train_ds)} train sequences of {run.train_ds.seq_len}")


def check_recipe(recipe: Recipe) -> None:
    """Every check of `recipe` that needs neither data work nor a model, so that `pretrain` and each run of
    `ablate` (before its first run trains, --dry-run too) refuse the same recipes the same way: the model
    config, the objective against a SHARDDIR, and masking correction's corpus size against a SHARDDIR's
    train split (a raw corpus is checked once sharded, by the loader)."""
    from zh_bert.data import read_meta
    from zh_bert.pipeline import is_sharddir

    if not recipe.init_from:   # a bad model config.json is one line before any data work
        from zh_bert.model import build_config
        build_config(recipe.model, 1)
    check_objective_data(recipe)
    paths = recipe.data_paths
    if recipe.masking.strategy == "correction" and len(paths) == 1 and is_sharddir(paths[0]):
        from zh_bert.similar_words import check_possible
        check_possible(read_meta(paths[0]), paths[0])


def check_objective_data(recipe: Recipe) -> None:
    """Refuse a SHARDDIR that does not fit the objective before any data work: ELECTRA trains on single-segment
    shards (sentence-pair shards carry NSP/SOP labels it would ignore, and segments cut for pairs)."""
    from zh_bert.data import read_meta
    from zh_bert.pipeline import is_sharddir

    paths = recipe.data_paths
    if recipe.objective != "electra" or len(paths) != 1 or not is_sharddir(paths[0]):
        return
    pairs = read_meta(paths[0]).get("pairs")
    if pairs:
        raise ZhBertError(f"objective electra needs shards without sentence pairs, but {paths[0]} was built with "
                          f"--pairs {pairs}; give the raw corpus or shards built without --pairs")


def _inside(a: Path, b: Path) -> bool:
    """Whether resolved path `a` is `b` or lies under it."""
    return a == b or b in a.parents


def check_out_dir(recipe: Recipe) -> bool:
    """The ownership rule for out_dir, before anything is written (reads only; every process): pretrain
    writes into a folder only if it is new, empty, or a run dir of its own (`rundir.written_by_pretrain`)
    holding nothing but what zh-bert writes there; never the current directory (or one above it), never
    an input (data, tokenizer, init_from: out_dir neither at, inside nor around one, except the data
    cache inside out_dir), never inside data_cache. One line naming what is in the way. Returns whether
    out_dir is new or empty (then a failed start takes away what it wrote: `release_out_dir`)."""
    from zh_bert.rundir import run_dir_entry, written_by_pretrain

    out = Path(recipe.out_dir)
    where = f"out_dir {recipe.out_dir!r}"
    real, cwd = out.resolve(), Path.cwd().resolve()
    if _inside(cwd, real):
        raise ZhBertError(f"{where} is the current directory{' or above it' if real != cwd else ''}: pretrain writes "
                          f"metrics, checkpoints and final/ there; give the run a folder of its own, e.g. runs/NAME")
    cache = Path(recipe.data_cache).resolve() if recipe.data_cache else real / "data"
    for key, value in [("data", p) for p in recipe.data_paths] + [("tokenizer", recipe.tokenizer),
                                                                   ("init_from", recipe.init_from)]:
        p = Path(value).resolve() if value else None
        if p is not None and (_inside(real, p) or (_inside(p, real) and not _inside(p, cache))):
            raise ZhBertError(f"{where} and {key} {value} overlap: pretrain would write into or over its own "
                              f"input; choose an out_dir apart from it")
    if recipe.data_cache and _inside(real, cache):
        raise ZhBertError(f"{where} is inside data_cache {recipe.data_cache}, which pretrain fills with data of its "
                          f"own; choose an out_dir outside it")
    if not os.path.lexists(out):
        return True
    if not out.is_dir():
        raise ZhBertError(f"{where} exists and is not a directory; choose a new out_dir")
    entries = sorted(out.iterdir())
    extra = (cache.relative_to(real).parts[0],) if cache != real and real in cache.parents else ()
    foreign = [p.name for p in entries if p.is_symlink() or not run_dir_entry(p.name, p.is_dir(), extra)]
    if foreign or (entries and not written_by_pretrain(out)):
        what = (f"{', '.join(foreign[:3])}, which zh-bert pretrain did not write" if foreign else
                f"{', '.join(p.name for p in entries[:3])} but no recipe.yaml or run.json of zh-bert pretrain")
        raise ZhBertError(f"{where} holds {what}; refusing to write into it: choose a new out_dir")
    return not entries


def claim_out_dir(recipe: Recipe) -> list[Path]:
    """Make out_dir (main process) and mark it as this run's with its recipe.yaml, before the first other
    write into it (data cache, logs), so that a rerun after a kill at any point finds its own marker.
    Returns the folders it created, for `release_out_dir`. An unusable out_dir is one line."""
    from zh_bert.rundir import written_by_pretrain

    out = Path(recipe.out_dir)
    made, d = [], out
    while not os.path.lexists(d) and d != d.parent:
        made.append(d)
        d = d.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ZhBertError(f"out_dir {recipe.out_dir}: cannot create it ({e.strerror or e})") from None
    if not written_by_pretrain(out):
        try:
            save_recipe(recipe, out / "recipe.yaml")
        except ZhBertError:
            release_out_dir(out, made, fresh=True)
            raise
    return made


def release_out_dir(out: Path, made: list[Path], fresh: bool) -> None:
    """Undo `claim_out_dir` after a start that failed before training: a new or empty out_dir is left as it
    was (what this start wrote there goes; nothing else was in it)."""
    if not fresh:
        return
    for p in (out.iterdir() if out.is_dir() else ()):
        _remove_tree(p)
    for d in made:   # deepest first
        with contextlib.suppress(OSError):
            d.rmdir()


def _remove_tree(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def resume_point(recipe: Recipe, resume: str | None, warn: Callable[[str], None]):
    """(checkpoint to resume or None, the run dir it belongs to when this run branches off into a new
    out_dir, else None, {recipe key: [checkpoint's, this run's]} of the allowed changes): the resume rules of
    the module docstring."""
    from zh_bert import checkpoint as ckpt
    from zh_bert.recipe import changes_on_resume

    out = Path(recipe.out_dir)
    root = out / "checkpoints"
    path = ckpt.find_resume(resume, root, warn=warn)
    ours = ckpt.list_checkpoints(root)
    if path is None:
        if ours:
            raise ZhBertError(f"{out} already holds a run (checkpoints in {root}); continue it with --resume auto, "
                              f"or choose another out_dir")
        return None, None, {}
    same_run = path.resolve().parent == root.resolve()
    newer = [p for p in ours if p.name > path.name]
    if same_run and newer:
        raise ZhBertError(f"--resume {resume}: {root} holds a newer checkpoint ({newer[-1].name}) that continuing "
                          f"from {path.name} here would overwrite; continue in a new run dir with --set "
                          f"out_dir=NEW_DIR, or resume the newest with --resume auto")
    if not same_run and ours:
        raise ZhBertError(f"--resume {resume}: out_dir {out} already holds a run (checkpoints in {root}); "
                          f"branch off into an out_dir without checkpoints")
    changed = changes_on_resume(ckpt.read_state(path).get("recipe") or {}, recipe, f"--resume {resume}")
    return path, (None if same_run else path.resolve().parent.parent), changed


def _due(every: int, step: int, last: int) -> bool:
    """Periodic work (validation, checkpoint) at every `every`-th step except the last, which `finish` does."""
    return bool(every) and step % every == 0 and step < last


def _train_row(run: Run, stats: StepStats, res: dict) -> dict:
    """The metrics line for the logging window in `stats` (summed over processes): the logging sync."""
    import torch

    acc = run.accelerator
    sums = torch.tensor([float(stats.loss), float(stats.correct), stats.masked, float(stats.nsp_loss),
                         float(stats.nsp_correct), stats.seqs, stats.tokens, float(stats.rtd_loss),
                         float(stats.rtd_correct), float(stats.replaced)], dtype=torch.float64)
    if acc.num_processes > 1:
        sums = acc.reduce(sums.to(acc.device), reduction="sum").cpu()
    loss_s, corr, masked, nsp_l, nsp_c, seqs, toks, rtd_l, rtd_c, replaced = sums.tolist()
    row = {"step": run.step, "loss": loss_s / max(masked, 1), "mlm_acc": corr / max(masked, 1),
           "lr": run.scheduler.get_last_lr()[0], "tokens_per_s": toks / max(time.perf_counter() - stats.t0, 1e-9),
           "grad_norm": float(res["grad_norm"]) if res["grad_norm"] is not None else None,
           "tokens_seen": run.tokens_seen, "epoch": run.loader.state_dict()["epoch"],
           "skipped_steps": run.skipped_steps, "elapsed_s": round(run.train_seconds, 3)}
    if run.recipe.pairs:
        row.update(nsp_loss=nsp_l / max(seqs, 1), nsp_acc=nsp_c / max(seqs, 1))
    if run.recipe.objective == "electra":
        # per real token: a discriminator that calls every token original scores rtd_acc = 1 - replaced_frac
        row.update(rtd_loss=rtd_l / max(toks, 1), rtd_acc=rtd_c / max(toks, 1), replaced_frac=replaced / max(toks, 1))
    return row


def _val_text(val: dict) -> str:
    text = f"mlm_loss {val['val_mlm_loss']:.4f} mlm_acc {val['val_mlm_acc']:.4f}"
    if "val_rtd_acc" in val:
        text += f" rtd_loss {val['val_rtd_loss']:.4f} rtd_acc {val['val_rtd_acc']:.4f}"
    return text


def _stop_requested(run: Run, flag: dict) -> str | None:
    """The signal name if this process (or, under DDP, any process) was asked to stop: all stop together."""
    import torch

    stop, acc = flag["stop"], run.accelerator
    if acc.num_processes > 1:
        s = acc.reduce(torch.tensor([1.0 if stop else 0.0], device=acc.device), "sum")
        stop = stop or ("signal" if s.item() > 0 else None)
    return stop


def _guard(run: Run, res: dict, streak: int) -> int:
    """The one guard against steps that cannot train, for every objective and precision: a step whose
    backpropagated loss or gradient norm is non-finite is skipped (`train_step`) and counted; the first one
    of a streak is reported at once (fp32/bf16: never normal; fp16's loss scaler skips a few overflows by
    design), and `max_nan_streak` of them in a row stop the run (status diverged). Returns the new streak."""
    if not res["skipped"]:
        return 0
    r, streak = run.recipe, streak + 1
    hint = ("Lower lr" + (f" or rtd_weight ({r.rtd_weight:g})" if r.objective == "electra" else "")
            + (", raise warmup_steps, or use precision: bf16/fp32 instead of fp16." if run.precision == "fp16"
               else " or raise warmup_steps."))
    norm = res["grad_norm"]
    what = f"loss {float(res['loss']):.3g}, gradient norm {'?' if norm is None else format(float(norm), '.3g')}"
    if streak >= r.max_nan_streak:
        run.status = "diverged"
        run.warn(f"error: {streak} step(s) in a row skipped for a non-finite loss or gradient norm (step "
                 f"{run.step}: {what}); stopping. {hint}")
    elif streak == 1 and run.precision != "fp16":
        run.warn(f"warning: step {run.step} skipped, not applied: non-finite {what}; the run stops after "
                 f"{r.max_nan_streak} such steps in a row (max_nan_streak). {hint}")
    return streak


def fit(run: Run) -> None:
    """Train from `run.step` to `recipe.max_steps`, logging, validating and checkpointing on schedule; stops
    early on a signal (after saving a checkpoint) or a streak of non-finite steps (`_guard`; `run.status` says
    which)."""
    from tqdm.auto import tqdm

    r, say = run.recipe, run.say
    tty = sys.stderr.isatty()
    bar = tqdm(total=r.max_steps, initial=run.step, disable=not (tty and run.accelerator.is_main_process),
               dynamic_ncols=True, unit="step")
    stats, nan_streak = StepStats(), 0
    batches = iter(run.loader)
    run.model.train()
    with _stop_on_signals() as flag:
        while run.step < r.max_steps:
            t0 = time.perf_counter()
            micro = [next(batches) for _ in range(run.accum)]
            res = train_step(run.model, run.optimizer, run.scheduler, run.accelerator, micro, r, stats, run.step)
            run.step += 1
            run.tokens_seen += res["tokens"]
            run.train_seconds += time.perf_counter() - t0
            run.skipped_steps += int(res["skipped"])
            nan_streak = _guard(run, res, nan_streak)
            if run.status == "diverged":
                break
            if r.log_every and (run.step % r.log_every == 0 or run.step == r.max_steps):
                row = _train_row(run, stats, res)
                run.metrics.write(row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['mlm_acc']:.3f}", lr=f"{row['lr']:.2e}",
                                tok_s=f"{row['tokens_per_s']:.0f}")
                if not tty:
                    say(f"step {run.step}/{r.max_steps} loss {row['loss']:.4f} mlm_acc {row['mlm_acc']:.4f} "
                        + (f"rtd_loss {row['rtd_loss']:.4f} rtd_acc {row['rtd_acc']:.4f} " if "rtd_acc" in row else "")
                        + f"lr {row['lr']:.3e} tokens/s {row['tokens_per_s']:.0f}")
                stats.reset()
            bar.update(1)
            if run.valid_loader is not None and _due(r.eval_every, run.step, r.max_steps):
                val = run.validate()
                say(f"step {run.step}: validation {_val_text(val)}")
            stop = _stop_requested(run, flag)
            if stop:
                run.status = "interrupted"
                say(f"{stop}: saved {run.save_checkpoint()} at step {run.step}; continue with --resume auto")
                break
            if _due(r.save_every, run.step, r.max_steps):
                run.save_checkpoint()
    bar.close()


def finish(run: Run) -> dict:
    """After `fit`: the last checkpoint and validation, `final/`, curves.png and run.json (main process);
    returns the run summary (other processes: just the status)."""
    from zh_bert import checkpoint as ckpt

    acc = run.accelerator
    if run.status == "finished":
        done = ckpt.list_checkpoints(run.ckpt_root)
        if not done or done[-1].name != ckpt.step_dir_name(run.step):
            run.save_checkpoint()
        if run.valid_loader is not None:
            val = run.validate()
            run.say(f"final validation: {_val_text(val)} (chance {1 / run.hf.config.vocab_size:.5f})")
    summary = {"status": run.status}
    if acc.is_main_process:
        run.metrics.close()
        if run.status == "finished":
            save_final(run.out, run.hf, run.tokenizer, run.tokdir, run.generator)
        try:
            plot_curves(run.metrics.path, run.out / "curves.png",
                        title=f"{run.out.name}: {run.recipe.model} {run.recipe.objective}")
        except Exception as e:  # a missing plot must not fail a finished run
            run.warn(f"warning: curves.png not written: {e}")
        summary = _summary(run)
        write_json(run.out / "run.json", summary)
        if run.status == "finished":
            run.say(f"done: {run.step} steps, {run.tokens_seen / 1e6:.2f}M tokens in {run.train_seconds:.0f}s "
                    f"-> {run.out / 'final'}")
    acc.wait_for_everyone()
    acc.end_training()
    return summary


def train(recipe: Recipe, resume: str | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Run `recipe`; returns the run summary also written to out_dir/run.json."""
    run = build_run(recipe, resume, log)
    try:
        fit(run)
    except BaseException:   # e.g. a checkpoint that could not be saved: close the logs, keep what they hold
        run.metrics.close()
        raise
    return finish(run)


def _summary(run: Run) -> dict:
    """run.json: what ran (model, vocab, data, objective, masking, hardware, batch) and what it gave."""
    import torch

    from zh_bert.model import count_params

    recipe, c, acc = run.recipe, run.hf.config, run.accelerator
    n_params = count_params(run.hf)
    meta_path = run.tokdir / "zh_bert_vocab.json" if run.tokdir else None
    vocab_meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path and meta_path.is_file() else None
    on_cuda = acc.device.type == "cuda"
    return {
        "status": run.status,
        "model": {"preset": recipe.model, "class": type(run.hf).__name__, "init_from": recipe.init_from,
                  "attention_init": None if recipe.init_from else recipe.attention_init,
                  "num_hidden_layers": c.num_hidden_layers, "hidden_size": c.hidden_size,
                  "num_attention_heads": c.num_attention_heads, "intermediate_size": c.intermediate_size,
                  "vocab_size": c.vocab_size, "max_position_embeddings": c.max_position_embeddings,
                  "parameters": n_params},
        "parameters": n_params,
        **({"generator": _generator_summary(run)} if run.generator is not None else {}),
        "vocab": {"kind": (vocab_meta or {}).get("kind"), "vocab_size": c.vocab_size, "tokenizer": str(run.tokdir),
                  "meta": vocab_meta},
        "data": {"sharddir": str(run.prepared.sharddir), "shard_meta": run.train_ds.meta,
                 "clean_report": run.prepared.clean_report},
        "objective": recipe.objective,
        "masking": asdict(recipe.masking),
        "hardware": {"device": str(acc.device), "device_name": torch.cuda.get_device_name(acc.device) if on_cuda else "cpu",
                     "processes": acc.num_processes, "precision": run.precision,
                     "precision_requested": recipe.precision, "warnings": run.warnings,
                     "torch_threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                     "malloc": run.malloc, "torch": torch.__version__, "adamw": run.adam_kind},
        "batch": {"global_batch": recipe.global_batch, "micro_batch": recipe.micro_batch,
                  "accumulation": run.accum, "seq_len": recipe.seq_len},
        "steps": run.step,
        "skipped_steps": run.skipped_steps,
        "resumes": run.resumes,
        "tokens_seen": run.tokens_seen,
        "tokens_per_s": run.tokens_seen / run.train_seconds if run.train_seconds else None,
        "train_seconds": round(run.train_seconds, 2),
        "wall_clock_s": round(time.time() - run.t_start, 2),
        "final_validation": {k.removeprefix("val_"): v for k, v in run.val.items()
                             if k in ("val_mlm_loss", "val_mlm_acc", "val_rtd_loss", "val_rtd_acc")}
        if run.val else None,
    }


def _generator_summary(run: Run) -> dict:
    """run.json's `generator` (electra): its shape, the weights it adds, and which folder holds it. Its MLM
    figures are the run's mlm_* / val_mlm_* (the discriminator predicts no tokens)."""
    from zh_bert.model import count_params

    c = run.generator.config
    shared = {id(p) for p in run.hf.parameters()}
    return {"class": type(run.generator).__name__, "folder": f"final/{GENERATOR}",
            "generator_ratio": run.recipe.generator_ratio, "rtd_weight": run.recipe.rtd_weight,
            "num_hidden_layers": c.num_hidden_layers, "hidden_size": c.hidden_size,
            "num_attention_heads": c.num_attention_heads, "intermediate_size": c.intermediate_size,
            "embedding_size": c.embedding_size, "parameters": count_params(run.generator),
            "parameters_not_shared": sum(p.numel() for p in run.generator.parameters() if id(p) not in shared)}
