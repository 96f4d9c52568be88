"""NER fine-tuning and prediction sentences/s: zh-bert's tagging loop against the transformers `Trainer` with
`DataCollatorForTokenClassification` (the `run_ner` recipe), in the same process, on the same model and rows.

Same model folder (a random BertForMaskedLM of the shape with the bundled Google vocab, or `--checkpoint` for
`tiny`), loaded by both sides as a `BertForTokenClassification` with Resume NER's 33 BMES tags under the same
seed; the same rows (`tagging.encode`: each character labelled on its first sub-token, long sentences in
max-context windows), batch size, epochs, learning rate and warmup, fp32. Fine-tuning: `ner_finetune.train_tagger`
(length-bucketed batches, dev entity F1 every epoch, the best state kept; early stop off so both run every
epoch) against `Trainer.train` (random batches padded to their longest row) evaluating dev every epoch with
run_ner's `compute_metrics` (seqeval on the first-sub-token predictions); each side's wall time covers loading
the model through the last evaluation. Prediction: `ner_finetune.predict_tags` (tokenizing included; rows
sorted by length, tags put back on every character) against `Trainer.predict` over the same rows in file order
(tokenizing included), on MSRA's test sentences (up to 577 characters, so windows); the two must give the same
tag to every character. Runs alternate (zh-bert, Trainer, ...) after one untimed warm-up each; medians compared.

    python -m bench.ner_speed --threads 1            # tiny and base, 2 repeats
    python -m bench.ner_speed --shapes tiny --checkpoint runs/tiny-cpu/final
    python -m bench.ner_speed --quick                # tiny, 1 epoch, 64 sentences (a smoke test)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench import REPO
from bench.cli import parse
from bench.finetune_speed import alternate, make_model_dir, rate
from bench.timing import machine
from zh_bert.core.config import at_least, option
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.train.arch.base import PRESETS

TASKS = REPO / "corpora" / "tasks"


@dataclass
class Options:
    shapes: str = option("tiny,base", metavar="A,B", help="model shapes: tiny (recipes/tiny-cpu.yaml) and/or base "
                                                          "(BERT-base 768/12/12), random weights")
    checkpoint: str | None = option(None, help="a model folder to use for `tiny` instead of random weights")
    train: int = option(0, help="Resume train sentences `tiny` fine-tunes on (0: all 3,814)")
    epochs: int = option(2, help="fine-tuning epochs of `tiny`")
    base_train: int = option(192, help="Resume train sentences `base` fine-tunes on (1 epoch)")
    predict: int = option(1000, help="MSRA test sentences `tiny` predicts")
    base_predict: int = option(200, help="MSRA test sentences `base` predicts")
    batch_size: int = option(32, help="rows per training step (prediction: twice that, both sides)")
    seq_len: int = option(128, help="sub-tokens per row; longer sentences are windowed")
    repeat: int = option(2, help="timed runs per side (after one untimed warm-up run each)")
    threads: int = option(2, help="torch threads")
    quick: bool = option(False, help="tiny, 1 epoch, 64 train / 32 dev / 64 test sentences, 1 repeat")

    def __post_init__(self):
        at_least(self, 1, "epochs", "base_train", "predict", "base_predict", "batch_size", "seq_len", "repeat",
                 "threads")
        at_least(self, 0, "train")
        unknown = [n for n in self.shapes.split(",") if n and n not in PRESETS]
        if unknown:
            raise ZhBertError(f"--shapes: unknown shape {unknown[0]!r}{suggest(unknown[0], PRESETS)}; presets: "
                              f"{', '.join(PRESETS)}")


def trainer_rows(rows, labels: bool = True) -> list[dict]:
    """`tagging.Windows` as the Trainer's dataset rows (the same tokens and labels zh-bert trains on)."""
    out = []
    for ids, lab in zip(rows.input_ids, rows.labels):
        row = {"input_ids": ids.tolist(), "attention_mask": [1] * len(ids)}
        out.append(row | ({"labels": lab.tolist()} if labels else {}))
    return out


def token_trainer(model, tok, cfg, scratch: str, train=None, **kw):
    """run_ner's Trainer: `DataCollatorForTokenClassification` (labels padded with -100), `cfg`'s batch size
    (prediction: twice it, as zh-bert's), epochs, lr, warmup, weight decay; on the CPU, saving and logging
    nothing."""
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    steps = -(-len(train or []) // cfg.batch_size) * cfg.epochs
    args = TrainingArguments(output_dir=scratch, per_device_train_batch_size=cfg.batch_size,
                             per_device_eval_batch_size=2 * cfg.batch_size, num_train_epochs=cfg.epochs,
                             learning_rate=cfg.lr, warmup_steps=int(cfg.warmup * steps), weight_decay=cfg.weight_decay,
                             eval_strategy="epoch" if "eval_dataset" in kw else "no", save_strategy="no",
                             logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorForTokenClassification(tok),
                      **kw)
    trainer.remove_callback(PrinterCallback)
    return trainer


def seqeval_metrics(labels: list[str], scheme):
    """run_ner's compute_metrics: seqeval's entity F1 of the argmax at the labelled positions (tags in the
    form seqeval reads: BMES's M as I)."""
    import numpy as np
    from seqeval.metrics import f1_score

    labels = [scheme.scoring_tag(t) for t in labels]

    def compute(p):
        pred = np.argmax(p.predictions, -1)
        gold_tags = [[labels[g] for g in row if g != -100] for row in p.label_ids]
        pred_tags = [[labels[q] for q, g in zip(prow, row) if g != -100] for prow, row in zip(pred, p.label_ids)]
        return {"f1": f1_score(gold_tags, pred_tags)}

    return compute


def fit_row(ckpt: Path, tok, task, cfg, tcfg, repeat: int) -> tuple[float, float, int]:
    """(Trainer sentences/s, zh-bert sentences/s, rows) fine-tuning on `task.train` for `cfg.epochs` epochs."""
    import torch
    from transformers import AutoModelForTokenClassification

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.evaluation.heads.tag.head import train_tagger
    from zh_bert.evaluation.heads.tag.tagging import encode

    labels = task.labels
    index = {t: i for i, t in enumerate(labels)}

    def theirs(scratch: str) -> tuple[int, int]:
        train = encode(tok, task.train, index, cfg.seq_len, tcfg.window_stride)
        dev = encode(tok, task.dev, index, cfg.seq_len, tcfg.window_stride)
        torch.manual_seed(0)
        model = AutoModelForTokenClassification.from_pretrained(str(ckpt), num_labels=len(labels))
        trainer = token_trainer(model, tok, cfg, scratch, trainer_rows(train), eval_dataset=trainer_rows(dev),
                                compute_metrics=seqeval_metrics(labels, task.scheme))
        return trainer.train().global_step, len(train.lengths)

    no_test = replace(task, test=None)
    with scratch_dir("zh-bert-bench-ner-trainer-") as scratch:
        ours, t_theirs, r_ours, r_theirs = alternate(
            lambda: train_tagger(ckpt, no_test, cfg, tcfg, 0, tok=tok, log=lambda m: None),
            lambda: theirs(str(scratch)), repeat)
    if r_ours["steps"] != r_theirs[0]:
        raise RuntimeError(f"zh-bert ran {r_ours['steps']} steps, the Trainer {r_theirs[0]}")
    n = len(task.train) * cfg.epochs
    return n / t_theirs, n / ours, r_theirs[1]


def predict_row(ckpt: Path, tok, task, sentences, cfg, tcfg, repeat: int) -> tuple[float, float, float, int]:
    """(Trainer.predict sentences/s, zh-bert sentences/s, share of characters given the same tag, rows)."""
    import numpy as np
    import torch

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.evaluation.heads.tag.head import predict_tags
    from zh_bert.evaluation.heads.tag.tagging import encode, load_tagger, tags_of

    torch.manual_seed(0)
    model = load_tagger(ckpt, task.labels, False, tok, cfg.seq_len).eval()
    with scratch_dir("zh-bert-bench-ner-predict-") as scratch:
        trainer = token_trainer(model, tok, replace(cfg, epochs=1), str(scratch))

        def theirs():
            rows = encode(tok, sentences, None, cfg.seq_len, tcfg.window_stride)
            logits = trainer.predict(trainer_rows(rows, labels=False)).predictions
            preds = [np.argmax(logits[i, :n], -1) for i, n in enumerate(rows.lengths)]
            return tags_of(rows, preds, task.labels), len(rows.lengths)

        t_ours, t_theirs, p_ours, (p_theirs, n_rows) = alternate(
            lambda: predict_tags(model, tok, sentences, task, cfg, tcfg), theirs, repeat)
    chars = sum(len(s.tokens) for s in sentences)
    same = sum(int(a == b) for x, y in zip(p_ours, p_theirs) for a, b in zip(x, y)) / chars
    return len(sentences) / t_theirs, len(sentences) / t_ours, same, n_rows


def shape_rows(args, shape: str, ckpt: Path, tok, task, msra, notes: list) -> None:
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.heads.tag.head import TaggingConfig

    quick, tiny = args.quick, shape == "tiny"
    n_train = 64 if quick else (args.train or len(task.train)) if tiny else args.base_train
    epochs = 1 if quick or not tiny else args.epochs
    fit_task = replace(task, train=task.train[:n_train], dev=task.dev[:32] if quick else task.dev)
    cfg = FinetuneConfig(epochs=epochs, lr=1e-3 if tiny else 5e-5, seq_len=args.seq_len, batch_size=args.batch_size,
                         patience=10**6)
    tcfg = TaggingConfig()
    base, ours, rows = fit_row(ckpt, tok, fit_task, cfg, tcfg, 1 if quick else args.repeat)
    print(f"| {shape} | fine-tune Resume {n_train:,} ({rows:,} rows) × {epochs} epochs | Trainer | {rate(base)} | "
          f"{rate(ours)} | **{ours / base:.2f}×** |", flush=True)
    n_pred = 64 if quick else args.predict if tiny else args.base_predict
    base, ours, same, rows = predict_row(ckpt, tok, task, msra[:n_pred], cfg, tcfg, 1 if quick else args.repeat)
    print(f"| {shape} | predict MSRA test {n_pred:,} ({rows:,} rows) | Trainer.predict | {rate(base)} | "
          f"{rate(ours)} | **{ours / base:.2f}×** |", flush=True)
    notes.append(f"{shape}: predicted tags agree with the Trainer's on {same:.1%} of characters")


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "ner_speed", __doc__, argv)
    import torch
    from transformers.utils import logging as hf_logging

    from zh_bert.core.fileio import scratch_dir
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.corpus.ner_files import read_ner
    from zh_bert.evaluation.tasks.ner import load_ner

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    resume = TASKS / "resume_ner"
    task = load_ner("resume_ner", resume / "train.char.bmes", resume / "dev.char.bmes", None)
    msra = read_ner(TASKS / "msra_ner" / "test.tsv")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; torch {torch.__version__}, "
          f"{args.threads} threads; load average {os.getloadavg()[0]:.2f}")
    print(f"Resume NER train {len(task.train):,} / dev {len(task.dev):,} sentences, MSRA test {len(msra):,}; "
          f"batch {args.batch_size}, seq_len {args.seq_len}, fp32\n")
    print("| shape | what | baseline | baseline sentences/s | zh-bert sentences/s | ratio |")
    print("|---|---|---|---|---|---|")
    notes: list[str] = []
    for shape in ["tiny"] if args.quick else args.shapes.split(","):
        with scratch_dir(f"zh-bert-bench-ner-{shape}-") as scratch:
            ckpt = Path(args.checkpoint) if args.checkpoint and shape == "tiny" else make_model_dir(shape, scratch)
            shape_rows(args, shape, ckpt, load_tokenizer(ckpt), task, msra, notes)
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
