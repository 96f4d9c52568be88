"""What a distillation teacher is, before any model loads: where `teacher:` points (a folder, run dir or
checkpoint; a catalog alias or Hub id through the model sources a later stage registers), its config.json
checked as a masked LM of a family zh-bert runs, the sha256 a resume compares, and the config `plan` counts."""

from __future__ import annotations

import hashlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, read_json
from zh_bert.train.arch.base import FAMILIES, PRESETS
from zh_bert.train.rundir import model_dir

#: where a teacher that is no local path comes from: callables (name, log) -> model folder, the first answers; the
#: installed package's `zh_bert.model_sources` entry points (the hub stage's `download.local_model`: catalog
#: aliases, Hub ids, converted releases), loaded on first need, so the CLI and the Python API resolve alike
MODEL_SOURCES: list[Callable] = []
MODEL_SOURCE_GROUP = "zh_bert.model_sources"


def model_sources() -> list[Callable]:
    """`MODEL_SOURCES`, filled from the entry points when nothing registered one (a test may put its own first)."""
    if not MODEL_SOURCES:
        MODEL_SOURCES.extend(ep.load() for ep in sorted(entry_points(group=MODEL_SOURCE_GROUP), key=lambda e: e.name))
    return MODEL_SOURCES
_FOUND: dict[str, Path] = {}     # teacher name -> folder, resolved once per process
_HASHED: dict[tuple, str] = {}   # (teacher folder, its weight files' names, sizes, mtimes) -> their sha256
WEIGHT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def teacher_folder(name: str, log=print) -> Path:
    """The model folder of `teacher:`: a folder, run dir (its final/) or checkpoint as given; else the first
    registered model source's answer (downloaded once)."""
    if name in _FOUND:
        return _FOUND[name]
    path = Path(name)
    if path.exists():
        folder = model_dir(name)
    elif path.parent != Path(".") and path.parent.is_dir():   # a mistyped path, not a repo id
        raise ZhBertError(f"teacher {name}: no such folder")
    elif model_sources():
        folder = model_dir(model_sources()[0](name, log=log))
    else:
        raise ZhBertError(f"teacher {name}: no such folder (a catalog alias or Hub id is fetched by `zh-bert "
                          f"download {name}`; give the folder it writes)")
    _FOUND[name] = folder
    return folder


def teacher_facts(name: str) -> dict:
    """What a run records of its teacher (trainer_state.json, run.json) and a resume compares: the name as the
    recipe gives it, the folder it resolved to, the sha256 of its weights (hashed once per process)."""
    folder = teacher_folder(name)
    key = (folder, tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in _weight_files(folder)))
    if key not in _HASHED:
        _HASHED[key] = folder_sha256(folder)
    return {"name": name, "path": str(folder.resolve()), "sha256": _HASHED[key]}


def _weight_files(folder: Path) -> list[Path]:
    names = sorted({*WEIGHT_FILES, *(p.name for p in folder.glob("model-*.safetensors"))})
    return [folder / name for name in names if (folder / name).is_file()]


def folder_sha256(folder: Path) -> str:
    """sha256 of a model folder's config.json and weight files (every safetensors shard), in name order: what a
    resume compares to refuse a changed teacher."""
    digest = hashlib.sha256()
    for path in _weight_files(folder):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


def teacher_config(folder: Path) -> Record:
    """The teacher's config.json, refused in one line unless it is a masked LM of a family zh-bert trains."""
    where = folder / "config.json"
    if not where.is_file():
        raise ZhBertError(f"teacher {folder}: no config.json: not a model folder")
    data = read_json(where, default=None)
    if not isinstance(data, dict):
        raise ZhBertError(f"teacher {where}: not a JSON object")
    config = Record(data, str(where))
    kind = config.text("model_type", None, max_len=100)
    archs = [a for a in config.list("architectures", []) if isinstance(a, str)]
    masked = any(a.endswith("ForMaskedLM") or a == "BertForPreTraining" for a in archs) or not archs
    if kind not in (*FAMILIES, None) or not masked:
        what = f"architectures {', '.join(archs)}" if archs else f"model_type {kind}"
        raise ZhBertError(f"teacher {folder} is not a masked LM zh-bert can run ({what}): give a BERT or ModernBERT "
                          f"masked LM (BertForMaskedLM, BertForPreTraining, ModernBertForMaskedLM)"
                          + ("; an ELECTRA run's masked LM is its generator/" if "Electra" in " ".join(archs) else ""))
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads"):
        config.integer(key, lo=1, hi=1 << 20)
    return config


def plan_teacher(name: str | None, architecture: str) -> tuple[str, str]:
    """(the `model:` value, the architecture) of the teacher `plan` counts, which cannot download: a preset of
    the plan's architecture, a config.json, or a model folder / run dir (its config.json, its family)."""
    if not name:
        raise ZhBertError("--objective distill needs --teacher: a preset (e.g. base), a config.json or a model folder")
    if name in PRESETS:
        return name, architecture
    path = Path(name)
    if not path.exists():
        raise ZhBertError(f"--teacher {name}: plan takes a preset ({', '.join(PRESETS)}), a config.json or a model "
                          f"folder (a catalog alias or Hub id: `zh-bert download {name}` first, then its folder)")
    config = path if path.is_file() else teacher_folder(name) / "config.json"
    data = read_json(config, default=None)
    kind = data.get("model_type") if isinstance(data, dict) else None
    family = FAMILIES.get(kind) or next(a for a in FAMILIES.values() if a.untyped_configs)
    return str(config), family.name
