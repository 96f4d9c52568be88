"""Head kinds: what `eval suite` asks of a task's head, by the kind its declaration names (`Task.head`). Every head
trains on the one loop (`loop.fit_head`); a kind says how its task's files are read and checked before any model loads,
how one setting (a pair, a learning rate, the seeds) runs, what chance is, and how its predictions are written in
the benchmark's own format.

- `classify` (`classify.ClassifyHead`): a sequence classifier; under `--method zero-shot|pet` the masked LM on the
  task's pattern (`prompts.ChoiceHead`) instead.
- `choice` (`prompts.ChoiceHead`): multiple choice through the masked LM (CHID); `finetune` trains it as PET.
- `span` (`qa.SpanHead`): span extraction, a fixed number of epochs, nothing chosen (`--cmrc-*` options).
- `tag` (`ner_finetune.TagHead`, `ner_tasks.TagKind`): token tagging (NER), chosen on dev by entity F1.

A kind whose head chooses (`chooses`) runs under the suite's choosing protocol (`suite.run_task`: each learning rate
of the grid, kept by the choosing split, over the task's pairs); one that does not runs `fixed` once per seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.squad_files import load_squad
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_spec import CHOICE, CLASSIFY, SPAN, TAG, Task
from zh_bert.evaluation.finetune import run
from zh_bert.evaluation.loop import TaskBar, init_label
from zh_bert.evaluation.ner_tasks import TagKind
from zh_bert.evaluation.prompts import prompt_data, run_prompt_task
from zh_bert.evaluation.qa import run_cmrc
from zh_bert.evaluation.splits import refuse_shared_spans
from zh_bert.evaluation.tasks import files_of, load_pair, public_records, report_file


def sha256_of(paths: list[Path]) -> str:
    """One digest over the data files a figure was computed from (names and bytes, in order)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def data_files(task: Task, pairs: int) -> list[Path]:
    """The files a suite figure of `task` is computed from: train_k and dev_k of the pairs used and the reported
    split (a task of one set of splits: its three files)."""
    if task.pairs is None:
        return files_of(task, task.splits)
    folder = task_data_dir(task.folder)
    return [folder / f.format(k=k) for k in range(pairs) for f in (task.pairs.train, task.pairs.choose)] + \
        [folder / task.pairs.report]


class ClassifyKind:
    """Sentence(-pair) classification: `finetune` a classifier, or `zero-shot`/`pet` the masked LM on the pattern.
    A setting's summary names its choosing figure `choose_key` (the dev accuracy)."""
    chooses, choose_key = True, "dev_acc"

    def method(self, method: str) -> str:
        return method

    def check(self, task: Task, method: str, k: int | None) -> None:
        (load_pair if method == "finetune" else prompt_data)(task, k)

    def setting(self, ckpt, task: Task, k: int | None, method: str, cfg, seeds: list[int], log, args) -> dict:
        if method != "finetune":
            return run_prompt_task(ckpt, task, k or 0, method, cfg, seeds, log=log)
        summary = run(ckpt, load_pair(task, k), cfg, seeds, log=log)
        summary["test_predictions"] = summary["per_seed"][0].get("test_pred")
        return summary

    def chance(self, task: Task) -> tuple[float, str]:
        gold = [e.label for e in load_pair(task, 0 if task.pairs else None).test or []]
        return (max(gold.count(g) for g in set(gold)) / len(gold) if gold else 0.0), "majority"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id", "label"} per reported record in file order, the label as the official field holds it
        (TNEWS, IFLYTEK: the code, not the name the classifier predicts)."""
        rows, key = public_records(task)
        _check_count(task, predicted, rows)
        label, code = getattr(task.reader, "label", None), getattr(task.reader, "code", None)
        codes = {str(r[label]): r[code] for r in rows if label in r and code in r}   # label name -> official value
        return [{"id": r[key], "label": codes.get(str(p), p)} for r, p in zip(rows, predicted)]


class ChoiceKind(ClassifyKind):
    """Multiple choice scored by the masked LM over each item's candidates: `finetune` trains it as PET."""

    def method(self, method: str) -> str:
        return "pet" if method == "finetune" else method

    def check(self, task: Task, method: str, k: int | None) -> None:
        prompt_data(task, k or 0)

    def chance(self, task: Task) -> tuple[float, str]:
        n = len(prompt_data(task, 0).test[0].candidates)
        return 1 / n, f"1 in {n}"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id", "answer": candidate index} per reported record in file order (CHID's format)."""
        rows, key = public_records(task)
        _check_count(task, predicted, rows)
        return [{"id": r[key], "answer": int(p)} for r, p in zip(rows, predicted)]


def _check_count(task: Task, predicted: list, rows: list) -> None:
    if len(predicted) != len(rows):
        raise ZhBertError(f"{task.dataset_name}: {len(predicted)} predictions for {len(rows)} reported records")


class SpanKind:
    """Span extraction: trained a fixed number of epochs (`--cmrc-epochs`, `--cmrc-lr`, `--cmrc-seq-len`) on the
    official train file the user gives (`--cmrc-train`) or the bundled stand-in, scored on the reported split."""
    chooses = False

    def method(self, method: str) -> str:
        return "finetune"

    def train_file(self, task: Task, given: str | None) -> Path:
        """The train file the user gave: the file, or the one named like the official one inside a folder."""
        p = Path(given)
        if p.is_dir():
            found = [p / n for n in task.splits.official_train if (p / n).is_file()]
            if not found:
                raise ZhBertError(f"--cmrc-train {p}: no {' or '.join(task.splits.official_train)} in this folder")
            return found[0]
        if not p.is_file():
            raise ZhBertError(f"--cmrc-train {p}: no such file or folder")
        return p

    def data(self, task: Task, given: str | None) -> dict:
        """The files the suite trains and scores on, read (and checked) once, before any training: the train file
        (or the bundled stand-in) shares no question id and no context with the reported split."""
        train_path = self.train_file(task, given) if given else task_data_dir(task.folder) / task.splits.train
        dev_path = report_file(task)
        train, dev = load_squad(train_path), load_squad(dev_path)
        refuse_shared_spans(train, f"--cmrc-train {train_path}" if given else f"the trial file {train_path}", dev,
                            str(dev_path))
        return {"train": train, "dev": dev, "train_file": train_path.name,
                "trained_on": "train" if given else task.splits.names[0],
                "data_sha256": sha256_of([train_path, dev_path])}

    def fixed(self, ckpt, task: Task, args, cfg, qa, data: dict, log=print) -> dict:
        """Fixed epochs on train (or the stand-in), scored on the reported split; what it trained on is part of
        the result."""
        if data["trained_on"] != "train":
            log(f"{task.name}: no official train file given (--cmrc-train): training on the {data['trained_on']} "
                f"set ({len(data['train'])} questions); {task.report_name} figures are not comparable with published "
                f"ones")
        with TaskBar(f"{task.name} ({init_label(cfg)})", 0, "batch", log) as bar:   # steps + prediction batches
            res = run_cmrc(ckpt, data["train"], data["dev"], dataclasses.replace(
                cfg, lr=args.cmrc_lr, seq_len=args.cmrc_seq_len, epochs=args.cmrc_epochs), qa, args.seed_list(),
                log=lambda m: bar.log(f"  {task.name}: {m}"), tick=bar.tick)
        return {**res, **{k: data[k] for k in ("trained_on", "train_file", "data_sha256")},
                "reported_split": task.report_name, "seeds": args.seed_list(), "lr": args.cmrc_lr,
                "seq_len": args.cmrc_seq_len, "epochs": args.cmrc_epochs}


#: head kind (`Task.head`) -> what the suite asks of it
HEAD_KINDS = {CLASSIFY: ClassifyKind(), CHOICE: ChoiceKind(), SPAN: SpanKind(), TAG: TagKind()}


def head_kind(task: Task):
    if task.head not in HEAD_KINDS:
        raise ZhBertError(f"task {task.name}: head kind {task.head!r} is none of {', '.join(HEAD_KINDS)}")
    return HEAD_KINDS[task.head]
