"""`zh-bert finetune CKPT --task chnsenticorp|tnews|tsv:TRAIN,DEV[,TEST]`: sentence(-pair) classification.

The usual BERT recipe, nothing clever: AdamW (no decay on biases/LayerNorm), linear warmup then linear
decay, dev evaluation every epoch (or `--eval-every` steps), early stop when dev accuracy has not improved
for `--patience` evaluations, the best dev state restored before the test set is scored. The seed is a
setting; `--seeds 3` runs seeds S, S+1, S+2 and reports mean ± sample std (ddof=1), because a single
fine-tuning run of a small model varies by more than most differences people try to measure.
`--random-init` trains the same architecture from random weights: the baseline pretraining must beat.

Speed on a CPU comes from not computing padding: training batches are length buckets drawn from the seed's
rng (`train_batches`) whose forward runs per group of similar length (`length_groups`: a 32-shot batch is all
spread), prediction runs such groups and puts the classes back in order (`predict`), each text is tokenized
once per process (`encode_cached`), and the best dev state is copied into one buffer.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np

from zh_bert.core.config import (
    at_least,
    check_choices,
    check_finite,
    config_from_args,
    option,
    option_of,
)
from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json
from zh_bert.core.hardware import Precision, resolve_precision
from zh_bert.core.options import Shared
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.eval_results import CheckpointArgs, entry, record_for_checkpoint
from zh_bert.evaluation.length_groups import TRAIN_GROUP_OVERHEAD_TOKENS, length_groups
from zh_bert.evaluation.step import optimizer_step, precision_autocast, stepping
from zh_bert.evaluation.tasks import DATASET_NAMES, TaskData, load_task
from zh_bert.train.arch import of_config
from zh_bert.train.recipe import check_seed
from zh_bert.train.recipe_keys import OptimizerKeys, PrecisionKeys
from zh_bert.train.rundir import model_dir
from zh_bert.train.weights import init_from_config, load_pretrained


@dataclass
class FinetuneConfig:
    """How one fine-tuning run trains; `zh-bert ablate` keys its cached evaluations on the whole value."""
    epochs: int = option(3, help="passes over the training set (early stop on dev may end sooner)")
    lr: float = option_of(OptimizerKeys, "lr", default=5e-5, help="peak learning rate")
    seq_len: int = option_of(ShardConfig, "seq_len", help="max tokens per example (longer ones are truncated)")
    batch_size: int = option_of(Shared, "batch_size", help="examples per step")
    warmup: float = option(0.1, help="warmup fraction of all steps")
    weight_decay: float = option_of(OptimizerKeys, "weight_decay")
    patience: int = option(2, help="early stop after N dev evals without gain")
    eval_every: int = option(0, help="steps between dev evals (0: per epoch)")
    max_train: int = option(0, help="use N training examples (0: all)")
    random_init: bool = option(False, help="same architecture, random weights (baseline)")
    precision: Precision = option_of(PrecisionKeys, "precision", default="fp32", help="auto = what pretrain picks here (bf16 on CPUs with avx512_bf16); fp16 with dynamic loss scaling; bf16 autocast")
    pooling: Literal["cls", "mean"] = option("cls", help="cls: stock pooler on [CLS]; mean: masked mean of the "
                                                         "last layer (MLM-only checkpoints never trained [CLS] "
                                                         "or the pooler)")

    def __post_init__(self):
        check_finite(self)   # nan passes every `<` test: refuse it (and inf) before any comparison
        check_choices(self)
        at_least(self, 1, "epochs", "batch_size")
        at_least(self, 0, "patience", "eval_every", "max_train")
        if not 8 <= self.seq_len <= 4096:
            raise ZhBertError(f"--seq-len must be between 8 and 4096, got {self.seq_len}")
        if not (0 < self.lr < 1):
            raise ZhBertError(f"--lr must be in (0, 1), got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise ZhBertError(f"--warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.weight_decay < 0:
            raise ZhBertError(f"--weight-decay must be >= 0, got {self.weight_decay}")


@dataclass
class FinetuneJob:
    """What to fine-tune on, and with which seeds."""
    task: str = option(help="chnsenticorp | tnews | tsv:TRAIN,DEV[,TEST] (TRAIN trains, DEV chooses the best state, "
                            "TEST reports; no text of a later one is trained or chosen on)")
    columns: Optional[str] = option(None, help="TSV columns, e.g. label,text or text,label or label,text_a,text_b "
                                               "(default: detected from the header or the values)")
    seed: int = option_of(Shared, "seed", help="first seed")
    seeds: int = option(1, help="number of seeds (S, S+1, ...); reports mean ± std")

    def __post_init__(self):
        at_least(self, 1, "seeds")
        check_seed("--seed", self.seed, self.seed + self.seeds - 1)   # seeds S..S+N-1 (--seeds N)

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


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


def mean_std(xs: list[float]) -> tuple[float, float]:
    return float(statistics.fmean(xs)), float(statistics.stdev(xs)) if len(xs) > 1 else 0.0


# --------------------------------------------------------------------------- data

BUCKET_BATCHES = 50    # training batches whose examples are sorted by length together (see train_batches)
PREDICT_BATCHES = 2    # a prediction batch is this many training batches (no gradients: memory to spare)
ENCODED_KEPT = 8       # tokenized example lists kept for reuse (see encode_cached)


def percent(mean: float | None, std: float | None = None) -> str:
    """A fraction as a table cell: 86.5 ± 0.3 (percent), "–" when there is none; no ± without a spread."""
    if mean is None:
        return "–"
    return f"{mean * 100:.1f} ± {std * 100:.1f}" if std is not None else f"{mean * 100:.1f}"


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


def batches(data: dict, order: np.ndarray, batch_size: int, pad_id: int):
    for s in range(0, len(order), batch_size):
        yield collate(data, order[s:s + batch_size], pad_id)


def lengths_of(data: dict) -> np.ndarray:
    return np.fromiter((len(x) for x in data["input_ids"]), dtype=np.int64, count=len(data["input_ids"]))


def train_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's batches, drawn from `rng` alone (so a seed trains the same way every time): a shuffle, each
    chunk of up to BUCKET_BATCHES batches sorted by length and cut into batches (little padding: a step costs
    what its real tokens cost), then the batch order shuffled. A chunk is at most a quarter of the epoch, so the
    batches differ from epoch to epoch; an epoch of fewer than 8 batches (a few-shot split) is not sorted."""
    order = rng.permutation(len(lengths))
    per_chunk = batch_size * max(1, min(BUCKET_BATCHES, math.ceil(len(order) / batch_size) // 4))
    out = []
    for s in range(0, len(order), per_chunk):
        chunk = order[s:s + per_chunk]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")] if per_chunk > batch_size else chunk
        out += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [out[i] for i in rng.permutation(len(out))]


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


def train_subset(task: TaskData, cfg: FinetuneConfig, rng: np.random.Generator) -> list:
    """The training examples one seed trains on: all of them, or `max_train` drawn with the seed's rng."""
    if cfg.max_train and cfg.max_train < len(task.train):
        return [task.train[i] for i in sorted(rng.permutation(len(task.train))[:cfg.max_train])]
    return task.train


def check_trainable(task: TaskData, cfg: FinetuneConfig, seeds: list[int]) -> None:
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


def encode_task(tok, task: TaskData, cfg: FinetuneConfig, rng: np.random.Generator) -> tuple[dict, dict, dict | None]:
    """Train (the seed's subset), dev and test tokenized; through `encode_cached`, so only the first seed of
    a run (and the first run on a test set) pays for it."""
    label_index = {l: i for i, l in enumerate(task.labels)}
    train = encode_cached(tok, train_subset(task, cfg, rng), label_index, cfg.seq_len)
    dev = encode_cached(tok, task.dev, label_index, cfg.seq_len)
    return train, dev, encode_cached(tok, task.test, label_index, cfg.seq_len) if task.test else None


def snapshot(model, into: dict | None) -> dict:
    """The model's state, copied into the previous snapshot's tensors when there is one: a dev improvement
    allocates no new copy of the model."""
    state = model.state_dict()
    if into is None:
        return {k: v.detach().clone() for k, v in state.items()}
    for k, v in state.items():
        into[k].copy_(v)
    return into


def train_one(ckpt_dir: Path, task: TaskData, cfg: FinetuneConfig, seed: int, tok=None, log=print) -> dict:
    """Fine-tune once with `seed`; returns dev/test accuracy and macro-F1 of the best-on-dev state."""
    import torch

    tok = tok or tokenizer_for(ckpt_dir)
    rng = np.random.default_rng(seed)
    train, dev, test = encode_task(tok, task, cfg, rng)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0

    torch.manual_seed(seed)
    model = load_classifier(ckpt_dir, len(task.labels), cfg.random_init, task.labels, cfg.pooling)
    if model.config.vocab_size < len(tok):
        raise ZhBertError(f"{ckpt_dir}: tokenizer has {len(tok)} tokens but the model's vocab_size is "
                          f"{model.config.vocab_size}")
    model.to("cuda" if torch.cuda.is_available() else "cpu").train()
    steps_per_epoch = math.ceil(len(train["labels"]) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    opt, scaler, sched, precision = stepping(model, cfg, total)
    eval_every = cfg.eval_every or steps_per_epoch

    lengths = lengths_of(train)
    best = {"dev_acc": -1.0}
    best_state, bad, step, t0 = None, 0, 0, time.perf_counter()
    stop = False
    for epoch in range(cfg.epochs):
        for idx in train_batches(lengths, cfg.batch_size, rng):
            loss = 0.0   # the batch's mean loss, its forward run per length group (less padding, one backward)
            for group in length_groups(lengths[idx], len(idx), TRAIN_GROUP_OVERHEAD_TOKENS):
                batch = {k: v.to(model.device) for k, v in collate(train, idx[group], pad_id).items()}
                with precision_autocast(model.device, precision):
                    labels = batch.pop("labels")
                    loss = loss + torch.nn.functional.cross_entropy(logits(model, batch, cfg.pooling).float(),
                                                                    labels, reduction="sum") / len(idx)
            optimizer_step(loss, model, opt, scaler, sched)
            step += 1
            if step % eval_every == 0 or step == total:
                acc, f1 = scores(model, dev, cfg, pad_id)
                log(f"  seed {seed} step {step}/{total} epoch {epoch + 1} loss {loss.item():.4f} "
                    f"dev acc {acc:.4f} macro-F1 {f1:.4f}")
                if acc > best["dev_acc"]:
                    best, bad = {"dev_acc": acc, "dev_macro_f1": f1, "best_step": step}, 0
                    if step < total:    # the last step's state needs no copy: it is the model's own
                        best_state = snapshot(model, best_state)
                else:
                    bad += 1
                    if bad >= cfg.patience:
                        log(f"  seed {seed}: early stop at step {step} (no dev gain for {bad} evaluations)")
                        stop = True
                        break
        if stop:
            break
    if best["best_step"] != step:
        model.load_state_dict(best_state)
    out = {"seed": seed, **best, "steps": step, "train_s": round(time.perf_counter() - t0, 1)}
    if test is not None:
        ids: list[int] = []
        out["test_acc"], out["test_macro_f1"] = scores(model, test, cfg, pad_id, predictions=ids)
        out["test_pred"] = [task.labels[i] for i in ids]
    return out


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key in ("dev_acc", "dev_macro_f1", "test_acc", "test_macro_f1"):
        vals = [r[key] for r in runs if key in r]
        if not vals:
            out[key] = None
            continue
        out[key], std = mean_std(vals)
        if len(vals) > 1:
            out[f"{key}_std"] = std
    return out


def run(ckpt: str | Path, task: TaskData, cfg: FinetuneConfig, seeds: list[int], log=print, tok=None) -> dict:
    """Fine-tune once per seed; the summary dict is what the JSON line and ablate use. `tok`: the checkpoint's
    tokenizer when the caller has it (default: `tokenizer_for`, shared by every run on the checkpoint)."""
    check_trainable(task, cfg, seeds)
    ckpt_dir = model_dir(ckpt)
    tok = tok or tokenizer_for(ckpt_dir)
    runs = []
    for seed in seeds:
        r = train_one(ckpt_dir, task, cfg, seed, tok=tok, log=log)
        log(f"seed {seed}: dev acc {r['dev_acc']:.4f} macro-F1 {r['dev_macro_f1']:.4f}"
            + (f" | test acc {r['test_acc']:.4f} macro-F1 {r['test_macro_f1']:.4f}" if "test_acc" in r else "")
            + f" (best step {r['best_step']}, {r['train_s']} s)")
        runs.append(r)
    gold = [e.label for e in task.dev]
    majority = max(set(gold), key=gold.count)
    return {"task": task.name, "checkpoint": str(ckpt_dir), "init": "random" if cfg.random_init else "pretrained",
            "seeds": seeds, **summarize(runs), "majority_dev_acc": gold.count(majority) / len(gold),
            "n_train": min(len(task.train), cfg.max_train or len(task.train)), "n_dev": len(task.dev),
            "n_test": len(task.test) if task.test else 0, "splits": task.roles, "config": asdict(cfg),
            "per_seed": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in runs]}


def eval_entries(summary: dict, task_spec: str) -> list[dict]:
    name, dtype = DATASET_NAMES.get(task_spec, (summary["task"], "tsv"))
    n = len(summary["seeds"])
    task_name = "Text classification" + (f" (mean of {n} seeds)" if n > 1 else "")
    figures = [("dev", "dev_acc", "accuracy", "accuracy"), ("test", "test_acc", "accuracy", "accuracy"),
               ("test", "test_macro_f1", "f1", "macro-F1")]
    return [entry("text-classification", task_name, dtype, name, mtype, f"{split} {mname}", summary[key])
            for split, key, mtype, mname in figures if summary.get(key) is not None]


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert finetune", __doc__.split("\n\n")[0], CheckpointArgs, FinetuneJob, FinetuneConfig)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    target, job, cfg = (config_from_args(c, args) for c in (CheckpointArgs, FinetuneJob, FinetuneConfig))
    task = load_task(job.task, job.columns)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "newly initialised classifier" warnings are expected here
    hf_logging.disable_progress_bar()
    print(f"task {task.name}: {len(task.train)} train / {len(task.dev)} dev / {len(task.test or [])} test, "
          f"{len(task.labels)} labels{' (sentence pairs)' if task.pair else ''}", flush=True)
    for note in task.notes:
        print(f"note: {note}", flush=True)
    for warning in task.warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    summary = run(target.ckpt, task, cfg, job.seed_list(), log=lambda m: print(m, flush=True))
    for r in summary["per_seed"]:
        r.pop("test_pred", None)       # one label per test example: not for the JSON line
    summary["notes"] = task.notes
    summary["warnings"] = task.warnings
    if not target.no_record and not cfg.random_init:
        where = record_for_checkpoint(target.ckpt, eval_entries(summary, job.task))
        if where:
            print(f"recorded in {where}", flush=True)
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    return 0
