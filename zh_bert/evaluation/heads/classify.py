"""The classification head: the stock *ForSequenceClassification of the checkpoint's architecture on sentence(-pair)
examples, fine-tuned on the one loop (`loop`), chosen on dev by accuracy, scored by accuracy and macro-F1.

Speed on a CPU comes from not computing padding: training batches are length buckets drawn from the seed's
rng (`train_batches`) whose forward runs per group of similar length (`length_groups`: a 32-shot batch is all
spread), prediction runs such groups and puts the classes back in order (`predict`), each text is tokenized
once per process (`encode_cached`), and the best dev state is copied into one buffer (`loop.snapshot`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np

from zh_bert.core.config import option
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.task_registry import ACCURACY, MACRO_F1, task_named
from zh_bert.corpus.task_spec import FINETUNE_PROTOCOL, Task
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.heads.base import HeadKind, check_count
from zh_bert.evaluation.heads.choice import prompt_data, run_prompt_task
from zh_bert.evaluation.heads.distill import HARD_LABELS, distilled_entries
from zh_bert.evaluation.length_groups import TRAIN_GROUP_OVERHEAD_TOKENS, length_buckets, length_groups
from zh_bert.evaluation.loop import run_seed
from zh_bert.evaluation.metrics.classification import accuracy, macro_f1
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.step import precision_autocast
from zh_bert.evaluation.tasks.classification import (
    SUITE_PREFIX,
    TSV_PREFIX,
    TaskData,
    load_pair,
    load_task,
    public_records,
    train_subset,
)
from zh_bert.train.arch import of_config
from zh_bert.train.rundir import model_dir
from zh_bert.train.weights import init_from_config, load_pretrained, weight_names

BUCKET_BATCHES = 50    # training batches whose examples are sorted by length together (see train_batches)
PREDICT_BATCHES = 2    # a prediction batch is this many training batches (no gradients: memory to spare)
ENCODED_KEPT = 8       # tokenized example lists kept for reuse (see encode_cached)

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


# --------------------------------------------------------------------------- runs

#: the figures a classification result always carries (None where there is no test split)
CLASS_FIGURES = ("dev_acc", "dev_macro_f1", "test_acc", "test_macro_f1")


#: the poolings a classifier computes; the one a stock BERT classifier folder predicts by (its pooler on [CLS])
CLASSIFIER_POOLINGS, STOCK_POOLING = ("cls", "mean"), "cls"


def trained_pooler(ckpt_dir: Path) -> str | None:
    """What trained [CLS] into a sentence vector in this checkpoint (an NSP/SOP head, a fine-tuned classifier),
    None when nothing did: an MLM-only checkpoint's pooler is absent or untrained, and transformers initialises a
    missing one at random, so [CLS] through it starts a classifier from noise."""
    config = read_json(Path(ckpt_dir) / "config.json", default={})
    archs = config.get("architectures") if isinstance(config, dict) else None
    if any(isinstance(a, str) and a.endswith("ForSequenceClassification") for a in archs or ()):
        return "a fine-tuned classifier"
    if any(n.endswith("seq_relationship.weight") for n in weight_names(Path(ckpt_dir)) or ()):
        return "an NSP/SOP head"
    return None


def auto_pooling(ckpt_dir: Path) -> tuple[str, str]:
    """(the pooling `--pooling auto` picks for this checkpoint, why): cls where the checkpoint trained its
    pooler, mean otherwise. The random-init baseline asks the same folder, so both inits pool alike."""
    trained = trained_pooler(ckpt_dir)
    if trained:
        return "cls", f"cls: the checkpoint trained [CLS] through its pooler ({trained})"
    return "mean", "mean: the checkpoint trained no pooler (MLM only), so [CLS] through it would start from noise"


def classifier_config(cfg, ckpt_dir: Path | None = None, log=None):
    """`cfg` with the classifier's pooling: `--pooling`, else (auto) what `auto_pooling` picks for `ckpt_dir`
    (said through `log`); one line for a pooling a classifier does not compute."""
    if cfg.pooling is not None and cfg.pooling not in CLASSIFIER_POOLINGS:
        raise ZhBertError(f"--pooling {cfg.pooling}: a classifier pools by {' or '.join(CLASSIFIER_POOLINGS)} "
                          f"(or auto)")
    if cfg.pooling is not None:
        return cfg
    pooling, why = auto_pooling(ckpt_dir) if ckpt_dir is not None else (STOCK_POOLING, "")
    if log and why:
        log(f"pooling auto -> {why}")
    return replace(cfg, pooling=pooling)


def train_one(ckpt_dir: Path, task: TaskData, cfg, seed: int, tok=None, log=print) -> dict:
    """Fine-tune once with `seed` (the classifier on the one loop); dev/test accuracy and macro-F1 of the
    best-on-dev state, and the predicted test labels."""
    cfg = classifier_config(cfg, ckpt_dir)
    return run_seed(ClassifyHead(ckpt_dir, task, cfg, tok or tokenizer_for(ckpt_dir)), cfg, seed, log=log)


def run_classifier(ckpt, task: TaskData, cfg, seeds: list[int], log=print, tok=None, objective=HARD_LABELS,
                   keep=None, say_pooling=True) -> Result:
    """Fine-tune once per seed. `tok`: the checkpoint's tokenizer when the caller has it (default: `tokenizer_for`,
    shared by every run on the checkpoint); `objective`: gold labels, or a teacher's soft labels beside
    (`heads.distill`); `keep(model)`: the first seed's chosen model (`--save`). The first seed's test labels are
    the result's `predictions`."""
    check_trainable(task, cfg, seeds)
    ckpt_dir = model_dir(ckpt)
    cfg = classifier_config(cfg, ckpt_dir, log if say_pooling else None)
    head = ClassifyHead(ckpt_dir, task, cfg, tok or tokenizer_for(ckpt_dir), objective)
    runs = []
    for seed in seeds:
        r = run_seed(head, cfg, seed, log=log, keep=None if runs else keep)
        log(f"seed {seed}: dev acc {r['dev_acc']:.4f} macro-F1 {r['dev_macro_f1']:.4f}"
            + (f" | test acc {r['test_acc']:.4f} macro-F1 {r['test_macro_f1']:.4f}" if "test_acc" in r else "")
            + f" (best step {r['best_step']}, {r['train_s']} s)")
        runs.append(r)
    predictions = runs[0].get("test_pred")
    for r in runs:
        r.pop("test_pred", None)      # one label per test example: in the prediction files, not the summary
    gold = [e.label for e in task.dev]
    majority = max(set(gold), key=gold.count)
    facts = {"checkpoint": str(ckpt_dir), **objective.facts(), "majority_dev_acc": gold.count(majority) / len(gold),
             "n_train": min(len(task.train), cfg.max_train or len(task.train)), "n_dev": len(task.dev),
             "n_test": len(task.test) if task.test else 0, "splits": task.roles, "pooling": cfg.pooling,
             "config": asdict(cfg)}
    return Result(task.name, cfg.random_init, seeds, runs, facts, CLASS_FIGURES, predictions)


def eval_entries(summary: dict, task_spec: str) -> list[dict]:
    """eval_results entries of a classification summary (`finetune`, or `ablate`'s `suite:TASK` column under its
    suite's protocol): the dev accuracy that chose, and the task's metrics on the split it reports (a declared
    task's dataset and split names; a TSV task's folder name, "dev" and "test"), each in its metric's unit."""
    n = len(summary["seeds"])
    task_name = "Text classification" + (f" (mean of {n} seeds)" if n > 1 else "")
    protocol = FINETUNE_PROTOCOL
    if task_spec.startswith(TSV_PREFIX):
        (dtype, name), names, metrics = ("tsv", summary["task"]), ("dev", "test"), (ACCURACY, MACRO_F1)
    elif task_spec.startswith(SUITE_PREFIX):
        task = task_named(task_spec[len(SUITE_PREFIX):])
        (dtype, name), metrics, protocol = task.dataset, task.metrics, task.protocol
        names = ("dev_k" if task.pairs else task.splits.names[1], task.report_name)
    else:
        task = task_named(task_spec)
        (dtype, name), names, metrics = task.dataset, task.splits.names[1:], task.metrics
    figures = [(names[0], "dev_acc", ACCURACY)] + [(names[1], m.key, m) for m in metrics]
    return distilled_entries([entry("text-classification", task_name, dtype, name, m.type, f"{split} {m.name}",
                                    m.of_fraction(summary[key]), protocol=protocol, split=split,
                                    **({"pooling": summary["pooling"]} if summary.get("pooling") else {}))
                              for split, key, m in figures if summary.get(key) is not None], summary)


# --------------------------------------------------------------------------- the kind

@dataclass
class ClassifyOptions:
    """`finetune`'s options of the classification head."""
    columns: Optional[str] = option(None, help="TSV columns, e.g. label,text or text,label or label,text_a,text_b "
                                               "(default: detected from the header or the values)")


class ClassifyKind(HeadKind):
    """Sentence(-pair) classification: `finetune` a classifier, or, in the suite, `zero-shot`/`pet` the masked LM
    on the task's pattern (`choice.ChoiceHead`). A setting's summary names its choosing figure `choose_key`."""
    name, what = "classify", "a sequence classifier"
    finetune_options = (ClassifyOptions,)
    teacher_class = "AutoModelForSequenceClassification"
    prefixes = (TSV_PREFIX,)

    def finetunable(self, task: Task) -> bool:
        return task.splits is not None and task.splits.choose is not None

    def load(self, spec: str, job, opts: dict) -> TaskData:
        return load_task(spec, opts[ClassifyOptions].columns)

    def header(self, data: TaskData) -> tuple[str, list[str], list[str]]:
        return (f"task {data.name}: {len(data.train)} train / {len(data.dev)} dev / {len(data.test or [])} test, "
                f"{len(data.labels)} labels{' (sentence pairs)' if data.pair else ''}", data.notes, data.warnings)

    def teacher_labels(self, data: TaskData, opts: dict) -> tuple[list[str], str]:
        return data.labels, f"task {data.name}"

    def check_save(self, ckpt_dir: Path, cfg, opts: dict):
        """A BERT pooled by `mean` is refused: its stock folder would predict through the pooler on [CLS];
        `--pooling auto` saves by cls, said."""
        config = read_json(Path(ckpt_dir) / "config.json", default={})
        if cfg.pooling not in (None, STOCK_POOLING) and not of_config(config).pools_itself():
            raise ZhBertError(f"--save with --pooling {cfg.pooling}: a stock {config.get('model_type', 'BERT')} "
                              f"classifier predicts from [CLS] through its pooler; fine-tune with --pooling cls to "
                              f"save it")
        if cfg.pooling is None and not of_config(config).pools_itself():
            print(f"pooling auto -> cls: --save writes a stock {config.get('model_type', 'BERT')} classifier, which "
                  f"predicts from [CLS] through its pooler", flush=True)
            return replace(cfg, pooling=STOCK_POOLING)
        return cfg

    def run(self, ckpt_dir, data, cfg, opts, seeds, log=print, tok=None, objective=None, keep=None) -> Result:
        return run_classifier(ckpt_dir, data, cfg, seeds, log=log, tok=tok, objective=objective or HARD_LABELS,
                              keep=keep)

    def entries(self, result: Result, spec: str, data, opts: dict) -> list[dict]:
        return eval_entries(result.summary(), spec)

    def json_summary(self, result: Result, data: TaskData) -> dict:
        return {**result.summary(), "notes": data.notes, "warnings": data.warnings}

    # --------------------------------------------------------------- eval suite
    def check(self, task: Task, method: str, k: int | None, opts: dict) -> None:
        (load_pair if method == "finetune" else prompt_data)(task, k)

    def setting(self, ckpt, task: Task, k: int | None, method: str, cfg, seeds: list[int], log, opts: dict) -> Result:
        if method != "finetune":
            return run_prompt_task(ckpt, task, k or 0, method, cfg, seeds, log=log)
        return run_classifier(ckpt, load_pair(task, k), cfg, seeds, log=log, say_pooling=False)   # said once: `pooling_note`

    def suite_facts(self, result) -> dict:
        return {"pooling": result.facts["pooling"]} if result.facts.get("pooling") else {}

    def pooling_note(self, ckpt_dir: Path, cfg) -> str | None:
        return f"classifier pooling auto -> {auto_pooling(ckpt_dir)[1]}" if cfg.pooling is None else None

    def chance(self, task: Task) -> tuple[float, str]:
        gold = [e.label for e in load_pair(task, 0 if task.pairs else None).test or []]
        return (max(gold.count(g) for g in set(gold)) / len(gold) if gold else 0.0), "majority"

    def official(self, task: Task, predicted: list) -> list[dict]:
        """One {"id", "label"} per reported record in file order, the label as the official field holds it
        (TNEWS, IFLYTEK: the code, not the name the classifier predicts)."""
        rows, key = public_records(task)
        check_count(task, predicted, rows)
        label, code = getattr(task.reader, "label", None), getattr(task.reader, "code", None)
        codes = {str(r[label]): r[code] for r in rows if label in r and code in r}   # label name -> official value
        return [{"id": r[key], "label": codes.get(str(p), p)} for r, p in zip(rows, predicted)]


CLASSIFY_HEAD = ClassifyKind()
