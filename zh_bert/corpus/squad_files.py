"""SQuAD-style span-extraction files (CMRC 2018, DRCD...): the questions of a file, read strictly, and their
test text, read as contamination reads it. Pure reading, at the corpus stage beside the other task readers
(`task_files`).

In the official data an answer's `answer_start` is sometimes not where its text is: off by a few characters,
or -1 where the annotator wrote an answer that is not a span of the passage (193 of the 9,657 CMRC 2018 dev
answers). Two official trial questions are empty strings. Scoring uses only the id and the answer texts, so such
files load; `quirk_counts` says how many of each, and `SpanExample.spans` keeps only the answers that are spans.

The test text of a question (`SquadText`, what `eval contamination` and `clean --decontaminate` look for) is its
paragraph's context and the question: the unit CMRC scores is the question, so every question on a paragraph that
is in a corpus counts as contaminated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, read_json, read_object
from zh_bert.corpus.task_files import BenchmarkExample


@dataclass(frozen=True)
class SpanExample:
    id: str
    context: str
    question: str
    answers: list[tuple[str, int]]      # (text, answer_start); answer_start -1: the text is not a span

    @property
    def spans(self) -> list[tuple[str, int]]:
        """The answers whose text stands at their answer_start (what span training can use)."""
        return [(t, s) for t, s in self.answers if s >= 0 and self.context[s:s + len(t)] == t]


MAX_CONTEXT = 1_000_000     # characters of one context (CMRC's longest is under 1,000; DRCD's under 2,000)


def _answers(qa: Record, context: str) -> list[tuple[str, int]]:
    answers = qa.records("answers")
    if not answers:
        raise qa.error("answers", "no answers (nothing to score against)")
    out = []
    for ans in answers:
        text, start = ans.text("text", max_len=MAX_CONTEXT), ans.integer("answer_start", lo=-1)
        if not text.strip():
            raise ans.error("text", "empty answer text")
        if start >= len(context):
            raise ans.error("answer_start", f"{start} beyond the context ({len(context)} characters)")
        out.append((text, start))
    return out


def _paragraph(para: Record, seen: dict[str, str]) -> list[SpanExample]:
    context = para.text("context", max_len=MAX_CONTEXT)
    if not context.strip():
        raise para.error("context", "empty context")
    out = []
    for qa in para.records("qas"):
        qid = qa.text("id").strip()     # the official script strips ids before matching
        if not qid:
            raise qa.error("id", "empty id")
        if qid in seen:
            raise qa.error("id", f"{qid!r} repeated from {seen[qid]}")
        seen[qid] = qa.path
        question = qa.text("question", max_len=MAX_CONTEXT)    # may be empty, as two official trial ones are
        out.append(SpanExample(qid, context, question, _answers(qa, context)))
    return out


def load_squad(path: str | Path) -> list[SpanExample]:
    """The questions of a SQuAD-v1-style file (CMRC 2018, DRCD...), in file order, read through the reading
    layer: anything that makes a question unusable is one line naming the file and the field's path
    (`data[1].paragraphs[0].qas[2].answers[0].answer_start: expected an integer ≥ -1, got text '0'`); an
    answer_start that misses its text, and an empty question, are kept (see `quirk_counts`)."""
    path = Path(path)
    doc = read_object(path, what="a SQuAD-style object with a 'data' list")
    out: list[SpanExample] = []
    seen: dict[str, str] = {}
    for article in doc.records("data"):
        for para in article.records("paragraphs"):
            out += _paragraph(para, seen)
    if not out:
        raise ZhBertError(f"{path}: no questions")
    return out


def quirk_counts(examples: list[SpanExample]) -> dict[str, int]:
    """How many answers there are, how many are not a span (answer_start -1), how many have an answer_start
    that is not where their text is, and how many questions are empty: what a loader kept but training may not
    want."""
    answers = [(e.context, t, s) for e in examples for t, s in e.answers]
    unplaced = sum(s < 0 for _, _, s in answers)
    misplaced = sum(s >= 0 and c[s:s + len(t)] != t for c, t, s in answers)
    return {"answers": len(answers), "unplaced": unplaced, "misplaced": misplaced,
            "empty_questions": sum(not e.question.strip() for e in examples)}


@dataclass(frozen=True)
class SquadFile:
    """A task's files are SQuAD-style: each read by `load_squad`."""

    def read(self, path: Path) -> list[SpanExample]:
        return load_squad(path)


class SquadText:
    """The test text of a SQuAD-style test file: one example per question, its paragraph's context and the
    question (read leniently: an unreadable field is no text, never an error after a corpus scan began)."""

    def examples(self, task: str, path: Path, split: str) -> Iterator[BenchmarkExample]:
        doc = read_json(path)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise ZhBertError(f"{path}: no 'data' list at the top (not a SQuAD-style file)")
        for article in data:
            for para in article.get("paragraphs", []):
                context = str(para.get("context", ""))
                for qa in para.get("qas", []):
                    yield BenchmarkExample(task, str(qa.get("id")), f"{context}\n{qa.get('question', '')}", split)
