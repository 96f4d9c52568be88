"""A task as cloze: each example becomes a sentence with one blank (the task's declared `Pattern`), and the
masked LM itself picks the label by which label word fills the blank best, either as it comes from pretraining
(`zero-shot`) or after fine-tuning the whole MLM on the train split through the same blank (`pet`, Schick &
Schütze 2021); a multiple-choice task (CHID) brings its own candidates per item. The multiple-choice head
(`ChoiceHead`) trains on the one loop (`loop`). The patterns and label words, and where they differ from the
FewCLUE baselines', are declared with the tasks (`zh_bert.corpus.task_registry`).

A label word is filled jointly: the blank becomes as many [MASK]s as the word has tokens, all predicted in one
pass (`evaluate.candidate_logprobs`), and words are ranked by their *mean* token log-probability
(`eval cloze --score mean`). Mean, not sum, because the words of a task differ in length (理论经济学 beside 数学)
and a sum charges every extra token a log-probability below zero, which favours the shortest word whatever the
text says; for equal-length words (CHID's idioms, most tasks here) the two rank the same. Training uses the same
score: PET's loss is the cross-entropy over these per-label scores.

The protocol is the task's suite's: the PET checkpoint is chosen on the choosing split alone (dev_k; best
evaluation, early stop after `patience` evaluations without gain); the reported split is scored once, on the
chosen state. Zero-shot chooses nothing: the choosing split is reported beside the reported one.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.fileio import read_object
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.cloze_items import ClozeItem
from zh_bert.corpus.task_files import Example
from zh_bert.corpus.task_spec import Pattern, Task
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.heads.base import HeadKind, check_count
from zh_bert.evaluation.heads.cloze import (  # _text_ids: the one tokenization of a blank's context
    _text_ids,
    eval_cloze,
    load_mlm,
    model_batch,
    sparse_head,
)
from zh_bert.evaluation.loop import FinetuneConfig, run_seed
from zh_bert.evaluation.metrics.classification import macro_f1
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.tasks.splits import keep_apart
from zh_bert.evaluation.step import precision_autocast
from zh_bert.evaluation.tasks.classification import TaskData, files_of, load_pair, public_records, train_subset
from zh_bert.train.rundir import masked_lm_dir
from zh_bert.train.weights import init_from_config, load_pretrained

METHODS = ("zero-shot", "pet")
BLANK_SLOT = "{blank}"
MLM_ARCHITECTURES = ("ForMaskedLM", "ForPreTraining")   # config `architectures` that carry a masked-LM head


def check_prompt_task(task: Task, method: str = "zero-shot") -> Pattern:
    """The task's pattern, refused in one line when it has none or the method is not a cloze one."""
    if method not in METHODS:
        raise ZhBertError(f"--method must be one of {', '.join(METHODS)}, got {method!r}{suggest(method, METHODS)}")
    if task.pattern is None:
        raise ZhBertError(f"task {task.name}: no pattern declared, so no {method} (a cloze needs one)")
    return task.pattern


def pattern_items(task: Task, examples: list[Example], labels: list[str]) -> list[ClozeItem]:
    """The task's examples as cloze items: the candidates are the words of `labels` (in that order, so the
    candidate index is the class index), the answer the gold label's word."""
    pattern = check_prompt_task(task)
    if pattern.words is None:
        raise ZhBertError(f"{task.dataset_name}: its items come with their candidates, not label words")
    missing = [lab for lab in labels if lab not in pattern.words]
    if missing:
        raise ZhBertError(f"{task.dataset_name}: no label word for {', '.join(map(repr, missing))}")
    head, tail = pattern.template.split(BLANK_SLOT)
    cands = [pattern.words[lab] for lab in labels]
    out = []
    for i, e in enumerate(examples):
        if e.label not in pattern.words:
            raise ZhBertError(f"{task.dataset_name} example {i}: label {e.label!r} has no word")
        fill = {"a": e.text_a, "b": e.text_b or ""}
        out.append(ClozeItem(f"{task.name}:{i}", head.format(**fill), tail.format(**fill), cands,
                             pattern.words[e.label]))
    return out


def load_items(task: Task, k: int) -> tuple[list[ClozeItem], list[ClozeItem], list[ClozeItem]]:
    """A multiple-choice task's pair k (train_k, dev_k, test_public) as cloze items: the passage with its blank,
    the candidates, the answer; kept apart as every few-shot pair is (`splits.keep_apart`, on the passage)."""
    if not 0 <= k < task.pairs.count:
        raise ZhBertError(f"{task.dataset_name} pair {k}: the pairs are 0..{task.pairs.count - 1}")
    files = files_of(task, task.pairs.split(k))
    train, dev, test = (task.reader.read(f) for f in files)
    train, dev, _ = keep_apart(task.dataset[0], (train, dev, test), files, lambda it: (it.prefix, it.suffix),
                               drop_repeats=False)
    return train, dev, test


@dataclass
class PromptData:
    """A task's three splits as cloze items, and what a predicted candidate index is called in the output
    (the label name; CHID: the index itself, as its `answer` field)."""
    train: list[ClozeItem]
    dev: list[ClozeItem]
    test: list[ClozeItem]
    labels: list[str] | None


def prompt_data(task: Task, k: int) -> PromptData:
    if check_prompt_task(task).words is None:
        return PromptData(*load_items(task, k), None)
    data = load_pair(task, k)
    return PromptData(*(pattern_items(task, split, data.labels) for split in (data.train, data.dev, data.test)),
                      data.labels)


@contextmanager
def _quiet_transformers():
    """transformers' load report (missing/unexpected keys) is what check_mlm_head turns into one line."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def check_mlm_head(ckpt) -> Path:
    """The masked-LM folder of `ckpt`, refused in one line when it has no trained masked-LM head:
    `load_pretrained` would build one from random weights without a word (transformers only warns of missing
    keys), and a random head scores every pattern as noise. A fine-tuned classifier folder names its class in
    `architectures`; a folder whose weights lack any head tensor shows in the loading report."""
    from transformers import AutoModelForMaskedLM

    ckpt_dir = masked_lm_dir(ckpt)
    config = read_object(Path(ckpt_dir) / "config.json", default=None)
    archs = config.texts("architectures", default=[]) if config is not None else []
    if archs and not any(a.endswith(MLM_ARCHITECTURES) for a in archs):
        raise ZhBertError(f"{ckpt_dir}: a {archs[0]} has no masked-LM head; prompt scoring needs a pretrained "
                          f"masked LM (a pretrain run or its final/), not a fine-tuned model")
    with _quiet_transformers():
        _, info = load_pretrained(AutoModelForMaskedLM, ckpt_dir, "a masked-LM model", output_loading_info=True)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ZhBertError(f"{ckpt_dir}: no masked-LM head: its weights lack {', '.join(missing[:3])}"
                          f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}; prompt scoring needs the "
                          f"pretrained head")
    return ckpt_dir


# --------------------------------------------------------------------------- scoring

def predict_items(model, tok, items: list[ClozeItem], seq_len: int, batch_size: int,
                  precision: str = "fp32") -> tuple[float, np.ndarray]:
    """(accuracy, predicted candidate index per item) under `eval cloze --score mean`, the model in eval mode
    for the call."""
    was_training = model.training
    model.eval()
    with precision_autocast(model.device, precision):
        res, preds = eval_cloze(model, tok, items, "mean", _fit(model, seq_len), batch_size)
    model.train(was_training)
    return res["accuracy"], np.array([it.candidates.index(p["prediction"]) for it, p in zip(items, preds)])


def _fit(model, seq_len: int) -> int:
    return min(seq_len, getattr(model.config, "max_position_embeddings", seq_len))


def _rows(tok, item: ClozeItem, seq_len: int) -> list[tuple[list[int], int, list[int], list[list[int]]]]:
    """One input per candidate length, windowed on the blank as `candidate_logprobs` windows it:
    (ids, mask start, candidate indices, their token ids)."""
    pre, suf = _text_ids(tok, item.prefix), _text_ids(tok, item.suffix)
    by_len: dict[int, list[int]] = {}
    cand_ids = [_text_ids(tok, c) for c in item.candidates]
    for j, c in enumerate(cand_ids):
        by_len.setdefault(len(c), []).append(j)
    rows = []
    for k, js in by_len.items():
        room = seq_len - 2 - k
        if k == 0 or room < 0:
            raise ZhBertError(f"{item.where}: candidate {item.candidates[js[0]]!r} has {k} tokens (seq_len {seq_len})")
        keep_pre = min(len(pre), max(room // 2, room - len(suf)))
        p = pre[len(pre) - keep_pre:]
        ids = [tok.cls_token_id] + p + [tok.mask_token_id] * k + suf[:room - keep_pre] + [tok.sep_token_id]
        rows.append((ids, 1 + len(p), js, [cand_ids[j] for j in js]))
    return rows


def candidate_scores(model, tok, items: list[ClozeItem], seq_len: int):
    """(B, C) mean token log-probability of every candidate, with gradients: the scores `predict_items` ranks
    by, as PET trains them. Items of one batch have the same number of candidates."""
    import torch

    rows = [(i, r) for i, it in enumerate(items) for r in _rows(tok, it, _fit(model, seq_len))]
    width = max(len(r[0]) for _, r in rows)
    inp = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.bool)
    for n, (_, (ids, start, _, cids)) in enumerate(rows):
        inp[n, :len(ids)] = torch.tensor(ids)
        pos[n, start:start + len(cids[0])] = True
    batch = {k: v.to(model.device) for k, v in model_batch(model, inp, (inp != tok.pad_token_id).long()).items()}
    pos = pos.to(model.device)
    split = sparse_head(model)
    hidden = split[1](split[0](**batch)[0][pos]) if split is not None else model(**batch).logits[pos]
    logp = torch.log_softmax(hidden.float(), dim=-1)    # rows in (input, position) order
    scores = torch.full((len(items), len(items[0].candidates)), float("-inf"), device=logp.device)
    at = 0
    for i, (_, _, js, cids) in rows:
        t = torch.tensor(cids, device=logp.device)            # (n, k)
        k = t.shape[1]
        scores[i, js] = logp[at:at + k][torch.arange(k, device=logp.device), t].mean(-1)
        at += k
    return scores


# --------------------------------------------------------------------------- the two methods

def _model(ckpt_dir: Path, random_init: bool):
    """The masked LM on the best device; random_init: the same architecture from random weights (the
    baseline pretraining must beat)."""
    if not random_init:
        return load_mlm(ckpt_dir)[:2]
    import torch
    from transformers import AutoModelForMaskedLM

    model = init_from_config(AutoModelForMaskedLM, ckpt_dir, "a masked-LM model")
    return model.to("cuda" if torch.cuda.is_available() else "cpu").eval(), load_tokenizer(ckpt_dir)


def _figures(model, tok, items, cfg, precision) -> tuple[float, float, np.ndarray]:
    acc, pred = predict_items(model, tok, items, cfg.seq_len, cfg.batch_size, precision)
    gold = np.array([it.candidates.index(it.answer) for it in items])
    return acc, macro_f1(gold, pred), pred


class ChoiceHead:
    """Multiple choice through the masked LM on the one loop (`loop`): `pet` fine-tunes the whole MLM on the train
    items (cross-entropy over the candidates' scores), chooses on dev by accuracy and reports test; `zero-shot`
    trains and chooses nothing and reports dev beside test. The predictions are the label names (CHID: the
    candidate index)."""
    chooses = True
    choose_key = "dev_acc"

    def __init__(self, ckpt_dir: Path, data: PromptData, cfg: FinetuneConfig, method: str):
        self.ckpt_dir, self.data, self.cfg, self.trains = ckpt_dir, data, cfg, method == "pet"

    def draw(self, rng: np.random.Generator) -> None:
        self.train = train_subset(TaskData("pet", self.data.train, self.data.dev, self.data.test, []), self.cfg, rng)

    @property
    def train_size(self) -> int:
        return len(self.train)

    def model(self):
        model, self.tok = _model(self.ckpt_dir, self.cfg.random_init)
        self.precision = resolve_precision(self.cfg.precision, model.device)[0]
        return model.train() if self.trains else model

    def epoch(self, rng: np.random.Generator, batch_size: int) -> list[np.ndarray]:
        order = rng.permutation(len(self.train))
        return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]

    def loss(self, model, idx: np.ndarray):
        import torch

        batch = [self.train[i] for i in idx]
        gold = torch.tensor([it.candidates.index(it.answer) for it in batch], device=model.device)
        return torch.nn.functional.cross_entropy(candidate_scores(model, self.tok, batch, self.cfg.seq_len), gold)

    def choose(self, model) -> dict:
        acc, f1, _ = _figures(model, self.tok, self.data.dev, self.cfg, self.precision)   # dev only: the choice
        return {"dev_acc": acc, "dev_macro_f1": f1}

    def describe(self, figures: dict) -> str:
        return f"dev acc {figures['dev_acc']:.4f}"

    def report(self, model, tick=None) -> dict:
        """Test figures and predictions; zero-shot, which chose nothing, reports dev beside them."""
        dev = {} if self.trains else self.choose(model)
        acc, f1, pred = _figures(model, self.tok, self.data.test, self.cfg, self.precision)
        named = [int(p) for p in pred] if self.data.labels is None else [self.data.labels[p] for p in pred]
        return {**dev, "test_acc": acc, "test_macro_f1": f1, "test_pred": named}


def run_prompt_task(ckpt, task: Task, k: int, method: str, cfg: FinetuneConfig, seeds: list[int],
                    log=print) -> Result:
    """The task on pair k by `method` (zero-shot | pet): a Result whose predictions are the first seed's label per
    reported example (CHID: the candidate index). Zero-shot is deterministic: it runs the first seed only and says
    so in `note`."""
    check_prompt_task(task, method)
    if not seeds:
        raise ZhBertError("run_prompt_task: no seeds")
    ckpt_dir = masked_lm_dir(ckpt) if cfg.random_init else check_mlm_head(ckpt)
    data = prompt_data(task, k)
    used = seeds[:1] if method == "zero-shot" else list(seeds)
    head = ChoiceHead(ckpt_dir, data, cfg, method)
    runs = []
    for seed in used:
        r = run_seed(head, cfg, seed, log=log)
        log(f"{task.name} pair {k} {method} seed {seed}: dev acc {r['dev_acc']:.4f} | test acc {r['test_acc']:.4f}"
            + (f" (best step {r['best_step']}, {r['train_s']} s)" if "best_step" in r else f" ({r['train_s']} s)"))
        runs.append(r)
    pred = runs[0]["test_pred"]
    for r in runs:
        r.pop("test_pred")
    gold = Counter(it.candidates.index(it.answer) for it in data.dev)
    facts = {"checkpoint": str(ckpt_dir), "method": method, "pair": k,
             "majority_dev_acc": max(gold.values()) / len(data.dev), "n_train": len(data.train),
             "n_dev": len(data.dev), "n_test": len(data.test), "config": asdict(cfg),
             "pattern": task.pattern.template, "chosen_on": f"dev_{k}" if method == "pet" else None}
    if len(used) < len(seeds):
        facts["note"] = (f"zero-shot trains nothing and draws nothing: seeds {seeds[1:]} would repeat seed "
                         f"{seeds[0]}'s figures, so only seed {seeds[0]} ran")
    return Result(task.dataset[0], cfg.random_init, used, runs, facts,
                  ("dev_acc", "dev_macro_f1", "test_acc", "test_macro_f1"), pred)


class ChoiceKind(HeadKind):
    """Multiple choice scored by the masked LM over each item's candidates (CHID): the suite's `finetune` trains it
    as PET, `zero-shot` scores it as it comes; it reads its items through its declared pattern."""
    name, what = "choice", "the masked LM over each item's candidates"

    def finetunable(self, task: Task) -> bool:
        return False        # its tasks come in few-shot pairs: the suite runs them

    def method(self, method: str) -> str:
        return "pet" if method == "finetune" else method

    def check(self, task: Task, method: str, k: int | None, opts: dict) -> None:
        prompt_data(task, k or 0)

    def setting(self, ckpt, task: Task, k: int | None, method: str, cfg, seeds: list[int], log, opts: dict) -> Result:
        return run_prompt_task(ckpt, task, k or 0, method, cfg, seeds, log=log)

    def chance(self, task: Task) -> tuple[float, str]:
        n = len(prompt_data(task, 0).test[0].candidates)
        return 1 / n, f"1 in {n}"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id", "answer": candidate index} per reported record in file order (CHID's format)."""
        rows, key = public_records(task)
        check_count(task, predicted, rows)
        return [{"id": r[key], "answer": int(p)} for r, p in zip(rows, predicted)]


CHOICE_HEAD = ChoiceKind()
