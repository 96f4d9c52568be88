"""The one fine-tuning loop every head trains on: classify (`classify.ClassifyHead`), span extraction
(`qa.SpanHead`), multiple choice / cloze (`prompts.ChoiceHead`: CHID, PET, zero-shot), and any head a new task
kind adds. What differs between them is asked of the head; how zh-bert fine-tunes is written here once:

- the seed: numpy's generator draws the training examples (`--max-train`) and every epoch's batches, torch's
  (seeded right before the model is made) the new weights and dropout, so a seed trains the same way every time;
- the step (`step.stepping`, `step.optimizer_step`: AdamW, linear warmup then decay, loss scaling, autocast);
- the choice: a head that chooses (`head.chooses`) is scored on its choosing split every `--eval-every` steps (or
  epoch) and at the last step, the best state is kept in one buffer (`snapshot`), training stops after `--patience`
  evaluations without gain, and the best state is restored before the reported split is predicted; a head that
  does not choose (CMRC 2018's dev is its reported split) trains a fixed number of epochs and keeps the last state;
- the progress callback (`tick`: steps found, steps done; the suite's bar, `TaskBar`) and the log lines;
- the predictions, which come from `head.report` on the kept state.

A head is an object with: `trains` and `chooses` (booleans), `choose_key` (the figure of `choose` the best state
maximises), `draw(rng)` (the seed's training examples, encoded), `train_size` (examples or windows), `model()`
(made after torch is seeded, on its device, in train mode), `epoch(rng, batch_size)` (one epoch's batches: arrays
of indices into the training examples, length-grouped as the head likes), `loss(model, idx)` (the batch's mean
loss in fp32; called under the precision's autocast), `choose(model)` (figures on the choosing split, named as
they are reported: `dev_acc`), `describe(figures)` (their words in the log) and `report(model, tick)` (figures and
predictions of the reported split).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from zh_bert.core.config import at_least, check_choices, check_finite, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import Precision
from zh_bert.core.options import Shared
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.evaluation.step import no_tick, optimizer_step, precision_autocast, stepping
from zh_bert.train.recipe import check_seed
from zh_bert.train.recipe_keys import OptimizerKeys, PrecisionKeys


#: what `--pooling` takes (each head says which of them it computes)
PoolingName = Literal["auto", "cls", "mean", "first-last-avg"]


@dataclass
class FinetuneConfig:
    """How one fine-tuning run trains; `zh-bert ablate` keys its cached evaluations on the whole value."""
    epochs: Optional[int] = option(3, help="passes over the training set (early stop on dev may end sooner)")
    lr: float = option_of(OptimizerKeys, "lr", default=5e-5, help="peak learning rate")
    seq_len: int = option_of(ShardConfig, "seq_len", help="max tokens per example (longer ones are truncated)")
    batch_size: int = option_of(Shared, "batch_size", help="examples per step")
    warmup: float = option(0.1, help="warmup fraction of all steps")
    weight_decay: float = option_of(OptimizerKeys, "weight_decay")
    patience: Optional[int] = option(2, help="early stop after N dev evals without gain")
    eval_every: int = option(0, help="steps between dev evals (0: per epoch)")
    max_train: int = option(0, help="use N training examples (0: all)")
    random_init: bool = option(False, help="same architecture, random weights (baseline)")
    precision: Precision = option_of(PrecisionKeys, "precision", default="fp32", help="auto = what pretrain picks here (bf16 on CPUs with avx512_bf16); fp16 with dynamic loss scaling; bf16 autocast")
    pooling: Optional[PoolingName] = option(
        None, help="how a sentence's tokens become one vector: cls ([CLS]; a classifier reads it through its stock "
                   "pooler), mean (the masked mean of the last layer: an MLM-only checkpoint never trained [CLS] or "
                   "the pooler, every token), first-last-avg (an embedder: the mean of the first and last layers' "
                   "average); auto (the default): the head's choice for the checkpoint (a classifier cls only where "
                   "the checkpoint trained its pooler, an NSP/SOP head or a fine-tuned classifier, mean otherwise; an "
                   "embedder a sentence-transformers folder's own, else mean)")

    def __post_init__(self):
        check_finite(self)   # nan passes every `<` test: refuse it (and inf) before any comparison
        check_choices(self)
        if self.pooling == "auto":
            self.pooling = None     # the head decides, for the checkpoint it is given
        at_least(self, 1, *(k for k in ("epochs", "batch_size") if getattr(self, k) is not None))
        at_least(self, 0, *(k for k in ("patience", "eval_every", "max_train") if getattr(self, k) is not None))
        if not 8 <= self.seq_len <= 4096:
            raise ZhBertError(f"--seq-len must be between 8 and 4096, got {self.seq_len}")
        if not (0 < self.lr < 1):
            raise ZhBertError(f"--lr must be in (0, 1), got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise ZhBertError(f"--warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.weight_decay < 0:
            raise ZhBertError(f"--weight-decay must be >= 0, got {self.weight_decay}")


@dataclass
class Seeds:
    """The seeds a command runs: S, S+1, ... (`--seeds N`); figures are mean ± std over them."""
    seed: int = option_of(Shared, "seed", help="first seed")
    seeds: int = option(1, help="number of seeds (S, S+1, ...); reports mean ± std")

    def __post_init__(self):
        at_least(self, 1, "seeds")
        check_seed("--seed", self.seed, self.seed + self.seeds - 1)   # seeds S..S+N-1 (--seeds N)

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))



def snapshot(model, into: dict | None) -> dict:
    """The model's state, copied into the previous snapshot's tensors when there is one: a dev improvement
    allocates no new copy of the model."""
    state = model.state_dict()
    if into is None:
        return {k: v.detach().clone() for k, v in state.items()}
    for k, v in state.items():
        into[k].copy_(v)
    return into


def fit_head(head, model, cfg, seed: int, rng: np.random.Generator, log=print, tick=no_tick) -> dict:
    """Train `model` through `head` for `cfg.epochs` epochs (see the module docstring); returns the step count
    and, for a head that chooses, the best figures and their step (the model is left in the best state)."""
    per_epoch = math.ceil(head.train_size / cfg.batch_size)
    total = per_epoch * cfg.epochs
    opt, scaler, sched, precision = stepping(model, cfg, total)
    tick(0, total)
    eval_every = cfg.eval_every or per_epoch
    best, best_state, bad, step, stop = {head.choose_key: -1.0}, None, 0, 0, False
    for epoch in range(cfg.epochs):
        losses = []
        for idx in head.epoch(rng, cfg.batch_size):
            with precision_autocast(model.device, precision):
                loss = head.loss(model, idx)
            optimizer_step(loss, model, opt, scaler, sched)
            step += 1
            losses.append(loss.item())
            tick()
            if not head.chooses or (step % eval_every and step != total):
                continue
            figures = head.choose(model)
            log(f"  seed {seed} step {step}/{total} epoch {epoch + 1} loss {losses[-1]:.4f} {head.describe(figures)}")
            if figures[head.choose_key] > best[head.choose_key]:
                best, bad = {**figures, "best_step": step}, 0
                if step < total:    # the last step's state needs no copy: it is the model's own
                    best_state = snapshot(model, best_state)
                continue
            bad += 1
            if bad >= cfg.patience:
                log(f"  seed {seed}: early stop at step {step} (no dev gain for {bad} evaluations)")
                stop = True
                break
        if not head.chooses:
            log(f"  seed {seed} epoch {epoch + 1}/{cfg.epochs} step {step}/{total} mean loss {np.mean(losses):.4f}")
        if stop:
            break
    if head.chooses and best["best_step"] != step:
        model.load_state_dict(best_state)
    return {**(best if head.chooses else {}), "steps": step}


def run_seed(head, cfg, seed: int, log=print, tick=no_tick, keep=None) -> dict:
    """One seed of any head: its training examples drawn, the model made, trained (`fit_head`; a head that trains
    nothing, zero-shot, is scored as it comes), handed to `keep` when given (`finetune --save`), the reported split
    scored and predicted."""
    import torch

    rng = np.random.default_rng(seed)
    if head.trains:
        head.draw(rng)
    torch.manual_seed(seed)
    model = head.model()
    t0 = time.perf_counter()
    out = {"seed": seed, **(fit_head(head, model, cfg, seed, rng, log, tick) if head.trains else {"steps": 0})}
    out["train_s"] = round(time.perf_counter() - t0, 1)
    if keep is not None:
        keep(model)
    return {**out, **head.report(model, tick)}


# --------------------------------------------------------------------------- progress

def bars_shown() -> bool:
    """Progress bars only on a terminal: in CI, a pipe or a log file the log lines alone say how far it got."""
    return sys.stderr.isatty()


class TaskBar:
    """A progress bar for one task of the suite (tqdm, on stderr, only where `bars_shown`): the task's runs
    (FewCLUE: pairs x learning rates x seeds) or CMRC 2018's training steps and prediction batches, with the
    last dev figure beside it. The log lines still print, scrolling above the bar."""

    def __init__(self, desc: str, total: int, unit: str, log=print):
        from tqdm import tqdm

        self._tqdm, self._log = tqdm, log
        self.bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, disable=not bars_shown())

    def log(self, message: str) -> None:
        if self.bar.disable:
            self._log(message)
            return
        with self._tqdm.external_write_mode():   # the bar is cleared, the line printed, the bar redrawn
            self._log(message)

    def tick(self, done: int = 1, more: int = 0) -> None:
        """`done` units finished, `more` units of work found (CMRC learns its step count once it has windows)."""
        if more:
            self.bar.total = (self.bar.total or 0) + more
            self.bar.refresh()
        if done:
            self.bar.update(done)

    def note(self, text: str) -> None:
        self.bar.set_postfix_str(text)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def init_label(cfg) -> str:
    """What a run started from, as logs and bars name it."""
    return "random init" if cfg.random_init else "pretrained"
