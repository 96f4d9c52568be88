"""The embed head's losses, one object each (as sentence-transformers' `losses/`): what rows a batch encodes, and the
loss of their vectors. Every similarity is a cosine of L2-normalised fp32 vectors times `scale` (the inverse
temperature; 20 = SimCSE's temperature 0.05, CoSENT's lambda), so fp16 and bf16 autocast never reach the
exponentials: the "loss went NaN under fp16" of the embedding trackers has no place to happen.

- `SimCSE` (Gao et al. 2021, unsupervised): each sentence twice in one forward, its two dropout masks the only
  difference; the other sentences of the batch are the negatives (cross-entropy over the batch).
- `CoSENT` (Su 2022; sentence-transformers' `CoSENTLoss`): for graded pairs, log(1 + sum over (i, j) with
  label_i > label_j of exp(scale * (cos_j - cos_i))): only the order of the labels matters, so 0-5 grades and
  1/0 labels alike.
- `MNRL` (multiple negatives ranking, InfoNCE; `MultipleNegativesRankingLoss`): positive pairs, every other
  positive of the batch a negative, plus a hard negative per anchor when the file gives one.

A text equal to an anchor's own positive is never that anchor's negative: a batch holding the same sentence twice
(a repeated positive, a sentence that is also another pair's anchor, SimCSE's repeats) masks those cells, so the
loss cannot push a sentence away from itself.
"""

from __future__ import annotations

import numpy as np


def _mask_same_text(scores, anchor_ids: np.ndarray, candidate_ids: np.ndarray):
    """`scores` (anchors x candidates) with -inf where a candidate other than an anchor's own (the diagonal) has
    the text of that anchor's positive or of the anchor itself."""
    import torch

    n = len(anchor_ids)
    positive = candidate_ids[:n]
    same = (candidate_ids[None, :] == positive[:, None]) | (candidate_ids[None, :] == anchor_ids[:, None])
    same[np.arange(n), np.arange(n)] = False
    if not same.any():
        return scores
    return scores.masked_fill(torch.from_numpy(same).to(scores.device), float("-inf"))


def in_batch(anchors, candidates, anchor_ids: np.ndarray, candidate_ids: np.ndarray, scale: float):
    """Cross-entropy of each anchor against every candidate, its own (row i) the target: the in-batch negatives
    of SimCSE and MNRL, same-text cells masked."""
    import torch

    scores = _mask_same_text(scale * anchors @ candidates.T, anchor_ids, candidate_ids)
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(anchors), device=anchors.device))


class SimCSE:
    """Unsupervised SimCSE: the batch's sentences against themselves under another dropout mask."""
    name = "simcse"
    positives_only = False

    def rows(self, batch: dict) -> list[np.ndarray]:
        """The text indices to encode: the sentences, then the same sentences again."""
        return [batch["a"], batch["a"]]

    def loss(self, vecs: list, batch: dict, scale: float):
        z1, z2 = vecs
        return in_batch(z1, z2, batch["a"], batch["a"], scale)


class CoSENT:
    """CoSENT on graded (or 1/0) pairs: a ranking of the pairs' cosines by their labels."""
    name = "cosent"
    positives_only = False

    def rows(self, batch: dict) -> list[np.ndarray]:
        return [batch["a"], batch["b"]]

    def loss(self, vecs: list, batch: dict, scale: float):
        import torch

        a, b = vecs
        cos = scale * (a * b).sum(-1)
        labels = torch.as_tensor(batch["label"], device=cos.device)
        diff = cos[None, :] - cos[:, None]          # [i, j] = cos_j - cos_i, counted where label_i > label_j
        diff = diff[labels[:, None] > labels[None, :]]
        return torch.logsumexp(torch.cat([diff.new_zeros(1), diff]), dim=0)


class MNRL:
    """Multiple negatives ranking: each anchor's positive against every other positive (and hard negative). It
    trains on positive pairs only: a 1/0 file's label-1 pairs (its 0 pairs are scored, not trained on)."""
    name = "mnrl"
    positives_only = True

    def rows(self, batch: dict) -> list[np.ndarray]:
        return [batch["a"], batch["b"]] + ([batch["neg"]] if "neg" in batch else [])

    def loss(self, vecs: list, batch: dict, scale: float):
        import torch

        ids = np.concatenate([batch["b"]] + ([batch["neg"]] if "neg" in batch else []))
        return in_batch(vecs[0], torch.cat(vecs[1:]), batch["a"], ids, scale)


LOSSES = {c.name: c() for c in (SimCSE, CoSENT, MNRL)}
