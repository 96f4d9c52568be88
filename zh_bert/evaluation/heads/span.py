"""CMRC 2018 span extraction: fine-tune a checkpoint to point at the answer, and score it on dev.

The standard scheme of Hugging Face's `run_qa` (and Google's `run_squad`): question + context in one row,
a context longer than the row cut into windows that overlap by `doc_stride` tokens, and per window a start
and an end label, both 0 ([CLS]) when the answer is not wholly inside it. Prediction takes the `n_best`
start and end logits of each window, keeps pairs inside the context with end >= start and at most
`max_answer_len` tokens, and answers with the best-scoring pair over all of an example's windows, cut from
the context by the tokenizer's character offsets (so the text is the passage's own, never detokenized).

CMRC reports its dev set, so nothing is chosen on dev: a fixed number of epochs, and the last state is the
one scored. The bundled trial set (1,002 questions) stands in for the unbundled train set.

`max_answer_len` defaults to 64 tokens: of the 3,216 dev questions with a span answer, the shortest
reference is longer than 30 tokens for 153, than 50 for 24 and than 64 for 3 (none above 85), so 64 costs
at most 0.1 EM point while keeping out the long wrong spans a larger limit admits. (Trial answers run longer,
median 18 tokens, 94 of 997 above 64; that bounds only predictions, not the training labels.)
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Optional
from pathlib import Path

import numpy as np

from zh_bert.core.config import at_least, check_finite, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import write_json
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.squad_files import SpanExample, load_squad
from zh_bert.corpus.task_files import task_data_dir
from zh_bert.corpus.task_spec import FINETUNE_PROTOCOL, Task
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.heads.base import HeadKind, sha256_of
from zh_bert.evaluation.heads.classify import PREDICT_BATCHES
from zh_bert.evaluation.length_groups import length_buckets
from zh_bert.evaluation.loop import FinetuneConfig, TaskBar, init_label, run_seed
from zh_bert.evaluation.metrics.cmrc import evaluate_cmrc
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.step import no_tick, precision_autocast
from zh_bert.evaluation.tasks.classification import report_file
from zh_bert.evaluation.tasks.splits import refuse_shared_spans
from zh_bert.train.arch import of_config
from zh_bert.train.rundir import model_dir
from zh_bert.train.weights import load_for_rows

QA_SPECIAL_TOKENS = 3      # [CLS] question [SEP] context [SEP]
QA_BUCKET = 50             # training batches are length-sorted within chunks of this many batches


@dataclass
class QAConfig:
    """How long contexts are windowed and how answers are read off the logits."""
    doc_stride: int = option(128, help="tokens that consecutive windows of a long context share")
    max_answer_len: int = option(64, help="longest predicted answer in tokens (64 fits the shortest reference "
                                          "of all but 3 of the 3,216 CMRC dev questions)")
    n_best: int = option(20, help="start and end candidates per window that answer pairs are built from")

    def __post_init__(self):
        check_finite(self)
        at_least(self, 1, "doc_stride", "max_answer_len", "n_best")

    def check_windows(self, seq_len: int, examples: list[SpanExample], tok) -> None:
        """Every question leaves room for more than `doc_stride` context tokens in a `seq_len` row, or the
        windows could not advance; one line naming the first question that does not."""
        if self.doc_stride >= seq_len - QA_SPECIAL_TOKENS:
            raise ZhBertError(f"--doc-stride {self.doc_stride} must be below --seq-len {seq_len} minus "
                              f"{QA_SPECIAL_TOKENS} special tokens")
        lengths = tok([e.question for e in examples], add_special_tokens=False)["input_ids"] if examples else []
        for ex, ids in zip(examples, lengths):
            room = seq_len - QA_SPECIAL_TOKENS - len(ids)
            if room <= self.doc_stride:
                raise ZhBertError(f"question {ex.id}: {len(ids)} tokens leave {room} context tokens per "
                                  f"--seq-len {seq_len} window, not more than --doc-stride {self.doc_stride}")


# --------------------------------------------------------------------------- features

def answer_tokens(offsets: np.ndarray, lo: int, hi: int, start: int, end: int) -> tuple[int, int]:
    """(start, end) token of the characters [start, end) in a window whose context tokens are lo..hi, or
    (0, 0) ([CLS]) when the answer is not wholly inside them."""
    if offsets[lo, 0] > start or offsets[hi, 1] < end:
        return 0, 0
    ctx = offsets[lo:hi + 1]
    first = lo + int(np.argmax(ctx[:, 1] > start))            # first token ending after the answer starts
    last = lo + len(ctx) - 1 - int(np.argmax(ctx[::-1, 0] < end))   # last token starting before it ends
    return first, last


def qa_features(tok, examples: list[SpanExample], seq_len: int, doc_stride: int, labels: bool = False) -> dict:
    """Windows of question + context: ragged `input_ids`/`token_type_ids`, per window its `example` index,
    character `offsets`, the context's token range `ctx` (lo, hi), and with `labels` the answer's `start`/
    `end` tokens (the first answer that is a span; 0 = [CLS]). With labels, examples without a span answer are
    left out and counted in `skipped`."""
    if not getattr(tok, "is_fast", False):
        raise ZhBertError(f"{type(tok).__name__} is not a fast tokenizer: span extraction needs its offsets")
    keep = [e for e in examples if e.spans] if labels else list(examples)
    if not keep:
        raise ZhBertError("CMRC: no questions" + (" with an answer that is a span of its context" if labels else ""))
    enc = tok([e.question for e in keep], [e.context for e in keep], truncation="only_second",
              max_length=seq_len, stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    out = {"input_ids": enc["input_ids"], "example": np.asarray(enc["overflow_to_sample_mapping"]),
           "token_type_ids": enc.get("token_type_ids") or [[0] * len(x) for x in enc["input_ids"]],
           "offsets": [], "ctx": [], "start": [], "end": [], "examples": keep,
           "skipped": len(examples) - len(keep)}
    for i in range(len(enc["input_ids"])):
        seq = np.array([s if s is not None else -1 for s in enc.sequence_ids(i)])
        where = np.flatnonzero(seq == 1)
        lo, hi = int(where[0]), int(where[-1])
        offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64)
        out["offsets"].append(offsets)
        out["ctx"].append((lo, hi))
        if labels:
            text, at = keep[out["example"][i]].spans[0]
            s, e = answer_tokens(offsets, lo, hi, at, at + len(text))
            out["start"].append(s)
            out["end"].append(e)
    return out


def qa_batches(feats: dict, order, batch_size: int, pad_id: int, token_types: bool):
    """Padded tensors of the windows `order` lists, in that order, `batch_size` at a time."""
    import torch

    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        width = max(len(feats["input_ids"][i]) for i in idx)
        ids = np.full((len(idx), width), pad_id, dtype=np.int64)
        tt, mask = np.zeros_like(ids), np.zeros_like(ids)
        for r, i in enumerate(idx):
            n = len(feats["input_ids"][i])
            ids[r, :n], tt[r, :n], mask[r, :n] = feats["input_ids"][i], feats["token_type_ids"][i], 1
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if token_types:
            batch["token_type_ids"] = torch.from_numpy(tt)
        yield idx, batch


def takes_token_types(model) -> bool:
    """Whether the model's forward reads token types (BERT does; ModernBERT has none)."""
    return bool(getattr(model.config, "type_vocab_size", None)) and of_config(model.config).uses_token_types


# --------------------------------------------------------------------------- training

def load_qa_model(ckpt_dir: Path, random_init: bool, tok, seq_len: int):
    """The stock *ForQuestionAnswering of the checkpoint's architecture (random weights for the baseline);
    refused when the rows would be longer than its positions."""
    from transformers import AutoModelForQuestionAnswering

    return load_for_rows(AutoModelForQuestionAnswering, ckpt_dir, "a question-answering model", tok, random_init,
                         seq_len)


def span_loss(model, batch: dict, starts, ends):
    """Mean of the start and end cross-entropies, in fp32 whatever the autocast."""
    import torch

    out = model(**batch)
    ce = torch.nn.functional.cross_entropy
    return (ce(out.start_logits.float(), starts) + ce(out.end_logits.float(), ends)) / 2


class SpanHead:
    """Span extraction on the one loop (`loop`): windows of question + context, the start/end cross-entropy, a
    fixed number of epochs (nothing is chosen: the reported split, CMRC's dev, is the only held-out one, and the
    last state is the model); the report is the official scorer's EM and F1 on `dev_examples` with the answers.
    `cfg.max_train` draws that many questions with the seed; patience, eval_every and pooling do not apply.

    A training batch is cut from one epoch's window order made by `length_buckets` (chunks of QA_BUCKET batches
    sorted by length): the order's windows are taken `batch_size` at a time, as this head has always cut them (the
    pinned figures are of this order; a short batch of the epoch may thus stand between two others)."""
    trains, chooses, choose_key = True, False, "f1"

    def __init__(self, ckpt_dir, train_examples: list[SpanExample], dev_examples: list[SpanExample] | None,
                 cfg: FinetuneConfig, qa: QAConfig, tok):
        self.ckpt_dir, self.examples, self.dev_examples = Path(ckpt_dir), train_examples, dev_examples
        self.cfg, self.qa, self.tok = cfg, qa, tok
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        self.dev = qa_features(tok, dev_examples, cfg.seq_len, qa.doc_stride) if dev_examples else None

    def draw(self, rng: np.random.Generator) -> None:
        import torch

        examples, cfg = self.examples, self.cfg
        if cfg.max_train and cfg.max_train < len(examples):
            examples = [examples[i] for i in sorted(rng.permutation(len(examples))[:cfg.max_train])]
        self.qa.check_windows(cfg.seq_len, examples, self.tok)
        self.feats = qa_features(self.tok, examples, cfg.seq_len, self.qa.doc_stride, labels=True)
        self.lengths = np.array([len(x) for x in self.feats["input_ids"]])
        self.starts, self.ends = torch.tensor(self.feats["start"]), torch.tensor(self.feats["end"])

    @property
    def train_size(self) -> int:
        return len(self.lengths)

    def model(self):
        import torch

        model = load_qa_model(self.ckpt_dir, self.cfg.random_init, self.tok, self.cfg.seq_len)
        model.to("cuda" if torch.cuda.is_available() else "cpu").train()
        self.token_types = takes_token_types(model)
        return model

    def epoch(self, rng: np.random.Generator, batch_size: int) -> list[np.ndarray]:
        order = np.concatenate(length_buckets(self.lengths, batch_size, rng, QA_BUCKET))
        return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]

    def loss(self, model, idx: np.ndarray):
        ((_, batch),) = qa_batches(self.feats, idx, len(idx), self.pad_id, self.token_types)
        batch = {k: v.to(model.device) for k, v in batch.items()}
        return span_loss(model, batch, self.starts[idx].to(model.device), self.ends[idx].to(model.device))

    def report(self, model, tick=no_tick) -> dict:
        """EM and F1 (fractions; the official rules, which print percent) of the answers predicted for dev, the answers, and how many
        questions and windows trained."""
        out = {"n_train": len(self.feats["examples"]), "n_train_skipped": self.feats["skipped"],
               "windows": len(self.lengths)}
        if self.dev is None:
            return out
        t0 = time.perf_counter()
        preds = predict_from_features(model.eval(), self.dev, self.cfg, self.qa, self.tok, tick)
        score = evaluate_cmrc(self.dev_examples, preds)
        return {**out, "em": score["em"] / 100, "f1": score["f1"] / 100, "predictions": preds,
                "predict_s": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------- prediction

def best_span(start_logits: np.ndarray, end_logits: np.ndarray, ctx: tuple[int, int], n_best: int,
              max_len: int) -> tuple[float, int, int] | None:
    """(score, start, end) of the best pair of one window: from its n_best start and n_best end tokens inside
    the context lo..hi, end >= start and at most `max_len` tokens; None when no pair qualifies."""
    lo, hi = ctx
    s_log, e_log = start_logits[lo:hi + 1], end_logits[lo:hi + 1]
    k = min(n_best, len(s_log))
    starts = np.argsort(-s_log, kind="stable")[:k]
    ends = np.argsort(-e_log, kind="stable")[:k]
    score = s_log[starts][:, None] + e_log[ends][None, :]
    width = ends[None, :] - starts[:, None]
    score = np.where((width >= 0) & (width < max_len), score, -np.inf)
    r, c = np.unravel_index(int(np.argmax(score)), score.shape)
    if not np.isfinite(score[r, c]):
        return None
    return float(score[r, c]), lo + int(starts[r]), lo + int(ends[c])


def pick_answers(feats: dict, start_logits: list, end_logits: list, qa: QAConfig) -> dict[str, str]:
    """{id: answer text} from per-window logits: the best span over each example's windows, cut from its
    context by the character offsets ("" for an example none of whose windows has a qualifying pair)."""
    best: dict[int, tuple[float, str]] = {}
    for w, ex_i in enumerate(feats["example"]):
        found = best_span(start_logits[w], end_logits[w], feats["ctx"][w], qa.n_best, qa.max_answer_len)
        if found and (ex_i not in best or found[0] > best[ex_i][0]):
            score, s, e = found
            offsets = feats["offsets"][w]
            best[ex_i] = (score, feats["examples"][ex_i].context[offsets[s, 0]:offsets[e, 1]])
    return {ex.id: best[i][1] if i in best else "" for i, ex in enumerate(feats["examples"])}


def window_logits(model, feats: dict, batch_size: int, pad_id: int, precision: str,
                  tick=no_tick) -> tuple[list, list]:
    """Start and end logits of every window (fp32 numpy, unpadded), batched by length."""
    import torch

    lengths = np.array([len(x) for x in feats["input_ids"]])
    tick(0, math.ceil(len(lengths) / batch_size))
    order = np.argsort(lengths, kind="stable")
    starts, ends = [None] * len(lengths), [None] * len(lengths)
    was_training = model.training
    model.eval()
    with torch.no_grad(), precision_autocast(model.device, precision):
        for idx, batch in qa_batches(feats, order, batch_size, pad_id, takes_token_types(model)):
            out = model(**{k: v.to(model.device) for k, v in batch.items()})
            s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for r, i in enumerate(idx):
                starts[i], ends[i] = s[r, :lengths[i]], e[r, :lengths[i]]
            tick()
    model.train(was_training)
    return starts, ends


def predict_from_features(model, feats: dict, cfg: FinetuneConfig, qa: QAConfig, tok,
                          tick=no_tick) -> dict[str, str]:
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    precision = resolve_precision(cfg.precision, model.device)[0]
    starts, ends = window_logits(model, feats, cfg.batch_size * PREDICT_BATCHES, pad_id, precision, tick)
    return pick_answers(feats, starts, ends, qa)


def predict_answers(model, tok, examples: list[SpanExample], cfg: FinetuneConfig, qa: QAConfig) -> dict[str, str]:
    """{id: answer text} for every example (questions without a span answer too)."""
    qa.check_windows(cfg.seq_len, examples, tok)
    return predict_from_features(model, qa_features(tok, examples, cfg.seq_len, qa.doc_stride), cfg, qa, tok)


# --------------------------------------------------------------------------- the protocol

def run_cmrc(ckpt, train_examples: list[SpanExample], dev_examples: list[SpanExample], cfg: FinetuneConfig,
             qa: QAConfig, seeds: list[int], log=print, tick=no_tick, keep=None) -> Result:
    """Per seed: train on `train_examples`, predict dev, score with the official rules; EM/F1 as fractions, the
    first seed's predictions ({id: answer}) as the result's. `tick` counts training steps and prediction
    batches; `keep(model)` receives the first seed's trained model (`finetune --save`)."""
    if not seeds:
        raise ZhBertError("CMRC: no seeds to run")
    ckpt_dir = model_dir(ckpt)
    tok = load_tokenizer(ckpt_dir)
    qa.check_windows(cfg.seq_len, train_examples, tok)   # both splits checked before any training
    qa.check_windows(cfg.seq_len, dev_examples, tok)
    head = SpanHead(ckpt_dir, train_examples, dev_examples, cfg, qa, tok)
    runs, first, r = [], None, {}
    for seed in seeds:
        r = run_seed(head, cfg, seed, log=log, tick=tick, keep=None if runs else keep)
        log(f"seed {seed}: dev EM {100 * r['em']:.2f} F1 {100 * r['f1']:.2f} "
            f"({r['train_s']} s training, {r['predict_s']} s predicting)")
        runs.append({k: r[k] for k in ("seed", "em", "f1", "train_s", "predict_s")})
        first = first if first is not None else r["predictions"]
    facts = {"checkpoint": str(ckpt_dir), "n_train": r["n_train"], "n_train_skipped": r["n_train_skipped"],
             "n_dev": len(dev_examples), "windows_train": r["windows"], "windows_dev": len(head.dev["input_ids"])}
    return Result("cmrc", cfg.random_init, seeds, runs, facts, ("em", "f1"), first)


# --------------------------------------------------------------------------- the kind

@dataclass
class SpanOptions:
    """The span head's settings under `eval suite`: fixed, since its reported split chooses nothing (CMRC 2018's
    dev); `--cmrc-*` are the same options under the task's name."""
    span_train: Optional[str] = option(None, metavar="PATH", flags=("--span-train", "--cmrc-train"),
                                       help="the span task's official train file (CMRC 2018: cmrc2018_train.json, or a "
                                            "folder holding it); default: train on the bundled trial set, said so in "
                                            "the report")
    span_lr: float = option(3e-5, flags=("--span-lr", "--cmrc-lr"),
                            help="span head learning rate (fixed: its dev is the reported split)")
    span_epochs: int = option(2, flags=("--span-epochs", "--cmrc-epochs"), help="span head epochs (fixed, as HFL's "
                                                                                "recipe for CMRC 2018: 2)")
    span_seq_len: int = option(512, flags=("--span-seq-len", "--cmrc-seq-len"),
                               help="span head window length in tokens (question + a piece of the context)")

    def __post_init__(self):
        check_finite(self)
        if self.span_epochs < 1:
            raise ZhBertError(f"--span-epochs must be at least 1, got {self.span_epochs}")
        if not 32 <= self.span_seq_len <= 4096:
            raise ZhBertError(f"--span-seq-len must be between 32 and 4096, got {self.span_seq_len}")
        if not 0 < self.span_lr < 1:
            raise ZhBertError(f"a learning rate must be in (0, 1), got {self.span_lr}")

    def fixed(self, cfg: FinetuneConfig) -> FinetuneConfig:
        return dataclasses.replace(cfg, lr=self.span_lr, seq_len=self.span_seq_len, epochs=self.span_epochs)


@dataclass
class SpanFiles:
    """`finetune --task cmrc2018`: the official train file in place of the bundled trial set."""
    span_train: Optional[str] = option_of(SpanOptions, "span_train")


class SpanKind(HeadKind):
    """Span extraction: trained a fixed number of epochs on the official train file the user gives
    (`--span-train`) or the bundled stand-in, scored on the reported split (nothing is chosen on it)."""
    name, what, chooses, choose_key = "span", "a question-answering model", False, "f1"
    finetune_options = (SpanFiles, QAConfig)
    suite_options = (SpanOptions, QAConfig)

    def method(self, method: str) -> str:
        return "finetune"

    def train_file(self, task: Task, given: str | None) -> Path:
        """The train file the user gave: the file, or the one named like the official one inside a folder."""
        p = Path(given)
        if p.is_dir():
            found = [p / n for n in task.splits.official_train if (p / n).is_file()]
            if not found:
                raise ZhBertError(f"--span-train {p}: no {' or '.join(task.splits.official_train)} in this folder")
            return found[0]
        if not p.is_file():
            raise ZhBertError(f"--span-train {p}: no such file or folder")
        return p

    def data(self, task: Task, opts: dict) -> dict:
        """The suite's data of the task (`files`), the train file given by `--span-train`."""
        return self.files(task, opts[SpanOptions].span_train)

    def files(self, task: Task, given: str | None) -> dict:
        """The files the task trains and scores on, read (and checked) once, before any training: the train file
        (or the bundled stand-in) shares no question id and no context with the reported split."""
        train_path = self.train_file(task, given) if given else task_data_dir(task.folder) / task.splits.train
        dev_path = report_file(task)
        train, dev = load_squad(train_path), load_squad(dev_path)
        refuse_shared_spans(train, f"--span-train {train_path}" if given else f"the trial file {train_path}", dev,
                            str(dev_path))
        return {"task": task, "train": train, "dev": dev, "train_file": train_path.name,
                "trained_on": "train" if given else task.splits.names[0],
                "data_sha256": sha256_of([train_path, dev_path])}

    def said(self, task: Task, data: dict) -> list[str]:
        if data["trained_on"] == "train":
            return []
        return [f"{task.name}: no official train file given (--span-train): training on the {data['trained_on']} set "
                f"({len(data['train'])} questions); {task.report_name} figures are not comparable with published ones"]

    def fixed(self, ckpt, task: Task, cfg, opts: dict, data: dict, seeds: list[int], log=print) -> Result:
        """Fixed epochs on train (or the stand-in), scored on the reported split; what it trained on is part of
        the result."""
        span = opts[SpanOptions]
        for line in self.said(task, data) + [f"{task.name}: {span.span_epochs} epoch(s)"]:
            log(line)
        with TaskBar(f"{task.name} ({init_label(cfg)})", 0, "batch", log) as bar:   # steps + prediction batches
            res = run_cmrc(ckpt, data["train"], data["dev"], span.fixed(cfg), opts[QAConfig], seeds,
                           log=lambda m: bar.log(f"  {task.name}: {m}"), tick=bar.tick)
        res.task = task.name
        res.facts.update({k: data[k] for k in ("trained_on", "train_file", "data_sha256")},
                         reported_split=task.report_name, lr=span.span_lr, seq_len=span.span_seq_len,
                         epochs=span.span_epochs)
        return res

    def chance(self, task: Task) -> tuple[float, str]:
        return 0.0, "no answer"

    def ran(self, task: Task, summary: dict) -> str:
        split = task.report_name
        return (f"fine-tuned {summary['epochs']} epoch(s) on {summary['trained_on']} ({summary['n_train']} questions), "
                f"reported on {split} ({summary['n_dev']} questions), nothing chosen on {split}")

    def caveats(self, task: Task, summary: dict) -> list[str]:
        if summary["trained_on"] == "train":
            return []
        return [f"trained on the {summary['trained_on']} set, not the official train split: not comparable with the "
                f"rows below"]

    def official(self, task: Task, predicted) -> dict:
        """{question id: answer text}: the official scorer's prediction file."""
        return predicted

    def write_official(self, task: Task, predicted, folder: Path) -> Path:
        path = Path(folder) / f"{task.name}_predict.json"
        write_json(path, predicted, indent=None)
        return path

    # --------------------------------------------------------------- finetune
    def load(self, spec: str, job, opts: dict) -> dict:
        return self.files(self.declared(spec), opts[SpanFiles].span_train)

    def header(self, data: dict) -> tuple[str, list[str], list[str]]:
        task = data["task"]
        return (f"task {task.name}: {len(data['train'])} train questions ({data['trained_on']}) / {len(data['dev'])} "
                f"{task.report_name} questions (reported; nothing chosen on it)", [], self.said(task, data))

    def run(self, ckpt_dir, data, cfg, opts, seeds, log=print, tok=None, objective=None, keep=None) -> Result:
        res = run_cmrc(ckpt_dir, data["train"], data["dev"], cfg, opts[QAConfig], seeds, log=log, keep=keep)
        res.task = data["task"].name
        res.facts.update({k: data[k] for k in ("trained_on", "train_file", "data_sha256")},
                         reported_split=data["task"].report_name)
        return res

    def entries(self, result: Result, spec: str, data: dict, opts: dict) -> list[dict]:
        task, summary = data["task"], result.summary()
        n = len(result.seeds)
        name = f"{task.dataset_name or task.title} (trained on {data['trained_on']}" + (
            f", mean of {n} seeds)" if n > 1 else ")")
        return [entry(task.task_type, name, *task.dataset, m.type, f"{task.report_name} {m.name}",
                      m.of_fraction(summary[m.key]), protocol=FINETUNE_PROTOCOL, split=task.report_name,
                      trained_on=data["trained_on"]) for m in task.metrics]


SPAN_HEAD = SpanKind()
