"""Training checkpoints that resume exactly: written to a temp dir, renamed when complete.

Layout of `out_dir/checkpoints/step-NNNNNNN/`:
  config.json + model.safetensors   stock HF model (the main process writes it)
  optimizer.pt                      optimizer, scheduler, grad-scaler state (tensors + plain types only,
                                    loaded with weights_only=True: nothing is unpickled)
  rng-rankR.pt                      torch/cuda/numpy/python RNG of each process
  trainer_state.json                step, tokens, loader position, ... — written last: its presence
                                    marks a complete checkpoint
A kill -9 at any moment leaves either a complete `step-*` dir or a `.step-*.tmp` dir that is ignored.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from zh_bert.errors import ZhBertError
from zh_bert.fileio import write_json

STATE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


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


def save_checkpoint(ckpt_root: Path, step: int, *, accelerator, hf_model, optimizer, scheduler,
                    trainer_state: dict, keep_last: int) -> Path:
    """Every process calls this (each saves its RNG); returns the final dir.

    The temp dir has a fixed name (not `fileio.atomic_dir`'s random one) because every rank writes into it.
    """
    ckpt_root = Path(ckpt_root)
    final = ckpt_root / step_dir_name(step)
    tmp = ckpt_root / f".{final.name}.tmp"
    main = accelerator.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    torch.save(rng_state(), tmp / f"rng-rank{accelerator.process_index}.pt")
    if main:
        hf_model.save_pretrained(str(tmp), safe_serialization=True)
        scaler = getattr(accelerator, "scaler", None)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict() if scaler is not None else None}, tmp / "optimizer.pt")
    accelerator.wait_for_everyone()
    if main:
        write_json(tmp / STATE, {**trainer_state, "step": step, "num_processes": accelerator.num_processes})
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in list_checkpoints(ckpt_root)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    ckpt_root = Path(ckpt_root)
    if not ckpt_root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_root.iterdir()
             if (m := _STEP_DIR.match(p.name)) and (p / STATE).is_file()]
    return [p for _, p in sorted(found)]


def find_resume(resume: str | None, ckpt_root: Path) -> Path | None:
    """--resume auto -> newest complete checkpoint (None if there is none); PATH -> that checkpoint."""
    if not resume:
        return None
    if resume == "auto":
        found = list_checkpoints(ckpt_root)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / STATE).is_file():
        raise ZhBertError(f"--resume {resume}: not a complete checkpoint (no {STATE})")
    return path


def load_checkpoint(path: Path, *, accelerator, hf_model, optimizer, scheduler) -> dict:
    """Restore model, optimizer, scheduler, scaler and this process's RNG; return the trainer state."""
    from safetensors.torch import load_file

    path = Path(path)
    state = json.loads((path / STATE).read_text(encoding="utf-8"))
    if state.get("num_processes", 1) != accelerator.num_processes:
        accelerator.print(f"note: checkpoint was written by {state.get('num_processes')} processes, resuming with "
                          f"{accelerator.num_processes}: data order continues, exact-loss resume is not guaranteed")
    weights = load_file(str(path / "model.safetensors"))
    missing, unexpected = hf_model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in _tied_names(hf_model)]
    if missing or unexpected:
        raise ZhBertError(f"{path}: checkpoint does not match the model (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]})")
    opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    scaler = getattr(accelerator, "scaler", None)
    if scaler is not None and opt.get("scaler"):
        scaler.load_state_dict(opt["scaler"])
    rng_file = path / f"rng-rank{accelerator.process_index}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, map_location="cpu", weights_only=True))
    return state


def _tied_names(model) -> set[str]:
    """Parameter names that safetensors stores once because they are tied (the decoder weight)."""
    names = set()
    for k in model.state_dict():
        if k.endswith("predictions.decoder.weight") or k.endswith("predictions.decoder.bias"):
            names.add(k)
    return names
