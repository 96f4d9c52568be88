"""`zh-bert eval mlm|cloze CKPT ...`: masked-LM figures that compare checkpoints fairly.

`eval mlm` packs held-out text with the shard packer itself (rows `[CLS] doc [SEP] doc ... [SEP]`, exactly
like the training rows) and masks them once with `zh_bert.train.masking.mask_batch` from a fixed seed, over the
whole set at once, so the masked positions depend only on (text, tokenizer, seed, masking) — not on batch
size or model — and two checkpoints with the same tokenizer are scored on exactly the same blanks.

`eval cloze` fills each blank with every candidate: the blank becomes as many [MASK]s as the candidate has
tokens, and the candidate's score is the sum (or mean) of its tokens' log-probabilities, all predicted at
once. Candidates with the same token count share one forward pass (ChID's are all four characters).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zh_bert.core.config import at_least, config_from_args, option, option_of
from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import SUITE_DIR
from zh_bert.core.options import Shared
from zh_bert.corpus.corpus_io import read_documents
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.corpus.cloze_items import read_cloze
from zh_bert.evaluation.heads.cloze import MlmEvalConfig, eval_cloze, eval_mlm, load_mlm
from zh_bert.evaluation.commands.contamination import ContaminationArgs, main_contamination
from zh_bert.evaluation.eval_results import CheckpointArgs, entry, record_for_checkpoint
from zh_bert.evaluation.heads import option_classes
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.evaluation.suite.protocol import (
    SuiteArgs, SuiteConfig, check_suite_data, head_options, pooling_notes, run_suite)
from zh_bert.evaluation.suite.report import (
    claim_outputs,
    report_lines,
    suite_entries,
    write_predictions,
    write_report,
)
from zh_bert.hub.download import local_model
from zh_bert.train.masking import MaskingConfig
from zh_bert.train.rundir import find_run_dir

# --------------------------------------------------------------------------- options shared by the commands

# --------------------------------------------------------------------------- CLI

@dataclass
class MlmText:
    text: list[str] = option(metavar="FILE", help="held-out text: `zh-bert clean` JSONL or plain text, "
                                                  "one document per line, or a directory of parts "
                                                  "(a `zh-bert clean` OUTDIR)")


@dataclass
class ClozeEvalConfig:
    """Settings of `eval cloze`."""
    data: str = option(metavar="FILE", help='JSON lines: {"content": "..#idiom#..", "candidates": [..], '
                                            '"answer": i} or {"text": "..[MASK]..", "answer": "..", '
                                            '"candidates": [..] (optional)}')
    score: Literal["sum", "mean"] = option("sum", help="rank candidates by summed or mean token log-probability")
    seq_len: int = option_of(ShardConfig, "seq_len", default=256, help="longest input; the window is centred on the blank")
    batch_size: int = option_of(Shared, "batch_size", help="inputs per forward pass")
    show: int = option(5, help="print the first N predictions")

    def __post_init__(self):
        if self.score not in ("sum", "mean"):
            raise ZhBertError(f"--score must be sum or mean, got {self.score!r}")
        at_least(self, 1, "batch_size")
        at_least(self, 3, "seq_len")
        at_least(self, 0, "show")


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert eval", __doc__.split("\n\n")[0], subcommands={
        "mlm": ("masked-LM loss, perplexity, top-1/top-5 accuracy on held-out text",
                (CheckpointArgs, MlmText, MlmEvalConfig, MaskingConfig)),
        "cloze": ("multiple-choice cloze (ChID #idiom# or [MASK] sentences)", (CheckpointArgs, ClozeEvalConfig)),
        "suite": ("the benchmarks under their own protocols: FewCLUE (train on train_k, choose on dev_k, report "
                  "test_public), CMRC 2018 (span extraction, dev EM/F1), any declared suite",
                  (CheckpointArgs, SuiteArgs, SuiteConfig, *option_classes("suite"))),
        "contamination": ("share of each benchmark test set whose text (character n-grams) is in a pretraining "
                          "corpus", (ContaminationArgs,))})


def _main_mlm(ckpt: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    cfg = dataclasses.replace(config_from_args(MlmEvalConfig, args), masking=config_from_args(MaskingConfig, args))
    text = config_from_args(MlmText, args).text
    docs = read_documents(text)
    model, tok, ckpt_dir = load_mlm(ckpt)
    res = eval_mlm(model, tok, docs, cfg)
    res["checkpoint"] = str(ckpt_dir)
    print(f"{ckpt_dir}: {res['n_sequences']} sequences, {res['n_masked']} masked tokens ({res['masking']}, "
          f"seed {cfg.seed}): loss {res['mlm_loss']:.4f}, perplexity {res['perplexity']:.2f}, "
          f"acc {res['mlm_acc']:.4f}, top-5 {res['mlm_top5']:.4f}", flush=True)
    if cfg.order_check:
        print(f"context shuffled: acc {res['mlm_acc_shuffled']:.4f} (order gain {res['order_gain'] * 100:+.1f} "
              f"points), loss {res['mlm_loss_shuffled']:.4f}", flush=True)
    name = ", ".join(Path(t).name for t in text)
    task = f"Masked LM ({res['masking']} masking, seed {cfg.seed})"
    return res, [entry("fill-mask", task, "text", name, "accuracy", "MLM accuracy", res["mlm_acc"]),
                 entry("fill-mask", task, "text", name, "accuracy", "MLM top-5 accuracy", res["mlm_top5"]),
                 entry("fill-mask", task, "text", name, "perplexity", "perplexity", res["perplexity"])]


def _main_cloze(ckpt: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    cfg = config_from_args(ClozeEvalConfig, args)
    items = read_cloze(cfg.data)
    model, tok, ckpt_dir = load_mlm(ckpt)
    res, preds = eval_cloze(model, tok, items, cfg.score, cfg.seq_len, cfg.batch_size)
    res["checkpoint"] = str(ckpt_dir)
    for p in preds[:cfg.show]:
        print(f"{p['where']}: {'✓' if p['correct'] else '✗'} predicted {p['prediction']!r}, answer {p['answer']!r}")
    print(f"{ckpt_dir}: cloze accuracy {res['accuracy']:.4f} on {res['n']} items "
          f"(sum {res['accuracy_sum']:.4f}, mean {res['accuracy_mean']:.4f})", flush=True)
    return res, [entry("fill-mask", f"Cloze ({cfg.score} log-prob)", "cloze", Path(cfg.data).name, "accuracy",
                       "cloze accuracy", res["accuracy"])]


def _main_suite(ckpt: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    from transformers.utils import logging as hf_logging

    suite, cfg = (config_from_args(c, args) for c in (SuiteArgs, SuiteConfig))
    if not suite.lrs and cfg.lr != FinetuneConfig.lr:     # `--lr X` alone: a grid of one rate
        suite = dataclasses.replace(suite, lrs=[cfg.lr])
    opts = head_options(suite, {cls: config_from_args(cls, args) for cls in option_classes("suite")})
    data = check_suite_data(suite, opts)      # every file read and its roles kept apart before a model is resolved
    model = local_model(ckpt, log=lambda m: print(m, flush=True))
    run_dir = find_run_dir(model)
    report = suite.report or (str(Path(run_dir) / SUITE_DIR) if run_dir else None)
    claim_outputs(suite.predictions, report)          # before any training: never a user's folder
    hf_logging.set_verbosity_error()  # "newly initialised classifier" warnings are expected here
    hf_logging.disable_progress_bar()
    for note in pooling_notes(model, suite, cfg):
        print(note, flush=True)
    res = run_suite(model, suite, cfg, opts, log=lambda m: print(m, flush=True), data=data)
    print("\n".join(report_lines(res)), flush=True)
    if suite.predictions:
        files = write_predictions(res, suite.predictions)
        print(f"predictions: {len(files)} files in {suite.predictions} (the benchmarks' own formats)", flush=True)
    if report:
        write_report(res, report, "zh-bert eval " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else [ckpt]))
        print(f"report: {report}/suite.md, suite.png, suite.json", flush=True)
    for r in [*res["pretrained"].values(), *res["random_init"].values()]:   # the files hold every prediction
        r.pop("predictions", None)
        for pair in r.get("per_pair", []):
            pair.pop("test_predictions", None)
    return res, suite_entries(res)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "contamination":   # reads a corpus, not a checkpoint: nothing to record
        print(json.dumps(main_contamination(args), ensure_ascii=False), flush=True)
        return 0
    target = config_from_args(CheckpointArgs, args)
    res, entries = {"mlm": _main_mlm, "cloze": _main_cloze, "suite": _main_suite}[args.command](target.ckpt, args)
    if not target.no_record:
        where = record_for_checkpoint(target.ckpt, entries)
        if where:
            print(f"recorded in {where}", flush=True)
    print(json.dumps(res, ensure_ascii=False), flush=True)
    return 0
