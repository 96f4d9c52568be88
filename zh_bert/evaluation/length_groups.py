"""Groups of examples of similar length, cut where a cut saves more padded tokens than a forward's fixed cost.

A batch padded to its longest example computes every pad token of every row; sorting by length and cutting
into fixed-size chunks still pads the spread within each chunk, and a few-shot batch (16 examples of 10 to 128
tokens) is all spread. Since no example's output depends on the others in its forward pass, the same examples
can be run as several shorter forwards: `length_groups` picks the cuts that minimise the padded tokens plus
`GROUP_OVERHEAD_TOKENS` per forward (dynamic programming over the sorted lengths).
"""

from __future__ import annotations

import numpy as np

#: a forward's fixed cost (Python, kernel launches, small-matrix inefficiency) in padded tokens: a cut that
#: saves fewer padded tokens than this is not made (measured on `tiny`, where it matters most)
GROUP_OVERHEAD_TOKENS = 64
#: the same in training, where each group's forward also adds a backward pass over the whole word embedding
TRAIN_GROUP_OVERHEAD_TOKENS = 160


def length_groups(lengths: np.ndarray, max_rows: int, overhead: int = GROUP_OVERHEAD_TOKENS) -> list[np.ndarray]:
    """Positions into `lengths`, shortest first, cut into groups of at most `max_rows` that minimise
    sum(rows x longest + overhead): the cheapest way to run these examples, padding each group to its longest."""
    order = np.argsort(lengths, kind="stable")
    ln = np.asarray(lengths)[order].astype(np.float64)
    n = len(ln)
    best, cut = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        starts = np.arange(max(0, i - max_rows), i)
        cost = best[starts] + (i - starts) * ln[i - 1] + overhead
        k = int(np.argmin(cost))
        best[i], cut[i] = cost[k], starts[k]
    groups, i = [], n
    while i > 0:
        groups.append(order[cut[i]:i])
        i = int(cut[i])
    return groups[::-1]


def length_buckets(lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                   chunk_batches: int) -> list[np.ndarray]:
    """One epoch's training batches, drawn from `rng` alone (a seed trains the same way every time): a shuffle,
    each chunk of `chunk_batches` batches sorted by length and cut into batches (little padding: a step costs what
    its real tokens cost), then the batch order shuffled. A chunk of one batch is not sorted."""
    order = rng.permutation(len(lengths))
    per_chunk = batch_size * chunk_batches
    out = []
    for s in range(0, len(order), per_chunk):
        chunk = order[s:s + per_chunk]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")] if chunk_batches > 1 else chunk
        out += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [out[i] for i in rng.permutation(len(out))]
