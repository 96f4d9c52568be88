"""Entity-level precision, recall and F1: an entity counts when its span and type are both exact, micro-averaged
over all entities of the split (seqeval's default and conlleval's, which papers report as "NER F1").

Computed here, not by importing seqeval (a test dependency that pulls scikit-learn), from `ner_tags.entities`,
which reads tags by seqeval's rules; tests/test_ner.py checks every figure against seqeval itself.
"""

from __future__ import annotations

from zh_bert.evaluation.tasks.tag_schemes import Scheme, entities


def entity_scores(gold: list[list[str]], pred: list[list[str]], scheme: Scheme) -> dict:
    """{precision, recall, f1, gold, predicted, correct, per_type: {type: {precision, recall, f1, gold, ...}}}
    of predicted tag sequences against gold ones (the same lengths, tags of `scheme`). A ratio with nothing
    to divide is 0, as seqeval's default."""
    counts: dict[str, list[int]] = {}          # type -> [gold, predicted, correct]
    for g_tags, p_tags in zip(gold, pred, strict=True):
        if len(g_tags) != len(p_tags):
            raise ValueError(f"{len(g_tags)} gold tags but {len(p_tags)} predicted")
        g = set(entities([scheme.scoring_tag(t) for t in g_tags]))
        p = set(entities([scheme.scoring_tag(t) for t in p_tags]))
        for i, found in enumerate((g, p, g & p)):
            for kind, _, _ in found:
                counts.setdefault(kind, [0, 0, 0])[i] += 1
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    return {**_prf(*total), "per_type": {k: _prf(*c) for k, c in sorted(counts.items())}}


def _prf(n_gold: int, n_pred: int, correct: int) -> dict:
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "gold": n_gold, "predicted": n_pred,
            "correct": correct}
