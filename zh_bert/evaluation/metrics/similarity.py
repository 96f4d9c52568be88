"""How sentence vectors are scored on a pair set, as mteb scores C-MTEB's STS tasks: the cosine similarity of the two
sentences' vectors, and Spearman's rank correlation of those cosines with the gold labels (scipy's `spearmanr`, ties
averaged), a fraction in [-1, 1] (tables show x100).

Beside it, the floor any embedder must beat: a character TF-IDF cosine on the same pairs (each sentence a bag of
its characters, idf = ln((1 + n) / (1 + df)) + 1 over the split's own sentences, as scikit-learn's
`TfidfVectorizer(analyzer="char")` with its defaults; vectors L2-normalised). Counting shared characters already
ranks STS-B's pairs well (Spearman ~0.67): a model below it has learned nothing a sentence's characters do not
say.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np


def spearman(gold, scores) -> float:
    """Spearman's rho of `scores` against `gold` (scipy.stats.spearmanr); 0.0 where either is constant."""
    from scipy.stats import spearmanr

    gold, scores = np.asarray(gold, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    if len(gold) < 2 or np.ptp(gold) == 0 or np.ptp(scores) == 0:
        return 0.0
    return float(spearmanr(gold, scores).statistic)


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two arrays of vectors (any norm), in float64."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def tfidf_cosines(a: list[str], b: list[str]) -> np.ndarray:
    """Character TF-IDF cosine of each pair (the module docstring's definition), idf over the 2n sentences."""
    docs = [Counter(s) for s in a + b]
    df = Counter(ch for d in docs for ch in d)
    n = len(docs)
    idf = {ch: math.log((1 + n) / (1 + k)) + 1 for ch, k in df.items()}
    out = np.zeros(len(a))
    for i, (u, v) in enumerate(zip(docs[:len(a)], docs[len(a):])):
        wu = {ch: c * idf[ch] for ch, c in u.items()}
        wv = {ch: c * idf[ch] for ch, c in v.items()}
        dot = sum(w * wv.get(ch, 0.0) for ch, w in wu.items())
        norm = math.sqrt(sum(w * w for w in wu.values())) * math.sqrt(sum(w * w for w in wv.values()))
        out[i] = dot / norm if norm else 0.0
    return out
