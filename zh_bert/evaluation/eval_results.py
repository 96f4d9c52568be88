"""`out_dir/eval_results.json`: evaluation figures stored with the run, turned into the card's model-index.

A JSON list of objects with exactly the keys of huggingface_hub's `EvalResult` that the card needs
(`task_type`, `task_name`, `dataset_type`, `dataset_name`, `metric_type`, `metric_name`, `metric_value`),
so `EvalResult(**entry)` works. The newest entry per (task, dataset, metric) wins: re-evaluating replaces.

Read back through `checked_entries`: the file may have been copied from elsewhere or edited by hand, and its
figures go onto cards and boards, so every entry is typed and every figure finite and in its metric's range.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import EVAL_RESULTS as FILENAME
from zh_bert.core.fileio import Record, claim_file, read_json, write_json
from zh_bert.train.rundir import find_run_dir

ENTRY_KEYS = ("task_type", "task_name", "dataset_type", "dataset_name", "metric_type", "metric_name", "metric_value")
_IDENTITY = ENTRY_KEYS[:-1]
#: the range a figure of a metric may take: accuracy as a fraction [0, 1] or a percent [0, 100]; CMRC's EM and
#: F1 in percent (the official scorer's scale), a macro-F1 as a fraction; a perplexity is at least 1; a Spearman
#: correlation x100 (MTEB's scale) in [-100, 100]. A metric not named here only has to be finite.
METRIC_RANGE = {"accuracy": (0, 100), "exact_match": (0, 100), "f1": (0, 100), "perplexity": (1, None),
                "cosine_spearman": (-100, 100)}
#: text details an entry may carry beside the card's keys, checked when present (the board reads them)
TEXT_DETAILS = ("split", "method", "protocol", "zh_bert_version", "trained_on")


def entry(task_type: str, task_name: str, dataset_type: str, dataset_name: str, metric_type: str,
          metric_name: str, metric_value: float, **details) -> dict:
    """One figure; `details` (split, protocol, seeds, data_sha256, zh_bert_version, ...) travel beside the
    card's keys: the card reads only those, so a figure stays reproducible without breaking `EvalResult`."""
    return {**dict(zip(ENTRY_KEYS, (task_type, task_name, dataset_type, dataset_name, metric_type, metric_name,
                                    round(float(metric_value), 6)))), **details}


def metric_range(metric_type: str) -> tuple[float | None, float | None]:
    return METRIC_RANGE.get(metric_type, (None, None))


def checked_entry(rec: Record) -> dict:
    """One entry read from a file: its card keys text, its figure finite and within its metric's range; a
    wrong field is one line naming the file and the field (`eval_results.json: [2].metric_value: ...`)."""
    for key in ENTRY_KEYS[:-1]:
        rec.text(key, max_len=1000)
    for key in TEXT_DETAILS:
        rec.text(key, None, max_len=1000)
    lo, hi = metric_range(rec.data["metric_type"])
    rec.number("metric_value", lo=lo, hi=hi)
    return rec.data


def checked_entries(data: object, where: str, key: str = "") -> list[dict]:
    """A list of eval_results entries (the file itself, or a record's `entries` field), each checked."""
    if not isinstance(data, list):
        kind = "an object (the Trainer's eval_results.json is a summary, not zh-bert's entries)" \
            if isinstance(data, dict) else type(data).__name__
        raise ZhBertError(f"{where}: {key + ': ' if key else ''}expected a JSON list of eval_results entries, "
                          f"got {kind}")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ZhBertError(f"{where}: {key}[{i}]: expected an object, got {type(item).__name__}")
        out.append(checked_entry(Record(item, where, f"{key}[{i}]")))
    return out


def load(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        return []
    return checked_entries(read_json(path), str(path))


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
