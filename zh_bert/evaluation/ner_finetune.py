"""NER fine-tuning: a stock token classifier trained on train, its best state chosen on dev by entity F1,
scored on test (entity-level micro precision/recall/F1, exact span and type, as seqeval's default).

The recipe is `finetune`'s (`step.stepping`: AdamW, linear warmup and decay; dev evaluated every epoch or
`--eval-every` steps, early stop after `--patience` evaluations without gain, the best dev state restored before
test is predicted). The model may learn another scheme than the files' (`--tag-scheme bioes` on BIO files):
its predictions are read back into entities and written in the files' scheme, which is what is scored.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zh_bert.core.config import at_least, check_finite, option
from zh_bert.core.hardware import resolve_precision
from zh_bert.evaluation.finetune import FinetuneConfig, snapshot, tokenizer_for, train_batches
from zh_bert.evaluation.length_groups import TRAIN_GROUP_OVERHEAD_TOKENS, length_groups
from zh_bert.evaluation.ner_data import NerTask, Sentence
from zh_bert.evaluation.ner_metric import entity_scores
from zh_bert.evaluation.ner_tags import scheme_named
from zh_bert.evaluation.step import optimizer_step, precision_autocast, stepping
from zh_bert.evaluation.tagging import (
    IGNORED,
    collate_rows,
    convert,
    encode,
    load_tagger,
    predict_rows,
    tag_loss,
    tags_of,
)


@dataclass
class TaggingConfig:
    """What NER adds to fine-tuning: how long sentences are windowed, which scheme the model learns."""
    window_stride: int = option(32, help="sub-tokens that consecutive windows of a sentence longer than "
                                         "--seq-len share (each character is still predicted once)")
    tag_scheme: str = option("auto", help="the tag scheme the model learns: auto (the files'), bio, bioes or "
                                          "bmes; predictions are written and scored in the files' scheme")

    def __post_init__(self):
        check_finite(self)
        at_least(self, 0, "window_stride")
        if self.tag_scheme != "auto":
            scheme_named(self.tag_scheme)

    def learned(self, task: NerTask):
        return task.scheme if self.tag_scheme == "auto" else scheme_named(self.tag_scheme)


def predict_tags(model, tok, sentences: list[Sentence], task: NerTask, cfg: FinetuneConfig, tcfg: TaggingConfig,
                 rows=None) -> list[list[str]]:
    """Tags of the files' scheme for `sentences` (`rows`: their windows, when already made)."""
    learned = tcfg.learned(task)
    labels = learned.tags(task.types)
    rows = rows or encode(tok, sentences, None, cfg.seq_len, tcfg.window_stride)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    preds = predict_rows(model, rows, 2 * cfg.batch_size, pad_id, resolve_precision(cfg.precision, model.device)[0])
    return [convert(t, learned, task.scheme) for t in tags_of(rows, preds, labels)]


def split_scores(model, tok, sentences, task, cfg, tcfg, rows=None) -> tuple[dict, list[list[str]]]:
    """(entity scores, predicted tags) of a tagged split."""
    pred = predict_tags(model, tok, sentences, task, cfg, tcfg, rows)
    return entity_scores([s.tags for s in sentences], pred, task.scheme), pred


def train_rows(tok, task: NerTask, cfg: FinetuneConfig, tcfg: TaggingConfig, rng: np.random.Generator):
    """The seed's training sentences (all, or `max_train` drawn with its rng) as windows, tags in the learned
    scheme."""
    learned = tcfg.learned(task)
    train = task.train
    if cfg.max_train and cfg.max_train < len(train):
        train = [train[i] for i in sorted(rng.permutation(len(train))[:cfg.max_train])]
    if learned is not task.scheme:
        train = [Sentence(s.tokens, convert(s.tags, task.scheme, learned), s.where) for s in train]
    index = {t: i for i, t in enumerate(learned.tags(task.types))}
    return encode(tok, train, index, cfg.seq_len, tcfg.window_stride)


def train_tagger(ckpt_dir: Path, task: NerTask, cfg: FinetuneConfig, tcfg: TaggingConfig, seed: int, tok=None,
                 log=print) -> dict:
    """Fine-tune once with `seed`; dev entity F1 of the best state and, when test is tagged, its scores;
    `test_pred` holds test's predicted tags (the files' scheme)."""
    import torch

    tok = tok or tokenizer_for(ckpt_dir)
    rng = np.random.default_rng(seed)
    train = train_rows(tok, task, cfg, tcfg, rng)
    dev_rows = encode(tok, task.dev, None, cfg.seq_len, tcfg.window_stride)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    torch.manual_seed(seed)
    model = load_tagger(ckpt_dir, tcfg.learned(task).tags(task.types), cfg.random_init, tok, cfg.seq_len)
    model.to("cuda" if torch.cuda.is_available() else "cpu").train()
    steps_per_epoch = math.ceil(len(train.lengths) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    opt, scaler, sched, precision = stepping(model, cfg, total)
    eval_every = cfg.eval_every or steps_per_epoch
    labelled = np.array([int((x != IGNORED).sum()) for x in train.labels])
    best, best_state, bad, step, t0 = {"dev_f1": -1.0}, None, 0, 0, time.perf_counter()
    for epoch in range(cfg.epochs):
        for idx in train_batches(train.lengths, cfg.batch_size, rng):
            loss, denominator = 0.0, int(labelled[idx].sum())
            for group in length_groups(train.lengths[idx], len(idx), TRAIN_GROUP_OVERHEAD_TOKENS):
                batch = {k: v.to(model.device) for k, v in collate_rows(train, idx[group], pad_id).items()}
                with precision_autocast(model.device, precision):
                    loss = loss + tag_loss(model, batch, denominator)
            optimizer_step(loss, model, opt, scaler, sched)
            step += 1
            if step % eval_every and step != total:
                continue
            dev, _ = split_scores(model, tok, task.dev, task, cfg, tcfg, dev_rows)
            log(f"  seed {seed} step {step}/{total} epoch {epoch + 1} loss {loss.item():.4f} dev entity "
                f"F1 {dev['f1']:.4f}")
            if dev["f1"] > best["dev_f1"]:
                best, bad = {"dev_f1": dev["f1"], "dev_precision": dev["precision"], "dev_recall": dev["recall"],
                             "best_step": step}, 0
                best_state = snapshot(model, best_state) if step < total else best_state
            else:
                bad += 1
                if bad >= cfg.patience:
                    log(f"  seed {seed}: early stop at step {step} (no dev gain for {bad} evaluations)")
                    break
        else:
            continue
        break
    if best["best_step"] != step:
        model.load_state_dict(best_state)
    out = {"seed": seed, **best, "steps": step, "train_s": round(time.perf_counter() - t0, 1)}
    if task.test is not None:
        pred = predict_tags(model, tok, task.test, task, cfg, tcfg)
        out["test_pred"] = pred
        if task.scored:
            scores = entity_scores([s.tags for s in task.test], pred, task.scheme)
            out |= {f"test_{k}": scores[k] for k in ("precision", "recall", "f1")}
            out["test_per_type"] = scores["per_type"]
    return out
