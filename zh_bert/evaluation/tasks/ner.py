"""NER files (read by `zh_bert.corpus.ner_files`) checked and assembled into a task: train trains, dev chooses,
test reports.

A file without any tag is a test file to predict, not to score, and refused as train or dev. The scheme (BIO, BIOES, BMES) is
read from the tags of all files unless given; tags that break it are counted and said once (they are read as
seqeval reads them), types of dev or test that train never saw are named, and a sentence of a later split is
dropped from an earlier one (`splits.keep_apart`), so no figure is made on a split its model trained or chose on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.ner_files import Sentence, read_ner
from zh_bert.evaluation.tasks.tag_schemes import Scheme, broken_tags, detect_scheme, scheme_named, split_tag
from zh_bert.evaluation.tasks.splits import keep_apart, roles_of, text_key


@dataclass
class NerTask:
    """A tagging task: its splits, the scheme of its files, the entity types train holds."""
    name: str
    train: list[Sentence]
    dev: list[Sentence]
    test: list[Sentence] | None
    scheme: Scheme
    types: list[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        """Whether test has tags to score (a test file without them is predicted only)."""
        return bool(self.test) and self.test[0].tags is not None

    @property
    def labels(self) -> list[str]:
        return self.scheme.tags(self.types)


def _scheme_of(splits: dict[str, list[Sentence]], files: dict[str, Path], name: str | None) -> Scheme:
    """The given scheme, or the one the tags' prefixes say; a tag of another scheme is one line naming where."""
    found: dict[str, str] = {}
    for split in ("train", "dev", "test"):
        for s in splits.get(split) or []:
            for tag in s.tags or []:
                found.setdefault(split_tag(tag)[0], s.where)
    found.pop(None, None)
    scheme = scheme_named(name) if name and name != "auto" else detect_scheme(set(found), str(files["train"]))
    for prefix, where in found.items():
        if prefix not in scheme.prefixes:
            raise ZhBertError(f"{where}: the sentence starting here has tag prefix {prefix}-, not one of the "
                              f"{scheme.name.upper()} scheme ({', '.join(scheme.prefixes)}, O)")
    return scheme


def _types(sentences: list[Sentence]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in sentences:
        for tag in s.tags or []:
            kind = split_tag(tag)[1]
            if kind and tag[0] in "BS":
                counts[kind] = counts.get(kind, 0) + 1
    return counts


def assemble_ner(name: str, splits: dict[str, list[Sentence] | None], files: dict[str, Path],
             scheme_name: str | None = None) -> NerTask:
    """The task of these splits (train, dev, test or None): checked, kept apart, its scheme and types."""
    for split in ("train", "dev"):
        if splits[split][0].tags is None:
            raise ZhBertError(f"{files[split]}: no tags (one field per line): the {split} file needs a tag per "
                              f"character; only a test file may come without them (predicted, not scored)")
    test = splits["test"]
    tagged = {k: v for k, v in splits.items() if v and v[0].tags is not None}
    scheme = _scheme_of(tagged, files, scheme_name)
    train, dev, notes = keep_apart(name, (splits["train"], splits["dev"], test),
                                   [files["train"], files["dev"], files.get("test")], lambda s: text_key(s.text),
                                   drop_repeats=False)   # a repeated sentence is data, not leakage
    for split, sentences in tagged.items():
        count, first = broken_tags(scheme, [s.tags for s in sentences])
        if count:
            notes.append(f"{files[split]}: {count:,} tag{'s' * (count > 1)} break the {scheme.name.upper()} scheme "
                         f"(first: {first}); read as seqeval reads them")
    if test is not None and test[0].tags is None:
        notes.append(f"{files['test']}: no tags: test is predicted, not scored")
    types = _types(train)
    if not types:
        raise ZhBertError(f"{files['train']}: no entity in the train split of task {name}: nothing to learn")
    warnings = []
    for split in ("dev", "test"):
        unseen = {k: v for k, v in _types(tagged.get(split, [])).items() if k not in types}
        if unseen:
            warnings.append(f"{split} entity types that train never saw: "
                            f"{', '.join(f'{k} ({v:,})' for k, v in sorted(unseen.items()))}; the model can only "
                            f"miss them")
    roles = roles_of([files["train"], files["dev"], files.get("test")])
    return NerTask(name, train, dev, test, scheme, sorted(types), notes, warnings, roles)


def carve_choose(sentences: list[Sentence], share: float = 0.1) -> tuple[list[Sentence], list[Sentence]]:
    """(train, choose): a fixed `share` of the sentences, those whose text has the smallest sha256, to choose
    on, the rest to train on. The same for every seed and run, whatever the order of the file."""
    keyed = sorted(range(len(sentences)), key=lambda i: hashlib.sha256(sentences[i].text.encode()).hexdigest())
    held = set(keyed[:max(1, round(len(sentences) * share))])
    return ([s for i, s in enumerate(sentences) if i not in held], [s for i, s in enumerate(sentences) if i in held])


def load_ner(name: str, train: str | Path | None, dev: str | Path, test: str | Path | None,
             scheme: str | None = None) -> NerTask:
    """Read the files and assemble the task; without a train file, train on a fixed 90% of dev and choose on
    the rest (`carve_choose`), said in the notes."""
    files = {"train": Path(train) if train else Path(dev), "dev": Path(dev), "test": Path(test) if test else None}
    splits = {"dev": read_ner(files["dev"]), "test": read_ner(files["test"]) if test else None}
    if train:
        splits["train"] = read_ner(files["train"])
        note = None
    else:
        splits["train"], splits["dev"] = carve_choose(splits["dev"])
        note = (f"no train file: trains on {len(splits['train']):,} sentences of {files['dev']} (a fixed 90%) and "
                f"chooses on the other {len(splits['dev']):,}; test is never trained or chosen on")
    task = assemble_ner(name, splits, files, scheme)
    if note:
        task.notes.insert(0, note)
    return task

