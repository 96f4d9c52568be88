"""Fine-tuning and prediction examples/s: zh-bert's classification loop against the transformers `Trainer`
and `pipeline("text-classification")`, in the same process, on FewCLUE eprstmt (train_0 to train on, dev_0
to evaluate each epoch, test_public to predict).

Same model (a random BertForMaskedLM of the shape, saved with the bundled Google vocab, both sides loading
the same folder as a 2-label classifier under the same seed; or `--checkpoint` for `tiny`), same examples,
`seq_len`, batch size, epochs, learning rate and warmup, fp32. Fine-tuning: zh-bert's `train_one` (length-
bucketed batches, a dev evaluation per epoch, the best state kept; early stop off so both run every epoch)
against `Trainer.train` with `DataCollatorWithPadding`, random batches and `eval_strategy="epoch"` on the
same dev set (no checkpoints saved: the Trainer does less than zh-bert); each side's wall time covers loading
the model through the last evaluation. train_0 is 2 batches an epoch, too few for length buckets (see
`finetune.train_batches`), so `tiny` also trains on test_public's 610 examples (`--large-train`). Prediction: `predict` (tokenizing included; batches of
similar length, put back in order) against the pipeline with the same batch size and truncation; the two
must agree on every label. Runs alternate (zh-bert, baseline, ...) so both see the same machine load; the
medians are compared.

    python -m bench.finetune_speed --threads 1             # tiny and base, 2 repeats
    python -m bench.finetune_speed --shapes tiny --checkpoint runs/tiny-cpu
    python -m bench.finetune_speed --quick                 # tiny, 1 epoch, 64 test examples (a smoke test)

Question answering (`--qa-shapes`), CMRC 2018 with 384-token windows and stride 128 on both sides: a span head
on the same model fine-tuned on the first trial questions, `qa.SpanHead` (length-bucketed batches) against
run_qa's recipe, the `Trainer` on the same windows and labels (random batches padded to their longest window);
then the first dev questions answered, `qa.predict_answers` (windows sorted by length) against `Trainer.predict`
over the windows in file order with the same answer picking (transformers 5 has no question-answering
pipeline; run_qa evaluates this way). How often the two give the same answer text is printed beside it.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench import REPO
from bench.cli import parse
from bench.timing import machine
from zh_bert.core.config import at_least, option
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.train.arch.base import PRESETS

VOCAB = REPO / "tests" / "data" / "bert_base_chinese_vocab" / "vocab.txt"
TASK = "eprstmt"


@dataclass
class Options:
    shapes: str = option("tiny,base", metavar="A,B", help="model shapes: tiny (recipes/tiny-cpu.yaml) and/or "
                                                          "base (BERT-base 768/12/12), random weights")
    checkpoint: str | None = option(None, help="a model folder to use for `tiny` instead of random weights")
    epochs: int = option(10, help="fine-tuning epochs of `tiny` over train_0")
    base_epochs: int = option(2, help="fine-tuning epochs of `base`")
    base_test: int = option(200, help="test_public examples `base` predicts (0: all 610)")
    batch_size: int = option(16, help="examples per training step (prediction: twice that, both sides)")
    seq_len: int = option(128, help="max tokens per example")
    large_train: int = option(2, help="also fine-tune `tiny` for N epochs on test_public's 610 examples, a "
                                      "training set large enough for length buckets (0: skip)")
    qa_shapes: str = option("tiny,base", metavar="A,B", help="shapes that also fine-tune on CMRC 2018 trial "
                                                             "and answer dev questions (empty: none)")
    qa_train: int = option(200, help="CMRC 2018 trial questions `tiny` fine-tunes on")
    qa_epochs: int = option(2, help="CMRC 2018 fine-tuning epochs of `tiny` (`base`: 1)")
    qa_questions: int = option(200, help="CMRC 2018 dev questions `tiny` answers")
    base_qa_train: int = option(24, help="CMRC 2018 trial questions `base` fine-tunes on")
    base_qa_questions: int = option(24, help="CMRC 2018 dev questions `base` answers")
    qa_only: bool = option(False, help="only the CMRC 2018 rows (of the shapes in --qa-shapes)")
    repeat: int = option(2, help="timed runs per side (after one untimed warm-up run each)")
    threads: int = option(2, help="torch threads")
    quick: bool = option(False, help="tiny, 1 epoch, 64 test examples, 1 repeat: a smoke test")

    def __post_init__(self):
        at_least(self, 1, "epochs", "base_epochs", "batch_size", "seq_len", "qa_train", "qa_epochs",
                 "qa_questions", "base_qa_train", "base_qa_questions", "repeat", "threads")
        at_least(self, 0, "base_test", "large_train")
        for flag, names in (("--shapes", self.shapes), ("--qa-shapes", self.qa_shapes)):
            unknown = [n for n in names.split(",") if n and n not in PRESETS]
            if unknown:
                raise ZhBertError(f"{flag}: unknown shape {unknown[0]!r}{suggest(unknown[0], PRESETS)}; presets: "
                                  f"{', '.join(PRESETS)}")
        if self.qa_only and not set(self.shapes.split(",")) & set(self.qa_shapes.split(",")):
            raise ZhBertError("--qa-only: no shape of --shapes is in --qa-shapes, so there is nothing to run")


def make_model_dir(shape: str, out: Path) -> Path:
    """A random BertForMaskedLM of preset `shape` (seed 0) with the bundled tokenizer: a checkpoint folder."""
    import torch
    from transformers import BertForMaskedLM, BertTokenizer

    from zh_bert.core.fileio import copy_file, save_pretrained
    from zh_bert.train.arch.bert import build_config

    tok = BertTokenizer(vocab=str(VOCAB))
    torch.manual_seed(0)
    save_pretrained(BertForMaskedLM(build_config(shape, len(tok), pad_token_id=tok.pad_token_id)), out)
    save_pretrained(tok, out)
    copy_file(VOCAB, out / "vocab.txt")
    return out


def alternate(ours, theirs, repeat: int) -> tuple[float, float, object, object]:
    """Median wall seconds of `ours()` and `theirs()`, called in turn after one warm-up each; last results."""
    walls: dict[str, list[float]] = {"ours": [], "theirs": []}
    results = {"ours": ours(), "theirs": theirs()}
    for _ in range(repeat):
        for name, fn in (("ours", ours), ("theirs", theirs)):
            t0 = time.perf_counter()
            results[name] = fn()
            walls[name].append(time.perf_counter() - t0)
    return statistics.median(walls["ours"]), statistics.median(walls["theirs"]), results["ours"], results["theirs"]


def stock_trainer(model, tok, cfg, scratch: str, train=None, eval_strategy: str = "no", **kw):
    """The transformers `Trainer` both baselines use: `DataCollatorWithPadding` (random batches padded to their
    longest row), `cfg`'s batch size (prediction: twice it, as zh-bert's), epochs, lr, warmup and weight decay,
    on the CPU, saving and logging nothing; `kw` goes to `Trainer` (eval_dataset, compute_metrics). Its
    collator counts the real and the padded tokens of the batches it makes (`real_share`)."""
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from zh_bert.evaluation.heads.classify import PREDICT_BATCHES

    class CountingCollator(DataCollatorWithPadding):
        real = padded = 0

        def __call__(self, features):
            batch = super().__call__(features)
            self.real += int(batch["attention_mask"].sum())
            self.padded += batch["attention_mask"].numel()
            return batch

    steps = -(-len(train or []) // cfg.batch_size) * cfg.epochs
    args = TrainingArguments(output_dir=scratch, per_device_train_batch_size=cfg.batch_size,
                             per_device_eval_batch_size=PREDICT_BATCHES * cfg.batch_size, num_train_epochs=cfg.epochs,
                             learning_rate=cfg.lr, warmup_steps=int(cfg.warmup * steps), weight_decay=cfg.weight_decay,
                             eval_strategy=eval_strategy, save_strategy="no", logging_strategy="no", report_to=[],
                             use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=CountingCollator(tok), **kw)
    trainer.remove_callback(PrinterCallback)   # its per-evaluation prints; zh-bert's side logs nothing either
    return trainer


def trainer_fit(ckpt: Path, tok, task, cfg, scratch: str) -> int:
    """The stock recipe: Trainer + DataCollatorWithPadding, evaluating dev every epoch; returns its steps."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification

    index = {l: i for i, l in enumerate(task.labels)}

    def rows(examples):
        enc = tok([e.text_a for e in examples], truncation=True, max_length=cfg.seq_len)
        return [{"input_ids": ids, "token_type_ids": tt, "attention_mask": m, "labels": index[e.label]}
                for ids, tt, m, e in zip(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], examples)]

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(ckpt), num_labels=len(task.labels))
    trainer = stock_trainer(model, tok, cfg, scratch, rows(task.train), "epoch", eval_dataset=rows(task.dev),
                            compute_metrics=lambda p: {"accuracy": float((np.argmax(p.predictions, -1) ==
                                                                          p.label_ids).mean())})
    return trainer.train().global_step


def fit_row(shape: str, ckpt: Path, tok, task, cfg, repeat: int) -> tuple[float, float]:
    """(Trainer examples/s, zh-bert examples/s) of fine-tuning on train_0 for `cfg.epochs` epochs."""
    from zh_bert.core.fileio import scratch_dir
    from zh_bert.evaluation.heads.classify import train_one

    no_test = replace(task, test=None)
    with scratch_dir("zh-bert-bench-trainer-") as scratch:   # the Trainer's output folder (it saves nothing)
        ours, theirs, r_ours, r_theirs = alternate(
            lambda: train_one(ckpt, no_test, cfg, 0, tok=tok, log=lambda m: None),
            lambda: trainer_fit(ckpt, tok, task, cfg, str(scratch)), repeat)
    if r_ours["steps"] != r_theirs:
        raise RuntimeError(f"{shape}: zh-bert ran {r_ours['steps']} steps, the Trainer {r_theirs}")
    n = len(task.train) * cfg.epochs
    return n / theirs, n / ours


def predict_row(shape: str, ckpt: Path, tok, task, cfg, repeat: int) -> tuple[float, float, float]:
    """(pipeline examples/s, zh-bert examples/s, label agreement) predicting `task.test`."""
    import torch
    from transformers import pipeline

    from zh_bert.evaluation.heads.classify import PREDICT_BATCHES, load_classifier, predict, tokenize_examples

    torch.manual_seed(0)
    model = load_classifier(ckpt, len(task.labels), False, task.labels).eval()
    index = {l: i for i, l in enumerate(task.labels)}
    batch = cfg.batch_size * PREDICT_BATCHES
    pipe = pipeline("text-classification", model=model, tokenizer=tok, device="cpu", batch_size=batch)
    texts = [e.text_a for e in task.test]

    def ours():
        return predict(model, tokenize_examples(tok, task.test, index, cfg.seq_len), cfg.batch_size,
                       tok.pad_token_id, "fp32")

    def theirs():
        return [index[r["label"]] for r in pipe(texts, truncation=True, max_length=cfg.seq_len)]

    t_ours, t_theirs, p_ours, p_theirs = alternate(ours, theirs, repeat)
    agree = float(sum(int(a == b) for a, b in zip(p_ours, p_theirs)) / len(texts))
    return len(texts) / t_theirs, len(texts) / t_ours, agree


def window_rows(feats: dict, labels: bool) -> list[dict]:
    """The windows of `qa.qa_features` as the Trainer's dataset rows (the same tokens zh-bert trains on)."""
    rows = []
    for i, ids in enumerate(feats["input_ids"]):
        row = {"input_ids": ids, "token_type_ids": feats["token_type_ids"][i], "attention_mask": [1] * len(ids)}
        if labels:
            row |= {"start_positions": feats["start"][i], "end_positions": feats["end"][i]}
        rows.append(row)
    return rows


def cmrc(split: str, n: int):
    from zh_bert.corpus.squad_files import load_squad

    return load_squad(REPO / "corpora" / "tasks" / "cmrc2018" / f"cmrc2018_{split}.json")[:n]


def real_share(trainer) -> float:
    """The share of real tokens in the batches the Trainer's collator made: 1 / it bounds what removing every
    pad token can save in the layers that cost per token."""
    return trainer.data_collator.real / trainer.data_collator.padded


def qa_fit_row(shape: str, ckpt: Path, tok, n: int, cfg, repeat: int) -> tuple[float, float, float]:
    """(Trainer questions/s, zh-bert questions/s, real-token share of the Trainer's batches) fine-tuning a span
    head on the first `n` CMRC 2018 trial questions: `qa.SpanHead` on the one loop against the Trainer on the same windows and
    labels (its time includes making them, as zh-bert's does)."""
    from zh_bert.core.fileio import scratch_dir
    from zh_bert.evaluation.loop import run_seed
    from zh_bert.evaluation.heads.span import QAConfig, SpanHead, qa_features

    examples, qa = cmrc("trial", n), QAConfig()

    def theirs(scratch):   # run_qa's recipe: AutoModelForQuestionAnswering and the stock Trainer
        import torch
        from transformers import AutoModelForQuestionAnswering

        feats = qa_features(tok, examples, cfg.seq_len, qa.doc_stride, labels=True)
        torch.manual_seed(0)
        model = AutoModelForQuestionAnswering.from_pretrained(str(ckpt))
        trainer = stock_trainer(model, tok, cfg, scratch, window_rows(feats, True))
        return trainer.train().global_step, real_share(trainer)

    with scratch_dir("zh-bert-bench-qa-trainer-") as scratch:
        ours, t_theirs, r_ours, r_theirs = alternate(
            lambda: run_seed(SpanHead(ckpt, examples, None, cfg, qa, tok), cfg, 0, log=lambda m: None),
            lambda: theirs(str(scratch)), repeat)
    if r_ours["steps"] != r_theirs[0]:
        raise RuntimeError(f"{shape}: zh-bert ran {r_ours['steps']} CMRC steps, the Trainer {r_theirs[0]}")
    q = r_ours["n_train"] * cfg.epochs
    return q / t_theirs, q / ours, r_theirs[1]


def qa_row(ckpt: Path, tok, n: int, batch_size: int, repeat: int) -> tuple[float, float, float, float]:
    """(Trainer questions/s, zh-bert questions/s, identical answers, real-token share of the Trainer's batches)
    answering the first `n` CMRC 2018 dev questions with a (random) span head: `qa.predict_answers` against
    run_qa's evaluation path, `Trainer.predict` over the same windows (384 tokens, stride 128, in file order,
    padded per batch) with the same answer picking (`qa.pick_answers`: n-best 20, longest answer 64).
    transformers 5 has no question-answering pipeline; `Trainer.predict` is what its run_qa example calls."""
    import numpy as np
    import torch

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.heads.span import QAConfig, load_qa_model, pick_answers, predict_answers, qa_features

    examples = cmrc("dev", n)
    cfg, qa = FinetuneConfig(seq_len=384, batch_size=batch_size), QAConfig()
    torch.manual_seed(0)
    model = load_qa_model(ckpt, False, tok, cfg.seq_len).eval()
    with scratch_dir("zh-bert-bench-qa-predict-") as scratch:
        trainer = stock_trainer(model, tok, cfg, str(scratch))

        def theirs():
            feats = qa_features(tok, examples, cfg.seq_len, qa.doc_stride)
            start, end = trainer.predict(window_rows(feats, False)).predictions[:2]
            n_tok = [len(ids) for ids in feats["input_ids"]]
            return pick_answers(feats, [np.asarray(s[:k]) for s, k in zip(start, n_tok)],
                                [np.asarray(e[:k]) for e, k in zip(end, n_tok)], qa)

        t_ours, t_theirs, p_ours, p_theirs = alternate(lambda: predict_answers(model, tok, examples, cfg, qa),
                                                       theirs, repeat)
    same = sum(int(p_ours[e.id] == p_theirs[e.id]) for e in examples) / len(examples)
    return len(examples) / t_theirs, len(examples) / t_ours, same, real_share(trainer)


def rate(per_s: float) -> str:
    """A rate as the tables print it: one decimal, three significant digits below 10 (base's 0.22 questions/s)."""
    return f"{per_s:,.1f}" if per_s >= 10 else f"{per_s:.3g}"


def classification_rows(args, shape: str, ckpt: Path, tok, task, shaped, cfg, repeat: int, notes: list) -> None:
    """The FewCLUE eprstmt rows of `shape`: fine-tuning on train_0 (`tiny`: also on test_public), predicting."""
    base, ours = fit_row(shape, ckpt, tok, shaped, cfg, repeat)
    print(f"| {shape} | fine-tune {len(task.train)} × {cfg.epochs} epochs | Trainer | {rate(base)} | {rate(ours)} | "
          f"**{ours / base:.2f}×** |", flush=True)
    if shape == "tiny" and args.large_train and not args.quick:
        large = replace(task, train=task.test)
        base, ours = fit_row(shape, ckpt, tok, large, replace(cfg, epochs=args.large_train), repeat)
        print(f"| {shape} | fine-tune {len(large.train)} (test_public) × {args.large_train} epochs | Trainer | "
              f"{rate(base)} | {rate(ours)} | **{ours / base:.2f}×** |", flush=True)
    base, ours, agree = predict_row(shape, ckpt, tok, shaped, cfg, repeat)
    print(f"| {shape} | predict {len(shaped.test)} | pipeline | {rate(base)} | {rate(ours)} | "
          f"**{ours / base:.2f}×** |", flush=True)
    notes += [f"{shape}: predicted labels agree with the pipeline's on {agree:.1%} of test examples"]


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "finetune_speed", __doc__, argv)
    import torch
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.corpus.task_registry import task_named
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.tasks.classification import load_pair

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    shapes = ["tiny"] if args.quick else args.shapes.split(",")
    if args.qa_only:
        shapes = [s for s in shapes if s in args.qa_shapes.split(",")]
    repeat = 1 if args.quick else args.repeat
    task = load_pair(task_named(TASK), 0)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; torch {torch.__version__}, "
          f"{args.threads} threads; load average {os.getloadavg()[0]:.2f}")
    print(f"FewCLUE {TASK}: train_0 {len(task.train)}, dev_0 {len(task.dev)}, test_public {len(task.test)}; "
          f"batch {args.batch_size}, seq_len {args.seq_len}, fp32\n")
    print("| shape | what | baseline | baseline examples/s | zh-bert examples/s | ratio |")
    print("|---|---|---|---|---|---|")
    notes = []
    for shape in shapes:
        epochs = 1 if args.quick else (args.epochs if shape == "tiny" else args.base_epochs)
        n_test = 64 if args.quick else (args.base_test if shape == "base" else 0)
        cfg = FinetuneConfig(epochs=epochs, seq_len=args.seq_len, batch_size=args.batch_size, patience=10**6)
        shaped = replace(task, test=task.test[:n_test] if n_test else task.test)
        with scratch_dir(f"zh-bert-bench-{shape}-") as scratch:
            ckpt = Path(args.checkpoint) if args.checkpoint and shape == "tiny" else make_model_dir(shape, scratch)
            tok = AutoTokenizer.from_pretrained(str(ckpt))
            if not args.qa_only:
                classification_rows(args, shape, ckpt, tok, task, shaped, cfg, repeat, notes)
            if shape in args.qa_shapes.split(","):
                n_fit = 16 if args.quick else (args.qa_train if shape == "tiny" else args.base_qa_train)
                qa_cfg = replace(cfg, seq_len=384, epochs=1 if args.quick or shape == "base" else args.qa_epochs)
                base, ours, fit_share = qa_fit_row(shape, ckpt, tok, n_fit, qa_cfg, repeat)
                print(f"| {shape} | CMRC 2018 fine-tune {n_fit} (trial) × {qa_cfg.epochs} epochs | Trainer | "
                      f"{rate(base)} | {rate(ours)} | **{ours / base:.2f}×** |", flush=True)
                n_qa = 16 if args.quick else (args.qa_questions if shape == "tiny" else args.base_qa_questions)
                base, ours, same, answer_share = qa_row(ckpt, tok, n_qa, args.batch_size, repeat)
                print(f"| {shape} | CMRC 2018 answer {n_qa} | Trainer.predict | {rate(base)} | {rate(ours)} | "
                      f"**{ours / base:.2f}×** |", flush=True)
                notes += [f"{shape}: the same answer text as the Trainer's for {same:.1%} of the CMRC questions",
                          f"{shape}: the Trainer's CMRC batches are {fit_share:.1%} real tokens in training, "
                          f"{answer_share:.1%} in answering: removing every pad token saves at most "
                          f"{1 / fit_share:.2f}× and {1 / answer_share:.2f}× in the per-token layers"]
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
