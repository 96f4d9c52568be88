"""What an embedder trains and is scored on: sentence pairs (a declared STS task, or `pairs:TRAIN,DEV[,TEST]`, the
user's files) and SimCSE's sentences (`simcse:FILE[,FILE...]`, any text `zh-bert clean` reads).

Pairs keep their roles apart as every task does (`splits.keep_apart`, by the pair of sentences): a pair of a later
split is dropped from an earlier one and counted. A task whose train and choose name the same file (LCQMC and
PAWS-X bundle no train split) trains on a fixed 90% of it and chooses on the other 10% (`ner.carve_choose`'s rule,
by the pair's text), only when asked (`finetune --task lcqmc`); its test split is never trained or chosen on.

SimCSE reads documents through clean's readers (text, JSONL, Parquet, .jsonl.zst, MediaWiki ...), splits them
into sentences at Chinese sentence ends (`core.text.split_sentences`), and drops, counting each: sentences shorter
than `--min-sentence-chars`, repeats, and any sentence of a declared STS task's reported split (the figures are
reported there).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.text import split_sentences
from zh_bert.corpus.clean.readers import ReadOptions, expand_inputs, read_input
from zh_bert.corpus.clean.source import Problems
from zh_bert.corpus.pair_files import Pair, PairFile
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_spec import Task
from zh_bert.evaluation.tasks.splits import keep_apart, roles_of

PAIRS_PREFIX = "pairs:"
SIMCSE_PREFIX = "simcse:"
#: the label kinds of a pair file, which choose its default loss
GRADES, BINARY, TRIPLETS = "grades", "binary", "triplets"


@dataclass
class PairTask:
    """Sentence pairs in their roles: train trains, dev chooses (None: nothing chosen), test reports; the kind of
    labels train holds (grades, binary 1/0, or triplets with hard negatives)."""
    name: str
    train: list[Pair]
    dev: list[Pair] | None
    test: list[Pair] | None
    labels: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)
    task: Task | None = None
    loss: str = ""          # the loss it trains with (the embed head's choice, made when its files are read)


@dataclass
class SentenceTask:
    """SimCSE's training sentences, what was dropped, and the files they came from."""
    name: str
    sentences: list[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    task: Task | None = None
    sets: dict[str, list[Pair]] = field(default_factory=dict)   # test pairs scored after training, by task name
    loss: str = "simcse"


def label_kind(pairs: list[Pair]) -> str:
    """grades (any label but 0 and 1), binary (only 1/0), or triplets (hard negatives, no labels)."""
    if pairs and pairs[0].label is None:
        return TRIPLETS
    return BINARY if {p.label for p in pairs} <= {0.0, 1.0} else GRADES


def _pair_text(p: Pair) -> tuple[str, str]:
    return tuple(sorted((p.a, p.b)))


def carve(pairs: list[Pair], share: float = 0.1) -> tuple[list[Pair], list[Pair]]:
    """(train, choose): a fixed `share` of the pairs, those whose text has the smallest sha256, to choose on; the
    same for every seed and run whatever the order of the file."""
    keyed = sorted(range(len(pairs)), key=lambda i: hashlib.sha256("\t".join(_pair_text(pairs[i])).encode()).hexdigest())
    held = set(keyed[:max(1, round(len(pairs) * share))])
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


def assemble_pairs(name: str, splits: list[list[Pair] | None], files: list, task: Task | None = None,
             carved: bool = False) -> PairTask:
    """The task of (train, dev or None, test or None): roles kept apart, its label kind, its notes."""
    train, dev, test = splits
    notes = []
    if carved:
        notes.append(f"no train file: trains on {len(train):,} pairs of {files[0]} (a fixed 90%) and chooses on the "
                     f"other {len(dev):,}; test is never trained or chosen on")
    if dev is not None:
        train, dev, kept = keep_apart(name, (train, dev, test), files, _pair_text, drop_repeats=False)
        notes += kept
    elif test is not None:
        train, _, kept = keep_apart(name, (train, test, None), files, _pair_text, drop_repeats=False)
        notes += kept
    kind = label_kind(train)
    if kind == GRADES and len({p.label for p in train}) < 2:
        raise ZhBertError(f"{files[0]}: every pair of task {name} has the same label: nothing to rank")
    if dev is None:
        notes.append("no dev file: nothing is chosen; the last state is the model")
    return PairTask(name, train, dev, test, kind, notes, [], roles_of((list(files) + [None] * 3)[:3]), task)


def load_pairs(spec: str, triplets: bool) -> PairTask:
    """`pairs:TRAIN,DEV[,TEST]` (the user's files; `triplets`: a third field of text is a hard negative)."""
    paths = [p for p in spec[len(PAIRS_PREFIX):].split(",") if p]
    if len(paths) not in (2, 3):
        raise ZhBertError(f"--task {spec}: expected pairs:TRAIN,DEV[,TEST] (TAB-separated sentence1, sentence2, label)")
    reader = PairFile(triplets=triplets)
    train = reader.read(Path(paths[0]))
    held = [PairFile().read(Path(p)) for p in paths[1:]]     # dev and test are scored: labels, never triplets
    return assemble_pairs(Path(paths[0]).parent.name or "pairs", [train, held[0], held[1] if len(held) > 1 else None], paths)


def load_declared_pairs(task: Task) -> PairTask:
    """A declared STS task's files: train, dev and test, or (LCQMC, PAWS-X) a fixed 90%/10% of one file."""
    folder = task_data_dir(task.folder)
    s = task.splits
    train_f, choose_f, report_f = folder / s.train, folder / s.choose, folder / s.report
    test = task.reader.read(report_f)
    if train_f == choose_f:
        train, dev = carve(task.reader.read(train_f))
        return assemble_pairs(task.name, [train, dev, test], [train_f, choose_f, report_f], task, carved=True)
    return assemble_pairs(task.name, [task.reader.read(train_f), task.reader.read(choose_f), test],
                    [train_f, choose_f, report_f], task)


def reported_sentences(tasks: list[Task]) -> set[str]:
    """Every sentence of the reported split of `tasks` (what SimCSE must not train on)."""
    out: set[str] = set()
    for task in tasks:
        for p in task.reader.read(task_data_dir(task.folder) / task.splits.report):
            out.update((p.a, p.b))
    return out


def load_sentences(spec: str, min_chars: int, reported: set[str]) -> SentenceTask:
    """`simcse:FILE[,FILE...]`: the files' sentences, short ones, repeats and reported ones dropped and counted."""
    names = [p for p in spec[len(SIMCSE_PREFIX):].split(",") if p]
    if not names:
        raise ZhBertError(f"--task {spec}: expected simcse:FILE[,FILE...] (text, JSONL, Parquet, .jsonl.zst: what "
                          f"zh-bert clean reads)")
    files, _ = expand_inputs(names)
    problems, read = Problems(), ReadOptions()
    seen: set[str] = set()
    sentences, short, repeats, held = [], 0, 0, 0
    for path in files:
        for doc in read_input(path, read, problems):
            for s in split_sentences(doc.text):
                if len(s) < min_chars:
                    short += 1
                elif s in reported:
                    held += 1
                elif s in seen:
                    repeats += 1
                else:
                    seen.add(s)
                    sentences.append(s)
    notes = [f"{len(sentences):,} sentences from {len(files)} file(s); dropped: {short:,} shorter than {min_chars} "
             f"characters, {repeats:,} repeats, {held:,} of the STS sets' reported splits"]
    unusable = sum(problems.counts.values())
    warnings = [f"{unusable:,} unusable lines or rows ({', '.join(problems.counts)})"] if unusable else []
    return SentenceTask(Path(names[0]).stem or "simcse", sentences, notes, warnings, [str(f) for f in files])
