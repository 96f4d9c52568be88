"""`zh-bert eval suite MODEL --suite SUITE|all`: a checkpoint on the benchmarks the Chinese community compares
encoders on, each task under its suite's protocol, with the baselines beside every figure. The suites and their
tasks are the registry's (`zh_bert.corpus.task_registry`); what differs by head is asked of the head's kind
(`heads`), and every head trains on the one loop (`loop`).

- A task whose head chooses (classification, multiple choice): per pair k (FewCLUE's five; one set of files for a
  task without pairs), every learning rate of the grid is fine-tuned on the train split; the rate and the epoch are
  chosen on the choosing split (dev_k); the chosen state is scored on the reported split (test_public); mean ± std
  over the pairs and seeds; the suite's score (FewCLUE's, over the eight tasks other than CHID). `--method
  zero-shot|pet` scores with the masked LM on the task's pattern instead of a classifier (`heads.choice`); a multiple
  choice task (CHID) is always scored by the masked LM over its candidates (PET-trained under `finetune`).
- A task whose head does not choose (CMRC 2018's span extraction): fine-tuned for a fixed number of epochs
  (`--span-epochs`) on the official train file (or, when the user has none, on the bundled trial set, said so
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
from zh_bert.evaluation.heads import HEAD_KINDS, head_kind, option_classes
from zh_bert.evaluation.heads.base import data_files, set_options, sha256_of
from zh_bert.evaluation.loop import FinetuneConfig, Seeds, TaskBar, init_label
from zh_bert.evaluation.result import FIGURE_UNIT, Result
from zh_bert.evaluation.step import no_tick
from zh_bert.evaluation.tasks.classification import SUITE_PREFIX, public_records
from zh_bert.train.rundir import model_dir

#: the learning rates tried for every task and pair that chooses, chosen on the choosing split: 2e-5 is the
#: published base-model rate, 2e-3 what a tiny from-scratch model needs; a decade between them
LR_GRID = (2e-5, 2e-4, 2e-3)
SUITE_METHODS = ("finetune", "zero-shot", "pet")
#: the most few-shot pairs a task declares (FewCLUE's five); `--splits` runs the first N
PAIRS = 5


#: how long a classifier trains on a few-shot pair (FewCLUE's 32-160 examples) when `--epochs`/`--patience` are not
#: given: 3 epochs are ~5-15 steps there, too few for any rate of the grid to move a small model off chance
#: (measured on the main command's checkpoint: FewCLUE 32.86 at 3 epochs and cls pooling, against 41.15 at 20
#: epochs, patience 5 and mean pooling; docs/results.md). A full training set keeps finetune's defaults.
FEW_SHOT_EPOCHS, FEW_SHOT_PATIENCE = 20, 5


@dataclass
class SuiteConfig(FinetuneConfig):
    """`eval suite`'s (and `leaderboard verify`'s) fine-tuning: `FinetuneConfig` whose training length defaults to
    the task's: the few-shot one on a task of pairs, finetune's on a full training set (`task_config`)."""
    epochs: Optional[int] = option_of(FinetuneConfig, "epochs", default=None, help=(
        f"passes over the training set (default: {FEW_SHOT_EPOCHS} on a few-shot task's pairs, "
        f"{FinetuneConfig.epochs} on a full training set; early stop on dev may end sooner)"))
    patience: Optional[int] = option_of(FinetuneConfig, "patience", default=None, help=(
        f"early stop after N dev evals without gain (default: {FEW_SHOT_PATIENCE} on a few-shot task's pairs, "
        f"{FinetuneConfig.patience} on a full training set)"))


def task_config(task: Task, cfg: FinetuneConfig) -> FinetuneConfig:
    """`cfg` with the training length the user left open set for `task`: few-shot on pairs, else finetune's."""
    few = task.pairs is not None
    epochs = cfg.epochs if cfg.epochs is not None else (FEW_SHOT_EPOCHS if few else FinetuneConfig.epochs)
    patience = cfg.patience if cfg.patience is not None else (FEW_SHOT_PATIENCE if few else FinetuneConfig.patience)
    return dataclasses.replace(cfg, epochs=epochs, patience=patience)


@dataclass(kw_only=True)
class SuiteArgs(Seeds):
    suite: str = option("fewclue", help=f"the benchmark: {', '.join(suite_names())} (every suite)")
    method: Literal["finetune", "zero-shot", "pet"] = option(
        "finetune", help="finetune (a classifier), zero-shot (the masked LM on the task's pattern, no training) or "
                         "pet (the masked LM fine-tuned on the pattern)")
    only: list[str] = option_of(Shared, "only", help="only these tasks of the suite (repeatable; default: all)")
    splits: int = option(PAIRS, help=f"train_k/dev_k pairs, k = 0.. (FewCLUE reports all {PAIRS})")
    lrs: list[float] = option(default_factory=list, action="append", metavar="LR", help=f"learning rates tried per pair, chosen on dev_k (repeatable; "
                                                     f"default: the grid {', '.join(map(str, LR_GRID))}; "
                                                     f"--lr X alone is a grid of one)")
    baselines: bool = option(False, help="also fine-tune the same architecture from random weights")
    predictions: Optional[str] = option_of(Shared, "predictions", help="write every task's test predictions in its "
                                                                       "official scorer's format (NER: CoNLL lines)")
    report: Optional[str] = option(None, metavar="DIR", help="folder for suite.md, suite.png, suite.json "
                                                             "(default: RUN/suite when MODEL is a run)")

    def __post_init__(self):
        super().__post_init__()
        suites_of(self.suite)
        if self.method not in SUITE_METHODS:
            raise ZhBertError(f"--method must be finetune, zero-shot or pet; got {self.method!r}")
        self.only = only_tasks(self.only, self.suite)
        if not 1 <= self.splits <= PAIRS:
            raise ZhBertError(f"--splits must be in 1..{PAIRS}, got {self.splits}")
        for lr in self.lrs:
            if not 0 < lr < 1:
                raise ZhBertError(f"a learning rate must be in (0, 1), got {lr}")

    @property
    def suites(self) -> tuple[str, ...]:
        return tuple(s.name for s in suites_of(self.suite))

    @property
    def tasks(self) -> list[Task]:
        """The tasks to run, in `--only`'s order (default: the suites' declaration order)."""
        return [task_named(n) for n in self.only]

    @property
    def grid(self) -> tuple[float, ...]:
        return tuple(self.lrs) or LR_GRID


def only_tasks(names: list[str], suite: str) -> list[str]:
    """The tasks `--only` asks for among the suite's (all of them for an empty list), refusing others in one line."""
    every = [t.name for t in tasks_of(suite)]
    for n in names:
        if n not in every:
            raise ZhBertError(f"--only {n}: not a task of --suite {suite}{suggest(n, every)}; one of "
                              f"{', '.join(every)}")
    return list(dict.fromkeys(names)) or every


def head_options(args: SuiteArgs, given: dict | None = None) -> dict:
    """Every head kind's suite options (option class -> value; defaults for those not `given`), refusing an option
    of a kind none of the asked tasks has: it would change nothing."""
    opts = {cls: (given or {}).get(cls) or cls() for cls in option_classes("suite")}
    kinds = {head_kind(t) for t in args.tasks}
    for kind in HEAD_KINDS.values():
        if kind in kinds:
            continue
        for cls in kind.suite_options:
            shared = any(cls in k.suite_options for k in kinds)
            flags = [] if shared else set_options(opts[cls])
            if flags:
                raise ZhBertError(f"{flags[0]}: no {kind.name} task among {', '.join(args.only)}; an option of the "
                                  f"{kind.name} head ({kind.what})")
    return opts


# --------------------------------------------------------------------------- the choosing protocol

def _grid(task: Task, args: SuiteArgs, cfg: FinetuneConfig) -> tuple[float, ...]:
    return (cfg.lr,) if head_kind(task).method(args.method) == "zero-shot" else args.grid


def _pairs_of(task: Task, args: SuiteArgs) -> list[int | None]:
    """The pairs a task runs on: `--splits` of its few-shot pairs (zero-shot: the first only), or its one set."""
    if task.pairs is None:
        return [None]
    return list(range(1 if head_kind(task).method(args.method) == "zero-shot" else min(args.splits, task.pairs.count)))


def run_pair(ckpt, task: Task, k: int | None, args: SuiteArgs, cfg: FinetuneConfig, opts: dict | None = None,
             log=print, tick=no_tick) -> tuple[Result, float]:
    """Pair k of `task`: every rate of the grid trained on train_k; the one with the best choosing figure (dev_k
    accuracy, the kind's `choose_key`; mean over seeds) is kept, whatever its reported figure: (its result, the
    rate). `tick` counts the runs (rates x seeds)."""
    kind, opts = head_kind(task), opts or head_options(args)
    method, key = kind.method(args.method), kind.choose_key
    best, chosen = None, None
    for lr in _grid(task, args, cfg):
        where = f"pair {k} " if k is not None else ""
        res = kind.setting(ckpt, task, k, method, dataclasses.replace(cfg, lr=lr), args.seed_list(),
                           lambda m, lr=lr: log(f"  {task.name} {where}lr {lr:g}: {m}"), opts)
        tick(len(args.seed_list()))
        if best is None or res.mean(key) > best.mean(key):
            best, chosen = res, lr
    return best, chosen


def run_task(ckpt, task: Task, args: SuiteArgs, cfg: FinetuneConfig, opts: dict | None = None, log=print) -> dict:
    """One choosing task over its pairs (zero-shot trains nothing: one pass, pair 0's dev beside it): each pair's
    chosen runs (pair x seed rows), their reported figure (the task's main metric) and choosing one as mean ± std."""
    kind, opts = head_kind(task), opts or head_options(args)
    pairs = _pairs_of(task, args)
    test_key = task.main_metric.key
    rows, per_pair, method, facts = [], [], args.method, {}
    runs = len(pairs) * len(_grid(task, args, cfg)) * args.seeds
    with TaskBar(f"{task.name} ({init_label(cfg)})", runs, "run", log) as bar:
        for k in pairs:
            r, lr = run_pair(ckpt, task, k, args, cfg, opts, bar.log, bar.tick)
            bar.note(("" if k is None else f"pair {k} ") + f"dev {r.mean(kind.choose_key):.3f}")
            rows += [{"pair": k, "lr": lr, **row} for row in r.runs]
            method, facts = r.facts.get("method", kind.method(args.method)), kind.suite_facts(r)
            per_pair.append({"pair": k, "lr": lr, test_key: r.mean(test_key), kind.choose_key: r.mean(kind.choose_key),
                             "test_predictions": r.predictions})
    chance, chance_name = kind.chance(task)
    res = Result(task.name, cfg.random_init, args.seed_list(), rows, figures=(test_key, kind.choose_key), facts={
        "method": method, "runs": len(rows), "pairs": len(pairs), "majority_test_acc": chance, "chance": chance_name,
        "per_pair": per_pair, "data_sha256": sha256_of(data_files(task, len(pairs))), **facts})
    return res.summary()


def check_suite_data(args: SuiteArgs, opts: dict | None = None) -> dict:
    """Every file the suite will read, read and checked in one pass before any model is loaded: each pair's splits
    in the form its method reads them (fields, label words, roles kept apart), every reported record's id and
    official label (what the prediction files write after all training), and the files of a task that does not
    choose, returned as {task: data} for `run_suite`."""
    opts = opts or head_options(args)
    data = {}
    for task in args.tasks:
        kind = head_kind(task)
        if not kind.chooses:
            data[task.name] = kind.data(task, opts)
            continue
        for k in _pairs_of(task, args):
            kind.check(task, kind.method(args.method), k, opts)
        public_records(task)
    return data


# --------------------------------------------------------------------------- the suite

def _suite_score(res: dict) -> float | None:
    """The score of the asked suite that has one (FewCLUE's), in percent, when all its tasks ran; None otherwise."""
    accs = {n: 100 * r[task_named(n).main_metric.key] for n, r in res.items() if task_named(n).main_metric.key in r}
    for suite in suites():
        names = [t.name for t in scored(suite)]
        if suite.score and names and set(names) <= set(accs):
            return sum(accs[n] for n in names) / len(names)
    return None


def pooling_notes(ckpt, args: SuiteArgs, cfg: FinetuneConfig) -> list[str]:
    """How each fine-tuned head kind of the run pools this checkpoint (a run's first lines)."""
    kinds = dict.fromkeys(head_kind(t) for t in args.tasks if head_kind(t).method(args.method) == "finetune")
    return [n for n in (k.pooling_note(model_dir(ckpt), cfg) for k in kinds) if n]


def run_suite(ckpt, args: SuiteArgs, cfg: FinetuneConfig, opts: dict | None = None, log=print,
              data: dict | None = None) -> dict:
    """Every asked task, pretrained and (with --baselines) from random weights; `opts`: the head kinds' options
    (`head_options`); `data`: what `check_suite_data` returned, when the caller checked the files before resolving
    the model."""
    opts = head_options(args, opts)
    data = check_suite_data(args, opts) if data is None else data     # a bad file is one line before any training
    t0 = time.perf_counter()
    out = {"suites": list(args.suites), "protocols": {s.name: s.protocol for s in suites_of(args.suite)},
           "method": args.method, "reported_split": {s.name: tasks_of(s)[0].report_name for s in suites()
                                                     if tasks_of(s)},
           "checkpoint": str(ckpt), "zh_bert_version": version("zh-bert"), "figures": FIGURE_UNIT,
           "grid": list(args.grid), "config": dataclasses.asdict(cfg),
           "options": {cls.__name__: dataclasses.asdict(o) for cls, o in opts.items()}, "pretrained": {},
           "random_init": {}}
    inits = [("pretrained", cfg)] + ([("random_init", dataclasses.replace(cfg, random_init=True))]
                                     if args.baselines else [])
    out["wall_s_by_init"] = {}
    for key, c_init in inits:
        t_init = time.perf_counter()
        for task in args.tasks:
            kind, c = head_kind(task), task_config(task, c_init)
            if not kind.chooses:
                log(f"{task.name} ({init_label(c)}): {args.seeds} seed(s)")
                res = kind.fixed(ckpt, task, c, opts, data[task.name], args.seed_list(), log)
                out[key][task.name] = {**res.summary(), "predictions": res.predictions}
                continue
            log(f"{task.name} ({init_label(c)}, {kind.method(args.method)}): {len(_pairs_of(task, args))} pairs x "
                f"{args.seeds} seed(s) x {len(_grid(task, args, c))} learning rate(s)")
            out[key][task.name] = run_task(ckpt, task, args, c, opts, log)
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
    """One task under its suite's protocol with `cfg.lr` as the grid, in finetune's summary keys (fractions): dev
    is the split that chose, test the reported one, mean ± std over pairs x seeds."""
    args = SuiteArgs(suite=task.suites[0], only=[task.name], splits=pairs, seed=seeds[0], seeds=len(seeds),
                     lrs=[cfg.lr])
    r = run_task(model_dir, task, args, cfg, log=lambda m: None)
    m = task.main_metric
    return {"seeds": seeds, "dev_acc": r[head_kind(task).choose_key], "dev_acc_std": None,
            "test_acc": r[m.key], "test_acc_std": r.get(f"{m.key}_std"), "test_macro_f1": None,
            "test_macro_f1_std": None, "protocol": task.protocol, "pairs": pairs, "metric": m.name}
