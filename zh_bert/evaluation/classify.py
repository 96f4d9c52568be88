"""The classification head: the stock *ForSequenceClassification of the checkpoint's architecture on sentence(-pair)
examples, fine-tuned on the one loop (`loop`), chosen on dev by accuracy, scored by accuracy and macro-F1.

Speed on a CPU comes from not computing padding: training batches are length buckets drawn from the seed's
rng (`train_batches`) whose forward runs per group of similar length (`length_groups`: a 32-shot batch is all
spread), prediction runs such groups and puts the classes back in order (`predict`), each text is tokenized
once per process (`encode_cached`), and the best dev state is copied into one buffer (`loop.snapshot`).
"""

from __future__ import annotations

import sys

import math
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.length_groups import TRAIN_GROUP_OVERHEAD_TOKENS, length_buckets, length_groups
from zh_bert.evaluation.step import precision_autocast
from zh_bert.evaluation.task_distill import HARD_LABELS
from zh_bert.evaluation.tasks import TaskData
from zh_bert.train.arch import of_config
from zh_bert.train.weights import init_from_config, load_pretrained

BUCKET_BATCHES = 50    # training batches whose examples are sorted by length together (see train_batches)
PREDICT_BATCHES = 2    # a prediction batch is this many training batches (no gradients: memory to spare)
ENCODED_KEPT = 8       # tokenized example lists kept for reuse (see encode_cached)

# --------------------------------------------------------------------------- metrics

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


# --------------------------------------------------------------------------- data

def tokenize_examples(tok, examples, label_index: dict[str, int], seq_len: int) -> dict:
    """Token ids per example (ragged lists) + labels; padding happens per batch."""
    a = [e.text_a for e in examples]
    b = [e.text_b or "" for e in examples] if any(e.text_b is not None for e in examples) else None
    enc = tok(a, b, truncation=True, max_length=seq_len)
    tt = enc.get("token_type_ids") or [[0] * len(x) for x in enc["input_ids"]]
    labels = np.array([label_index.get(e.label, -1) for e in examples], dtype=np.int64)
    return {"input_ids": enc["input_ids"], "token_type_ids": tt, "labels": labels}


_ENCODED: dict = {}      # encode_cached's store: key -> (tokenizer, encoded), oldest first
_TOKENIZERS: dict = {}   # tokenizer_for's store: (folder, its files' sizes and mtimes) -> tokenizer


def encode_cached(tok, examples, label_index: dict[str, int], seq_len: int) -> dict:
    """`tokenize_examples`, reused while the same tokenizer object encodes the same texts, labels and
    `seq_len` again: `run` tokenizes dev and test once for all its seeds, and a caller that runs several
    train/dev pairs against one test set (the FewCLUE suite) tokenizes that test set once. The entry holds the
    tokenizer, so its id cannot be reused by another object; the returned dict is shared: do not modify it."""
    key = (id(tok), seq_len, tuple(sorted(label_index.items())),
           tuple((e.text_a, e.text_b, e.label) for e in examples))
    hit = _ENCODED.pop(key, None)
    if hit is None or hit[0] is not tok:
        hit = (tok, tokenize_examples(tok, examples, label_index, seq_len))
    _ENCODED[key] = hit
    while len(_ENCODED) > ENCODED_KEPT:
        _ENCODED.pop(next(iter(_ENCODED)))
    return hit[1]


def announce(header: str, notes: list[str], warnings: list[str]) -> None:
    """What a fine-tuning command says before it trains: the task in one line, its notes on stdout, its warnings
    on stderr; the transformers messages every fresh head prints ("newly initialised") silenced, as expected."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    print(header, flush=True)
    for note in notes:
        print(f"note: {note}", flush=True)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)


def tokenizer_for(ckpt_dir: Path):
    """`load_tokenizer(ckpt_dir)`, loaded once while the folder's files are unchanged (same names, sizes and
    mtimes): every `run` on one checkpoint then shares one tokenizer, and so `encode_cached`'s entries."""
    folder = Path(ckpt_dir).resolve()
    stamp = tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file())) \
        if folder.is_dir() else ()
    key = (str(folder), stamp)
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[key] = load_tokenizer(ckpt_dir)
    return _TOKENIZERS[key]


def collate(data: dict, idx: np.ndarray, pad_id: int) -> dict:
    """The examples `idx` of `data` as one batch of tensors, padded to its longest example only."""
    import torch

    width = max(len(data["input_ids"][i]) for i in idx)
    ids = np.full((len(idx), width), pad_id, dtype=np.int64)
    tt = np.zeros((len(idx), width), dtype=np.int64)
    mask = np.zeros((len(idx), width), dtype=np.int64)
    for r, i in enumerate(idx):
        n = len(data["input_ids"][i])
        ids[r, :n], tt[r, :n], mask[r, :n] = data["input_ids"][i], data["token_type_ids"][i], 1
    return {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(tt),
            "attention_mask": torch.from_numpy(mask), "labels": torch.from_numpy(data["labels"][idx])}


def lengths_of(data: dict) -> np.ndarray:
    return np.fromiter((len(x) for x in data["input_ids"]), dtype=np.int64, count=len(data["input_ids"]))


def train_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's batches (`length_buckets`): chunks of up to BUCKET_BATCHES batches sorted by length, a chunk at
    most a quarter of the epoch, so the batches differ from epoch to epoch; an epoch of fewer than 8 batches (a
    few-shot split) is not sorted."""
    per_chunk = max(1, min(BUCKET_BATCHES, math.ceil(len(lengths) / batch_size) // 4))
    return length_buckets(lengths, batch_size, rng, per_chunk)


def logits(model, batch: dict, pooling: str):
    """Class logits. `mean` pools the last layer over real tokens instead of using [CLS] through the pooler:
    an MLM-only checkpoint never trained [CLS] or the pooler (no NSP), but every token's representation.
    ModernBERT has no token types and pools by its config (`load_classifier` set it to `pooling`)."""
    if of_config(model.config).pools_itself():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    if pooling == "cls":
        return model(**batch).logits
    hidden = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              token_type_ids=batch.get("token_type_ids")).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    if not hasattr(model, "dropout"):   # ELECTRA: its stock head (dropout, dense, GELU, dropout, output) reads position 0
        return model.classifier(pooled.unsqueeze(1))
    return model.classifier(model.dropout(pooled))


def predict(model, data: dict, batch_size: int, pad_id: int, precision: str, pooling: str = "cls") -> np.ndarray:
    """Class ids in the order of `data`. Groups of up to `2 * batch_size` examples of similar length
    (`length_groups`, then put back in order): padding costs next to nothing, and each prediction is the one it
    would be in any batch. The model is left in the mode (train or eval) it came in."""
    import torch

    was_training = model.training
    model.eval()
    lengths = lengths_of(data)
    preds = np.zeros(len(lengths), dtype=np.int64)
    with torch.inference_mode(), precision_autocast(model.device, precision):
        for idx in length_groups(lengths, batch_size * PREDICT_BATCHES):
            batch = collate(data, idx, pad_id)
            batch.pop("labels")
            batch = {k: v.to(model.device) for k, v in batch.items()}
            preds[idx] = logits(model, batch, pooling).float().argmax(-1).cpu().numpy()
    model.train(was_training)
    return preds


def scores(model, data, cfg, pad_id, predictions: list | None = None) -> tuple[float, float]:
    """Accuracy and macro-F1; the class ids are appended to `predictions` when given (the test set's go into
    the official prediction files)."""
    pred = predict(model, data, cfg.batch_size, pad_id, resolve_precision(cfg.precision, model.device)[0],
                   cfg.pooling)
    if predictions is not None:
        predictions += pred.tolist()
    return accuracy(data["labels"], pred), macro_f1(data["labels"], pred)


# --------------------------------------------------------------------------- training

def load_classifier(ckpt_dir: Path, num_labels: int, random_init: bool, labels: list[str], pooling: str = "cls"):
    """The stock *ForSequenceClassification of the checkpoint's architecture; a ModernBERT pools with its own
    `classifier_pooling` (= `pooling`), saved in its config so the fine-tuned model predicts the same way."""
    from transformers import AutoModelForSequenceClassification

    id2label = dict(enumerate(labels))
    kw = dict(num_labels=num_labels, id2label=id2label, label2id={v: k for k, v in id2label.items()})
    kw.update(of_config(read_json(Path(ckpt_dir) / "config.json", default={})).classifier_kwargs(pooling))
    if random_init:
        return init_from_config(AutoModelForSequenceClassification, ckpt_dir, "a classifier", **kw)
    return load_pretrained(AutoModelForSequenceClassification, ckpt_dir, "a classifier", **kw)


def train_subset(task: TaskData, cfg, rng: np.random.Generator) -> list:
    """The training examples one seed trains on: all of them, or `max_train` drawn with the seed's rng."""
    if cfg.max_train and cfg.max_train < len(task.train):
        return [task.train[i] for i in sorted(rng.permutation(len(task.train))[:cfg.max_train])]
    return task.train


def check_trainable(task: TaskData, cfg, seeds: list[int]) -> None:
    """Refuse, before any training, a seed whose training examples hold fewer than two classes: it would
    learn a constant and report a dev accuracy that measures nothing."""
    for seed in seeds:
        classes = {e.label for e in train_subset(task, cfg, np.random.default_rng(seed))}
        if len(classes) < 2 and cfg.max_train and cfg.max_train < len(task.train):
            raise ZhBertError(f"--max-train {cfg.max_train}: seed {seed} draws training examples of one class "
                              f"only ({next(iter(classes))!r}); use a larger --max-train (or 0: all)")
        if len(classes) < 2:
            raise ZhBertError(f"task {task.name}: the train split holds fewer than two classes "
                              f"({', '.join(sorted(classes)) or 'no examples'}); a classifier needs at least two")


def encode_task(tok, task: TaskData, cfg, rng: np.random.Generator) -> tuple[dict, dict, dict | None]:
    """Train (the seed's subset), dev and test tokenized; through `encode_cached`, so only the first seed of
    a run (and the first run on a test set) pays for it."""
    label_index = {l: i for i, l in enumerate(task.labels)}
    train = encode_cached(tok, train_subset(task, cfg, rng), label_index, cfg.seq_len)
    dev = encode_cached(tok, task.dev, label_index, cfg.seq_len)
    return train, dev, encode_cached(tok, task.test, label_index, cfg.seq_len) if task.test else None


# --------------------------------------------------------------------------- the head

class ClassifyHead:
    """Sentence(-pair) classification of `task` on the loop (`loop`): train the seed's subset, choose on dev by
    accuracy (macro-F1 beside), report test with the predicted labels. `objective`: the gold labels alone
    (`task_distill.HARD_LABELS`) or beside a teacher's soft labels (`task_distill.Distilled`)."""
    trains = chooses = True
    choose_key = "dev_acc"

    def __init__(self, ckpt_dir: Path, task: TaskData, cfg, tok, objective=HARD_LABELS):
        self.ckpt_dir, self.task, self.cfg, self.tok = Path(ckpt_dir), task, cfg, tok
        self.objective = objective
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0

    def draw(self, rng: np.random.Generator) -> None:
        self.train, self.dev, self.test = encode_task(self.tok, self.task, self.cfg, rng)
        self.lengths = lengths_of(self.train)

    @property
    def train_size(self) -> int:
        return len(self.train["labels"])

    def model(self):
        import torch

        model = load_classifier(self.ckpt_dir, len(self.task.labels), self.cfg.random_init, self.task.labels,
                                self.cfg.pooling)
        if model.config.vocab_size < len(self.tok):
            raise ZhBertError(f"{self.ckpt_dir}: tokenizer has {len(self.tok)} tokens but the model's vocab_size is "
                              f"{model.config.vocab_size}")
        return model.to("cuda" if torch.cuda.is_available() else "cpu").train()

    def epoch(self, rng: np.random.Generator, batch_size: int) -> list[np.ndarray]:
        return train_batches(self.lengths, batch_size, rng)

    def loss(self, model, idx: np.ndarray):
        """The batch's mean loss (the objective's: cross-entropy, or with a teacher's soft labels beside), its
        forward run per length group (less padding, one backward). A teacher reads [CLS] as a stock classifier."""
        loss = 0.0
        for group in length_groups(self.lengths[idx], len(idx), TRAIN_GROUP_OVERHEAD_TOKENS):
            batch = {k: v.to(model.device) for k, v in collate(self.train, idx[group], self.pad_id).items()}
            labels = batch.pop("labels")
            student = logits(model, batch, self.cfg.pooling).float()
            loss = loss + self.objective.loss_sum(student, labels, lambda t, b=batch: logits(t, b, "cls")) / len(idx)
        return loss

    def choose(self, model) -> dict:
        acc, f1 = scores(model, self.dev, self.cfg, self.pad_id)
        return {"dev_acc": acc, "dev_macro_f1": f1}

    def describe(self, figures: dict) -> str:
        return f"dev acc {figures['dev_acc']:.4f} macro-F1 {figures['dev_macro_f1']:.4f}"

    def report(self, model, tick=None) -> dict:
        """Test accuracy, macro-F1 and the predicted label of every test example (none without a test split)."""
        if self.test is None:
            return {}
        ids: list[int] = []
        acc, f1 = scores(model, self.test, self.cfg, self.pad_id, predictions=ids)
        return {"test_acc": acc, "test_macro_f1": f1, "test_pred": [self.task.labels[i] for i in ids]}
