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
from zh_bert.core.fileio import read_json

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

def _squad_field(obj: object, key: str, kind: type, where: str) -> object:
    """obj[key] of type `kind`, or a one-line error naming the place."""
    if not isinstance(obj, dict) or key not in obj:
        raise ZhBertError(f"{where}: missing '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ZhBertError(f"{where}: '{key}' is {type(value).__name__}, expected {kind.__name__}")
    return value


def _answers(qa: dict, context: str, where: str) -> list[tuple[str, int]]:
    answers = _squad_field(qa, "answers", list, where)
    if not answers:
        raise ZhBertError(f"{where}: no answers (nothing to score against)")
    out = []
    for k, ans in enumerate(answers, 1):
        at = f"{where}, answer {k}"
        text, start = _squad_field(ans, "text", str, at), _squad_field(ans, "answer_start", int, at)
        if not text.strip():
            raise ZhBertError(f"{at}: empty answer text")
        if start < -1:
            raise ZhBertError(f"{at}: answer_start {start} is negative (-1 alone marks a non-span answer)")
        if start >= len(context):
            raise ZhBertError(f"{at}: answer_start {start} beyond the context ({len(context)} characters)")
        out.append((text, start))
    return out


def _paragraph(para: object, where: str, seen: dict[str, str]) -> list[SpanExample]:
    context = _squad_field(para, "context", str, where)
    if not context.strip():
        raise ZhBertError(f"{where}: empty context")
    qas = _squad_field(para, "qas", list, where)
    out = []
    for q, qa in enumerate(qas, 1):
        at = f"{where}, question {q}"
        qid = _squad_field(qa, "id", str, at).strip()     # the official script strips ids before matching
        if not qid:
            raise ZhBertError(f"{at}: empty id")
        at = f"{at} (id {qid})"
        if qid in seen:
            raise ZhBertError(f"{at}: id repeated from {seen[qid]}")
        seen[qid] = at
        question = _squad_field(qa, "question", str, at)     # may be empty, as two official trial ones are
        out.append(SpanExample(qid, context, question, _answers(qa, context, at)))
    return out


def load_squad(path: str | Path) -> list[SpanExample]:
    """The questions of a SQuAD-v1-style file (CMRC 2018, DRCD...), in file order.

    Anything that makes a question unusable is a one-line error naming the file and the 1-based paragraph
    (counted through the whole file) and question; an answer_start that misses its text, and an empty
    question, are kept (see `quirk_counts`).
    """
    path = Path(path)
    doc = read_json(path)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ZhBertError(f"{path}: no 'data' list at the top (not a SQuAD-style file)")
    out: list[SpanExample] = []
    seen: dict[str, str] = {}
    n_para = 0
    for a, article in enumerate(data, 1):
        paragraphs = _squad_field(article, "paragraphs", list, f"{path}: article {a}")
        for para in paragraphs:
            n_para += 1
            out += _paragraph(para, f"{path}: paragraph {n_para}", seen)
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
