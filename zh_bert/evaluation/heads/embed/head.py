"""The embed head on the one loop (`loop.fit_head`): the encoder trained by its loss (`losses`), its state chosen on
the dev pairs by Spearman (where there are dev pairs; SimCSE has none and keeps its last state), the test pairs
scored once on the kept state.

Every distinct text of the task is tokenized once and held as one table, so a batch is index arrays into it: the
same sentence is one id wherever it appears (what the losses' same-text mask compares), and a training batch's
rows are encoded as groups of similar length (`encoder.grouped_rows`) in one forward and one backward.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zh_bert.core.hardware import resolve_precision
from zh_bert.evaluation.heads.embed.encoder import encode_ids, grouped_rows, load_encoder, pad_id_of, tokenize
from zh_bert.evaluation.heads.embed.pooling import Pooling
from zh_bert.evaluation.length_groups import TRAIN_GROUP_OVERHEAD_TOKENS
from zh_bert.evaluation.metrics.similarity import spearman
from zh_bert.evaluation.tasks.pairs import PairTask, SentenceTask


class TextTable:
    """The distinct texts of a task, tokenized once: `index(text)` its id, `ids[i]` its token ids."""

    def __init__(self, tok, texts: list[str], seq_len: int):
        self.texts = list(dict.fromkeys(texts))
        self.at = {t: i for i, t in enumerate(self.texts)}
        self.ids, self.cut = tokenize(tok, self.texts, seq_len)

    def index(self, texts: list[str]) -> np.ndarray:
        return np.array([self.at[t] for t in texts], dtype=np.int64)


def pair_texts(task: PairTask | SentenceTask) -> list[str]:
    if isinstance(task, SentenceTask):
        return task.sentences
    return [t for split in (task.train, task.dev or [], task.test or []) for p in split
            for t in (p.a, p.b, p.negative) if t]


class EmbedHead:
    """Sentence vectors trained by `loss` (a `losses` object) on the task's train pairs or sentences; `dropout`:
    the encoder's dropout while training (SimCSE's positives differ by it alone)."""
    trains = True
    choose_key = "dev_spearman"

    def __init__(self, ckpt_dir: Path, task: PairTask | SentenceTask, cfg, tok, pooling: Pooling, loss, scale: float,
                 dropout: float | None):
        self.ckpt_dir, self.task, self.cfg, self.tok = Path(ckpt_dir), task, cfg, tok
        self.pooling, self.loss_fn, self.scale, self.dropout = pooling, loss, scale, dropout
        self.table = TextTable(tok, pair_texts(task), cfg.seq_len)
        self.pad_id = pad_id_of(tok)
        self.dev = None if isinstance(task, SentenceTask) else task.dev
        self.chooses = bool(self.dev)

    def _split(self, pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (self.table.index([p.a for p in pairs]), self.table.index([p.b for p in pairs]),
                np.array([p.label for p in pairs], dtype=np.float64))

    def draw(self, rng: np.random.Generator) -> None:
        """The seed's training items (all, or `max_train` drawn with its rng), as id arrays."""
        items = self.task.sentences if isinstance(self.task, SentenceTask) else self.task.train
        if self.loss_fn.positives_only:
            items = [p for p in items if p.label is None or p.label > 0]
        if self.cfg.max_train and self.cfg.max_train < len(items):
            items = [items[i] for i in sorted(rng.permutation(len(items))[:self.cfg.max_train])]
        if isinstance(self.task, SentenceTask):
            self.train = {"a": self.table.index(items)}
            return
        self.train = {"a": self.table.index([p.a for p in items]), "b": self.table.index([p.b for p in items])}
        if items[0].label is None:
            self.train["neg"] = self.table.index([p.negative for p in items])
        else:
            self.train["label"] = np.array([p.label for p in items], dtype=np.float32)

    @property
    def train_size(self) -> int:
        return len(self.train["a"])

    def model(self):
        model = load_encoder(self.ckpt_dir, self.tok, self.cfg.seq_len, self.cfg.random_init, self.dropout)
        return model.train()

    def epoch(self, rng: np.random.Generator, batch_size: int) -> list[np.ndarray]:
        """Shuffled batches; a last batch of one item (nothing to contrast it with) joins the one before."""
        order = rng.permutation(self.train_size)
        batches = [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
        if len(batches) > 1 and len(batches[-1]) < 2:
            batches[-2:] = [np.concatenate(batches[-2:])]
        return batches

    def loss(self, model, idx: np.ndarray):
        """The batch's loss: its rows (the loss says which) encoded in one forward of length groups."""
        batch = {k: v[idx] for k, v in self.train.items()}
        parts = self.loss_fn.rows(batch)
        rows = [self.table.ids[i] for part in parts for i in part]
        vecs = grouped_rows(model, rows, self.pooling, self.pad_id, TRAIN_GROUP_OVERHEAD_TOKENS)
        return self.loss_fn.loss(list(vecs.split([len(p) for p in parts])), batch, self.scale)

    def cosines(self, model, pairs) -> tuple[np.ndarray, np.ndarray]:
        """(cosine of each pair's vectors, gold labels), the split's distinct texts encoded once."""
        a, b, gold = self._split(pairs)
        used = np.unique(np.concatenate([a, b]))
        vecs = np.zeros((len(self.table.texts), model.config.hidden_size), dtype=np.float32)
        vecs[used] = encode_ids(model, [self.table.ids[i] for i in used], self.pooling, self.pad_id,
                                self.precision(model))
        return (vecs[a] * vecs[b]).sum(1), gold

    def precision(self, model) -> str:
        return resolve_precision(self.cfg.precision, model.device)[0]

    def choose(self, model) -> dict:
        cos, gold = self.cosines(model, self.dev)
        return {"dev_spearman": spearman(gold, cos)}

    def describe(self, figures: dict) -> str:
        return f"dev Spearman {100 * figures['dev_spearman']:.2f}"

    def report(self, model, tick=None) -> dict:
        """Test Spearman and each test pair's cosine (the prediction file), when there is a test split; SimCSE's
        sentences have none, and are scored on the test pairs of the sets it never saw (`SentenceTask.sets`)."""
        if isinstance(self.task, SentenceTask):
            return {f"{name}_test_spearman": self.spearman_of(model, pairs) for name, pairs in self.task.sets.items()}
        if not self.task.test:
            return {}
        cos, gold = self.cosines(model, self.task.test)
        return {"test_spearman": spearman(gold, cos), "test_pred": [round(float(c), 6) for c in cos]}

    def spearman_of(self, model, pairs) -> float:
        """Spearman of pairs outside the task's table (encoded here, not trained on)."""
        texts = list(dict.fromkeys(t for p in pairs for t in (p.a, p.b)))
        ids, _ = tokenize(self.tok, texts, self.cfg.seq_len)
        vecs = encode_ids(model, ids, self.pooling, self.pad_id, self.precision(model))
        at = {t: i for i, t in enumerate(texts)}
        cos = (vecs[[at[p.a] for p in pairs]] * vecs[[at[p.b] for p in pairs]]).sum(1)
        return spearman([p.label for p in pairs], cos)

