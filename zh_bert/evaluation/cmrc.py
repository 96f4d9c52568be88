"""CMRC 2018 (SQuAD-style Chinese span extraction): read the data and score predictions as the official script does.

The scorer reimplements ymcui/cmrc2018 `squad-style-data/cmrc2018_evaluate.py` (v5 - special) in Python 3, so
figures stay comparable with published CMRC 2018 dev results: EM after punctuation removal, F1 from the longest
common *contiguous* run of tokens, each the max over the reference answers, unanswered questions counted as 0.

One deliberate difference: the official script cuts the non-Chinese runs (English words, numbers) with
`nltk.word_tokenize`; we split them on whitespace, which is what nltk yields for plain words and numbers.
They part only where such a run holds ASCII punctuation outside the official list (`(` `)` `%` `;` `"` `,`
`.` ...): nltk splits `(npc)` into `(`, `npc`, `)` and `99%` into `99`, `%`; we keep one token. That changes F1,
never EM: 59 of the 9,657 dev reference answers segment differently, and on noisy predictions our dev F1 was
0.02 points below the official script's (which ours matches exactly when given nltk's tokenizer). In exchange
there is no nltk dependency and no punkt download.

In the official data an answer's `answer_start` is sometimes not where its text is: off by a few characters,
or -1 where the annotator wrote an answer that is not a span of the passage (193 of the 9,657 dev answers).
Two official trial questions are empty strings. Scoring uses only the id and the answer texts, so such files
load; `quirk_counts` says how many of each, and `SpanExample.spans` keeps only the answers that are spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, read_object

# The official list, in its order. '……' is two characters, so the char-by-char test never matches it and a
# lone '…' is kept, as in the official script.
CMRC_PUNCTUATION = ('-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=',
                    '，', '。', '：', '？', '！', '“', '”', '；', '’', '《', '》', '……', '·', '、',
                    '「', '」', '（', '）', '－', '～', '『', '』')
_CMRC_CHINESE = re.compile("[\u4e00-\u9fa5]")     # the official range: CJK Unified Ideographs, BMP block only


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


# --------------------------------------------------------------------------- loading

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


# --------------------------------------------------------------------------- scoring (official script)

def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    """Lower-cased tokens: each Chinese character or listed punctuation mark alone, the runs between them split
    on whitespace. With `rm_punc` the marks are dropped without ending the run around them (so `a-b` is one
    token `ab`), as in the official script."""
    out: list[str] = []
    run = ""
    for char in str(text).lower().strip():
        if rm_punc and char in CMRC_PUNCTUATION:
            continue
        if _CMRC_CHINESE.match(char) or char in CMRC_PUNCTUATION:
            out += run.split()
            run = ""
            out.append(char)
        else:
            run += char
    return out + run.split()


def remove_punctuation(text: str) -> str:
    """Lower-cased, stripped text without the official punctuation marks (what EM compares)."""
    return "".join(c for c in str(text).lower().strip() if c not in CMRC_PUNCTUATION)


def find_lcs(s1: list[str], s2: list[str]) -> tuple[list[str], int]:
    """The longest common contiguous run of s1 and s2 (the first found, scanning s1) and its length."""
    prev = [0] * (len(s2) + 1)
    best, end = 0, 0
    for i, a in enumerate(s1):
        row = [0] * (len(s2) + 1)
        for j, b in enumerate(s2):
            if a == b:
                row[j + 1] = prev[j] + 1
                if row[j + 1] > best:
                    best, end = row[j + 1], i + 1
        prev = row
    return s1[end - best:end], best


def calc_f1_score(answers: list[str], prediction: str) -> float:
    """Max over the references of the F1 of the LCS, on tokens with punctuation removed (0..1)."""
    pred = mixed_segmentation(prediction, rm_punc=True)
    scores = [0.0]
    for ans in answers:
        ref = mixed_segmentation(ans, rm_punc=True)
        _, n = find_lcs(ref, pred)
        if n:
            precision, recall = n / len(pred), n / len(ref)
            scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def calc_em_score(answers: list[str], prediction: str) -> int:
    """1 when the prediction equals some reference once both lose their punctuation, else 0."""
    pred = remove_punctuation(prediction)
    return int(any(remove_punctuation(ans) == pred for ans in answers))


def evaluate_cmrc(examples: list[SpanExample], predictions: dict[str, str]) -> dict:
    """EM and F1 in percent over all questions, as the official script reports them; a question with no
    prediction scores 0 and counts in `skipped`. Predictions for unknown ids are ignored, as there."""
    if not examples:
        raise ZhBertError("CMRC scoring: no questions to score")
    em = f1 = 0.0
    skipped = 0
    for ex in examples:
        if ex.id not in predictions:
            skipped += 1
            continue
        refs = [t for t, _ in ex.answers]
        em += calc_em_score(refs, predictions[ex.id])
        f1 += calc_f1_score(refs, predictions[ex.id])
    total = len(examples)
    return {"em": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total, "skipped": skipped}
