"""`out_dir/eval_results.json`: evaluation figures stored with the run, turned into the card's model-index.

A JSON list of objects with exactly the keys of huggingface_hub's `EvalResult` that the card needs
(`task_type`, `task_name`, `dataset_type`, `dataset_name`, `metric_type`, `metric_name`, `metric_value`),
so `EvalResult(**entry)` works. The newest entry per (task, dataset, metric) wins: re-evaluating replaces.
"""

from __future__ import annotations

import json
from pathlib import Path

from zh_bert.errors import ZhBertError
from zh_bert.fileio import write_json

FILENAME = "eval_results.json"
KEYS = ("task_type", "task_name", "dataset_type", "dataset_name", "metric_type", "metric_name", "metric_value")
_IDENTITY = KEYS[:-1]


def entry(task_type: str, task_name: str, dataset_type: str, dataset_name: str, metric_type: str,
          metric_name: str, metric_value: float) -> dict:
    return dict(zip(KEYS, (task_type, task_name, dataset_type, dataset_name, metric_type, metric_name,
                           round(float(metric_value), 6))))


def find_run_dir(ckpt: str | Path) -> Path | None:
    """The run dir that holds `ckpt`: the dir itself, `RUN/final` or `RUN/checkpoints/step-N`; None otherwise."""
    p = Path(ckpt).resolve()
    for cand in (p, p.parent, p.parent.parent):
        if (cand / "run.json").is_file() or (cand / "recipe.yaml").is_file():
            return cand
    return None


def load(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ZhBertError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ZhBertError(f"{path}: expected a JSON list of objects")
    return data


def record(run_dir: str | Path, entries: list[dict]) -> Path:
    """Merge `entries` into RUN/eval_results.json (atomic write); same identity -> replaced, kept in place."""
    path = Path(run_dir) / FILENAME
    merged = load(run_dir)
    index = {tuple(d.get(k) for k in _IDENTITY): i for i, d in enumerate(merged)}
    for e in entries:
        key = tuple(e[k] for k in _IDENTITY)
        if key in index:
            merged[index[key]] = e
        else:
            index[key] = len(merged)
            merged.append(e)
    write_json(path, merged)
    return path


def record_for_checkpoint(ckpt: str | Path, entries: list[dict]) -> Path | None:
    """Record when `ckpt` belongs to a run dir; a bare checkpoint folder has nowhere to store results."""
    run_dir = find_run_dir(ckpt)
    return record(run_dir, entries) if run_dir else None


def resolve_checkpoint(ckpt: str | Path) -> Path:
    """A model folder (has config.json): `ckpt` itself, or `ckpt/final` when given a run dir."""
    p = Path(ckpt)
    if not p.exists():
        raise ZhBertError(f"{p}: no such checkpoint")
    for cand in (p, p / "final"):
        if (cand / "config.json").is_file():
            return cand
    raise ZhBertError(f"{p}: not a checkpoint (no config.json) nor a run dir with final/")
