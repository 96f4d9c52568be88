"""What the board reads: the figures of a model (its `eval_results.json` or its card's `model-index`) placed in
the board's columns, the notes on what could not be placed, and the verification record `leaderboard verify`
writes.

A claim and a re-run are the same kind of thing here, a list of eval_results entries; only where they came
from differs. So one placement, `sort_entries`, turns either into `{column: percent}` plus notes, and a cell
compares the two. A claim is never dropped silently: one that fits no column (another split than the column's,
a task without a column, a metric the board does not show, a figure out of range, another protocol) becomes a
note with the reason, and the notes travel with the row into board.json, board.md and the page.
"""

from __future__ import annotations

from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, read_json
from zh_bert.corpus.task_registry import scored, suite_named, suites, task_named, tasks
from zh_bert.corpus.task_spec import Column
from zh_bert.evaluation.eval_results import checked_entries
from zh_bert.leaderboard.cards import card_split, claim_text, identity, metric_of, percent_of

RECORD_SCHEMA = "zh-bert-verification/1"
#: the fine-tuning protocol is what the board compares; zero-shot and PET figures are other columns' business
BOARD_METHOD = "finetune"
#: default |claimed - re-run| in points within which a claim counts as verified (seed noise of a 5-split mean)
TOLERANCE = 0.5


def columns() -> list[Column]:
    """The board's columns, from the task declarations: each suite's score, then each task's columns, in
    declaration order (a task declared later gets its columns on the next board)."""
    return [s.score.column for s in suites() if s.score] + [c for t in tasks() for c in t.columns]


def task_columns() -> dict[str, dict[str, Column]]:
    """A task (`cards.identity`) -> {metric: the column it fills}."""
    return {t.name: {c.metric: c for c in t.columns} for t in tasks() if t.columns}


def protocols() -> set[str]:
    return {t.protocol for t in tasks()} | {s.protocol for s in suites()}


#: the most claims one note lists in board.json (the rest are counted); an MTEB card holds a few hundred
NOTE_CLAIMS = 1000


def _method_of(e: dict, default: str = BOARD_METHOD) -> str:
    """`method` detail, else read from a suite task's name "FewCLUE x (fewclue-v3, pet, ...)" (cards drop
    details), else `default` (the column's own: a card that says nothing claims what the column holds)."""
    if e.get("method"):
        return str(e["method"])
    name = str(e.get("task_name", ""))
    inner = name[name.find("(") + 1:name.find(")")].split(", ") if "(" in name else []
    return inner[1] if len(inner) > 1 and inner[0] in protocols() else default


def _no_column(task: str | None) -> str:
    """Why a task has no column on the board."""
    if task == "mteb":
        return ("an MTEB embedding evaluation (a classifier or a similarity on frozen sentence embeddings), not the "
                "fine-tuning the columns compare")
    named = {t.name: t for t in tasks()}
    if task and task.startswith("clue-"):
        name = task[5:]
        ours = named.get(name) or named.get(name.removesuffix("2020"))
        if ours and ours.columns and ours.suites:
            return (f"CLUE's full-data {name.upper()} (its own train and test sets): the board's {ours.title} "
                    f"columns hold {suite_named(ours.suites[0]).title}'s {ours.title}, another training set and "
                    f"test set")
        return f"CLUE's {name.upper()}: the board has no column for it"
    return f"the board has no column for this task (its columns: {', '.join(c.label for c in columns())})"


def _out_of_range(metric: str, value: float) -> str:
    scale = "a fraction in [0, 1] or a percent in [0, 100]" if metric == "accuracy" else "a percent in [0, 100]"
    return f"{metric} {value!r} is out of range ({scale})"


def placement(e: dict) -> tuple[str | None, float | None, str]:
    """(column, percent, "") for a claim the board shows, else (None, None, the reason it is not shown)."""
    task, metric, split = identity(e), metric_of(e), card_split(e)
    cols = task_columns().get(task or "")
    if cols is None:
        return None, None, _no_column(task)
    column = cols.get(metric)
    if column is None:
        labels = " and ".join(c.label for c in cols.values())
        return None, None, f"metric {metric or '(none)'}: the {labels} column{'s' * (len(cols) > 1)} " \
                           f"show{'s' * (len(cols) == 1)} {' and '.join(cols)}"
    protocol = task_named(task).protocol
    if e.get("protocol") and e["protocol"] != protocol:
        return None, None, f"protocol {e['protocol']}: the {column.label} column holds {protocol} figures"
    if split != column.split:
        given = "no split given" if split is None else f"split {split}"
        return None, None, f"{given}: the {column.label} column holds {column.split} figures"
    method = _method_of(e, column.method)
    if method != column.method:
        held = "fine-tuned figures" if column.method == BOARD_METHOD else f"{column.method} figures"
        return None, None, f"method {method}: the {column.label} column holds {held}"
    value = percent_of(metric, float(e["metric_value"]))
    if value is None:
        return None, None, _out_of_range(metric, e["metric_value"])
    return column.key, round(value, 2), ""


def sort_entries(entries: list[dict], source: str) -> tuple[dict[str, float], list[dict]]:
    """{column: percent} of a list of entries (the last one of a column wins, as in eval_results.json), with
    a suite's score when all its scored tasks are there (FewCLUE's eight); and a note for each entry not placed."""
    out: dict[str, float] = {}
    notes = []
    first: dict[str, dict] = {}
    for e in entries:
        key, value, why = placement(e)
        if key is None:
            notes.append({"source": source, "reason": why, "claim": claim_text(e)})
            continue
        if key in out and out[key] != value:     # one source, two figures for one cell: both named
            notes.append({"source": source, "reason": f"two claims for the {key} column: "
                                                      f"{claim_text(first[key])} and {claim_text(e)}; the last is shown",
                          "claim": claim_text(e)})
        first.setdefault(key, e)
        out[key] = value
    for suite in suites():
        keys = [t.columns[0].key for t in scored(suite) if t.columns]
        if suite.score and keys and all(k in out for k in keys):
            out[suite.score.column.key] = round(sum(out[k] for k in keys) / len(keys), 2)
    return out, notes


def scores_of(entries: list[dict]) -> dict[str, float]:
    return sort_entries(entries, "")[0]


def group_notes(notes: list[dict]) -> list[dict]:
    """Notes with the same source and reason as one: {source, reason, claims, more} (`more`: claims past
    NOTE_CLAIMS, counted, not listed), in the order they first came."""
    grouped: dict[tuple, dict] = {}
    for n in notes:
        g = grouped.setdefault((n["source"], n["reason"]), {"source": n["source"], "reason": n["reason"],
                                                            "claims": [], "more": 0})
        if n.get("claim") and n["claim"] != "?":
            if len(g["claims"]) < NOTE_CLAIMS:
                g["claims"].append(n["claim"])
            else:
                g["more"] += 1
    return list(grouped.values())


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


# --------------------------------------------------------------------------------------- records

def _check_record_fields(rec: Record) -> None:
    """The fields the board shows and `publish` compares, typed: one line naming the record and the field."""
    model = rec.record("model")
    model.text("id", max_len=1000)
    for key in ("source", "revision", "weights_sha256"):
        model.text(key, None, max_len=4096)
    for key in ("zh_bert_version", "date", "command", "hardware", "method"):
        rec.text(key, None, max_len=10_000)
    rec.number("wall_s", None, lo=0)
    rec.number("tolerance", None, lo=0, hi=100)
    for i, seed in enumerate(rec.list("seeds", None, max_len=10_000) or []):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise rec.error("seeds", f"[{i}]: expected an integer seed, got {type(seed).__name__}")
    protocols = rec.record("protocols", None)
    for key, _ in (protocols.items() if protocols is not None else ()):
        protocols.text(key, max_len=100)


def read_record(path: str | Path) -> dict:
    """A verification record, checked: its schema, entries that are eval_results entries (typed, each figure
    in its metric's range), and every field the board shows typed."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
        raise ZhBertError(f"{path}: not a zh-bert verification record (no \"schema\": \"{RECORD_SCHEMA}\")")
    rec = Record(data, str(path))
    checked_entries(rec.raw("entries"), str(path), "entries")
    _check_record_fields(rec)
    return data


def is_record(path: Path) -> bool:
    """A JSON file that says it is a verification record (cheap: the schema string in its first bytes)."""
    if not path.is_file() or path.suffix != ".json":
        return False
    try:
        with open(path, "rb") as f:
            return RECORD_SCHEMA.encode() in f.read(4096)
    except OSError as e:
        raise ZhBertError(f"{path}: cannot read ({e.strerror or e})") from None
