"""The tag head kind (NER): `zh-bert finetune MODEL --task ner --train F --dev F [--test F]` on the user's own files,
`--task resume_ner` (a declared task, whose files `--train/--dev/--test` may replace), and the declared NER tasks
under `eval suite --suite ner`.

A declared task reads its files through its declaration: train trains, choose chooses, report reports; a task
whose train and choose name the same file (MSRA NER, whose train split is not bundled) trains on a fixed 90% of
it and chooses on the other 10% (`tasks.ner.carve_choose`), said in the notes, unless the user gives the official
train file (`eval suite --tag-train`, alias `--msra-train`; `finetune --train`). Test is never trained or chosen on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_registry import ENTITY_METRICS
from zh_bert.corpus.task_spec import FINETUNE_PROTOCOL, Task
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.heads.base import HeadKind
from zh_bert.evaluation.heads.distill import distilled_entries
from zh_bert.evaluation.heads.tag.head import Decoding, TaggingConfig, head_entries, run_tagger
from zh_bert.evaluation.heads.tag.tagging import write_tag_predictions
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.tasks.ner import NerTask, load_ner


@dataclass
class TagFiles:
    """`finetune --task ner`: the user's files (or replacements for a declared NER task's), and predictions."""
    train: Optional[str] = option(None, metavar="PATH", help="NER: the train file (CoNLL: a character and its tag per "
                                                             "line; or UER's TSV text_a/label)")
    dev: Optional[str] = option(None, metavar="PATH", help="NER: the dev file, on which the best state is chosen")
    test: Optional[str] = option(None, metavar="PATH", help="NER: the test file the figure is reported on (without "
                                                            "tags: predicted, not scored)")
    predictions: Optional[str] = option_of(Shared, "predictions", help="NER: write test's predictions to "
                                                                       "DIR/TASK.conll (character, gold, predicted "
                                                                       "tag), which conlleval and seqeval re-score")
    tag_scheme: str = option_of(TaggingConfig, "tag_scheme")
    window_stride: int = option_of(TaggingConfig, "window_stride")
    crf: bool = option_of(TaggingConfig, "crf")
    decode: Optional[Decoding] = option_of(TaggingConfig, "decode")

    def __post_init__(self):
        self.tagging()          # --decode argmax with --crf refused before any file is read

    def tagging(self) -> TaggingConfig:
        return TaggingConfig(window_stride=self.window_stride, tag_scheme=self.tag_scheme, crf=self.crf,
                             decode=self.decode)


@dataclass
class TagSuiteOptions:
    """The tag head's options under `eval suite`: the official train file of a task that bundles none (MSRA NER;
    `--msra-train` is the same option under the task's name), and how tags are decoded."""
    tag_train: Optional[str] = option(None, metavar="PATH", flags=("--tag-train", "--msra-train"),
                                      help="the official train file of a NER task that bundles none (MSRA NER: "
                                           "train.tsv, or a folder holding it); default: train on a fixed 90% of dev, "
                                           "choose on the other 10%, said so")
    crf: bool = option_of(TaggingConfig, "crf")
    decode: Optional[Decoding] = option_of(TaggingConfig, "decode")

    def __post_init__(self):
        self.tagging()          # --decode argmax with --crf refused here

    def tagging(self) -> TaggingConfig:
        return TaggingConfig(crf=self.crf, decode=self.decode)


def declared_files(task: Task) -> tuple[Path | None, Path, Path]:
    """(train or None: carve it from choose, choose, report) of a declared task; a train file the user gave stands
    as an absolute path in the declaration (`with_train`)."""
    folder = task_data_dir(task.folder)
    train, choose, report = (folder / f for f in (task.splits.train, task.splits.choose, task.splits.report))
    return (None if train == choose else train), choose, report


def load_declared(task: Task, scheme: str | None = None) -> NerTask:
    return load_ner(task.name, *declared_files(task), scheme)


def with_train(task: Task, given: str | None) -> Task:
    """`task` with the user's official train file (a file, or a folder holding one of `official_train`'s names)
    in place of its bundled stand-in; unchanged for None or a task that declares no official train file."""
    if given is None or not task.splits or not task.splits.official_train:
        return task
    p = Path(given)
    if p.is_dir():
        found = [p / n for n in task.splits.official_train if (p / n).is_file()]
        if not found:
            raise ZhBertError(f"{given}: no {' or '.join(task.splits.official_train)} in this folder")
        p = found[0]
    if not p.is_file():
        raise ZhBertError(f"{given}: no such file or folder")
    names = ("train", task.splits.names[1].split(" ")[0], task.splits.names[2])
    return dataclasses.replace(task, splits=dataclasses.replace(task.splits, train=str(p.resolve()), names=names))


def ner_entries(summary: dict, task: Task | None) -> list[dict]:
    """eval_results entries: entity P/R/F1 on test in percent, the metrics' unit (a declared task's dataset and
    metrics; the user's files: `conll`)."""
    n = len(summary["seeds"])
    name = "Named-entity recognition" + (f" (mean of {n} seeds)" if n > 1 else "")
    dtype, dname = task.dataset if task else ("conll", summary["task"])
    return [entry("token-classification", name, dtype, dname, m.type, f"test {m.name}", m.of_fraction(summary[m.key]),
                  protocol=FINETUNE_PROTOCOL, split="test")
            for m in ENTITY_METRICS if summary.get(m.key) is not None]


class TagKind(HeadKind):
    """Token tagging (NER): a stock token classifier (the tag head on the one loop), each rate of the suite's grid
    chosen on dev by entity F1; entity F1 on test."""
    name, what, choose_key = "tag", "a token classifier", "dev_f1"
    finetune_options = (TagFiles,)
    suite_options = (TagSuiteOptions,)
    teacher_class = "AutoModelForTokenClassification"

    def __init__(self):
        self._said: set[str] = set()

    # --------------------------------------------------------------- finetune
    def load(self, spec: str, job, opts: dict) -> NerTask:
        """A declared NER task (its files, or those given in their place) or the user's files (--train and --dev
        required)."""
        files = opts[TagFiles]
        task = self.declared(spec)
        if task is None:
            missing = [f"--{n}" for n in ("train", "dev") if getattr(files, n) is None]
            if missing:
                raise ZhBertError(f"--task {spec}: give {' and '.join(missing)} (and --test for a reported figure): "
                                  f"CoNLL files (a character and its tag per line) or UER's TSV")
            return load_ner(Path(files.train).parent.name or spec, files.train, files.dev, files.test,
                            files.tag_scheme)
        train, dev, test = declared_files(task)
        return load_ner(task.name, files.train or train, files.dev or dev, files.test or test, files.tag_scheme)

    def header(self, data: NerTask) -> tuple[str, list[str], list[str]]:
        return (f"task {data.name}: {len(data.train)} train / {len(data.dev)} dev / {len(data.test or [])} test "
                f"sentences, {data.scheme.name.upper()} tags, {len(data.types)} entity types ({', '.join(data.types)})",
                data.notes, data.warnings)

    def teacher_labels(self, data: NerTask, opts: dict) -> tuple[list[str], str]:
        learned = opts[TagFiles].tagging().learned(data)
        return learned.tags(data.types), f"task {data.name} ({learned.name.upper()} tags)"

    def run(self, ckpt_dir, data, cfg, opts, seeds, log=print, tok=None, objective=None, keep=None) -> Result:
        files = opts[TagFiles]
        kw = {"objective": objective} if objective is not None else {}
        res = run_tagger(ckpt_dir, data, cfg, files.tagging(), seeds, log=log, tok=tok, predictions=files.predictions,
                         keep=keep, **kw)
        if files.predictions:
            log(f"predictions: {Path(files.predictions) / (data.name + '.conll')}")
        return res

    def entries(self, result: Result, spec: str, data: NerTask, opts: dict) -> list[dict]:
        """Entity P/R/F1 on a tagged test split: a declared task's dataset when its own files were used, the user's
        files (`conll`) otherwise."""
        if not data.scored:
            return []
        files = opts[TagFiles]
        summary = result.summary()
        replaced = any([files.train, files.dev, files.test])
        declared = None if replaced else self.declared(spec)
        return distilled_entries(head_entries(ner_entries(summary, declared), summary), summary)

    # --------------------------------------------------------------- eval suite
    def check(self, task: Task, method: str, k: int | None, opts: dict) -> None:
        load_declared(self.with_options(task, opts))

    def with_options(self, task: Task, opts: dict) -> Task:
        return with_train(task, opts[TagSuiteOptions].tag_train)

    def setting(self, ckpt, task: Task, k: int | None, method: str, cfg, seeds: list[int], log, opts: dict) -> Result:
        data = load_declared(self.with_options(task, opts))
        if task.name not in self._said:        # the notes once per task, not once per learning rate
            self._said.add(task.name)
            for line in [f"note: {n}" for n in data.notes] + [f"warning: {w}" for w in data.warnings]:
                log(line)
        return run_tagger(ckpt, data, cfg, opts[TagSuiteOptions].tagging(), seeds, log=log)

    def suite_facts(self, result: Result) -> dict:
        return {k: result.facts[k] for k in ("crf", "decode") if result.facts.get(k)}

    def mark_entries(self, entries: list[dict], summary: dict) -> list[dict]:
        return head_entries(entries, summary)

    def chance(self, task: Task) -> tuple[float, str]:
        return 0.0, "all O"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id": FILE:LINE, "tags": [...]} per test sentence (the CoNLL file is `write_official`'s)."""
        sentences = load_declared(task).test or []
        return [{"id": s.where.rsplit("/", 1)[-1], "tags": p} for s, p in zip(sentences, predicted)]

    def write_official(self, task: Task, predicted: list, folder: Path) -> Path:
        """`folder/TASK.conll`: character, gold and predicted tag per line, as conlleval and seqeval read it."""
        data = load_declared(task)
        path = Path(folder) / f"{task.name}.conll"
        write_tag_predictions(path, data.test, predicted, data.scheme)
        return path


TAG_HEAD = TagKind()
