"""Training checkpoints that resume exactly: written to a temp dir, checked by a manifest, renamed when complete.

Layout of `out_dir/checkpoints/step-NNNNNNN/`:
  config.json + model.safetensors   stock HF model (the main process writes it)
  generator/                        the objective's other trained stock models, each a model folder too
                                    (electra: the generator; the discriminator is the top-level model)
  objective_state.safetensors       tensors of the training module in no stock model (distill: the learned
                                    projections); a frozen teacher is never saved, trainer_state.json
                                    `objective` records its path and sha256
  optimizer.pt                      optimizer, scheduler, grad-scaler state (tensors + plain types only,
                                    loaded with weights_only=True: nothing is unpickled)
  rng-rankR.pt                      torch/cuda/numpy/python RNG of each process
  trainer_state.json                step, tokens, loader position, recipe, ...
  manifest.json                     every other file with its size (and sha256 when small), written last,
                                    after all processes have written theirs
A checkpoint is complete when its manifest lists files that are all there with those sizes; anything else
(a `.step-*.tmp` dir of a killed save, a half-deleted dir) is never resumed from, and the next run removes
the temp dirs. A checkpoint from before manifests counts as complete when every file it should hold exists
(trainer_state.json readable, config, weights, optimizer and one RNG file per process it names): truncation
cannot be detected there. Replacing or deleting a checkpoint first renames it to a hidden `.step-*.trash`
name, so a kill never leaves a half-deleted dir under a complete-looking name. A manifest is read, not
trusted: one naming anything but a file of its own folder (`../x`, an absolute path, a name under a linked
subfolder) or with a field of the wrong type makes its checkpoint incomplete, so it is never resumed from nor
rotated out (`--resume auto` names the field on stderr), and deleting re-checks every name after resolving it.

`ZH_BERT_FAULT=after:POINT[@STEP]` (a test hook) makes the process SIGKILL itself right after POINT of the
save of STEP (any step if omitted); POINT is one of `FAULT_POINTS`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import re
from pathlib import Path

import numpy as np
import torch

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import (
    CHECKPOINTS,
    Record,
    check_dir_ours,
    entry_name,
    fault_point,
    foreign_entries,
    fresh_staging_dir,
    inside,
    read_object,
    remove_owned,
    remove_scratch,
    rename_owned,
    replace_dir,
    save_pretrained,
    save_safetensors,
    torch_save,
    write_json,
)
from zh_bert.train.arch import of_config
from zh_bert.train.rundir import GENERATOR
from zh_bert.train.scaler import NO_SCALING

STATE = "trainer_state.json"
OBJECTIVE_STATE = "objective_state.safetensors"   # the training module's tensors in no stock model
CHECKPOINT_MANIFEST = "manifest.json"   # a checkpoint's files and sizes (not fileio.MANIFEST, the ownership proof)
HASH_LIMIT = 16 << 20        # files up to this size also get a sha256 in the manifest
FAULT_POINTS = ("tmp-dir", "rng-rank0", "model", "optimizer", "trainer-state", "manifest", "renamed", "trashed")
_STEP_DIR = re.compile(r"^step-(\d+)$")
_LEFTOVER = re.compile(r"^\.(step-\d+|nodecay)\.(tmp|trash.*)$")
NODECAY = "nodecay"   # wsd: the weights at the start of the lr decay (training.decay_start), kept apart


def step_dir_name(step: int) -> str:
    return f"step-{step:07d}"


def rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"key": np_state[0], "state": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        "python": _py_state_to_plain(random.getstate()),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["key"], n["state"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _py_state_to_plain(s):
    version, internal, gauss = s
    return [version, list(internal), gauss]


class _SaveFailed(Exception):
    pass


def _together(accelerator, work) -> None:
    """Run `work` (None: nothing on this process), then agree with every process: if any failed to write,
    all raise _SaveFailed (instead of the others waiting forever at a barrier)."""
    from safetensors import SafetensorError

    reason = None
    if work:
        try:
            work()
        except (OSError, RuntimeError, SafetensorError, ZhBertError) as e:  # torch.save: a full disk is a RuntimeError
            cause = getattr(e, "cause", e)   # the layer's one-line disk error carries the OSError
            reason = (getattr(cause, "strerror", None) or str(cause).split("\n")[0] or type(e).__name__)[:300]
            if isinstance(cause, OSError) and cause.filename:
                reason += f": {cause.filename}"
    failed = reason is not None
    if accelerator.num_processes > 1:   # a collective: also the barrier between the phases of a save
        flag = torch.tensor([float(failed)], device=accelerator.device)
        failed = accelerator.reduce(flag, reduction="sum").item() > 0
    if failed:
        raise _SaveFailed(reason or "another process could not write its part")


def save_checkpoint(ckpt_root: Path, step: int, *, accelerator, hf_model, optimizer, scheduler,
                    trainer_state: dict, keep_last: int, trained: dict | None = None, scaler=NO_SCALING,
                    name: str | None = None, module_state: dict | None = None) -> Path:
    """Every process calls this (each saves its RNG); returns the final dir: `step-N`, or `name` (NODECAY), a
    complete checkpoint like the others that `keep_last` never removes.

    The temp dir has a fixed name (not `fileio.atomic_dir`'s random one) because every rank writes into it.
    A failed write (a full disk) on any process is one ZhBertError on every process; the temp dir is removed
    and the earlier checkpoints are not touched.
    """
    ckpt_root = Path(ckpt_root)
    final = ckpt_root / (name or step_dir_name(step))
    tmp = ckpt_root / f".{final.name}.tmp"
    main, rank = accelerator.is_main_process, accelerator.process_index

    def fresh():
        fresh_staging_dir(tmp)
        fault_point("after:tmp-dir", step)

    def write_parts():
        torch_save(rng_state(), tmp / f"rng-rank{rank}.pt")
        fault_point(f"after:rng-rank{rank}", step)
        if main:
            save_pretrained(hf_model, tmp, safe_serialization=True)
            of_config(hf_model.config).save_config(tmp)
            for sub, net in (trained or {}).items():
                save_pretrained(net, tmp / sub, safe_serialization=True)
            if module_state:
                save_safetensors({k: v.detach().contiguous().cpu() for k, v in module_state.items()},
                                 tmp / OBJECTIVE_STATE)
            fault_point("after:model", step)
            torch_save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                        "scaler": scaler.state_dict()}, tmp / "optimizer.pt")
            fault_point("after:optimizer", step)

    def commit():
        state = {**trainer_state, "step": step, "num_processes": accelerator.num_processes}
        missing = [f"rng-rank{r}.pt" for r in range(accelerator.num_processes) if not (tmp / f"rng-rank{r}.pt").is_file()]
        if missing:   # e.g. out_dir is not on a filesystem all processes share
            raise OSError(errno.ENOENT, f"{missing[0]} of another process is not in {tmp}")
        write_json(tmp / STATE, state)
        fault_point("after:trainer-state", step)
        write_manifest(tmp)
        fault_point("after:manifest", step)
        listed = listed_files(final) if final.exists() else None
        if final.exists():
            check_dir_ours(final, legacy=_legacy_entry, listed=listed)   # a user's file in it is never replaced
        old = _rename_aside(final, listed) if final.exists() else None
        replace_dir(tmp, final)
        _fsync_dir(ckpt_root)
        fault_point("after:renamed", step)
        if old is not None:
            remove_owned(old, listed_files(old))
        for stale in list_checkpoints(ckpt_root)[:-keep_last]:
            discard(stale, step)

    try:
        _together(accelerator, fresh if main else None)
        _together(accelerator, write_parts)
        _together(accelerator, commit if main else None)
    except _SaveFailed as e:
        if main:
            remove_scratch(tmp)
        raise ZhBertError(f"cannot save checkpoint {final}: {e}; the earlier checkpoints in {ckpt_root} are "
                          f"intact: free space, then continue with --resume auto") from None
    return final


def write_manifest(folder: Path) -> None:
    """`manifest.json`: every file in `folder` and its subfolders (`generator/...`) with its size (sha256 too
    up to HASH_LIMIT), each synced to disk first; the file whose presence makes the checkpoint complete."""
    files = {}
    for p in sorted(Path(folder).rglob("*")):
        name = p.relative_to(folder).as_posix()
        if name == CHECKPOINT_MANIFEST or not p.is_file():
            continue
        entry = {"size": p.stat().st_size}
        with open(p, "rb") as f:
            os.fsync(f.fileno())
            if entry["size"] <= HASH_LIMIT:
                entry["sha256"] = hashlib.sha256(f.read()).hexdigest()
        files[name] = entry
    write_json(Path(folder) / CHECKPOINT_MANIFEST, {"format": 1, "files": files})


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_entries(path: Path) -> list[tuple[str, int, str | None]]:
    """(name, size, sha256 or None) of each file the checkpoint's `manifest.json` lists, every field checked: a
    name is an entry of the checkpoint's own folder (a forged `../../x` makes the manifest unreadable, so nothing
    outside the checkpoint is ever taken for one of its files), a size a whole number of bytes."""
    manifest = read_object(Path(path) / CHECKPOINT_MANIFEST).known(("format", "files"))
    entries = [(name, e.known(("size", "sha256"))) for name, e in manifest.records_in("files")]
    return [(entry_name(name, f"{manifest.where}: {e.path}"), e.integer("size", lo=0, hi=2**50),
             e.text("sha256", None, max_len=64)) for name, e in entries]


def listed_files(path: Path) -> dict[str, int] | None:
    """What the checkpoint's `manifest.json` says zh-bert wrote in `path` (name -> size, the manifest itself
    included), or None for a checkpoint without a readable manifest."""
    try:
        files = {name: size for name, size, _ in manifest_entries(path)}
    except ZhBertError:
        return None
    return {CHECKPOINT_MANIFEST: (Path(path) / CHECKPOINT_MANIFEST).stat().st_size, **files}   # the manifest goes first


def _legacy_entry(name: str, is_dir: bool) -> bool:
    """Files a checkpoint written before manifests holds."""
    return (name == GENERATOR) if is_dir else (name in (STATE, "config.json", "model.safetensors", "optimizer.pt")
                                               or re.fullmatch(r"rng-rank\d+\.pt", name) is not None)


def _rename_aside(path: Path, listed: dict[str, int] | None) -> Path:
    """Move a checkpoint to its hidden `.step-*.trash` name (one rename: never half-deleted in plain sight)."""
    trash = path.with_name(f".{path.name}.trash")
    remove_scratch(trash)
    rename_owned(path, trash, listed=listed, legacy=_legacy_entry)
    return trash


def discard(path: Path, step: int = -1) -> list[str]:
    """Delete a checkpoint by its manifest: first out of sight, then its files. A checkpoint holding files
    its manifest does not list (a user's notes) keeps them: only the listed files go, manifest first (so it
    is incomplete at once), and the folder stays with what is left. Returns what was kept."""
    path, listed = Path(path), listed_files(path)
    if foreign_entries(path, _legacy_entry, listed):
        return remove_owned(path, listed, legacy=_legacy_entry)
    trash = _rename_aside(path, listed)
    fault_point("after:trashed", step)
    return remove_owned(trash, listed, legacy=_legacy_entry)


def incomplete_reason(path: Path, deep: bool = False) -> str | None:
    """None if the checkpoint at `path` is complete, else what is wrong, naming the file. `deep` also
    compares the sha256 of the small files (resume does; listing checks sizes only)."""
    path = Path(path)
    if not path.is_dir():
        return "no such checkpoint directory"
    if not (path / CHECKPOINT_MANIFEST).is_file():
        return _legacy_reason(path)
    try:
        entries = manifest_entries(path)
    except ZhBertError as e:
        return _untrusted(path, e)
    if STATE not in {name for name, _, _ in entries}:
        return f"{STATE} is not in {CHECKPOINT_MANIFEST}"
    for name, size, digest in entries:
        f = inside(path, name)
        if f is None:
            return f"{name} in {CHECKPOINT_MANIFEST} leads out of the checkpoint"
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, {CHECKPOINT_MANIFEST} says {size}"
        if deep and digest and hashlib.sha256(f.read_bytes()).hexdigest() != digest:
            return f"{name} does not match its sha256 in {CHECKPOINT_MANIFEST}"
    return None


def _untrusted(path: Path, error: ZhBertError) -> str:
    """Why the manifest of the checkpoint at `path` is not taken at its word, naming the field: the checkpoint
    is then incomplete, so it is never resumed from, and never rotated out (deleting by such a manifest could
    reach files outside the checkpoint)."""
    field = str(error).removeprefix(str(path / CHECKPOINT_MANIFEST) + ": ")
    return f"{CHECKPOINT_MANIFEST} is not to be trusted: {field}"


def _legacy_reason(path: Path) -> str | None:
    """A checkpoint written before manifests: complete if every file it should hold is there."""
    if not (path / STATE).exists():
        return f"{STATE} is missing"
    try:
        world = read_object(path / STATE).integer("num_processes", 1, lo=1, hi=1 << 20)
    except ZhBertError as e:
        return f"{STATE} is unreadable ({str(e).removeprefix(str(path / STATE) + ': ')})"
    for name in ("config.json", "model.safetensors", "optimizer.pt", *(f"rng-rank{r}.pt" for r in range(world))):
        if not (path / name).is_file():
            return f"{name} is missing"
    return None


def _step_dirs(ckpt_root: Path) -> list[Path]:
    """Every `step-N` dir, complete or not, oldest first."""
    ckpt_root = Path(ckpt_root)
    if not ckpt_root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    return [p for p in _step_dirs(ckpt_root) if incomplete_reason(p) is None]


def clean_leftovers(ckpt_root: Path) -> list[str]:
    """Remove what killed saves left (`.step-*.tmp`, `.step-*.trash`); a complete one whose `step-N` is
    missing (killed between the two renames of a replace) is put back instead. Returns what was done."""
    done = []
    ckpt_root = Path(ckpt_root)
    if not ckpt_root.is_dir():
        return done
    for p in sorted(ckpt_root.iterdir()):
        m = _LEFTOVER.match(p.name)
        if not m or not p.is_dir():
            continue
        target = ckpt_root / p.name[1:].split(".")[0]
        if not target.exists() and incomplete_reason(p, deep=True) is None:
            rename_owned(p, target)
            done.append(f"restored {target.name} from an interrupted save")
        else:
            remove_scratch(p)
            done.append(f"removed {p.name} left by an interrupted save")
    return done


def find_resume(resume: str | None, ckpt_root: Path, warn=print) -> Path | None:
    """--resume auto -> newest complete checkpoint (None if there is none), each newer incomplete one
    skipped with a `warn` line; PATH -> that checkpoint, which must be complete."""
    if not resume:
        return None
    if resume == "auto":
        chosen = None
        for path in reversed(_step_dirs(ckpt_root)):
            if chosen is not None:   # older: never resumed from; one whose manifest is forged is never deleted
                reason = _manifest_problem(path)
                if reason:
                    warn(f"warning: {path} is left as it is (never resumed from, rotated out or deleted): {reason}")
                continue
            reason = incomplete_reason(path, deep=True)
            if reason is None:
                chosen = path
            else:
                warn(f"warning: skipping incomplete checkpoint {path}: {reason}")
        return chosen
    reason = incomplete_reason(Path(resume), deep=True)
    if reason is not None:
        hint = (f" ({resume} is a run dir: give one of its checkpoints, or --resume auto with out_dir: {resume})"
                if (Path(resume) / CHECKPOINTS).is_dir() else "")
        raise ZhBertError(f"--resume {resume}: not a complete checkpoint: {reason}{hint}")
    return Path(resume)


def _manifest_problem(path: Path) -> str | None:
    """What makes the manifest of the checkpoint at `path` untrustworthy (a name outside the checkpoint, also
    through a linked subfolder; a field of the wrong type), or None (no manifest, or a well-formed one)."""
    if not (path / CHECKPOINT_MANIFEST).is_file():
        return None
    try:
        entries = manifest_entries(path)
    except ZhBertError as e:
        return _untrusted(path, e)
    out = next((name for name, _, _ in entries if inside(path, name) is None), None)
    return None if out is None else f"{CHECKPOINT_MANIFEST} is not to be trusted: files[{out!r}] leads out of the checkpoint"


def check_resaves(ckpt_root: Path, resume_from: Path | None) -> None:
    """Before any work: a run saves every step after `resume_from` again, and a step dir there that is not a
    complete checkpoint must then be replaced; one holding anything its manifest does not vouch for (a user's
    file, a forged manifest's checkpoint) would stop the run at that save. Refuse it now, in one line."""
    for path in _step_dirs(ckpt_root):
        if (resume_from is not None and path.name <= resume_from.name) or incomplete_reason(path) is None:
            continue
        listed = listed_files(path)
        foreign = foreign_entries(path, _legacy_entry, listed)
        if foreign:
            why = _manifest_problem(path) or f"it holds {', '.join(foreign[:3])}, which no manifest of zh-bert's lists"
            raise ZhBertError(f"{path}: not a complete checkpoint, and this run would have to replace it when it "
                              f"saves that step ({why}); move it out of {ckpt_root} first")


def load_checkpoint(path: Path, *, accelerator, hf_model, optimizer, scheduler, trained: dict | None = None,
                    scaler=NO_SCALING, module=None, objective=None) -> dict:
    """Restore the model (and the objective's other trained models, e.g. ELECTRA's generator, and the training
    module's own tensors), optimizer, scheduler, scaler and this process's RNG; return the trainer state."""
    path = Path(path)
    state = read_state(path)
    if state.get("num_processes", 1) != accelerator.num_processes:
        accelerator.print(f"note: checkpoint was written by {state.get('num_processes')} processes, resuming with "
                          f"{accelerator.num_processes}: data order continues, exact-loss resume is not guaranteed")
    _load_weights(path, hf_model)
    for sub, net in (trained or {}).items():
        if not (path / sub / "model.safetensors").is_file():
            raise ZhBertError(f"{path}: no {sub}/ in this checkpoint: it was not written by a run of this objective")
        _load_weights(path / sub, net)
    if objective is not None:
        _load_module_state(path, module, objective)
    opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    if opt.get("scaler"):   # a disabled scaler ignores it; fp32/bf16 checkpoints store {} (older ones None)
        scaler.load_state_dict(opt["scaler"])
    rng_file = path / f"rng-rank{accelerator.process_index}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, map_location="cpu", weights_only=True))
    return state


def _load_module_state(path: Path, module, objective) -> None:
    """The training module's own tensors (`Objective.module_state`), which the checkpoint must hold exactly."""
    from safetensors.torch import load_file

    file = path / OBJECTIVE_STATE
    tensors = load_file(str(file)) if file.is_file() else {}
    if objective.module_state(module) and not tensors:
        raise ZhBertError(f"{path}: no {OBJECTIVE_STATE} in this checkpoint: it was not written by a run of this "
                          f"objective")
    objective.load_module_state(module, tensors, path)


def _load_weights(folder: Path, model) -> None:
    """`folder/model.safetensors` into `model`, every parameter accounted for (tied ones stored once)."""
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in _tied_names(model)]
    if missing or unexpected:
        raise ZhBertError(f"{folder}: checkpoint does not match the model (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]})")


def read_state(path: Path) -> dict:
    """The trainer state of the (complete) checkpoint at `path`, every field a resume uses typed and in range
    (one line naming the file and the field otherwise): counts are integers ≥ 0, seconds finite."""
    state = read_object(Path(path) / STATE, what="a trainer state (a JSON object)")
    loader, recipe = state.record("loader"), state.record("recipe", None)
    resumes = [{"step": r.integer("step", lo=0), "from": r.text("from"),
                "changed": r.record("changed", Record({}, "")).data} for r in state.records("resumes", [])]
    return {**state.data, "step": state.integer("step", lo=0, hi=2**62),
            "num_processes": state.integer("num_processes", 1, lo=1, hi=1 << 20),
            "tokens_seen": state.integer("tokens_seen", lo=0), "skipped_steps": state.integer("skipped_steps", 0, lo=0),
            "train_seconds": state.number("train_seconds", 0.0, lo=0),
            "train_sequences": state.integer("train_sequences", None, lo=0),
            "recipe": recipe.data if recipe is not None else {}, "resumes": resumes,
            "loader": {"epoch": loader.integer("epoch", lo=0), "position": loader.integer("position", lo=0)}}


def _tied_names(model) -> set[str]:
    """Parameter names that safetensors stores once because they are tied (the decoder weight)."""
    names = set()
    for k in model.state_dict():
        if k == "decoder.weight" or k.endswith(("predictions.decoder.weight", "predictions.decoder.bias",
                                                "generator_lm_head.weight")):
            names.add(k)
    return names
