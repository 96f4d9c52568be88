"""A pretraining run's bookkeeping: what it keeps between steps (`TrainingRun`: counters, loaders, the
checkpoint it saves and restores), its metrics log, the rules for resuming and for owning out_dir, and the
run.json summary. The computation of a step is `zh_bert.train.training`.

Resuming (`--resume auto|PATH`, `resume_point`): `auto` takes the newest complete checkpoint of out_dir
(incomplete ones are skipped with a warning; see `zh_bert.train.checkpoint`), PATH must be complete. A checkpoint
older than the newest of its own run is refused: continuing it there would overwrite the later checkpoints.
Continue it in a new run dir (`--set out_dir=NEW`, which must hold no checkpoints) instead: NEW gets its own
checkpoints, `final/` and metrics (the old run's lines up to the checkpoint copied), and `--resume auto` in NEW
reads only NEW's. A step dir after the resume point that is not a complete checkpoint and holds anything its
manifest does not vouch for is refused before any work (the run would have to replace it when it saves that
step). The recipe of a resumed run is compared with the checkpoint's: the keys in
`recipe.CHANGEABLE_ON_RESUME` take effect from the resumed step and are recorded in recipe.yaml, the next
checkpoints and run.json (`resumes`); any other difference is refused, naming the key.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    CHECKPOINTS,
    DATA_CACHE,
    FINAL,
    MANIFEST,
    METRICS_LOG,
    RUN_RECIPE,
    TENSORBOARD,
    Record,
    atomic_write,
    check_dir_ours,
    claim_dir,
    entry_name,
    in_household,
    open_append,
    read_json,
    read_object,
    refuse_overlap,
    remove_owned,
    remove_scratch,
    truncate_owned,
)
from zh_bert.core.hardware import sdpa_backend
from zh_bert.train import checkpoint as ckpt
from zh_bert.train.curves import read_metrics
from zh_bert.train.recipe import Recipe, changes_on_resume, save_recipe
from zh_bert.train.rundir import final_entry, written_by_pretrain
from zh_bert.train.scaler import NO_SCALING


@dataclass
class TrainingRun:
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
    model: Any                      # the objective's training module, prepared by Accelerate
    hf: Any                         # the stock HF model inside it (what checkpoints and final/ hold);
                                    # electra: the discriminator; distill: the student
    optimizer: Any
    scheduler: Any
    adam_kind: str                  # fused | foreach
    accum: int                      # micro-batches per optimizer step per process
    say: Callable[[str], None]
    warn: Callable[[str], None] = print    # warnings and the guard's error: stderr, main process
    nets: Any = None                # objectives.Networks: hf, the other trained models (subfolders of
                                    # checkpoints and final/: electra's generator/), the frozen ones (a teacher)
    scaler: Any = NO_SCALING        # the loss scaler (scaler.make_scaler: enabled for fp16), in every checkpoint
    kernels: dict = field(default_factory=dict)   # hardware.kernel_settings: deterministic, tf32, pinned, compile
    metrics: Optional[MetricsLog] = None   # opened by build_run once the resume step is known
    step: int = 0
    tokens_seen: int = 0            # all processes
    skipped_steps: int = 0
    train_seconds: float = 0.0
    status: str = "finished"        # finished | interrupted | diverged
    stopped_by: Optional[str] = None   # interrupted: the signal (SIGTERM, SIGINT), run.json's `signal`
    val: Optional[dict] = None      # the latest validation
    resumes: list = field(default_factory=list)   # [{step, from, changed: {key: [old, new]}}], oldest first
    malloc: str = "unchanged"       # what keep_freed_memory did
    t_start: float = field(default_factory=time.time)

    @property
    def out(self) -> Path:
        return Path(self.recipe.out_dir)

    @property
    def ckpt_root(self) -> Path:
        return self.out / CHECKPOINTS

    def save_checkpoint(self, name: str | None = None) -> Path:
        """checkpoints/step-N (pruned to keep_last), or checkpoints/`name` (kept)."""
        objective = self.recipe.objective_spec
        state = {"loader": self.loader.state_dict(), "tokens_seen": self.tokens_seen,
                 "skipped_steps": self.skipped_steps, "train_seconds": self.train_seconds,
                 "recipe": self.recipe.to_dict(), "resumes": self.resumes, "train_sequences": len(self.train_ds),
                 "objective": objective.run_state(self.recipe)}
        return ckpt.save_checkpoint(self.ckpt_root, self.step, accelerator=self.accelerator, hf_model=self.hf,
                                    optimizer=self.optimizer, scheduler=self.scheduler, trainer_state=state,
                                    keep_last=self.recipe.keep_last, trained=self.nets.trained, scaler=self.scaler,
                                    name=name, module_state=objective.module_state(self.accelerator.unwrap_model(self.model)))

    def resume_from(self, path: Path, changed: dict) -> None:
        """Restore the checkpoint at `path`; `changed` = the recipe keys this run changes (checked), recorded in
        `resumes` (a new lr schedule is applied by the caller: `training.reschedule`)."""
        objective = self.recipe.objective_spec
        st = ckpt.load_checkpoint(path, accelerator=self.accelerator, hf_model=self.hf, optimizer=self.optimizer,
                                  scheduler=self.scheduler, trained=self.nets.trained, scaler=self.scaler,
                                  module=self.accelerator.unwrap_model(self.model), objective=objective)
        if st["train_sequences"] not in (None, len(self.train_ds)):   # typed by ckpt.read_state
            raise ZhBertError(f"{path}: the training data changed since this checkpoint ({st['train_sequences']} "
                              f"sequences then, {len(self.train_ds)} now in {self.prepared.sharddir})")
        self.loader.load_state_dict(st["loader"])
        self.step, self.tokens_seen = st["step"], st["tokens_seen"]
        self.skipped_steps, self.train_seconds = st["skipped_steps"], st["train_seconds"]
        self.resumes = st["resumes"] + [{"step": self.step, "from": str(path), "changed": changed}]



class MetricsLog:
    """`metrics.jsonl` (one JSON object per line) and TensorBoard scalars under `tb/`; only the main process
    writes, the others hold a log whose `write` does nothing."""

    def __init__(self, out: Path, enabled: bool, resume_step: int | None, history: Path | None = None):
        """`history`: the metrics.jsonl to take the lines up to `resume_step` from (a branch's old run)."""
        self.path, self.enabled = out / METRICS_LOG, enabled
        self.file = self.writer = None
        if not enabled:
            return
        out.mkdir(parents=True, exist_ok=True)
        history = history or self.path
        if resume_step is None:
            truncate_owned(self.path)
        elif history.is_file():   # drop lines a killed run logged after its last checkpoint: they come again
            rows = [r for r in read_metrics(history) if r["step"] <= resume_step]
            with atomic_write(self.path) as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out / TENSORBOARD))
        self.file = open_append(self.path)

    def write(self, row: dict) -> None:
        """One line; a non-finite figure (a skipped step's loss) is written as null, which JSON has, not as
        NaN/Infinity, which it has not (a resume reads the file back through the reading layer)."""
        if not self.enabled:
            return
        plain = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
        self.file.write(json.dumps(plain, ensure_ascii=False) + "\n")
        self.file.flush()
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)):
                self.writer.add_scalar(k if k.startswith("val_") else f"train/{k}", v, row["step"])

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            self.writer.close()


def resume_point(recipe: Recipe, resume: str | None, warn: Callable[[str], None]):
    """(checkpoint to resume or None, the run dir it belongs to when this run branches off into a new
    out_dir, else None, {recipe key: [checkpoint's, this run's]} of the allowed changes): the resume rules of
    the module docstring."""
    out = Path(recipe.out_dir)
    root = out / CHECKPOINTS
    path = ckpt.find_resume(resume, root, warn=warn)
    ours = ckpt.list_checkpoints(root)
    ckpt.check_resaves(root, path if path is not None and path.resolve().parent == root.resolve() else None)
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
    state = ckpt.read_state(path)
    changed = changes_on_resume(state["recipe"], recipe, f"--resume {resume}")
    saved = state.get("objective")
    recipe.objective_spec.check_resume(saved if isinstance(saved, dict) else {}, recipe, path)
    return path, (None if same_run else path.resolve().parent.parent), changed


def check_out_dir(recipe: Recipe) -> bool:
    """Claim out_dir before anything is written (reads only; every process), through the ownership layer:
    never the current directory (or one above it), never an input (data, tokenizer, init_from: out_dir
    neither at, inside nor around one, except the data cache inside out_dir), never inside data_cache; an
    existing folder only if it is a run dir of pretrain's own (`rundir.written_by_pretrain`) holding nothing
    but what zh-bert writes there, and its `final/` only if final's manifest lists every file in it. Returns
    whether out_dir is new or empty (then a failed start takes away what it wrote: `release_out_dir`)."""
    out = Path(recipe.out_dir)
    real = out.resolve()
    cache = Path(recipe.data_cache).resolve() if recipe.data_cache else real / DATA_CACHE
    extra = (cache.relative_to(real).parts[0],) if cache != real and real in cache.parents else ()
    inputs = [*recipe.data_paths, recipe.tokenizer, recipe.init_from, *recipe.objective_spec.input_paths(recipe)]
    if recipe.data_cache and real not in cache.parents:   # a cache inside out_dir is the run's own; out_dir
        refuse_overlap(out, [recipe.data_cache], "out_dir")  # inside (or at) the cache is not
    fresh = claim_dir(out, inputs=inputs, allow_inside=[cache], flag="out_dir", what="zh-bert pretrain",
                      legacy=lambda name, is_dir: in_household(name, is_dir, extra), proof=written_by_pretrain)
    if (out / FINAL).is_dir():   # replaced at the end of the run: refuse now, not then
        _check_final_manifest(out / FINAL)
        check_dir_ours(out / FINAL, legacy=final_entry)
    return fresh


def _check_final_manifest(final: Path) -> None:
    """`final/`'s manifest, read as what it is (a file anyone could have edited): a name in it that is not an
    entry of final/ itself (`../x`, an absolute path) is one line naming the field, and final/ is never replaced
    by its word."""
    if not (final / MANIFEST).is_file():
        return
    try:
        manifest = read_object(final / MANIFEST)
        for i, name in enumerate(manifest.list("files")):
            entry_name(name, f"{manifest.where}: files[{i}]")
    except ZhBertError as e:
        raise ZhBertError(f"{e}; {final} is not replaced on its word: move it out of the run dir") from None


def claim_out_dir(recipe: Recipe) -> list[Path]:
    """Make out_dir (main process) and mark it as this run's with its recipe.yaml, before the first other
    write into it (data cache, logs), so that a rerun after a kill at any point finds its own marker.
    Returns the folders it created, for `release_out_dir`. An unusable out_dir is one line."""
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
            save_recipe(recipe, out / RUN_RECIPE)
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
        remove_scratch(p)
    for d in made:   # deepest first; only while empty
        remove_owned(d, listed={})


def run_summary(run: TrainingRun) -> dict:
    """run.json: what ran (model, vocab, data, objective, masking, hardware, batch) and what it gave."""
    import torch

    from zh_bert.train.model import count_params

    recipe, c, acc = run.recipe, run.hf.config, run.accelerator
    n_params = count_params(run.hf)
    meta_path = run.tokdir / "zh_bert_vocab.json" if run.tokdir else None
    vocab_meta = read_json(meta_path, default=None) if meta_path and meta_path.is_file() else None
    vocab_meta = Record(vocab_meta, str(meta_path)) if isinstance(vocab_meta, dict) else None   # only shown: a
    kind = vocab_meta.raw("kind") if vocab_meta else None    # wrong field never fails a run that has trained
    on_cuda = acc.device.type == "cuda"
    return {
        "status": run.status,
        "signal": run.stopped_by,
        "model": {"preset": recipe.model, "class": type(run.hf).__name__, "architecture": recipe.architecture,
                  "init_from": recipe.init_from,
                  "attention_init": None if recipe.init_from else recipe.arch.attention_init(recipe),
                  "num_hidden_layers": c.num_hidden_layers, "hidden_size": c.hidden_size,
                  "num_attention_heads": c.num_attention_heads, "intermediate_size": c.intermediate_size,
                  "vocab_size": c.vocab_size, "max_position_embeddings": c.max_position_embeddings,
                  "parameters": n_params},
        "parameters": n_params,
        **recipe.objective_spec.summary_fields(run),
        "vocab": {"kind": kind if isinstance(kind, str) else None, "vocab_size": c.vocab_size,
                  "tokenizer": str(run.tokdir), "meta": vocab_meta.data if vocab_meta else None},
        "data": {"sharddir": str(run.prepared.sharddir), "shard_meta": run.train_ds.meta,
                 "clean_report": run.prepared.clean_report},
        "objective": recipe.objective,
        "masking": asdict(recipe.masking),
        "hardware": {"device": str(acc.device), "device_name": torch.cuda.get_device_name(acc.device) if on_cuda else "cpu",
                     "processes": acc.num_processes, "precision": run.precision,
                     "precision_requested": recipe.precision, "warnings": run.warnings,
                     "loss_scaler": _scaler_summary(run),
                     "kernels": {**run.kernels, "attention": getattr(c, "_attn_implementation", None),
                                 "sdpa_backend": sdpa_backend(c, acc.device, run.precision, recipe.seq_len)},
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
                             if k not in ("val_ppl", "val_masked_tokens")} if run.val else None,
    }


def _scaler_summary(run: TrainingRun) -> dict | None:
    """run.json's fp16 loss-scaler settings and its scale at the end (None without fp16)."""
    scaler = run.scaler
    if not scaler.is_enabled():
        return None
    return {"init_scale": run.recipe.loss_scale_init, "growth_factor": scaler.get_growth_factor(),
            "backoff_factor": scaler.get_backoff_factor(), "growth_interval": scaler.get_growth_interval(),
            "final_scale": scaler.get_scale()}
