"""What the board reads: the figures of a model (its `eval_results.json` or its card's `model-index`) mapped onto
the board's columns, and the verification record `zh-bert leaderboard verify` writes.

A claim and a re-run are the same kind of thing here, a list of eval_results entries; only where they came
from differs. So one mapping, `scores_of`, turns either into `{column: percent}`, and a cell compares the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json
from zh_bert.evaluation.eval_results import ENTRY_KEYS
from zh_bert.evaluation.fewclue import FEWCLUE_TASKS, MULTIPLE_CHOICE, fewclue_score
from zh_bert.evaluation.suite import PROTOCOLS

#: written by `leaderboard verify` beside a run (RUN/verification.json) and uploaded by `publish --with-verification`
VERIFICATION_FILE = "verification.json"
RECORD_SCHEMA = "zh-bert-verification/1"
#: the fine-tuning protocol is what the board compares; zero-shot and PET figures are other columns' business
BOARD_METHOD = "finetune"
#: default |claimed - re-run| in points within which a claim counts as verified (seed noise of a 5-split mean)
TOLERANCE = 0.5


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    split: str


COLUMNS: tuple[Column, ...] = (
    Column("fewclue", "FewCLUE score", "test_public"),
    *(Column(f"fewclue-{t}", t.upper(), "test_public") for t in (*FEWCLUE_TASKS, *MULTIPLE_CHOICE)),
    Column("cmrc2018-em", "CMRC 2018 EM", "dev"),
    Column("cmrc2018-f1", "CMRC 2018 F1", "dev"),
    Column("chnsenticorp", "ChnSentiCorp", "test"),
    Column("tnews", "TNEWS", "test"),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)


def _split_of(e: dict) -> str:
    """An entry's split: its `split` detail, else the first word of its metric name ("test_public accuracy")."""
    return str(e.get("split") or str(e.get("metric_name", "")).split(" ")[0])


def _method_of(e: dict) -> str:
    """`method` detail, else read from the suite's task name "FewCLUE x (fewclue-v2, pet, ...)" (cards drop details)."""
    if e.get("method"):
        return str(e["method"])
    name = str(e.get("task_name", ""))
    inner = name[name.find("(") + 1:name.find(")")].split(", ") if "(" in name else []
    return inner[1] if len(inner) > 1 and inner[0] in PROTOCOLS.values() else BOARD_METHOD


def column_of(e: dict) -> str | None:
    """The board column an eval_results entry fills, or None (other metrics, splits or methods)."""
    dtype, metric, split = str(e.get("dataset_type", "")), str(e.get("metric_type", "")), _split_of(e)
    if dtype.startswith("fewclue-") and metric == "accuracy" and split == "test_public":
        key = dtype
        return key if key in COLUMN_KEYS and _method_of(e) == BOARD_METHOD else None
    if dtype == "cmrc2018" and split == "dev" and metric in ("exact_match", "f1"):
        return "cmrc2018-em" if metric == "exact_match" else "cmrc2018-f1"
    if metric == "accuracy" and split == "test":
        if dtype == "seamew/ChnSentiCorp":
            return "chnsenticorp"
        if dtype == "fewclue" and "TNEWS" in str(e.get("dataset_name", "")):
            return "tnews"
    return None


def as_percent(e: dict) -> float:
    """Accuracies are stored as fractions, CMRC's EM/F1 as percents (its official script's scale)."""
    v = float(e["metric_value"])
    return v * 100 if e.get("metric_type") == "accuracy" and v <= 1 else v


def scores_of(entries: list[dict]) -> dict[str, float]:
    """{column: percent} of a list of entries (the last one of a column wins, as in eval_results.json), with
    the FewCLUE score when all eight of its tasks are there."""
    out: dict[str, float] = {}
    for e in entries:
        key = column_of(e)
        if key is not None:
            out[key] = round(as_percent(e), 2)
    tasks = {k.removeprefix("fewclue-"): v for k, v in out.items() if k.startswith("fewclue-")}
    if all(t in tasks for t in FEWCLUE_TASKS):
        out["fewclue"] = round(fewclue_score(tasks), 2)
    return out


def cell(claimed: float | None, verified: float | None, split: str, tolerance: float) -> dict:
    """One score cell: verified (re-run here, and the claim, if any, within `tolerance` points), self-reported
    (only the claim) or mismatch (both, further apart than `tolerance`); `value` is the figure shown."""
    if verified is None:
        status = "self-reported"
    elif claimed is None or abs(claimed - verified) <= tolerance:
        status = "verified"
    else:
        status = "mismatch"
    value = verified if verified is not None else claimed
    return {"status": status, "value": value, "claimed": claimed, "verified": verified, "split": split}


# --------------------------------------------------------------------------------------- model-index

def _at(obj, path: str, kind: type | tuple, where: str, what: str):
    if not isinstance(obj, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ZhBertError(f"{where}: {path}: expected {what or names}, got {type(obj).__name__} {str(obj)[:40]!r}")
    return obj


def model_index_entries(meta: dict, where: str) -> list[dict]:
    """The card's `model-index` as eval_results entries; a malformed one is one line naming its YAML path
    (`README.md: model-index[0].results[2].metrics[0].value: expected a number, got str 'n/a'`)."""
    index = meta.get("model-index")
    if index is None:
        return []
    out = []
    for i, model in enumerate(_at(index, "model-index", list, where, "a list")):
        base = f"model-index[{i}]"
        results = _at(model, base, dict, where, "a mapping").get("results", [])
        for j, r in enumerate(_at(results, f"{base}.results", list, where, "a list")):
            rp = f"{base}.results[{j}]"
            r = _at(r, rp, dict, where, "a mapping")
            task = _at(r.get("task", {}), f"{rp}.task", dict, where, "a mapping")
            data = _at(r.get("dataset", {}), f"{rp}.dataset", dict, where, "a mapping")
            for k, m in enumerate(_at(r.get("metrics", []), f"{rp}.metrics", list, where, "a list")):
                mp = f"{rp}.metrics[{k}]"
                m = _at(m, mp, dict, where, "a mapping")
                value = m.get("value")
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ZhBertError(f"{where}: {mp}.value: expected a number, got {type(value).__name__} "
                                      f"{str(value)[:40]!r}")
                e = {"task_type": task.get("type"), "task_name": task.get("name"),
                     "dataset_type": data.get("type"), "dataset_name": data.get("name"),
                     "metric_type": m.get("type"), "metric_name": m.get("name") or "", "metric_value": value}
                if data.get("split"):
                    e["split"] = data["split"]
                out.append(e)
    return out


# --------------------------------------------------------------------------------------- records

def read_record(path: str | Path) -> dict:
    """A verification record, checked: its schema, and entries shaped as eval_results entries."""
    path = Path(path)
    rec = read_json(path)
    if not isinstance(rec, dict) or rec.get("schema") != RECORD_SCHEMA:
        raise ZhBertError(f"{path}: not a zh-bert verification record (no \"schema\": \"{RECORD_SCHEMA}\")")
    entries = rec.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and set(ENTRY_KEYS) <= e.keys()
                                                for e in entries):
        raise ZhBertError(f"{path}: \"entries\" must be a list of eval_results entries ({', '.join(ENTRY_KEYS)})")
    model = rec.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("id"), str):
        raise ZhBertError(f"{path}: \"model\" must name the model it verified ({{\"id\": ...}})")
    return rec


def is_record(path: Path) -> bool:
    """A JSON file that says it is a verification record (cheap: the schema string in its first bytes)."""
    if not path.is_file() or path.suffix != ".json":
        return False
    with open(path, "rb") as f:
        return RECORD_SCHEMA.encode() in f.read(4096)
