"""`out_dir/eval_results.json`: evaluation figures stored with the run, turned into the card's model-index.

A JSON list of objects with exactly the keys of huggingface_hub's `EvalResult` that the card needs
(`task_type`, `task_name`, `dataset_type`, `dataset_name`, `metric_type`, `metric_name`, `metric_value`),
so `EvalResult(**entry)` works. The newest entry per (task, dataset, metric) wins: re-evaluating replaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import claim_file, read_json, write_json
from zh_bert.train.rundir import find_run_dir

FILENAME = "eval_results.json"
ENTRY_KEYS = ("task_type", "task_name", "dataset_type", "dataset_name", "metric_type", "metric_name", "metric_value")
_IDENTITY = ENTRY_KEYS[:-1]


def entry(task_type: str, task_name: str, dataset_type: str, dataset_name: str, metric_type: str,
          metric_name: str, metric_value: float, **details) -> dict:
    """One figure; `details` (split, protocol, seeds, data_sha256, zh_bert_version, ...) travel beside the
    card's keys: the card reads only those, so a figure stays reproducible without breaking `EvalResult`."""
    return {**dict(zip(ENTRY_KEYS, (task_type, task_name, dataset_type, dataset_name, metric_type, metric_name,
                                    round(float(metric_value), 6)))), **details}


def load(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        return []
    data = read_json(path)
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ZhBertError(f"{path}: expected a JSON list of objects")
    return data


def latest(entries: list[dict]) -> list[dict]:
    """The newest entry per identity (entries are in time order), each where its identity first appeared."""
    by_identity = {tuple(e.get(k) for k in _IDENTITY): e for e in entries}  # re-assigning keeps the place
    return list(by_identity.values())


def record(run_dir: str | Path, entries: list[dict]) -> Path:
    """Merge `entries` into RUN/eval_results.json (atomic write); same identity -> replaced, kept in place."""
    path = Path(run_dir) / FILENAME
    old = load(run_dir)
    claim_file(path, ours=lambda _: all(set(ENTRY_KEYS) <= e.keys() for e in old), flag="eval results",
               what="an eval_results.json zh-bert wrote")
    write_json(path, latest(old + list(entries)))
    return path


def record_for_checkpoint(ckpt: str | Path, entries: list[dict]) -> Path | None:
    """Record when `ckpt` belongs to a run dir; a bare checkpoint folder has nowhere to store results."""
    run_dir = find_run_dir(ckpt)
    return record(run_dir, entries) if run_dir else None


@dataclass
class CheckpointArgs:
    """The model a command evaluates or fine-tunes, and whether its figures go into RUN/eval_results.json."""
    ckpt: str = option(positional=True, metavar="CKPT", help="model folder, or a run dir (uses RUN/final)")
    no_record: bool = option(False, help="do not write RUN/eval_results.json")
