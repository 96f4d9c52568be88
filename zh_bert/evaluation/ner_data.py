"""NER files read, checked and assembled into a task: train trains, dev chooses, test reports.

Two layouts, told apart by their content: CoNLL's one character (or word) and its tag per line, tab- or
space-separated, a blank line between sentences (Resume NER; CRLF and a byte-order mark read as LF); and UER's TSV
of one sentence per line, `text_a` of space-separated characters TAB `label` of as many tags, header optional
(MSRA NER). A line with more or fewer fields than that is one line naming the file and the line; a file without
any tag is a test file to predict, not to score, and refused as train or dev. The scheme (BIO, BIOES, BMES) is
read from the tags of all files unless given; tags that break it are counted and said once (they are read as
seqeval reads them), types of dev or test that train never saw are named, and a sentence of a later split is
dropped from an earlier one (`splits.keep_apart`), so no figure is made on a split its model trained or chose on.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_text
from zh_bert.evaluation.ner_tags import (
    Scheme,
    broken_tags,
    check_tag,
    detect_scheme,
    scheme_named,
    split_tag,
)
from zh_bert.evaluation.splits import keep_apart, roles_of

MAX_NER_BYTES = 512 << 20      # the largest NER file read (MSRA's full train split is ~15 MB)
TSV_HEADER = ("text_a", "label")
_TAG_FIELDS = re.compile(r"[ \t]+")


@dataclass
class Sentence:
    """Characters (or words) and their tags (None: the file has no tags), `where` the file:line it starts at."""
    tokens: list[str]
    tags: list[str] | None
    where: str

    @property
    def text(self) -> str:
        return "".join(self.tokens)


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


def _lines(path: Path) -> list[str]:
    return read_text(path, encoding="utf-8-sig", max_bytes=MAX_NER_BYTES).replace("\r\n", "\n").split("\n")


def is_tsv(lines: list[str]) -> bool:
    """UER's layout: a `text_a` header, or a first line whose text field holds several space-separated tokens."""
    first = next((line for line in lines if line.strip(" \t\r")), "")
    head = first.split("\t")
    return head[0].strip() == TSV_HEADER[0] or (len(head) == 2 and len(head[0].strip().split(" ")) > 1)


def read_conll(path: Path, lines: list[str]) -> list[Sentence]:
    """One token and its tag per line, a blank line between sentences; all lines one field: an untagged file."""
    rows: list[tuple[int, list[str]]] = []
    for n, line in enumerate(lines, 1):
        line = line.strip(" \t\r")
        rows.append((n, line.split("\t") if "\t" in line else _TAG_FIELDS.split(line)) if line else (n, []))
    widths = {len(r) for _, r in rows if r}
    tagged = widths != {1}
    out, tokens, tags, start = [], [], [], 0
    for n, r in rows + [(len(rows) + 1, [])]:
        if not r:
            if tokens:
                out.append(Sentence(tokens, tags if tagged else None, f"{path}:{start}"))
            tokens, tags = [], []
            continue
        if tagged and len(r) != 2:
            raise ZhBertError(f"{path}:{n}: {len(r)} field{'s' * (len(r) != 1)}, expected 2 (a character and its "
                              f"tag, separated by a tab or spaces)")
        if tagged:
            check_tag(r[1], f"{path}:{n}")
        tokens.append(r[0])
        tags.append(r[1] if tagged else None)
        start = start if len(tokens) > 1 else n
    return out


def read_ner_tsv(path: Path, lines: list[str]) -> list[Sentence]:
    """`text_a<TAB>label` per line, characters and tags separated by single spaces; one column: untagged."""
    rows = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(lines, 1) if line.strip(" \t\r")]
    if rows and tuple(c.strip() for c in rows[0][1]) in (TSV_HEADER, TSV_HEADER[:1]):
        rows = rows[1:]
    tagged = any(len(r) > 1 for _, r in rows)
    out = []
    for n, r in rows:
        if len(r) != (2 if tagged else 1):
            raise ZhBertError(f"{path}:{n}: {len(r)} tab-separated fields, expected {2 if tagged else 1} "
                              f"(text_a of space-separated characters{', TAB label of their tags' * tagged})")
        tokens = r[0].strip(" ").split(" ")
        if "" in tokens:
            raise ZhBertError(f"{path}:{n}: two spaces in a row in text_a (characters are separated by one space)")
        if not tagged:
            out.append(Sentence(tokens, None, f"{path}:{n}"))
            continue
        tags = r[1].split()
        if not tags:
            raise ZhBertError(f"{path}:{n}: a sentence without tags ({len(tokens)} characters, an empty label)")
        if len(tags) != len(tokens):
            raise ZhBertError(f"{path}:{n}: {len(tokens)} characters but {len(tags)} tags")
        for tag in tags:
            check_tag(tag, f"{path}:{n}")
        out.append(Sentence(tokens, tags, f"{path}:{n}"))
    return out


def read_ner(path: str | Path) -> list[Sentence]:
    """A NER file in either layout; one line when it holds no sentence."""
    path = Path(path)
    lines = _lines(path)
    sentences = read_ner_tsv(path, lines) if is_tsv(lines) else read_conll(path, lines)
    if not sentences:
        raise ZhBertError(f"{path}: no sentences")
    return sentences


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
                                   [files["train"], files["dev"], files.get("test")], lambda s: s.text,
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

