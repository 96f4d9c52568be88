"""Token classification for NER: sentences to windows of sub-tokens, a stock `*ForTokenClassification`
trained on them, tags predicted back onto every character, and the predictions file.

A sentence's characters (or words) are tokenized as pre-split words; each is labelled on its first sub-token and
the others are ignored (-100), the convention of Hugging Face's `run_ner`. A character the tokenizer drops (a
space, a control character) gets no token and is predicted O (`Windows.tokenless` counts them). A sentence longer
than a row is never cut: it is covered by windows of `seq_len - 2` sub-tokens that overlap by `stride`, and each
character is labelled and predicted in exactly one of them, the one where it has the most context on its nearer
side (BERT's "max context" rule for SQuAD; ties to the earlier window), so every character is trained once and
predicted once, from the window that sees most around it.

Speed comes from padding nothing that a cut can save, as in `finetune`: training batches are length buckets
(`finetune.train_batches`) whose forwards run per length group, and prediction runs windows sorted by length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write
from zh_bert.evaluation.length_groups import length_groups
from zh_bert.corpus.ner_files import Sentence
from zh_bert.evaluation.tasks.tag_schemes import OUTSIDE, Scheme, entities
from zh_bert.evaluation.step import precision_autocast
from zh_bert.train.weights import load_for_rows

IGNORED = -100          # the label of a position no loss is taken on (torch's and the Trainer's convention)
ROW_SPECIALS = 2        # [CLS] window [SEP]


@dataclass
class Windows:
    """Rows of one split: ragged `input_ids` and `labels` (IGNORED where not scored), and for each sentence
    and character the row and position it is predicted from (`where[s][c]`, (-1, -1) without a token)."""
    input_ids: list[np.ndarray]
    labels: list[np.ndarray]
    where: list[np.ndarray]
    tokenless: int = 0
    windowed: int = 0                      # sentences longer than one row
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self):
        self.lengths = np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self.input_ids))


def window_starts(n: int, body: int, stride: int) -> list[int]:
    """Start positions of windows of `body` sub-tokens over `n`, consecutive ones sharing `stride`."""
    starts, s = [0], 0
    while s + body < n:
        s = min(s + body - stride, n - body)
        starts.append(s)
    return starts


def best_window(pos: int, starts: list[int], body: int, n: int) -> tuple[int, int]:
    """(window, position in it) of sub-token `pos`: the window where its nearer edge is farthest."""
    best, score = 0, -1
    for w, s in enumerate(starts):
        e = min(s + body, n) - 1
        if s <= pos <= e and min(pos - s, e - pos) > score:
            best, score = w, min(pos - s, e - pos)
    return best, pos - starts[best]


def encode(tok, sentences: list[Sentence], label_index: dict[str, int] | None, seq_len: int,
           stride: int) -> Windows:
    """The rows of `sentences` (labels from their tags through `label_index`; None or an untagged sentence:
    all IGNORED, and so is a tag outside `label_index`, a type train never saw)."""
    if not getattr(tok, "is_fast", False):
        raise ZhBertError(f"{type(tok).__name__} is not a fast tokenizer: tagging needs its word ids")
    if tok.cls_token_id is None or tok.sep_token_id is None:
        raise ZhBertError("the tokenizer has no [CLS]/[SEP] tokens to frame a row with")
    body = seq_len - ROW_SPECIALS
    if stride >= body:
        raise ZhBertError(f"--window-stride {stride} must be below --seq-len {seq_len} minus {ROW_SPECIALS}")
    enc = tok([s.tokens for s in sentences], is_split_into_words=True, add_special_tokens=False)
    out = Windows([], [], [])
    for i, s in enumerate(sentences):
        ids, words = np.asarray(enc["input_ids"][i], dtype=np.int64), enc.word_ids(i)
        first = np.full(len(s.tokens), -1, dtype=np.int64)
        for pos in range(len(words) - 1, -1, -1):
            if words[pos] is not None:
                first[words[pos]] = pos
        out.tokenless += int((first < 0).sum())
        starts = window_starts(len(ids), body, stride)
        out.windowed += len(starts) > 1
        where = np.full((len(s.tokens), 2), -1, dtype=np.int64)
        rows = [np.full(min(st + body, len(ids)) - st + ROW_SPECIALS, IGNORED, dtype=np.int64) for st in starts]
        for c in np.flatnonzero(first >= 0):
            w, at = best_window(int(first[c]), starts, body, len(ids))
            where[c] = (len(out.input_ids) + w, at + 1)
            if label_index is not None and s.tags is not None:
                rows[w][at + 1] = label_index.get(s.tags[c], IGNORED)
        for st, labels in zip(starts, rows):
            out.input_ids.append(np.concatenate(([tok.cls_token_id], ids[st:st + body], [tok.sep_token_id])))
            out.labels.append(labels)
        out.where.append(where)
    out.__post_init__()
    return out


def collate_rows(rows: Windows, idx, pad_id: int) -> dict:
    """Rows `idx` as padded tensors: input_ids, attention_mask, labels (IGNORED on padding)."""
    import torch

    width = int(rows.lengths[idx].max())
    ids = np.full((len(idx), width), pad_id, dtype=np.int64)
    labels = np.full((len(idx), width), IGNORED, dtype=np.int64)
    mask = np.zeros((len(idx), width), dtype=np.int64)
    for r, i in enumerate(idx):
        n = rows.lengths[i]
        ids[r, :n], labels[r, :n], mask[r, :n] = rows.input_ids[i], rows.labels[i], 1
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "labels": torch.from_numpy(labels)}


def tag_loss(model, batch: dict, denominator: int, objective):
    """The objective's loss (cross-entropy; with a teacher, its soft labels beside) summed over the labelled
    positions of `batch`, divided by `denominator` (the labelled positions of the whole step, so a step split into
    length groups has the loss of one batch)."""
    labels = batch.pop("labels")
    keep = labels != IGNORED
    logits = model(**batch).logits[keep].float()
    return objective.loss_sum(logits, labels[keep], lambda t: t(**batch).logits[keep]) / max(denominator, 1)


def predict_rows(model, rows: Windows, batch_size: int, pad_id: int, precision: str) -> list[np.ndarray]:
    """The predicted label id of every position of every row, windows run in groups of similar length."""
    import torch

    was_training = model.training
    model.eval()
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(rows.input_ids)
    with torch.inference_mode(), precision_autocast(model.device, precision):
        for idx in length_groups(rows.lengths, batch_size):
            batch = collate_rows(rows, idx, pad_id)
            batch.pop("labels")
            pred = model(**{k: v.to(model.device) for k, v in batch.items()}).logits.argmax(-1).cpu().numpy()
            for r, i in enumerate(idx):
                out[i] = pred[r, :rows.lengths[i]]
    model.train(was_training)
    return out


def tags_of(rows: Windows, row_preds: list[np.ndarray], labels: list[str]) -> list[list[str]]:
    """Each sentence's predicted tags, each character's from its window (O without a token)."""
    out = []
    for where in rows.where:
        out.append([labels[row_preds[w][p]] if w >= 0 else OUTSIDE for w, p in where])
    return out


def convert(tags: list[str], source: Scheme, target: Scheme) -> list[str]:
    """`tags` of `source` rewritten in `target` through their entities (read as seqeval reads them)."""
    if source is target:
        return tags
    return target.encode(entities([source.scoring_tag(t) for t in tags]), len(tags))


def load_tagger(ckpt_dir: Path, labels: list[str], random_init: bool, tok, seq_len: int):
    """The stock *ForTokenClassification of the checkpoint's architecture with `labels` as its id2label; refused
    when the tokenizer outgrows its vocabulary or a row its positions."""
    from transformers import AutoModelForTokenClassification

    id2label = dict(enumerate(labels))
    kw = dict(num_labels=len(labels), id2label=id2label, label2id={v: k for k, v in id2label.items()})
    return load_for_rows(AutoModelForTokenClassification, ckpt_dir, "a token classifier", tok, random_init, seq_len,
                         **kw)


def write_tag_predictions(path: Path, sentences: list[Sentence], predicted: list[list[str]],
                          scheme: Scheme) -> None:
    """CoNLL lines `character gold predicted` (a blank line between sentences), tags in scoring form (BMES's M
    as I), so `conlleval` and seqeval re-score exactly the figure zh-bert printed; an untagged test file has
    two columns, character and prediction. A character that is whitespace is written as `_`."""
    lines = []
    for s, pred in zip(sentences, predicted):
        for c, tok in enumerate(s.tokens):
            shown = tok if tok.strip() else "_"
            gold = [scheme.scoring_tag(s.tags[c])] if s.tags is not None else []
            lines.append(" ".join([shown, *gold, scheme.scoring_tag(pred[c])]))
        lines.append("")
    with atomic_write(path) as f:
        f.write("\n".join(lines) + "\n")
