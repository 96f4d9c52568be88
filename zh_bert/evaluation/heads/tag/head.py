"""NER fine-tuning: a stock token classifier trained on train, its best state chosen on dev by entity F1,
scored on test (entity-level micro precision/recall/F1, exact span and type, as seqeval's default).

The tag head (`TagHead`) trains on the one fine-tuning loop every head shares (`loop.fit_head`: AdamW, linear
warmup and decay; dev evaluated every epoch or `--eval-every` steps, early stop after `--patience` evaluations
without gain, the best dev state restored before test is predicted). Figures are fractions, as every result's
(printed in percent, as the official scorers, conlleval and seqeval's report, print them). The model may learn another scheme than the files' (`--tag-scheme bioes` on BIO files):
its predictions are read back into entities and written in the files' scheme, which is what is scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np

from zh_bert.core.config import at_least, check_finite, option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.ner_files import Sentence
from zh_bert.evaluation.heads.classify import tokenizer_for, train_batches
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.length_groups import TRAIN_GROUP_OVERHEAD_TOKENS, length_groups
from zh_bert.evaluation.loop import run_seed
from zh_bert.evaluation.tasks.ner import NerTask
from zh_bert.evaluation.metrics.entities import entity_scores
from zh_bert.evaluation.tasks.tag_schemes import scheme_named
from zh_bert.evaluation.step import no_tick
from zh_bert.evaluation.heads.distill import HARD_LABELS
from zh_bert.evaluation.heads.tag.tagging import (
    IGNORED,
    collate_rows,
    convert,
    encode,
    load_tagger,
    predict_rows,
    tag_loss,
    tags_of,
    write_tag_predictions,
)
from zh_bert.train.rundir import model_dir


#: how the stock head's tags are read (`TaggingConfig.decode`)
Decoding = Literal["argmax", "constrained"]


@dataclass
class TaggingConfig:
    """What NER adds to fine-tuning: how long sentences are windowed, which scheme the model learns."""
    window_stride: int = option(32, help="sub-tokens that consecutive windows of a sentence longer than "
                                         "--seq-len share (each character is still predicted once)")
    tag_scheme: str = option("auto", help="the tag scheme the model learns: auto (the files'), bio, bioes or "
                                          "bmes; predictions are written and scored in the files' scheme")
    crf: bool = option(False, help="NER: a linear-chain CRF on the token classifier (start, transition and end "
                                   "scores trained with it; Viterbi decoding kept to the transitions the tag "
                                   "scheme allows); --save writes it as crf.safetensors beside the stock folder")
    decode: Optional[Decoding] = option(
        None, help="NER: how the stock head's tags are read, on dev (choosing) and test alike: argmax (the default: "
                   "each character's likeliest tag, as pipeline('token-classification') reads the folder) or "
                   "constrained (Viterbi over the softmax log-probabilities, the transitions the tag scheme forbids "
                   "excluded; no parameter added); --crf always decodes constrained")

    def __post_init__(self):
        check_finite(self)
        at_least(self, 0, "window_stride")
        if self.tag_scheme != "auto":
            scheme_named(self.tag_scheme)
        if self.crf and self.decode == "argmax":      # a CRF has no per-character argmax to fall back on
            raise ZhBertError("--decode argmax with --crf: a CRF decodes whole tag paths by Viterbi, kept to the tag "
                              "scheme; drop --decode (or --crf for the stock head's argmax)")

    def facts(self) -> dict:
        """What a result says of the head beside the figures: the CRF, or constrained decoding of the stock head."""
        return {"crf": True} if self.crf else {"decode": "constrained"} if self.decode == "constrained" else {}

    @property
    def constrained(self) -> bool:
        """Whether tags are decoded by Viterbi kept to the scheme (the CRF's, or the stock head's log-probs')."""
        return self.crf or self.decode == "constrained"

    def learned(self, task: NerTask):
        return task.scheme if self.tag_scheme == "auto" else scheme_named(self.tag_scheme)


def predict_tags(model, tok, sentences: list[Sentence], task: NerTask, cfg, tcfg: TaggingConfig, rows=None) -> list[list[str]]:
    """Tags of the files' scheme for `sentences` (`rows`: their windows, when already made)."""
    learned = tcfg.learned(task)
    labels = learned.tags(task.types)
    rows = rows or encode(tok, sentences, None, cfg.seq_len, tcfg.window_stride)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    precision = resolve_precision(cfg.precision, model.device)[0]
    if tcfg.constrained:          # Viterbi over each sentence's characters
        from zh_bert.evaluation.heads.tag.crf import crf_tags, scheme_tags

        tags = crf_tags(model, rows, labels, 2 * cfg.batch_size, pad_id, precision) if tcfg.crf else \
            scheme_tags(model, rows, labels, learned, 2 * cfg.batch_size, pad_id, precision)
    else:
        tags = tags_of(rows, predict_rows(model, rows, 2 * cfg.batch_size, pad_id, precision), labels)
    return [convert(t, learned, task.scheme) for t in tags]


def split_scores(model, tok, sentences, task, cfg, tcfg, rows=None) -> tuple[dict, list[list[str]]]:
    """(entity scores, predicted tags) of a tagged split."""
    pred = predict_tags(model, tok, sentences, task, cfg, tcfg, rows)
    return entity_scores([s.tags for s in sentences], pred, task.scheme), pred


def train_rows(tok, task: NerTask, cfg, tcfg: TaggingConfig, rng: np.random.Generator):
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


class TagHead:
    """The tag head on the one fine-tuning loop (`loop.fit`): a stock token classifier, trained on the task's
    windows, its state chosen by dev entity F1, test predicted and (when tagged) scored. `objective`: the gold
    tags alone, or beside a teacher's soft labels (`task_distill`). With `--crf` a linear-chain CRF rides on the
    classifier (`ner_crf`): its NLL is the loss, Viterbi decodes, and the loop's one optimizer trains both at the
    run's learning rate."""
    trains, chooses, choose_key = True, True, "dev_f1"

    def __init__(self, ckpt_dir: Path, task: NerTask, cfg, tcfg: TaggingConfig, tok=None, objective=HARD_LABELS):
        if tcfg.crf and objective is not HARD_LABELS:
            raise ZhBertError("--crf with --teacher: a teacher's soft labels are per character, a CRF scores whole "
                              "tag paths; fine-tune with one of them")
        self.ckpt_dir, self.task, self.cfg, self.tcfg = Path(ckpt_dir), task, cfg, tcfg
        self.objective = objective
        self.tok = tok or tokenizer_for(ckpt_dir)
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        self.dev_rows = encode(self.tok, task.dev, None, cfg.seq_len, tcfg.window_stride)
        self.rows = self.labelled = None

    def draw(self, rng: np.random.Generator) -> None:
        self.rows = train_rows(self.tok, self.task, self.cfg, self.tcfg, rng)
        self.labelled = np.array([int((x != IGNORED).sum()) for x in self.rows.labels])

    @property
    def train_size(self) -> int:
        return len(self.rows.lengths)

    def model(self):
        import torch

        learned = self.tcfg.learned(self.task)
        labels = learned.tags(self.task.types)
        model = load_tagger(self.ckpt_dir, labels, self.cfg.random_init, self.tok, self.cfg.seq_len)
        model = model.to("cuda" if torch.cuda.is_available() else "cpu")
        if self.tcfg.crf:
            from zh_bert.evaluation.heads.tag.crf import attach_crf, scheme_constraint

            attach_crf(model, len(labels)).constrain(scheme_constraint(labels, learned))
        return model.train()

    def epoch(self, rng: np.random.Generator, batch_size: int) -> list[np.ndarray]:
        return train_batches(self.rows.lengths, batch_size, rng)

    def loss(self, model, idx: np.ndarray):
        """The step's mean cross-entropy over its labelled characters (`--crf`: the CRF's NLL per row, over the
        same count), its forward run per length group."""
        from zh_bert.evaluation.heads.tag.crf import crf_loss    # torch: imported once training has begun

        loss, denominator = 0.0, int(self.labelled[idx].sum())
        for group in length_groups(self.rows.lengths[idx], len(idx), TRAIN_GROUP_OVERHEAD_TOKENS):
            batch = {k: v.to(model.device) for k, v in collate_rows(self.rows, idx[group], self.pad_id).items()}
            loss = loss + (crf_loss(model, batch, denominator) if self.tcfg.crf else
                           tag_loss(model, batch, denominator, self.objective))
        return loss

    def choose(self, model) -> dict:
        dev, _ = split_scores(model, self.tok, self.task.dev, self.task, self.cfg, self.tcfg, self.dev_rows)
        return {f"dev_{k}": dev[k] for k in ("f1", "precision", "recall")}

    def describe(self, figures: dict) -> str:
        return f"dev entity F1 {100 * figures['dev_f1']:.2f}"

    def report(self, model, tick=None) -> dict:
        """Test's predicted tags (`test_pred`, the files' scheme) and, when test is tagged, its scores."""
        if self.task.test is None:
            return {}
        pred = predict_tags(model, self.tok, self.task.test, self.task, self.cfg, self.tcfg)
        out: dict = {"test_pred": pred}
        if self.task.scored:
            scores = entity_scores([s.tags for s in self.task.test], pred, self.task.scheme)
            out |= {f"test_{k}": scores[k] for k in ("precision", "recall", "f1")}
            out["test_per_type"] = scores["per_type"]
        return out


def train_tagger(ckpt_dir: Path, task: NerTask, cfg, tcfg: TaggingConfig, seed: int, tok=None, log=print,
                 tick=no_tick, objective=HARD_LABELS, keep=None) -> dict:
    """Fine-tune once with `seed` (`cfg`: a `finetune.FinetuneConfig`) on the one loop; dev entity F1 of the best
    state and, when test is tagged, its P/R/F1 (fractions); `test_pred` holds test's tags (the files' scheme)."""
    return run_seed(TagHead(ckpt_dir, task, cfg, tcfg, tok, objective), cfg, seed, log, tick, keep)


#: the figures a tagging result always carries (fractions; None where test has no tags)
ENTITY_FIGURES = ("dev_f1", "dev_precision", "dev_recall", "test_f1", "test_precision", "test_recall")


def run_tagger(ckpt, task: NerTask, cfg, tcfg: TaggingConfig, seeds: list[int], log=print, tok=None,
               predictions: Path | None = None, objective=HARD_LABELS, keep=None) -> Result:
    """Fine-tune once per seed: entity P/R/F1 per seed (fractions), the first seed's test tags as the result's
    predictions. With `predictions`, they also go to `predictions/TASK.conll` (character, gold, predicted;
    `tagging.write_tag_predictions`). `objective`: gold tags, or a teacher's soft labels beside (`heads.distill`);
    `keep(model)`: the first seed's chosen model."""
    ckpt_dir = model_dir(ckpt)
    tok = tok or tokenizer_for(ckpt_dir)
    runs = []
    for seed in seeds:
        r = train_tagger(ckpt_dir, task, cfg, tcfg, seed, tok=tok, log=log, objective=objective,
                         keep=None if runs else keep)
        log(f"seed {seed}: dev entity F1 {100 * r['dev_f1']:.2f}" + (
            f" | test P {100 * r['test_precision']:.2f} R {100 * r['test_recall']:.2f} F1 {100 * r['test_f1']:.2f}"
            if "test_f1" in r else "") + f" (best step {r['best_step']}, {r['train_s']} s)")
        if predictions is not None and not runs and task.test is not None:
            write_tag_predictions(Path(predictions) / f"{task.name}.conll", task.test, r["test_pred"], task.scheme)
        runs.append(r)
    first = runs[0].get("test_pred")
    for r in runs:
        r.pop("test_pred", None)
    facts = {"checkpoint": str(ckpt_dir), "scheme": task.scheme.name, "learned_scheme": tcfg.learned(task).name,
             "types": task.types, **objective.facts(), **tcfg.facts(), "n_train": len(task.train),
             "n_dev": len(task.dev), "n_test": len(task.test or []), "splits": task.roles, "notes": task.notes,
             "warnings": task.warnings}
    return Result(task.name, cfg.random_init, seeds, runs, facts, ENTITY_FIGURES, first)


def head_entries(entries: list[dict], summary: dict) -> list[dict]:
    """eval_results entries of a tag run that is not the stock head's argmax: with the CRF head `crf: true` and
    `+crf` on the protocol, decoded constrained `decode: constrained` and `+constrained`, each with a task name of
    its own, so such a figure never replaces the stock head's (nor takes its board column)."""
    if summary.get("crf"):
        mark, name, fact = "crf", "CRF head", {"crf": True}
    elif summary.get("decode") == "constrained":
        mark, name, fact = "constrained", "constrained decoding", {"decode": "constrained"}
    else:
        return entries
    return [{**e, "task_name": f"{e['task_name']}, {name}", "protocol": f"{e.get('protocol', '')}+{mark}", **fact}
            for e in entries]
