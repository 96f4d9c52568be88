"""FewCLUE (Xu et al. 2021, arXiv:2107.07498): nine Chinese few-shot tasks, each with five 32-shot-per-class
train/dev pairs (`train_k`, `dev_k`, k = 0..4) and a labelled public test set (`test_public`).

The protocol the published table uses, and the only one this module offers: fine-tune on `train_k`, choose the
checkpoint on `dev_k`, report `test_public`, averaged over the five pairs; the FewCLUE score is the mean over the
eight tasks other than CHID. A split is named in every figure, and a task is read only as (train_k, dev_k,
test_public), so nothing can be selected on the split it is reported on.

The data lives in `corpora/tasks/fewclue/TASK/` of a source checkout (see its SOURCE.md: origin, no licence
stated, sha256 of every file), found like the other bundled tasks (`tasks.task_data_dir`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import Record
from zh_bert.corpus.corpus_io import read_jsonl
from zh_bert.evaluation.splits import keep_apart, roles_of
from zh_bert.evaluation.tasks import MAX_TEXT, Example, TaskData, label_of, task_data_dir

PAIRS = 5                  # train_k / dev_k pairs, k = 0..4
TEST = "test_public"        # the labelled public test set: the split every FewCLUE figure is reported on
SOURCE_URL = "https://github.com/CLUEbenchmark/FewCLUE"


def _wsc_text(row: Record) -> str:
    """CLUEWSC's text with the candidate marked `_…_` and the pronoun `[…]` (the CLUE baselines' markers), so
    a sentence classifier sees which two spans the label is about."""
    text, t = row.text("text", max_len=MAX_TEXT), row.record("target")
    spans = sorted([(t.integer("span1_index", lo=0), t.text("span1_text"), "_", "_"),
                    (t.integer("span2_index", lo=0), t.text("span2_text"), "[", "]")], reverse=True)
    for start, span, left, right in spans:   # the later span first: the earlier index stays valid
        if text[start:start + len(span)] != span:
            raise t.error("span1_index" if left == "_" else "span2_index",
                          f"span {span!r} is not at index {start} of {text[:40]!r}...")
        text = text[:start] + left + span + right + text[start + len(span):]
    return text


@dataclass(frozen=True)
class FewClueTask:
    name: str
    kind: str                                   # what is classified
    text_a: Callable[[Record], str]
    label: str = "label"                        # the field holding the label name
    text_b: Callable[[Record], str] | None = None


def _field(name: str) -> Callable[[Record], str]:
    return lambda row: row.text(name, max_len=MAX_TEXT)


FEWCLUE_TASKS: dict[str, FewClueTask] = {t.name: t for t in (
    FewClueTask("eprstmt", "e-commerce review sentiment", _field("sentence")),
    FewClueTask("csldcp", "scientific discipline of an abstract, 67 classes", _field("content")),
    FewClueTask("tnews", "news title topic, 15 classes", _field("sentence"), label="label_desc"),
    FewClueTask("iflytek", "app description topic, 119 classes", _field("sentence"), label="label_des"),
    FewClueTask("ocnli", "natural language inference", _field("sentence1"), text_b=_field("sentence2")),
    FewClueTask("bustm", "dialogue short-text matching", _field("sentence1"), text_b=_field("sentence2")),
    FewClueTask("csl", "keywords true to the abstract", lambda r: "；".join(r.texts("keyword")), text_b=_field("abst")),
    FewClueTask("cluewsc", "pronoun coreference", _wsc_text),
)}
#: CHID (idiom cloze, 7 candidates) is a multiple-choice task: not a sentence classifier's, and outside the score
MULTIPLE_CHOICE = ("chid",)
SCORE_TASKS = tuple(FEWCLUE_TASKS)

#: accuracy on test_public of the published table (README of the source, base model chinese-roberta-wwm-ext)
PUBLISHED = {
    "Human": {"score": 82.49, "eprstmt": 90.0, "bustm": 88.0, "ocnli": 90.3, "csldcp": 68.0, "tnews": 71.0,
              "cluewsc": 98.0, "iflytek": 66.0, "csl": 84.0, "chid": 87.1},
    "FineTuning": {"score": 46.37, "eprstmt": 73.7, "bustm": 61.1, "ocnli": 34.0, "csldcp": 28.6, "tnews": 43.6,
                   "cluewsc": 50.2, "iflytek": 29.6, "csl": 50.1, "chid": 15.0},
    "PET": {"score": 54.34, "eprstmt": 78.6, "bustm": 64.0, "ocnli": 43.9, "csldcp": 56.9, "tnews": 51.2,
            "cluewsc": 50.0, "iflytek": 35.1, "csl": 55.0, "chid": 61.3},
    "Zero-shot": {"score": 40.07, "eprstmt": 54.8, "bustm": 50.0, "ocnli": 34.4, "csldcp": 26.23, "tnews": 25.3,
                  "cluewsc": 50.0, "iflytek": 27.7, "csl": 52.2, "chid": 57.6},
}


def fewclue_score(accuracy: dict[str, float]) -> float:
    """The FewCLUE score: the mean test_public accuracy of the eight tasks other than CHID (as the published
    table computes it); every one of them must be there."""
    missing = [t for t in SCORE_TASKS if t not in accuracy]
    if missing:
        raise ZhBertError(f"the FewCLUE score needs all of {', '.join(SCORE_TASKS)}; missing {', '.join(missing)}")
    return sum(accuracy[t] for t in SCORE_TASKS) / len(SCORE_TASKS)


def check_task_names(names: list[str]) -> list[str]:
    """The FewCLUE tasks `names` asks for (all nine for an empty list), refusing others in one line."""
    every = (*FEWCLUE_TASKS, *MULTIPLE_CHOICE)
    for n in names:
        if n not in every:
            raise ZhBertError(f"unknown FewCLUE task '{n}'{suggest(n, every)}: one of {', '.join(every)}")
    return list(dict.fromkeys(names)) or list(every)


def task_files(name: str, pairs: int = PAIRS) -> list[Path]:
    """The files a task's figure is computed from: train_k and dev_k of the pairs used, and test_public."""
    root = task_data_dir(f"fewclue/{name}")
    return [root / f"{s}_{k}.json" for k in range(pairs) for s in ("train", "dev")] + [root / f"{TEST}.json"]


def _read(task: FewClueTask, split: str) -> list[Example]:
    """A split's records as examples; a record missing a field, or holding one of the wrong type, is one line
    naming `file:line` and the field."""
    path = task_data_dir(f"fewclue/{task.name}") / f"{split}.json"
    out = []
    for where, row in read_jsonl(path):
        rec = Record.of(row, where, f"a FewCLUE {task.name} record (a JSON object)")
        out.append(Example(task.text_a(rec), label_of(rec, task.label), task.text_b(rec) if task.text_b else None))
    if not out:
        raise ZhBertError(f"{path}: no records")
    return out


def split_names(k: int) -> tuple[str, str, str]:
    """The files of pair k, in role order: train_k trains, dev_k chooses, test_public reports."""
    if not 0 <= k < PAIRS:
        raise ZhBertError(f"FewCLUE split {k}: the pairs are 0..{PAIRS - 1}")
    return f"train_{k}", f"dev_{k}", TEST


def load_fewclue(name: str, k: int) -> TaskData:
    """Task `name` as (train_k, dev_k, test_public), kept apart (`splits.keep_apart`: a dev_k text that is in
    test_public is not chosen on; a train_k text in either is not trained on; train_k's own repeats are kept,
    as the few-shot sample was drawn); labels: every label name of its five pairs and test_public, so the
    classifier head is the same size for every pair."""
    if name in MULTIPLE_CHOICE:
        raise ZhBertError(f"FewCLUE task {name} is multiple choice: its items are scored by the masked LM over the "
                          f"candidates (zh_bert.evaluation.prompts), not as a sentence classifier's")
    check_task_names([name])
    names = split_names(k)
    task = FEWCLUE_TASKS[name]
    train, dev, test = (_read(task, s) for s in names)
    folder = task_data_dir(f"fewclue/{name}")
    files = [folder / f"{s}.json" for s in names]
    train, dev, notes = keep_apart(f"fewclue-{name}", (train, dev, test), files, lambda e: (e.text_a, e.text_b),
                                   drop_repeats=False)
    labels = sorted({e.label for e in train + dev + test})
    return TaskData(f"fewclue-{name}", train, dev, test, labels,
                    notes=[f"FewCLUE {name} ({task.kind}): train_{k} {len(train)}, dev_{k} {len(dev)}, "
                           f"{TEST} {len(test)}; the checkpoint is chosen on dev_{k}, reported on {TEST}", *notes],
                    roles=roles_of(files))


ID_KEYS = ("id", "idx")     # a record's id in FewCLUE's files (CLUEWSC: idx), what a prediction line names


def public_records(name: str) -> tuple[list[dict], str]:
    """test_public's records as written, and their id field, each record checked for what its line of the
    prediction file needs: the id (a number or text, in every record), and the official label field where the
    task classifies by another one (TNEWS, IFLYTEK: the code). Read before any training, so a record that
    cannot be written is one line naming `file:line` and the field, not an error after hours of training."""
    path = task_data_dir(f"fewclue/{name}") / f"{TEST}.json"
    rows, key = [], None
    for where, row in read_jsonl(path):
        rec = Record.of(row, where, f"a FewCLUE {name} record (a JSON object)")
        key = key or next((k for k in ID_KEYS if k in rec), ID_KEYS[0])
        if not isinstance(rec.raw(key), (int, str)) or isinstance(rec.raw(key), bool) or rec.raw(key) == "":
            raise rec.error(key, f"{'missing' if key not in rec else 'not a number or text'}: the id each line of "
                                 f"the prediction file names (every record of {TEST} needs one)")
        if name in FEWCLUE_TASKS and FEWCLUE_TASKS[name].label != "label":
            label_of(rec, "label")
        rows.append(row)
    if not rows:
        raise ZhBertError(f"{path}: no records")
    return rows, key


def official_predictions(name: str, predicted: list) -> list[dict]:
    """Predictions in FewCLUE's submission format, one {"id", "label"} per test record in file order (CHID:
    {"id", "answer": candidate index}); a label is written as the official field holds it (TNEWS/IFLYTEK:
    the code, not the name this module classifies by)."""
    rows, key = public_records(name)
    if len(predicted) != len(rows):
        raise ZhBertError(f"fewclue {name}: {len(predicted)} predictions for {len(rows)} test records")
    if name in MULTIPLE_CHOICE:
        return [{"id": r[key], "answer": int(p)} for r, p in zip(rows, predicted)]
    task = FEWCLUE_TASKS[name]
    code = {str(r[task.label]): r["label"] for r in rows}     # label name -> the official field's value
    return [{"id": r[key], "label": code.get(str(p), p)} for r, p in zip(rows, predicted)]
