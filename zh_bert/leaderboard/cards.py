"""A model card's `model-index`, read the ways the community writes it, as eval_results entries.

zh-bert's own cards name a dataset `fewclue-eprstmt` and put the split in the metric's name ("test_public
accuracy"). The Hub's conventions differ: the Trainer and the Hub's evaluator write `type: clue` with
`config: tnews` (older cards: `args: tnews`) and `split: validation`; MTEB writes `type: C-MTEB/TNews-
classification` with figures in percent; hand-written cards write `name: CLUE TNEWS`, `type: tnews`, an
accuracy as 0.56 or 56.0, or no split at all. `identity` turns any of them into one task key, `card_split`
into one split name and `percent_of` into one scale, so the board places a claim by what it says, not how.

A card is a stranger's text: what cannot be read (a value that is not a number, a result that is not a
mapping) is returned as a note naming its YAML path, and the rest of the card is still read.
"""

from __future__ import annotations

import math
import re

from zh_bert.core.fileio import preview
from zh_bert.corpus.task_registry import suites, tasks, tasks_of
from zh_bert.evaluation.eval_results import metric_range

#: CLUE's tasks (the full-data benchmark; `clue` on the Hub), FewCLUE's few-shot versions aside
CLUE_TASKS = ("afqmc", "tnews", "iflytek", "cmnli", "ocnli", "cluewsc2020", "csl", "cmrc2018", "drcd", "chid",
              "c3", "diagnostics")
#: a card's split words -> the board's (the Hub's `validation` is the benchmarks' dev set)
CARD_SPLITS = {"validation": "dev", "valid": "dev", "val": "dev", "dev": "dev", "eval": "dev", "test": "test",
          "test_public": "test_public", "trial": "trial", "train": "train"}
#: a card's metric ids -> the board's
METRICS = {"accuracy": "accuracy", "acc": "accuracy", "exact_match": "exact_match", "exact": "exact_match",
           "em": "exact_match", "f1": "f1", "cosine_spearman": "cosine_spearman",
           "cos_sim_spearman": "cosine_spearman"}   # MTEB's STS main score, before and after mteb 1.12
#: the most claims of one card the board reads (a hostile card cannot make it build a huge board)
MAX_CLAIMS = 5000
#: the most notes one card's model-index gives (then one note counting the rest)
MAX_CARD_NOTES = 20


def _letters_digits(text: object) -> str:
    """Lower case, letters and digits only: 'CLUE TNEWS' -> 'cluetnews', 'CMRC 2018' -> 'cmrc2018'."""
    return re.sub(r"[^0-9a-z]", "", str(text or "").lower())


def _clue_task(word: str) -> str | None:
    """CLUE's name of a task a card names (its WSC is `cluewsc2020`, which cards write `wsc` or `cluewsc`)."""
    plain = _letters_digits(word)
    return next((c for c in (plain, f"{plain}2020", f"clue{plain}2020") if c in CLUE_TASKS), None)


def _suite_task(e: dict, low: str, pname: str, config: str) -> str | None:
    """A task of a suite the card names by the suite's dataset (`type: fewclue` with `config: tnews`, `FewCLUE
    tnews`): the config, else the longest task name the dataset's name ends with."""
    for suite in suites():
        if not any(low == a or a in pname for a in suite.aliases):
            continue
        names = [t.name for t in tasks_of(suite)]
        task = _letters_digits(config) or next((n for n in sorted(names, key=len, reverse=True) if n in pname), "")
        return task if task in names else None
    return None


def identity(e: dict) -> str | None:
    """The task an entry is about: a declared task's name (`zh_bert.corpus.task_registry`: its dataset type, a
    suite's dataset with the task as config or name, one of its aliases such as a Hub id), `clue-<task>` (CLUE's
    full-data tasks), `mteb`, or None (unknown)."""
    dtype, name = str(e.get("dataset_type") or ""), str(e.get("dataset_name") or "")
    config = str(e.get("config") or "")
    low, pname = dtype.lower(), _letters_digits(name)
    declared = tasks()
    exact = next((t.name for t in declared if t.dataset[0].lower() == low), None)
    if exact:
        return exact
    if any(low == a or a in pname for s in suites() for a in s.aliases):
        return _suite_task(e, low, pname, config)
    if low.startswith(("c-mteb/", "mteb/")) or name.upper().startswith("MTEB "):
        return "mteb"
    for t in declared:
        if t.aliases and (low in t.aliases or low.rsplit("/", 1)[-1] in t.aliases or pname in t.aliases):
            return t.name
    words = (config, pname, pname.removeprefix("clue")) if low in ("clue", "clue/clue") or pname.startswith(
        "clue") else (dtype, name)
    task = next((t for t in map(_clue_task, words) if t), None)
    same = next((t.name for t in declared if task and task in t.aliases), None)   # CLUE's copy of our dataset
    return same or (f"clue-{task}" if task else None)


def card_split(e: dict) -> str | None:
    """An entry's split in the board's words: its `split`, else the first word of its metric name
    ("test_public accuracy", as zh-bert's own cards say it); None when it names none."""
    split = e.get("split")
    if split:
        return CARD_SPLITS.get(str(split).lower(), str(split))
    first = str(e.get("metric_name") or "").split(" ")[0].lower()
    return CARD_SPLITS.get(first)


def metric_of(e: dict) -> str:
    metric = str(e.get("metric_type") or "")
    return METRICS.get(metric.lower(), metric)


def percent_of(metric: str, value: float) -> float | None:
    """A figure on the board's scale (percent), or None when it is out of its metric's range. An accuracy in
    [0, 1] is a fraction and one in (1, 100] a percent: a percent accuracy of at most 1 would be below chance on
    every task the board shows but IFLYTEK (119 classes, chance 0.84%), so such a figure is read as a fraction.
    CMRC's EM and F1 are percents as its official scorer prints them."""
    lo, hi = metric_range(metric)
    if not math.isfinite(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        return None
    return value * 100 if metric == "accuracy" and value <= 1 else value


def _text(value: object) -> str | None:
    """A card field as text: strings as they are, numbers and booleans as YAML wrote them, anything else None."""
    if isinstance(value, str):
        return value[:200]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _mapping(value: object, path: str, notes: list[dict]) -> dict | None:
    if isinstance(value, dict):
        return value
    if value is not None:
        notes.append({"where": path, "reason": f"{path}: expected a mapping, got {type(value).__name__}",
                      "claim": "?"})
    return None


def _config(dataset: dict) -> str | None:
    """The dataset's configuration: `config` (the Hub's key), else the Trainer's older `args` (text, or a
    mapping whose values name it)."""
    config = _text(dataset.get("config"))
    args = dataset.get("args")
    if config is None and isinstance(args, dict):
        args = next((v for v in args.values() if isinstance(v, str)), None)
    return config if config is not None else _text(args)


def _metric_entries(result: dict, rp: str, base: dict, notes: list[dict]) -> list[dict]:
    metrics = result.get("metrics")
    if not isinstance(metrics, list):
        notes.append({"where": f"{rp}.metrics", "claim": _claim_label(base),
                      "reason": f"{rp}.metrics: expected a list, got {type(metrics).__name__}"})
        return []
    out = []
    for k, m in enumerate(metrics):
        mp = f"{rp}.metrics[{k}]"
        m = _mapping(m, mp, notes)
        if m is None:
            continue
        value, metric = m.get("value"), _text(m.get("type")) or ""
        e = {**base, "metric_type": metric, "metric_name": _text(m.get("name")) or "", "where": mp}
        if not _finite_number(value):
            shown = f"{type(value).__name__} {preview(value)}"
            notes.append({"where": mp, "claim": f"{_claim_label(e)}: {metric} {_claimed_value(value)}",
                          "reason": f"{mp}.value: expected a finite number, got {shown}"})
            continue
        out.append({**e, "metric_value": value})
    return out


def _finite_number(value: object) -> bool:
    """A number a figure can be: finite, and an integer that a float holds (YAML reads 400 digits as an int, and
    `math.isfinite` of it is an OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) < 10 ** 300


def _claimed_value(value: object) -> str:
    """A claimed value as a note shows it: text as written, anything else through the bounded preview."""
    return value[:40] if isinstance(value, str) else preview(value)


def _claim_label(e: dict) -> str:
    name = e.get("dataset_name") or e.get("dataset_type") or "?"
    config = e.get("config")
    name += f" [{config}]" if config and str(config).lower() not in str(name).lower() else ""
    return f"{name} ({e.get('split') or card_split(e) or 'no split'})"


def claim_text(e: dict) -> str:
    """How a note shows a claim: 'MTEB TNews (validation): accuracy 52.41'."""
    value = e.get("metric_value")
    shown = f"{value:.4g}" if _finite_number(value) else _claimed_value(value)
    return f"{_claim_label(e)}: {e.get('metric_name') or e.get('metric_type')} {shown}"


def model_index_entries(meta: dict, where: str) -> tuple[list[dict], list[dict]]:
    """The card's `model-index` as eval_results entries (with `split`, `config` and `where`, the YAML path),
    and a note for each part that cannot be read (`model-index[0].results[2].metrics[0].value: expected a
    finite number, got str '0,857'`)."""
    index, notes, out = meta.get("model-index"), [], []
    if index is None:
        return [], []
    if not isinstance(index, list):
        return [], [{"where": "model-index", "claim": "?",
                     "reason": f"model-index: expected a list, got {type(index).__name__}"}]
    for i, model in enumerate(index):
        model = _mapping(model, f"model-index[{i}]", notes) or {}
        results = model.get("results") or []
        if not isinstance(results, list):
            notes.append({"where": f"model-index[{i}].results", "claim": "?",
                          "reason": f"model-index[{i}].results: expected a list, got {type(results).__name__}"})
            continue
        for j, r in enumerate(results):
            rp = f"model-index[{i}].results[{j}]"
            r = _mapping(r, rp, notes)
            if r is None or len(out) >= MAX_CLAIMS:
                continue
            task = _mapping(r.get("task"), f"{rp}.task", notes) or {}
            data = _mapping(r.get("dataset"), f"{rp}.dataset", notes) or {}
            base = {"task_type": _text(task.get("type")) or "", "task_name": _text(task.get("name")) or "",
                    "dataset_type": _text(data.get("type")) or "", "dataset_name": _text(data.get("name")) or "",
                    "config": _config(data), "split": _text(data.get("split"))}
            out += _metric_entries(r, rp, base, notes)
    if len(notes) > MAX_CARD_NOTES:    # one card cannot fill the board: the first ones, and how many more
        more = len(notes) - MAX_CARD_NOTES
        notes = notes[:MAX_CARD_NOTES] + [{"where": "model-index", "claim": "?",
                                           "reason": f"{more:,} more unreadable parts of this card's model-index"}]
    for n in notes:
        n["source"] = where
    return out, notes
