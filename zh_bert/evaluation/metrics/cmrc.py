"""CMRC 2018 (SQuAD-style Chinese span extraction): score predictions as the official script does (the files are
read by `zh_bert.corpus.squad_files`).

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
"""

from __future__ import annotations

import re

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.squad_files import SpanExample

# The official list, in its order. '……' is two characters, so the char-by-char test never matches it and a
# lone '…' is kept, as in the official script.
CMRC_PUNCTUATION = ('-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=',
                    '，', '。', '：', '？', '！', '“', '”', '；', '’', '《', '》', '……', '·', '、',
                    '「', '」', '（', '）', '－', '～', '『', '』')
_CMRC_CHINESE = re.compile("[\u4e00-\u9fa5]")     # the official range: CJK Unified Ideographs, BMP block only


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
