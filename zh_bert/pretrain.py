"""`zh-bert pretrain RECIPE.yaml [--set key=value ...] [--resume auto|PATH]`: masked-LM pretraining.

One Accelerate loop for 1 CPU, 1 GPU or N processes. What makes it fast: the MLM head only at masked
positions (`model.PretrainModel`), packed sequences from the shards (no padding), SDPA attention, fused
AdamW, and no host<->device syncs beyond one per optimizer step. What makes it safe: the loss is
normalised by the masked-token count of the whole global batch (so accumulation and DDP give the same
update as one big batch), non-finite steps are skipped and a streak of them stops the run, and
checkpoints hold everything needed to continue with exactly the losses of an uninterrupted run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from zh_bert.errors import ZhBertError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zh-bert pretrain", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Every recipe key is documented in recipes/tiny-cpu.yaml.\n"
                                       "example: zh-bert pretrain recipes/tiny-cpu.yaml --set max_steps=40")
    p.add_argument("recipe", help="recipe YAML (see recipes/)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one recipe key (repeatable), e.g. --set max_steps=40")
    p.add_argument("--resume", metavar="auto|PATH",
                   help="continue from the newest complete checkpoint in out_dir/checkpoints (auto) or PATH")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    # OpenMP threads that spin while waiting make a CPU run on a shared machine several times slower
    # (measured here: 2k vs 16k tokens/s for tiny-cpu with other jobs running). Must be set before torch
    # starts its thread pool; the user's own setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from zh_bert.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.set)
    summary = train(recipe, resume=args.resume)
    return 0 if summary.get("status") in ("finished", "interrupted") else 1


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


def make_optimizer(model, recipe, device):
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
    """Sums over a logging window, kept as device tensors so that logging is the only sync point."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.loss = self.correct = self.nsp_loss = self.nsp_correct = 0.0
        self.masked = self.tokens = self.seqs = self.steps = self.skipped = 0
        self.t0 = time.perf_counter()

    def add(self, out: dict):
        self.loss = self.loss + out["mlm_loss_sum"].detach().float()
        self.correct = self.correct + out["mlm_correct"].detach()
        if "nsp_loss_sum" in out:
            self.nsp_loss = self.nsp_loss + out["nsp_loss_sum"].detach().float()
            self.nsp_correct = self.nsp_correct + out["nsp_correct"].detach()


def train_step(model, optimizer, scheduler, accelerator, micro_batches: list[dict], recipe, stats: StepStats,
               world_counts=None) -> dict:
    """One optimizer step over `micro_batches` (this process's share of the global batch).

    Returns {'loss_finite', 'grad_norm', 'skipped', 'tokens' (of all processes)}. This is the whole training
    computation; everything else in this module is bookkeeping.
    """
    import torch

    device = accelerator.device
    masked = sum(int((b["labels"] != -100).sum()) for b in micro_batches)
    seqs = sum(int(b["input_ids"].shape[0]) for b in micro_batches)
    real = [int(b["attention_mask"].sum()) for b in micro_batches]
    tokens = sum(real)
    counts = torch.tensor([masked, seqs, tokens], dtype=torch.float64)
    if accelerator.num_processes > 1:  # normalise by the global batch's counts: DDP then averages exactly
        counts = accelerator.reduce(counts.to(device), reduction="sum").cpu()
    n_masked, n_seqs = max(counts[0].item(), 1.0), max(counts[1].item(), 1.0)
    world = accelerator.num_processes
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
            accelerator.backward(loss)
        stats.add(out)
        step_loss = step_loss + out["mlm_loss_sum"].detach()
    stats.masked += masked
    stats.seqs += seqs
    stats.tokens += tokens
    stats.steps += 1
    loss_finite = bool(torch.isfinite(step_loss).item())  # the one sync per step
    params = [p for p in model.parameters() if p.grad is not None]
    clip = recipe.grad_clip if recipe.grad_clip > 0 else float("inf")
    grad_norm = accelerator.clip_grad_norm_(params, clip)
    scaler = getattr(accelerator, "scaler", None)
    if scaler is None and not loss_finite:   # fp32/bf16: a NaN step would poison the weights; skip it
        skipped = True
    else:                                    # fp16: the GradScaler skips overflowed steps itself
        optimizer.step()
        skipped = bool(accelerator.optimizer_step_was_skipped)
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    stats.skipped += int(skipped)
    return {"loss_finite": loss_finite, "grad_norm": grad_norm, "skipped": skipped, "tokens": int(counts[2].item())}


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
    """Validation MLM loss/accuracy with fixed masks (same batches every call): comparable over time."""
    import torch

    inner = accelerator.unwrap_model(model)   # no DDP hooks: ranks may see different batch counts
    was_training = inner.training
    inner.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=accelerator.device)
    with torch.no_grad(), accelerator.autocast():
        for k, batch in enumerate(loader.one_pass()):
            if k >= max_batches:
                break
            batch = {key: v.to(accelerator.device) for key, v in batch.items()}
            out = inner(**batch)
            sums += torch.stack([out["mlm_loss_sum"].double(), out["mlm_correct"].double(),
                                 out["mlm_count"].double()])
    if accelerator.num_processes > 1:
        sums = accelerator.reduce(sums, reduction="sum")
    inner.train(was_training)
    loss, correct, count = sums.tolist()
    count = max(count, 1.0)
    return {"val_mlm_loss": loss / count, "val_mlm_acc": correct / count,
            "val_ppl": math.exp(min(loss / count, 50.0)), "val_masked_tokens": int(count)}


def save_final(out: Path, hf_model, tokenizer, tokdir: Path | None) -> Path:
    """`out/final/`: stock HF model (safetensors) + tokenizer files + vocab.txt, written atomically."""
    from zh_bert.fileio import atomic_dir, write_vocab_txt

    with atomic_dir(out / "final", overwrite=True) as tmp:
        hf_model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        for name in ("vocab.txt", "zh_bert_vocab.json", "spiece.model"):
            if tokdir is not None and (tokdir / name).is_file():
                shutil.copy(tokdir / name, tmp / name)
        if not (tmp / "vocab.txt").exists() and hasattr(tokenizer, "vocab"):
            vocab = tokenizer.get_vocab()
            write_vocab_txt(tmp / "vocab.txt", [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])])
    return out / "final"


def _keep_metrics_until(path: Path, step: int) -> None:
    """On resume: drop lines a killed run logged after its last checkpoint (they will be logged again)."""
    from zh_bert.curves import read_metrics
    from zh_bert.fileio import atomic_write

    if not path.is_file():
        return
    rows = [r for r in read_metrics(path) if r.get("step", 0) <= step]
    with atomic_write(path) as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------------------
# the run


def train(recipe, resume: str | None = None, log=None) -> dict:
    """Run `recipe` (a validated Recipe); returns the run summary also written to out_dir/run.json."""
    import torch
    from accelerate import Accelerator, PartialState
    from accelerate.utils import set_seed

    from zh_bert import checkpoint as ckpt
    from zh_bert.data import ShardDataset, ShardLoader
    from zh_bert.hardware import resolve_precision
    from zh_bert.masking import MaskingConfig
    from zh_bert.model import (PretrainModel, build_config, count_params, load_init, model_class,
                               neighbour_attention_init)
    from zh_bert.pipeline import prepare_data
    from zh_bert.recipe import save_recipe
    from zh_bert.tokenizer_files import load_tokenizer

    from transformers.utils import logging as hf_logging

    t_start = time.time()
    hf_logging.disable_progress_bar()   # "Writing model shards" bars at every checkpoint
    # without CUDA, Accelerate sets up gloo data parallelism (torchrun / accelerate launch) only when told cpu=True
    cpu = not torch.cuda.is_available()
    state = PartialState(cpu=cpu)
    precision, warnings = resolve_precision(recipe.precision, state.device)
    # Accelerate keeps its settings in a process-wide singleton; a second run in one process (ablate, tests)
    # with another precision must start from a clean one. The distributed state (PartialState) is kept.
    from accelerate.state import AcceleratorState, GradientState
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    accelerator = Accelerator(mixed_precision={"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[precision], cpu=cpu)
    main_proc, world = accelerator.is_main_process, accelerator.num_processes
    say = log or (lambda *a: accelerator.print(*a, flush=True))
    for w in warnings:
        say(f"warning: {w}")
    per_step = recipe.micro_batch * world
    if recipe.global_batch % per_step:
        raise ZhBertError(f"global_batch {recipe.global_batch} is not divisible by micro_batch {recipe.micro_batch} "
                          f"× {world} processes = {per_step}")
    accum = recipe.global_batch // per_step
    out = Path(recipe.out_dir)
    ckpt_root = out / "checkpoints"
    resume_from = ckpt.find_resume(resume, ckpt_root)
    if resume is None and ckpt.list_checkpoints(ckpt_root):
        raise ZhBertError(f"{out} already holds a run (checkpoints in {ckpt_root}); continue it with "
                          f"--resume auto, or choose another out_dir")

    # data: raw corpus -> shards (main process first, the others then find the cache)
    with accelerator.main_process_first():
        prepared = prepare_data(recipe, log=say)
    tokdir = Path(recipe.tokenizer) if recipe.tokenizer else prepared.tokdir or (
        Path(recipe.init_from) if recipe.init_from else None)
    if tokdir is None:
        raise ZhBertError(f"data {prepared.sharddir} is a SHARDDIR: set 'tokenizer' to the TOKDIR it was built with")
    tokenizer = load_tokenizer(tokdir)
    train_ds = ShardDataset(prepared.sharddir, "train", tokenizer_fingerprint=tokenizer)
    valid_ds = ShardDataset(prepared.sharddir, "valid") if train_ds.meta["counts"].get("valid", {}).get("sequences") else None
    if train_ds.seq_len != recipe.seq_len:
        raise ZhBertError(f"seq_len {recipe.seq_len} in the recipe, but {prepared.sharddir} was built with "
                          f"seq_len {train_ds.seq_len}; set seq_len: {train_ds.seq_len} or re-shard")
    need = {"mlm+nsp": "nsp", "mlm+sop": "sop"}.get(recipe.objective)
    if need and train_ds.pairs != need:
        raise ZhBertError(f"objective {recipe.objective} needs shards built with --pairs {need}, but "
                          f"{prepared.sharddir} has pairs={train_ds.pairs}")

    # model
    set_seed(recipe.seed)
    if recipe.init_from:
        hf = load_init(recipe.init_from, tokenizer, recipe.objective, recipe.seq_len)
    else:
        cfg = build_config(recipe.model, len(tokenizer), pad_token_id=train_ds.pad_id, dropout=recipe.dropout,
                           attention_dropout=recipe.attention_dropout, max_positions=max(512, recipe.seq_len))
        hf = model_class(recipe.objective)(cfg)
        if recipe.attention_init == "neighbour":
            neighbour_attention_init(hf)
    if hf.config.vocab_size < train_ds.vocab_size:
        raise ZhBertError(f"model vocab_size {hf.config.vocab_size} < shard vocab_size {train_ds.vocab_size}")
    train_ds.check_positions(hf.config.max_position_embeddings)
    if recipe.grad_checkpointing:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = PretrainModel(hf)
    optimizer, adam_kind = make_optimizer(model, recipe, accelerator.device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(recipe))
    model, optimizer = accelerator.prepare(model, optimizer)
    hf = accelerator.unwrap_model(model).hf

    masking = MaskingConfig(strategy=recipe.masking, mask_rate=recipe.mask_rate,
                            mask_token_prob=recipe.mask_token_prob, random_token_prob=recipe.random_token_prob,
                            max_ngram=recipe.max_ngram)
    loader = ShardLoader(train_ds, recipe.micro_batch, masking, recipe.seed, rank=accelerator.process_index,
                         world_size=world)
    valid_loader = (ShardLoader(valid_ds, recipe.micro_batch, masking, recipe.seed, rank=accelerator.process_index,
                                world_size=world) if valid_ds is not None else None)

    step, tokens_seen, skipped_total, train_seconds = 0, 0, 0, 0.0
    metrics_path = out / "metrics.jsonl"
    if resume_from is not None:
        st = ckpt.load_checkpoint(resume_from, accelerator=accelerator, hf_model=hf, optimizer=optimizer,
                                  scheduler=scheduler)
        loader.load_state_dict(st["loader"])
        step, tokens_seen = st["step"], st["tokens_seen"]
        skipped_total, train_seconds = st.get("skipped_steps", 0), st.get("train_seconds", 0.0)
        say(f"resumed from {resume_from} at step {step}")
        if main_proc:
            _keep_metrics_until(metrics_path, step)
    elif main_proc:
        out.mkdir(parents=True, exist_ok=True)
        metrics_path.unlink(missing_ok=True)
    if main_proc:
        save_recipe(recipe, out / "recipe.yaml")
    accelerator.wait_for_everyone()

    n_params = count_params(hf)
    say(f"model {recipe.model} ({type(hf).__name__}, {n_params / 1e6:.1f}M params, vocab {hf.config.vocab_size}) | "
        f"objective {recipe.objective}, masking {recipe.masking} | {world} process(es) on {accelerator.device}, "
        f"precision {precision} (requested {recipe.precision}) | global batch {recipe.global_batch} = "
        f"{recipe.micro_batch} × {accum} accumulation × {world} | AdamW {adam_kind} | "
        f"{len(train_ds)} train sequences of {train_ds.seq_len}")

    writer = None
    if main_proc:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(str(out / "tb"))
    metrics_file = open(metrics_path, "a", encoding="utf-8") if main_proc else None

    def emit(row: dict):
        if not main_proc:
            return
        metrics_file.write(json.dumps(row, ensure_ascii=False) + "\n")
        metrics_file.flush()
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)):
                writer.add_scalar(k if k.startswith("val_") else f"train/{k}", v, row["step"])

    def trainer_state() -> dict:
        return {"loader": loader.state_dict(), "tokens_seen": tokens_seen, "skipped_steps": skipped_total,
                "train_seconds": train_seconds, "recipe": recipe.to_dict()}

    def save():
        return ckpt.save_checkpoint(ckpt_root, step, accelerator=accelerator, hf_model=hf, optimizer=optimizer,
                                    scheduler=scheduler, trainer_state=trainer_state(), keep_last=recipe.keep_last)

    from tqdm.auto import tqdm

    tty = sys.stderr.isatty()
    bar = tqdm(total=recipe.max_steps, initial=step, disable=not (tty and main_proc), dynamic_ncols=True,
               unit="step")
    stats, nan_streak, status, val = StepStats(), 0, "finished", None
    batches = iter(loader)
    model.train()
    with _stop_on_signals() as flag:
        while step < recipe.max_steps:
            t0 = time.perf_counter()
            micro = [next(batches) for _ in range(accum)]
            res = train_step(model, optimizer, scheduler, accelerator, micro, recipe, stats)
            step += 1
            tokens_seen += res["tokens"]   # all processes
            train_seconds += time.perf_counter() - t0
            skipped_total += int(res["skipped"])
            nan_streak = 0 if res["loss_finite"] else nan_streak + 1
            if nan_streak >= recipe.max_nan_streak:
                status = "diverged"
                say(f"error: the loss was NaN/inf for {nan_streak} consecutive steps (step {step}); stopping. "
                    f"Lower lr, raise warmup_steps, or use precision: bf16/fp32 instead of fp16.")
                break
            if recipe.log_every and (step % recipe.log_every == 0 or step == recipe.max_steps):
                sums = torch.tensor([float(stats.loss), float(stats.correct), stats.masked, float(stats.nsp_loss),
                                     float(stats.nsp_correct), stats.seqs, stats.tokens], dtype=torch.float64)
                if world > 1:
                    sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
                loss_s, corr, masked, nsp_l, nsp_c, seqs, toks = sums.tolist()
                dt = time.perf_counter() - stats.t0
                row = {"step": step, "loss": loss_s / max(masked, 1), "mlm_acc": corr / max(masked, 1),
                       "lr": scheduler.get_last_lr()[0], "tokens_per_s": toks / max(dt, 1e-9),
                       "grad_norm": float(res["grad_norm"]) if res["grad_norm"] is not None else None,
                       "tokens_seen": tokens_seen, "epoch": loader.state_dict()["epoch"],
                       "skipped_steps": skipped_total, "elapsed_s": round(train_seconds, 3)}
                if need:
                    row.update(nsp_loss=nsp_l / max(seqs, 1), nsp_acc=nsp_c / max(seqs, 1))
                emit(row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['mlm_acc']:.3f}", lr=f"{row['lr']:.2e}",
                                tok_s=f"{row['tokens_per_s']:.0f}")
                if not tty:
                    say(f"step {step}/{recipe.max_steps} loss {row['loss']:.4f} mlm_acc {row['mlm_acc']:.4f} "
                        f"lr {row['lr']:.3e} tokens/s {row['tokens_per_s']:.0f}")
                stats.reset()
            bar.update(1)
            if valid_loader is not None and recipe.eval_every and step % recipe.eval_every == 0 and step < recipe.max_steps:
                val = evaluate(model, valid_loader, accelerator, recipe.eval_batches)
                emit({"step": step, **val})
                say(f"step {step}: validation mlm_loss {val['val_mlm_loss']:.4f} mlm_acc {val['val_mlm_acc']:.4f}")
            stop = flag["stop"]
            if world > 1:   # every process must agree to stop at the same step
                s = accelerator.reduce(torch.tensor([1.0 if stop else 0.0], device=accelerator.device), "sum")
                stop = stop or ("signal" if s.item() > 0 else None)
            if stop:
                status = "interrupted"
                path = save()
                say(f"{stop}: saved {path} at step {step}; continue with --resume auto")
                break
            if recipe.save_every and step % recipe.save_every == 0 and step < recipe.max_steps:
                save()
    bar.close()

    if status == "finished":
        if not ckpt.list_checkpoints(ckpt_root) or ckpt.list_checkpoints(ckpt_root)[-1].name != ckpt.step_dir_name(step):
            save()
        if valid_loader is not None:
            val = evaluate(model, valid_loader, accelerator, recipe.eval_batches)
            emit({"step": step, **val})
            say(f"final validation: mlm_loss {val['val_mlm_loss']:.4f} mlm_acc {val['val_mlm_acc']:.4f} "
                f"(chance {1 / hf.config.vocab_size:.5f})")
    summary = {}
    if main_proc:
        metrics_file.close()
        writer.close()
        if status == "finished":
            save_final(out, hf, tokenizer, tokdir)
        from zh_bert.curves import plot_curves
        try:
            plot_curves(metrics_path, out / "curves.png", title=f"{out.name}: {recipe.model} {recipe.objective}")
        except Exception as e:  # a missing plot must not fail a finished run
            say(f"warning: curves.png not written: {e}")
        summary = _summary(recipe, hf, n_params, train_ds, prepared, precision, warnings, accelerator, accum,
                           step, tokens_seen, train_seconds, time.time() - t_start, val, skipped_total,
                           status, adam_kind)
        from zh_bert.fileio import write_json
        write_json(out / "run.json", summary)
        if status == "finished":
            say(f"done: {step} steps, {tokens_seen / 1e6:.2f}M tokens in {train_seconds:.0f}s -> {out / 'final'}")
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return summary if main_proc else {"status": status}


def _summary(recipe, hf, n_params, train_ds, prepared, precision, warnings, accelerator, accum, step, tokens,
             train_seconds, wall, val, skipped, status, adam_kind) -> dict:
    import torch

    c = hf.config
    vocab_meta = None
    tokdir = recipe.tokenizer or prepared.tokdir or recipe.init_from
    if tokdir and (Path(tokdir) / "zh_bert_vocab.json").is_file():
        vocab_meta = json.loads((Path(tokdir) / "zh_bert_vocab.json").read_text(encoding="utf-8"))
    return {
        "status": status,
        "model": {"preset": recipe.model, "class": type(hf).__name__, "init_from": recipe.init_from,
                  "attention_init": None if recipe.init_from else recipe.attention_init,
                  "num_hidden_layers": c.num_hidden_layers, "hidden_size": c.hidden_size,
                  "num_attention_heads": c.num_attention_heads, "intermediate_size": c.intermediate_size,
                  "vocab_size": c.vocab_size, "max_position_embeddings": c.max_position_embeddings,
                  "parameters": n_params},
        "parameters": n_params,
        "vocab": {"kind": (vocab_meta or {}).get("kind"), "vocab_size": c.vocab_size, "tokenizer": str(tokdir),
                  "meta": vocab_meta},
        "data": {"sharddir": str(prepared.sharddir), "shard_meta": train_ds.meta, "clean_report": prepared.clean_report},
        "objective": recipe.objective,
        "masking": {"strategy": recipe.masking, "mask_rate": recipe.mask_rate,
                    "mask_token_prob": recipe.mask_token_prob, "random_token_prob": recipe.random_token_prob,
                    "max_ngram": recipe.max_ngram},
        "hardware": {"device": str(accelerator.device),
                     "device_name": torch.cuda.get_device_name(accelerator.device) if accelerator.device.type == "cuda" else "cpu",
                     "processes": accelerator.num_processes, "precision": precision,
                     "precision_requested": recipe.precision, "warnings": warnings,
                     "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "adamw": adam_kind},
        "batch": {"global_batch": recipe.global_batch, "micro_batch": recipe.micro_batch,
                  "accumulation": accum, "seq_len": recipe.seq_len},
        "steps": step,
        "skipped_steps": skipped,
        "tokens_seen": tokens,
        "tokens_per_s": tokens / train_seconds if train_seconds else None,
        "train_seconds": round(train_seconds, 2),
        "wall_clock_s": round(wall, 2),
        "final_validation": {"mlm_loss": val["val_mlm_loss"], "mlm_acc": val["val_mlm_acc"]} if val else None,
    }
