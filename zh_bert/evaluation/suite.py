"""`zh-bert eval suite MODEL --suite fewclue`: a checkpoint on the benchmark the Chinese community compares
few-shot encoders on, under its own protocol (`fewclue`: fine-tune on train_k, choose on dev_k, report
test_public, mean ± std over the pairs and seeds), with the baselines beside every figure: the majority rate of
test_public and, with `--baselines`, the same architecture fine-tuned from random weights.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.fewclue import (PUBLISHED, SCORE_TASKS, SOURCE_URL, PAIRS, TEST, check_task_names,
                                        fewclue_score, load_fewclue)
from zh_bert.evaluation.finetune import FinetuneConfig, FinetuneJob, mean_std, percent, run

PROTOCOL = "fewclue-v1"     # recorded with every figure: what "fine-tune on train_k, choose on dev_k" means here


@dataclass
class SuiteArgs:
    suite: Literal["fewclue"] = option("fewclue", help="the benchmark: fewclue (its eight scored tasks)")
    only: list[str] = option_of(Shared, "only", help=f"only these tasks (repeatable; default: all of "
                                                     f"{', '.join(SCORE_TASKS)})")
    splits: int = option(PAIRS, help=f"train_k/dev_k pairs, k = 0.. (FewCLUE reports all {PAIRS})")
    seed: int = option_of(FinetuneJob, "seed")
    seeds: int = option_of(FinetuneJob, "seeds")
    baselines: bool = option(False, help="also fine-tune the same architecture from random weights")

    def __post_init__(self):
        self.only = check_task_names(self.only)
        FinetuneJob(task="fewclue", seed=self.seed, seeds=self.seeds)   # the same seed checks as finetune
        if not 1 <= self.splits <= PAIRS:
            raise ZhBertError(f"--splits must be in 1..{PAIRS}, got {self.splits}")


def run_task(ckpt, name: str, args: SuiteArgs, cfg: FinetuneConfig, log=print) -> dict:
    """One task: a fine-tune per pair and seed; test_public accuracy over all of them, the dev figures that chose
    each checkpoint beside it."""
    seeds = list(range(args.seed, args.seed + args.seeds))
    runs, tests, devs = [], [], []
    for k in range(args.splits):
        task = load_fewclue(name, k)
        summary = run(ckpt, task, cfg, seeds, log=lambda m, k=k: log(f"  {name} pair {k}: {m}"))
        runs.append(summary)
        tests += [r["test_acc"] for r in summary["per_seed"]]
        devs += [r["dev_acc"] for r in summary["per_seed"]]
    gold = [e.label for e in task.test]
    majority = max(set(gold), key=gold.count)
    test_mean, test_std = mean_std(tests)
    return {"task": name, "test_acc": test_mean, "test_acc_std": test_std, "dev_acc": mean_std(devs)[0],
            "majority_test_acc": gold.count(majority) / len(gold), "n_test": len(gold),
            "pairs": args.splits, "seeds": seeds, "runs": len(tests), "per_pair": [r["test_acc"] for r in runs]}


def run_suite(ckpt, args: SuiteArgs, cfg: FinetuneConfig, log=print) -> dict:
    """Every task of `args`, pretrained and (with --baselines) from random weights; the FewCLUE score when all
    eight scored tasks ran."""
    out = {"suite": args.suite, "protocol": PROTOCOL, "reported_split": TEST, "checkpoint": str(ckpt),
           "config": dataclasses.asdict(cfg), "tasks": {}, "random_init": {}}
    inits = [("tasks", cfg)] + ([("random_init", dataclasses.replace(cfg, random_init=True))] if args.baselines else [])
    for key, c in inits:
        for name in args.only:
            log(f"{name} ({'random init' if c.random_init else 'pretrained'}): {args.splits} pairs x "
                f"{args.seeds} seed(s)")
            out[key][name] = run_task(ckpt, name, args, c, log)
    for key in ("tasks", "random_init"):
        accs = {n: r["test_acc"] * 100 for n, r in out[key].items()}
        out[f"{key}_score"] = fewclue_score(accs) if set(SCORE_TASKS) <= set(accs) else None
    return out


def _test_cell(r: dict) -> str:
    """Mean ± std over the runs (pairs x seeds); one run has no spread to show."""
    return percent(r["test_acc"], r["test_acc_std"] if r["runs"] > 1 else None)


def report_lines(res: dict) -> list[str]:
    """The table the command prints: each task's test_public accuracy (mean ± std over pairs x seeds), the dev
    figure that chose it, the majority rate, random init, and the published fine-tuning row."""
    ref = PUBLISHED["FineTuning"]
    lines = [f"FewCLUE ({res['protocol']}): fine-tuned on train_k, checkpoint chosen on dev_k, reported on "
             f"{res['reported_split']} (accuracy, %)",
             f"{'task':<9} {'test_public':>13} {'dev (chose)':>11} {'majority':>8} {'random init':>13} "
             f"{'published':>9}"]
    for name, r in res["tasks"].items():
        rand = res["random_init"].get(name)
        lines.append(f"{name:<9} {_test_cell(r):>13} {r['dev_acc'] * 100:>11.1f} {r['majority_test_acc'] * 100:>8.1f} {_test_cell(rand) if rand else '-':>13} "
                     f"{ref[name]:>9.1f}")
    for key, label in (("tasks_score", "score"), ("random_init_score", "score (random init)")):
        if res.get(key) is not None:
            lines.append(f"FewCLUE {label}: {res[key]:.2f} (mean of the eight tasks other than CHID)")
    lines.append(f"published: chinese-roberta-wwm-ext fine-tuned {ref['score']}, PET {PUBLISHED['PET']['score']}, "
                 f"zero-shot {PUBLISHED['Zero-shot']['score']}, human {PUBLISHED['Human']['score']} ({SOURCE_URL})")
    return lines


def suite_entries(res: dict) -> list[dict]:
    """eval_results.json entries: each task's test_public accuracy, the split and protocol in the task name."""
    out = []
    for name, r in res["tasks"].items():
        task = f"FewCLUE {name} ({res['protocol']}, {r['pairs']} pairs x {len(r['seeds'])} seeds)"
        out.append(entry("text-classification", task, f"fewclue-{name}", f"FewCLUE {name}", "accuracy",
                         f"{TEST} accuracy", r["test_acc"]))
    return out
