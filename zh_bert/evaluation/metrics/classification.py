"""Accuracy and macro-F1 of predicted class ids against gold ones (what the classification and multiple-choice
heads report), written here rather than imported from scikit-learn, whose macro average they equal."""

from __future__ import annotations

import numpy as np


def accuracy(gold: np.ndarray, pred: np.ndarray) -> float:
    return float((gold == pred).mean()) if len(gold) else float("nan")


def macro_f1(gold: np.ndarray, pred: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes present in gold or predictions (sklearn's default)."""
    scores = []
    for c in np.union1d(gold, pred):
        tp = int(((pred == c) & (gold == c)).sum())
        fp = int(((pred == c) & (gold != c)).sum())
        fn = int(((pred != c) & (gold == c)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores)) if scores else float("nan")
