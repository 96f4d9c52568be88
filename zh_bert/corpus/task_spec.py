"""What a benchmark task is, as one declaration: a `Task` holds everything that differs between tasks (its files
and which split trains, chooses and reports, the reader, the head kind, metrics with units and the official
scorer's definitions, the protocol version, published rows with their source, board columns, contamination test
text, PET pattern and verbalizer), a `Suite` what a group of tasks shares (its protocol, its score). The
declarations themselves, and the lookups every command makes, are in `task_registry`.

Data only, at the corpus stage: `clean --decontaminate` reads each suite's test text here, and every later stage
(fine-tuning, the suite, the board, the model card, ablations) asks the same objects. The head kind is a name the
evaluation stage turns into a head object (`zh_bert.evaluation.heads`), as a recipe's `architecture` is a name
`train/arch` turns into a family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the protocol of `zh-bert finetune --task`: train trains, the best state on dev is kept, test reports
FINETUNE_PROTOCOL = "finetune-v1"
#: the head kinds (`Task.head`; `zh_bert.evaluation.heads` turns each into an object): sentence(-pair)
#: classification (what `zh-bert finetune --task` trains), multiple choice through the masked LM, span extraction
CLASSIFY, CHOICE, SPAN = "classify", "choice", "span"
#: the head kind of token tagging (NER): a token classifier, chosen on dev by entity F1
TAG = "tag"
#: the head kind of sentence embeddings: pooled, L2-normalised vectors compared by cosine (the STS sets)
EMBED = "embed"


@dataclass(frozen=True)
class Metric:
    """A figure a task reports: `key` its field in a result (`test_acc`, `em`), `type` its eval_results
    `metric_type` (accuracy, exact_match, f1), `unit` (fraction: 0..1; percent: 0..100, as the official scorer
    prints it), `definition`, what the benchmark's own scorer computes, and `label`, its name in tables (default:
    the type)."""
    key: str
    type: str
    unit: str
    definition: str
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.type

    def percent(self, value: float) -> float:
        """A value in this metric's unit, in percent."""
        return value * 100 if self.unit == "fraction" else value

    def of_fraction(self, value: float) -> float:
        """A result's figure (always a fraction) in this metric's unit: what eval_results entries and cards hold."""
        return value * 100 if self.unit == "percent" else value


@dataclass(frozen=True)
class Column:
    """A board column: its key, its label, the split its figures are on, the metric it shows (in percent), and the
    method whose figures it holds (fine-tuned; the STS columns hold the model as it is, zero-shot, as C-MTEB)."""
    key: str
    label: str
    split: str
    metric: str = "accuracy"
    method: str = "finetune"


@dataclass(frozen=True)
class Reference:
    """A published row that stands beside ours: its name in the source's table, its figures by metric type (in
    percent), the source, the method it compares with (finetune, pet, zero-shot; None: every method, as a human
    row), whether it is the row drawn beside our figure (`beside`; the others are listed), and what the source
    measured (`note`: the model, how many runs)."""
    row: str
    figures: dict[str, float]
    source: str
    method: str | None = "finetune"
    beside: bool = True
    note: str = ""


@dataclass(frozen=True)
class Splits:
    """One set of files and the role of each: `train` trains, `choose` picks what is kept (the best state, a
    learning rate; None: nothing is chosen, a fixed number of epochs), `report` gives the figure. `names` is what
    each split is called in figures and notes; `official_train`, the names of the official train file when the
    bundled `train` stands in for it (a folder the user gives is searched for them)."""
    train: str
    choose: str | None
    report: str
    names: tuple[str, str | None, str] = ("train", "dev", "test")
    official_train: tuple[str, ...] = ()

    @property
    def report_name(self) -> str:
        return self.names[2]


@dataclass(frozen=True)
class Pairs:
    """Few-shot pairs (FewCLUE): `count` train/choose pairs, `{k}` in their names, and one report file."""
    count: int
    train: str = "train_{k}.json"
    choose: str = "dev_{k}.json"
    report: str = "test_public.json"

    def split(self, k: int) -> Splits:
        stem = [Path(f.format(k=k)).stem for f in (self.train, self.choose, self.report)]
        return Splits(self.train.format(k=k), self.choose.format(k=k), self.report, names=(stem[0], stem[1], stem[2]))

    @property
    def report_name(self) -> str:
        return Path(self.report).stem


@dataclass(frozen=True)
class Pattern:
    """A task as cloze (zero-shot, PET): `template` with {a} (text_a), {b} (text_b) and one {blank}; `words` each
    label's word. A task whose items bring their own candidates (CHID) has `words` None and the template
    `#idiom#`, its blank."""
    template: str
    words: dict[str, str] | None


@dataclass(frozen=True)
class Task:
    """One benchmark task, declared once; every command asks it for what differs (see the module docstring).

    `head` is the head kind (classify, span, choice); `reader` reads one split file (`.read(path)` -> examples);
    `folder` is where its files are (under the task data roots, or absolute); `splits` the one set of files
    `finetune --task` and a suite without pairs use, `pairs` a suite's few-shot pairs; `test_text` says what of its
    reported split counts as test text in a corpus (`.examples(key, path, split)`; None: not looked for);
    `in_score` whether it counts in its suite's score; `task_type`, `dataset_type`, `dataset_name` what its
    eval_results entries and model-index say; `headline` the metric a plot shows (default: the first)."""
    name: str
    title: str
    head: str
    reader: Any
    folder: str
    splits: Splits | None = None
    pairs: Pairs | None = None
    suites: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    metrics: tuple[Metric, ...] = ()
    protocol: str = FINETUNE_PROTOCOL
    published: tuple[Reference, ...] = ()
    columns: tuple[Column, ...] = ()
    test_text: Any = None
    pattern: Pattern | None = None
    in_score: bool = False
    task_type: str = "text-classification"
    headline: str = ""
    dataset_type: str = ""
    dataset_name: str = ""
    description: str = ""

    @property
    def layout(self) -> Splits | Pairs:
        """The files a suite runs the task on: its pairs when it has them, else its one set of splits."""
        return self.pairs or self.splits

    @property
    def report_name(self) -> str:
        """The split every figure of the task is reported on (test_public, test, dev)."""
        return self.layout.report_name

    @property
    def dataset(self) -> tuple[str, str]:
        """(dataset_type, dataset_name) of its eval_results entries and model-index."""
        return self.dataset_type or self.name, self.dataset_name or self.title

    @property
    def main_metric(self) -> Metric:
        """The figure a plot or a one-number summary shows: `headline` (a metric type), else the first metric."""
        return self.metric(self.headline) or self.metrics[0]

    def metric(self, metric_type: str) -> Metric | None:
        return next((m for m in self.metrics if m.type == metric_type), None)

    def beside(self, method: str) -> Reference | None:
        """The published row drawn beside a figure of `method`."""
        return next((r for r in self.published if r.beside and r.method == method), None)


@dataclass(frozen=True)
class Suite:
    """A group of tasks run together under one protocol (`eval suite --suite NAME`): its tasks are those that name
    it. `score` is the suite's own figure (the FewCLUE score), `aliases` how cards name its dataset."""
    name: str
    title: str
    protocol: str
    description: str
    score: Score | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Score:
    """A suite's score: the mean, in percent, of the reported figure of its tasks with `in_score`; its board column,
    what it is, and the published scores (`Reference`, figures {"score": ...})."""
    column: Column
    definition: str
    published: tuple[Reference, ...] = field(default_factory=tuple)
