"""`zh-bert eval suite MODEL --suite SUITE|all`: a checkpoint on the benchmarks the Chinese community compares
encoders on, each task under its suite's protocol, with the baselines beside every figure. The suites and their
tasks are the registry's (`zh_bert.corpus.task_registry`); what differs by head is asked of the head's kind
(`heads`), and every head trains on the one loop (`loop`).

- A task whose head chooses (classification, multiple choice): per pair k (FewCLUE's five; one set of files for a
  task without pairs), every learning rate of the grid is fine-tuned on the train split; the rate and the epoch are
  chosen on the choosing split (dev_k); the chosen state is scored on the reported split (test_public); mean ± std
  over the pairs and seeds; the suite's score (FewCLUE's, over the eight tasks other than CHID). `--method
  zero-shot|pet` scores with the masked LM on the task's pattern instead of a classifier (`prompts`); a multiple
  choice task (CHID) is always scored by the masked LM over its candidates (PET-trained under `finetune`).
- A task whose head does not choose (CMRC 2018's span extraction): fine-tuned for a fixed number of epochs
  (`--cmrc-epochs`) on the official train file (or, when the user has none, on the bundled trial set, said so
  everywhere) and scored on dev, which is the reported split: nothing is chosen on it.

The chance rate of each reported split is printed beside every score, and with `--baselines` the same architecture
fine-tuned from random weights under the same protocol.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from importlib.metadata import version
from typing import Literal, Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.core.options import Shared
from zh_bert.corpus.task_registry import scored, suite_names, suites, suites_of, task_named, tasks_of
from zh_bert.corpus.task_spec import Task
from zh_bert.evaluation.finetune import FinetuneConfig, FinetuneJob, mean_std
from zh_bert.evaluation.heads import data_files, head_kind, sha256_of
from zh_bert.evaluation.loop import TaskBar, init_label
from zh_bert.evaluation.ner_finetune import Decoding, TaggingConfig
from zh_bert.evaluation.ner_tasks import tagging_task, with_train
from zh_bert.evaluation.qa import QAConfig
from zh_bert.evaluation.step import no_tick
from zh_bert.evaluation.tasks import SUITE_PREFIX, public_records

#: the learning rates tried for every task and pair that chooses, chosen on the choosing split: 2e-5 is the
#: published base-model rate, 2e-3 what a tiny from-scratch model needs; a decade between them
LR_GRID = (2e-5, 2e-4, 2e-3)
SUITE_METHODS = ("finetune", "zero-shot", "pet")
#: the most few-shot pairs a task declares (FewCLUE's five); `--splits` runs the first N
PAIRS = 5


@dataclass
class SuiteArgs:
    suite: str = option("fewclue", help=f"the benchmark: {', '.join(suite_names())} (every suite)")
    method: Literal["finetune", "zero-shot", "pet"] = option(
        "finetune", help="finetune (a classifier), zero-shot (the masked LM on the task's pattern, no training) or "
                         "pet (the masked LM fine-tuned on the pattern)")
    only: list[str] = option_of(Shared, "only", help="only these tasks of the suite (repeatable; default: all)")
    splits: int = option(PAIRS, help=f"train_k/dev_k pairs, k = 0.. (FewCLUE reports all {PAIRS})")
    seed: int = option_of(FinetuneJob, "seed")
    seeds: int = option_of(FinetuneJob, "seeds")
    lrs: list[float] = option(default_factory=list, action="append", metavar="LR", help=f"learning rates tried per pair, chosen on dev_k (repeatable; "
                                                     f"default: the grid {', '.join(map(str, LR_GRID))}; "
                                                     f"--lr X alone is a grid of one)")
    baselines: bool = option(False, help="also fine-tune the same architecture from random weights")
    cmrc_train: Optional[str] = option(None, metavar="PATH", help="CMRC 2018's official train file (or a folder "
                                                                  "holding cmrc2018_train.json); default: train on "
                                                                  "the bundled trial set, said so in the report")
    cmrc_lr: float = option(3e-5, help="CMRC 2018 learning rate (fixed: its dev is the reported split)")
    cmrc_epochs: int = option(2, help="CMRC 2018 epochs (fixed, as HFL's recipe: 2)")
    cmrc_seq_len: int = option(512, help="CMRC 2018 window length in tokens (question + a piece of the context)")
    msra_train: Optional[str] = option(None, metavar="PATH", help="MSRA NER's official train file (or a folder "
                                                                  "holding train.tsv); default: train on a fixed 90% "
                                                                  "of dev, choose on the other 10%, said so")
    crf: bool = option_of(TaggingConfig, "crf")
    decode: Optional[Decoding] = option_of(TaggingConfig, "decode")
    predictions: Optional[str] = option_of(Shared, "predictions", help="write every task's test predictions in its "
                                                                       "official scorer's format (NER: CoNLL lines)")
    report: Optional[str] = option(None, metavar="DIR", help="folder for suite.md, suite.png, suite.json "
                                                             "(default: RUN/suite when MODEL is a run)")

    def __post_init__(self):
        suites_of(self.suite)
        if self.method not in SUITE_METHODS:
            raise ZhBertError(f"--method must be finetune, zero-shot or pet; got {self.method!r}")
        self.only = only_tasks(self.only, self.suite)
        if self.crf and not any(tagging_task(n) for n in self.only):
            raise ZhBertError(f"--crf: no tag (NER) task among {', '.join(self.only)}; the CRF is a layer of the tag "
                              f"head (--suite ner)")
        if self.decode and not any(tagging_task(n) for n in self.only):
            raise ZhBertError(f"--decode: no tag (NER) task among {', '.join(self.only)}; it chooses how the tag "
                              f"head's tags are read (--suite ner)")
        TaggingConfig(crf=self.crf, decode=self.decode)     # --decode argmax with --crf: refused here
        FinetuneJob(task="suite", seed=self.seed, seeds=self.seeds)   # the same seed checks as finetune
        if not 1 <= self.splits <= PAIRS:
            raise ZhBertError(f"--splits must be in 1..{PAIRS}, got {self.splits}")
        if self.cmrc_epochs < 1:
            raise ZhBertError(f"--cmrc-epochs must be at least 1, got {self.cmrc_epochs}")
        if not 32 <= self.cmrc_seq_len <= 4096:
            raise ZhBertError(f"--cmrc-seq-len must be between 32 and 4096, got {self.cmrc_seq_len}")
        for lr in self.lrs + [self.cmrc_lr]:
            if not 0 < lr < 1:
                raise ZhBertError(f"a learning rate must be in (0, 1), got {lr}")
        if self.cmrc_train is not None:
            for task in tasks_of("all"):
                if not head_kind(task).chooses:
                    head_kind(task).train_file(task, self.cmrc_train)

    @property
    def suites(self) -> tuple[str, ...]:
        return tuple(s.name for s in suites_of(self.suite))

    @property
    def tasks(self) -> list[Task]:
        """The tasks to run, in `--only`'s order (default: the suites' declaration order)."""
        return [with_train(task_named(n), self.msra_train) for n in self.only]

    @property
    def grid(self) -> tuple[float, ...]:
        return tuple(self.lrs) or LR_GRID

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


def only_tasks(names: list[str], suite: str) -> list[str]:
    """The tasks `--only` asks for among the suite's (all of them for an empty list), refusing others in one line."""
    every = [t.name for t in tasks_of(suite)]
    for n in names:
        if n not in every:
            raise ZhBertError(f"--only {n}: not a task of --suite {suite}{suggest(n, every)}; one of "
                              f"{', '.join(every)}")
    return list(dict.fromkeys(names)) or every


# --------------------------------------------------------------------------- the choosing protocol

def _grid(task: Task, args: SuiteArgs, cfg: FinetuneConfig) -> tuple[float, ...]:
    return (cfg.lr,) if head_kind(task).method(args.method) == "zero-shot" else args.grid


def _pairs_of(task: Task, args: SuiteArgs) -> list[int | None]:
    """The pairs a task runs on: `--splits` of its few-shot pairs (zero-shot: the first only), or its one set."""
    if task.pairs is None:
        return [None]
    return list(range(1 if head_kind(task).method(args.method) == "zero-shot" else min(args.splits, task.pairs.count)))


def run_pair(ckpt, task: Task, k: int | None, args: SuiteArgs, cfg: FinetuneConfig, log=print, tick=no_tick) -> dict:
    """Pair k of `task`: every rate of the grid trained on train_k; the one with the best choosing figure (dev_k
    accuracy, the kind's `choose_key`; mean over seeds) is kept, whatever its reported figure. `tick` counts the
    runs (rates x seeds)."""
    kind = head_kind(task)
    method, key = kind.method(args.method), kind.choose_key
    best, chosen = None, None
    for lr in _grid(task, args, cfg):
        where = f"pair {k} " if k is not None else ""
        summary = kind.setting(ckpt, task, k, method, dataclasses.replace(cfg, lr=lr), args.seed_list(),
                               lambda m, lr=lr: log(f"  {task.name} {where}lr {lr:g}: {m}"), args)
        tick(len(args.seed_list()))
        if best is None or summary[key] > best[key]:
            best, chosen = summary, lr
    return {**best, "lr": chosen, "method": method}


def run_task(ckpt, task: Task, args: SuiteArgs, cfg: FinetuneConfig, log=print) -> dict:
    """One choosing task over its pairs (zero-shot trains nothing: one pass, pair 0's dev beside it): the reported
    figure (the task's main metric, `test_acc`) mean ± std over pairs x seeds, the choosing one (`dev_acc`) beside."""
    pairs = _pairs_of(task, args)
    test_key, dev_key = task.main_metric.key, head_kind(task).choose_key
    tests, devs, per_pair = [], [], []
    runs = len(pairs) * len(_grid(task, args, cfg)) * args.seeds
    with TaskBar(f"{task.name} ({init_label(cfg)})", runs, "run", log) as bar:
        for k in pairs:
            r = run_pair(ckpt, task, k, args, cfg, bar.log, bar.tick)
            bar.note(("" if k is None else f"pair {k} ") + f"dev {r[dev_key]:.3f}")
            tests += [s[test_key] for s in r["per_seed"]]
            devs += [s[dev_key] for s in r["per_seed"]]
            per_pair.append({"pair": k, "lr": r["lr"], test_key: r[test_key], dev_key: r[dev_key],
                             "test_predictions": r.get("test_predictions")})
    chance, chance_name = head_kind(task).chance(task)
    test_mean, test_std = mean_std(tests)
    return {"task": task.name, "method": r["method"], test_key: test_mean, f"{test_key}_std": test_std,
            dev_key: mean_std(devs)[0], "runs": len(tests), "pairs": len(pairs), "seeds": args.seed_list(),
            "majority_test_acc": chance, "chance": chance_name, "per_pair": per_pair,
            "data_sha256": sha256_of(data_files(task, len(pairs))), **{k: r[k] for k in ("crf", "decode") if r.get(k)}}


def check_suite_data(args: SuiteArgs) -> dict:
    """Every file the suite will read, read and checked in one pass before any model is loaded: each pair's splits
    in the form its method reads them (fields, label words, roles kept apart), every reported record's id and
    official label (what the prediction files write after all training), and the files of a task that does not
    choose, returned as {task: data} for `run_suite`."""
    data = {}
    for task in args.tasks:
        kind = head_kind(task)
        if not kind.chooses:
            data[task.name] = kind.data(task, args.cmrc_train)
            continue
        for k in _pairs_of(task, args):
            kind.check(task, kind.method(args.method), k)
        public_records(task)
    return data


# --------------------------------------------------------------------------- the suite

def _suite_score(res: dict) -> float | None:
    """The score of the asked suite that has one (FewCLUE's), when all its tasks ran; None otherwise."""
    accs = {n: task_named(n).main_metric.percent(r[task_named(n).main_metric.key]) for n, r in res.items()
            if task_named(n).main_metric.key in r}
    for suite in suites():
        names = [t.name for t in scored(suite)]
        if suite.score and names and set(names) <= set(accs):
            return sum(accs[n] for n in names) / len(names)
    return None


def run_suite(ckpt, args: SuiteArgs, cfg: FinetuneConfig, qa: QAConfig | None = None, log=print,
              data: dict | None = None) -> dict:
    """Every asked task, pretrained and (with --baselines) from random weights; `data`: what `check_suite_data`
    returned, when the caller checked the files before resolving the model."""
    qa = qa or QAConfig()
    data = check_suite_data(args) if data is None else data     # a bad file is one line before any training
    t0 = time.perf_counter()
    out = {"suites": list(args.suites), "protocols": {s.name: s.protocol for s in suites_of(args.suite)},
           "method": args.method, "reported_split": {s.name: tasks_of(s)[0].report_name for s in suites()
                                                     if tasks_of(s)},
           "checkpoint": str(ckpt), "zh_bert_version": version("zh-bert"), "grid": list(args.grid),
           "config": dataclasses.asdict(cfg), "qa_config": dataclasses.asdict(qa), "pretrained": {}, "random_init": {}}
    inits = [("pretrained", cfg)] + ([("random_init", dataclasses.replace(cfg, random_init=True))]
                                     if args.baselines else [])
    out["wall_s_by_init"] = {}
    for key, c in inits:
        t_init = time.perf_counter()
        for task in args.tasks:
            kind = head_kind(task)
            if not kind.chooses:
                log(f"{task.name} ({init_label(c)}): {args.seeds} seed(s), {args.cmrc_epochs} epoch(s)")
                out[key][task.name] = kind.fixed(ckpt, task, args, c, qa, data[task.name], log)
                continue
            log(f"{task.name} ({init_label(c)}, {kind.method(args.method)}): {len(_pairs_of(task, args))} pairs x "
                f"{args.seeds} seed(s) x {len(_grid(task, args, c))} learning rate(s)")
            out[key][task.name] = run_task(ckpt, task, args, c, log)
        out["wall_s_by_init"][key] = round(time.perf_counter() - t_init, 1)
    for key in ("pretrained", "random_init"):
        out[f"{key}_score"] = _suite_score(out[key])
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


# --------------------------------------------------------------------------- ablate's downstream columns

def suite_task_of(task: str) -> Task | None:
    """The task a `suite:TASK` entry names (a task of a suite, whose head chooses; one line if not); None for
    other entries."""
    if not task.startswith(SUITE_PREFIX):
        return None
    name = task[len(SUITE_PREFIX):]
    every = [t.name for t in tasks_of("all") if head_kind(t).chooses]
    if name not in every:
        raise ZhBertError(f"{task}: not a task of a suite that chooses on dev{suggest(name, every)}; one of "
                          f"{', '.join(every)}")
    return task_named(name)


def suite_summary(model_dir, task: Task, cfg: FinetuneConfig, seeds: list[int], pairs: int = PAIRS) -> dict:
    """One task under its suite's protocol with `cfg.lr` as the grid, in finetune's summary keys: dev is the split
    that chose, test the reported one, mean ± std over pairs x seeds."""
    args = SuiteArgs(suite=task.suites[0], only=[task.name], splits=pairs, seed=seeds[0], seeds=len(seeds),
                     lrs=[cfg.lr])
    r = run_task(model_dir, task, args, cfg, log=lambda m: None)
    m = task.main_metric

    def fraction(value):        # the summary keys hold fractions whatever the task's unit (NER F1: percent)
        return None if value is None else m.percent(value) / 100

    return {"seeds": seeds, "dev_acc": fraction(r[head_kind(task).choose_key]), "dev_acc_std": None,
            "test_acc": fraction(r[m.key]), "test_acc_std": fraction(r[f"{m.key}_std"]), "test_macro_f1": None,
            "test_macro_f1_std": None, "protocol": task.protocol, "pairs": pairs, "metric": m.name}
