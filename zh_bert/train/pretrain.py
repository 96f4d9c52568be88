"""`zh-bert pretrain RECIPE.yaml [--set key=value ...] [--resume auto|PATH]`: masked-LM pretraining.

One Accelerate loop for 1 CPU, 1 GPU or N processes, in three parts: `build_run` (data, model, optimizer,
resume: everything the loop needs, in a `training_run.TrainingRun`), `training.fit` (the loop) and `finish`
(final checkpoint and validation, `final/`, curves, run.json); `train` = the three. The step itself, and why
it is fast and safe: `zh_bert.train.training`; resuming and the out_dir rules: `zh_bert.train.training_run`; every recipe
key: `zh_bert.train.recipe` (`--print-recipe` shows them with their types, defaults and help). torch (and so the
loop's modules) loads inside the functions, after `main` has set OMP_WAIT_POLICY, which OpenMP reads once.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.config import config_from_args, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    CHECKPOINTS,
    CURVES_PNG,
    FINAL,
    METRICS_LOG,
    RUN_RECIPE,
    RUN_SUMMARY,
    Record,
    atomic_dir,
    copy_file,
    read_json,
    read_text,
    save_pretrained,
    write_json,
    write_vocab_txt,
)
from zh_bert.core.hardware import (
    check_compile,
    keep_freed_memory,
    kernel_settings,
    omp_wait_policy,
    resolve_precision,
)
from zh_bert.core.options import Shared
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.train.arch import of_config
from zh_bert.train.arch.base import PRESETS, config_path
from zh_bert.train.arch.modernbert import layer_types
from zh_bert.train.curves import plot_curves
from zh_bert.train.recipe import Recipe, load_recipe, save_recipe
from zh_bert.train.rundir import final_entry
from zh_bert.train.training_run import (
    MetricsLog,
    TrainingRun,
    check_out_dir,
    claim_out_dir,
    release_out_dir,
    resume_point,
    run_summary,
)


@dataclass
class PretrainArgs:
    """The `zh-bert pretrain` command line."""
    recipe: str = option(positional=True, help="recipe YAML (see recipes/)")
    set: list[str] = option_of(Shared, "set")
    resume: Optional[str] = option(None, metavar="auto|PATH",
                                   help="continue from the newest complete checkpoint in out_dir/checkpoints "
                                        "(auto) or PATH (an older one of the same run only with --set "
                                        "out_dir=NEW)")
    print_recipe: bool = option(False, help="print the resolved recipe (the file with every --set applied) as "
                                "YAML, each key with its type, default and help, and exit without training")


def build_parser():
    return derive_parser("zh-bert pretrain", __doc__.split("\n\n")[0], PretrainArgs,
                         epilog="Every recipe key, with type, default and help: --print-recipe (or docs/pretrain.md).\n"
                                "example: zh-bert pretrain recipes/tiny-cpu.yaml --set max_steps=40")


def main(argv: list[str]) -> int:
    args = config_from_args(PretrainArgs, build_parser().parse_args(argv))
    recipe = load_recipe(args.recipe, args.set)
    if args.print_recipe:
        print(print_recipe(recipe, args.recipe, args.set), end="")
        return 0
    if "OMP_WAIT_POLICY" not in os.environ:   # before torch loads (OpenMP reads it then); the user's own wins
        os.environ["OMP_WAIT_POLICY"] = omp_wait_policy()
    summary = train(recipe, resume=args.resume)
    return run_exit_status(summary)


def run_exit_status(summary: dict) -> int:
    """0 only for a finished run: a run a signal stopped exits 128 + the signal's number (143 for SIGTERM, 130
    for SIGINT; its checkpoint is saved and `--resume auto` continues it), a diverged one 1."""
    from zh_bert.train.training import exit_status

    status = summary.get("status")
    return 0 if status == "finished" else exit_status(summary.get("signal")) if status == "interrupted" else 1


def print_recipe(recipe: Recipe, path: str, sets: list[str]) -> str:
    """`--print-recipe`: the resolved recipe as commented YAML that loads back to the same recipe, keeping the
    file's own one-line reasons beside the values it sets."""
    from zh_bert.train.recipe import recipe_comments, render_recipe

    _, reasons = recipe_comments(read_text(path))
    given = "".join(f" --set {s}" for s in sets)
    header = (f"# resolved by zh-bert pretrain --print-recipe: {path}{given}\n"
              f"# above each key its [type, default] and help; after a value, the recipe's own reason for it"
              + "".join(f"\n# {line}" for line in recipe.objective_spec.recipe_notes(recipe)))
    return render_recipe(recipe, header, reasons)


def _accelerator(recipe: Recipe):
    """(Accelerator, precision, warnings) for this machine and `recipe.precision`."""
    import torch
    from accelerate import PartialState

    from zh_bert.train.training import make_accelerator

    # without CUDA, Accelerate sets up gloo data parallelism (torchrun / accelerate launch) only when told cpu=True
    cpu = not torch.cuda.is_available()
    precision, warnings = resolve_precision(recipe.precision, PartialState(cpu=cpu).device)
    return make_accelerator(precision, cpu), precision, warnings


def load_datasets(recipe: Recipe, prepared):
    """(tokdir, tokenizer, train split, valid split or None), checked against the recipe."""
    from zh_bert.train.data import ShardDataset

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


def _networks(recipe: Recipe, tokenizer, train_ds):
    """The run's networks (`objectives.Networks`): the stock model to train (`init_from` fitted to the tokenizer,
    or a fresh one of `model:`, seeded) and what the objective adds (ELECTRA's generator, a frozen teacher)."""
    from accelerate.utils import set_seed

    from zh_bert.train.model import load_init, neighbour_attention_init

    set_seed(recipe.seed)
    arch, objective = recipe.arch, recipe.objective_spec
    hf = load_init(recipe.init_from, tokenizer, recipe.objective, recipe.seq_len, arch) if recipe.init_from else None
    cfg = None if hf is not None else arch.config(recipe, len(tokenizer), {"pad": train_ds.pad_id,
                                                                           "cls": train_ds.cls_id, "sep": train_ds.sep_id})
    try:
        nets = objective.build(recipe, cfg, arch, tokenizer, hf)
    except (ValueError, TypeError, KeyError, AttributeError) as e:   # a config.json the config cannot vet
        raise ZhBertError(f"model {recipe.model}: cannot build the model: {str(e).splitlines()[0][:300]}") from None
    if hf is None and arch.attention_init(recipe) == "neighbour" and recipe.student_init == "random":
        neighbour_attention_init(nets.hf)
    if nets.hf.config.vocab_size < train_ds.vocab_size:
        raise ZhBertError(f"model vocab_size {nets.hf.config.vocab_size} < shard vocab_size {train_ds.vocab_size}")
    train_ds.check_positions(nets.hf.config.max_position_embeddings)
    for net in (nets.hf, *nets.trained.values()):
        if recipe.grad_checkpointing:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for net in (nets.hf, *nets.trained.values(), *nets.frozen.values()):
        if recipe.compile:   # in place: the weights keep their names in every checkpoint
            getattr(net.base_model, "encoder", net.base_model).compile()
    return nets


def build_run(recipe: Recipe, resume: str | None = None, log: Callable[[str], None] | None = None) -> TrainingRun:
    """Accelerator, data (raw corpus -> shards first), model, optimizer and, with `resume`, the checkpoint's
    state: a `TrainingRun` ready for `fit`. Everything that can be checked without data work is checked before
    out_dir is touched; a start that fails before training leaves a new out_dir as it found it."""
    from transformers.utils import logging as hf_logging

    from zh_bert.train import checkpoint as ckpt
    from zh_bert.train.training import reschedule

    t_start = time.time()
    malloc = keep_freed_memory()
    hf_logging.disable_progress_bar()   # "Writing model shards" bars at every checkpoint
    accelerator, precision, warnings = _accelerator(recipe)
    world = accelerator.num_processes
    say = log or (lambda *a: accelerator.print(*a, flush=True))
    warn = lambda m: accelerator.print(m, file=sys.stderr, flush=True)  # noqa: E731
    for w in warnings:
        warn(f"warning: {w}")
    if recipe.compile:
        check_compile(accelerator.device)
    if recipe.global_batch % (recipe.micro_batch * world):
        raise ZhBertError(f"global_batch {recipe.global_batch} is not divisible by micro_batch {recipe.micro_batch} "
                          f"× {world} processes = {recipe.micro_batch * world}")
    out = Path(recipe.out_dir)
    fresh = check_out_dir(recipe)
    if accelerator.is_main_process:   # in a folder that is the run's own: a killed save is undone first
        for done in ckpt.clean_leftovers(out / CHECKPOINTS):
            say(f"note: {done}")
    accelerator.wait_for_everyone()
    resume_from, branch_of, changed = resume_point(recipe, resume, warn)
    check_recipe(recipe)
    made = claim_out_dir(recipe) if accelerator.is_main_process else []
    accelerator.wait_for_everyone()
    try:
        kernels = kernel_settings(recipe, accelerator.device)
        run = _assemble(recipe, accelerator, precision, warnings, say, warn)
        run.t_start, run.malloc, run.kernels = t_start, malloc, kernels
        if resume_from is not None:
            run.resume_from(resume_from, changed)
            if {"lr", "warmup_steps", "max_steps", "schedule"} & set(changed):
                reschedule(run.optimizer, run.scheduler, recipe)
            say(f"resumed from {resume_from} at step {run.step}" + "".join(
                f"; {k}: {a!r} -> {b!r}" for k, (a, b) in changed.items()))
    except ZhBertError:
        if accelerator.is_main_process:
            release_out_dir(out, made, fresh)
        raise
    run.metrics = MetricsLog(out, accelerator.is_main_process, run.step if resume_from is not None else None,
                             history=branch_of / METRICS_LOG if branch_of else None)
    if accelerator.is_main_process:
        save_recipe(recipe, out / RUN_RECIPE)
    accelerator.wait_for_everyone()
    _say_model(run)
    recipe.objective_spec.start_report(run)
    return run


def _assemble(recipe: Recipe, accelerator, precision: str, warnings: list[str], say, warn) -> TrainingRun:
    """The data (prepared: raw corpus -> shards, cached), model, optimizer and loaders of a fresh `TrainingRun`."""
    import torch

    from zh_bert.corpus.pipeline import prepare_data
    from zh_bert.train.data import ShardLoader
    from zh_bert.train.training import lr_lambda, make_optimizer, make_scaler

    world, rank = accelerator.num_processes, accelerator.process_index
    objective = recipe.objective_spec
    data_recipe = objective.data_recipe(recipe)   # distillation: the teacher's tokenizer
    with accelerator.main_process_first():   # the main process builds the shards, the others find the cache
        prepared = prepare_data(data_recipe, log=say)
    tokdir, tokenizer, train_ds, valid_ds = load_datasets(data_recipe, prepared)
    nets = _networks(recipe, tokenizer, train_ds)
    model = objective.module(nets, recipe)
    objective.place(nets, accelerator.device, precision)
    optimizer, adam_kind = make_optimizer(model, recipe)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(recipe))
    model, optimizer = accelerator.prepare(model, optimizer)
    pin = accelerator.device.type == "cuda"
    loader = ShardLoader(train_ds, recipe.micro_batch, recipe.masking, recipe.seed, rank=rank, world_size=world,
                         pin_memory=pin)
    valid_loader = (ShardLoader(valid_ds, recipe.micro_batch, recipe.masking, recipe.seed, rank=rank,
                                world_size=world, pin_memory=pin) if valid_ds is not None else None)
    return TrainingRun(recipe=recipe, accelerator=accelerator, precision=precision, warnings=warnings, prepared=prepared,
               tokdir=tokdir, tokenizer=tokenizer, train_ds=train_ds, loader=loader, valid_loader=valid_loader,
               model=model, hf=accelerator.unwrap_model(model).hf, optimizer=optimizer, scheduler=scheduler,
               adam_kind=adam_kind, accum=recipe.global_batch // (recipe.micro_batch * world), say=say, warn=warn,
               nets=nets, scaler=make_scaler(precision, accelerator.device, recipe))


def _say_model(run: TrainingRun) -> None:
    from zh_bert.train.model import count_params

    recipe, world = run.recipe, run.accelerator.num_processes
    run.say(f"model {recipe.model} ({type(run.hf).__name__}, {count_params(run.hf) / 1e6:.1f}M params"
            f"{recipe.objective_spec.describe(run.nets)}, vocab {run.hf.config.vocab_size}) | objective "
            f"{recipe.objective}, masking {recipe.masking.strategy} | {world} "
            f"process(es) on {run.accelerator.device}, precision {run.precision} (requested {recipe.precision}) | "
            f"global batch {recipe.global_batch} = {recipe.micro_batch} × {run.accum} accumulation × {world} | AdamW "
            f"{run.adam_kind} | {len(run.train_ds)} train sequences of {run.train_ds.seq_len}")


def _init_values(config: dict) -> dict:
    """The recipe keys that an init_from checkpoint fixes, as its config.json holds them (in the keys of either
    transformers major)."""

    try:
        out = of_config(config).init_values(config)
    except (TypeError, ValueError, AttributeError, IndexError):
        return {}   # load_init names what is wrong with it
    return {k: v for k, v in out.items() if v is not None}


def check_init_keys(recipe: Recipe) -> None:
    """With `init_from`, the model's shape, attention layout and dropout come from the checkpoint; a recipe that
    sets one of them to another value would train the checkpoint's while recipe.yaml and the log report the
    recipe's. One line naming the key and init_from (a key left at its default is no request: not refused)."""

    where = f"init_from {recipe.init_from}"
    config = read_json(Path(recipe.init_from) / "config.json", default=None)
    if not isinstance(config, dict):
        return   # load_init names what is wrong with it
    defaults = Recipe.__dataclass_fields__
    for key, have in _init_values(config).items():
        want = getattr(recipe, key)
        if key == "global_attn_every_n_layers":   # the same layout is no change (3 or 5 in a 2-layer model)
            n = Record(config, str(Path(recipe.init_from) / "config.json")).integer("num_hidden_layers", 0, lo=0,
                                                                                     hi=100_000)
            want, have = (want, have) if layer_types(n, want) != layer_types(n, have) else (have, have)
        if want != defaults[key].default and want != have:
            raise ZhBertError(f"{key} {want} with {where}, whose config.json has {have}: a continued model keeps "
                              f"its checkpoint's {key}; remove the key, or set it to {have}")
    if recipe.attention_init not in ("stock", "auto"):
        raise ZhBertError(f"attention_init {recipe.attention_init} with {where}: it sets the starting weights of a "
                          f"model built from scratch, and a continued model starts from its checkpoint's; remove "
                          f"the key, or set attention_init: stock")
    if recipe.model != defaults["model"].default:
        shape_keys = ("num_hidden_layers", "hidden_size", "num_attention_heads")
        have = tuple(config.get(k) for k in shape_keys)
        if recipe.model in PRESETS:
            want = PRESETS[recipe.model]
        else:   # a config.json: its shape, where it gives one
            given = read_json(config_path(recipe.model), default=None)
            want = tuple((given or {}).get(k, h) for k, h in zip(shape_keys, have)) if isinstance(given, dict) else have
        if want != have:
            raise ZhBertError(f"model {recipe.model} (L{want[0]}/H{want[1]}/A{want[2]}) with {where}, whose "
                              f"config.json is L{have[0]}/H{have[1]}/A{have[2]}: a continued model keeps its "
                              f"checkpoint's shape; remove model, or give the checkpoint's")


def check_recipe(recipe: Recipe) -> None:
    """Every check of `recipe` that needs neither data work nor a model, so that `pretrain` and each run of
    `ablate` (before its first run trains, --dry-run too) refuse the same recipes the same way: the model
    config, the objective against a SHARDDIR, and masking correction's corpus size against a SHARDDIR's
    train split (a raw corpus is checked once sharded, by the loader)."""
    from zh_bert.corpus.pipeline import is_sharddir
    from zh_bert.corpus.sharddir import read_meta

    if recipe.init_from:   # a checkpoint of the other architecture is one line before any data work
        recipe.arch.check_init(recipe.init_from)
        check_init_keys(recipe)
    else:   # a bad shape or config.json, likewise
        cfg = recipe.arch.config(recipe, 1)
        if recipe.seq_len > cfg.max_position_embeddings:
            raise ZhBertError(f"seq_len {recipe.seq_len} exceeds model {recipe.model}'s max_position_embeddings "
                              f"{cfg.max_position_embeddings}")
    recipe.objective_spec.check_inputs(recipe)
    check_objective_data(recipe)
    paths = recipe.data_paths
    if recipe.masking.strategy == "correction" and len(paths) == 1 and is_sharddir(paths[0]):
        from zh_bert.corpus.similar_words import check_possible
        check_possible(read_meta(paths[0]), paths[0])


def check_objective_data(recipe: Recipe) -> None:
    """Refuse a SHARDDIR that does not fit the objective before any data work (`Objective.check_shards`)."""
    from zh_bert.corpus.pipeline import is_sharddir
    from zh_bert.corpus.sharddir import read_meta

    paths = recipe.data_paths
    if len(paths) == 1 and is_sharddir(paths[0]):
        recipe.objective_spec.check_shards(recipe, read_meta(paths[0]), paths[0])


def save_final(out: Path, hf_model, tokenizer, tokdir: Path | None, trained: dict | None = None) -> Path:
    """`out/final/`: stock HF model (safetensors) + tokenizer files + vocab.txt, written atomically (a full
    disk leaves the previous `final/`, if any, and is one line). `trained`: the objective's other trained stock
    models, each a subfolder (ELECTRA: `final/` is the discriminator and `final/generator/` the generator, a
    masked LM), each with the tokenizer files so every one loads alone."""
    try:
        _write_final(out, hf_model, tokenizer, tokdir, trained or {})
    except OSError as e:
        raise ZhBertError(f"cannot write {out / FINAL}: {e.strerror or e}; the checkpoints in "
                          f"{out / CHECKPOINTS} are intact") from None
    return out / FINAL


def _write_final(out: Path, hf_model, tokenizer, tokdir: Path | None, trained: dict) -> None:
    with atomic_dir(out / FINAL, overwrite=True, legacy=final_entry) as tmp:
        _write_model_dir(tmp, hf_model, tokenizer, tokdir)
        for name, net in trained.items():
            _write_model_dir(tmp / name, net, tokenizer, tokdir)


def _write_model_dir(folder: Path, hf_model, tokenizer, tokdir: Path | None) -> None:
    """One loadable model folder: weights, config (in both transformers majors' keys), tokenizer files, vocab.txt."""

    save_pretrained(hf_model, folder, safe_serialization=True)
    of_config(hf_model.config).save_config(folder)
    save_pretrained(tokenizer, folder)
    for name in ("vocab.txt", "zh_bert_vocab.json", "spiece.model"):
        if tokdir is not None and (tokdir / name).is_file():
            copy_file(tokdir / name, folder / name)
    if not (folder / "vocab.txt").exists() and hasattr(tokenizer, "vocab"):
        vocab = tokenizer.get_vocab()
        write_vocab_txt(folder / "vocab.txt", [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])])


def finish(run: TrainingRun) -> dict:
    """After `fit`: the last checkpoint and validation, `final/`, curves.png and run.json (main process);
    returns the run summary (other processes: just the status)."""
    from zh_bert.train import checkpoint as ckpt
    from zh_bert.train.training import validate, validation_text

    acc = run.accelerator
    if run.status == "finished":
        done = ckpt.list_checkpoints(run.ckpt_root)
        if not done or done[-1].name != ckpt.step_dir_name(run.step):
            run.save_checkpoint()
        if run.valid_loader is not None:
            val = validate(run)
            run.say(f"final validation: {validation_text(val)} (chance {1 / run.hf.config.vocab_size:.5f})")
    summary = {"status": run.status, "signal": run.stopped_by}
    if acc.is_main_process:
        run.metrics.close()
        if run.status == "finished":
            save_final(run.out, run.hf, run.tokenizer, run.tokdir, run.nets.trained)
        try:
            plot_curves(run.metrics.path, run.out / CURVES_PNG,
                        title=f"{run.out.name}: {run.recipe.model} {run.recipe.objective}")
        except Exception as e:  # a missing plot must not fail a finished run
            run.warn(f"warning: curves.png not written: {e}")
        summary = run_summary(run)
        write_json(run.out / RUN_SUMMARY, summary)
        if run.status == "finished":
            run.say(f"done: {run.step} steps, {run.tokens_seen / 1e6:.2f}M tokens in {run.train_seconds:.0f}s "
                    f"-> {run.out / FINAL}")
    acc.wait_for_everyone()
    acc.end_training()
    return summary


def train(recipe: Recipe, resume: str | None = None, log: Callable[[str], None] | None = None) -> dict:
    """TrainingRun `recipe`; returns the run summary also written to out_dir/run.json."""
    from zh_bert.train.training import fit

    run = build_run(recipe, resume, log)
    try:
        fit(run)
    except BaseException:   # e.g. a checkpoint that could not be saved: close the logs, keep what they hold
        run.metrics.close()
        raise
    return finish(run)
