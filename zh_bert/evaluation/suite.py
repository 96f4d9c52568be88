"""`zh-bert eval suite MODEL --suite fewclue|cmrc2018|all`: a checkpoint on the benchmarks the Chinese community
compares encoders on, each under its own protocol, with the baselines beside every figure.

- `fewclue`: per task and pair k, every learning rate of the task's grid is fine-tuned on train_k; the rate
  and the epoch are chosen on dev_k; the chosen state is scored on test_public; mean ± std over the pairs and
  seeds; the FewCLUE score over the eight tasks other than CHID. `--method zero-shot|pet` scores with the
  masked LM on a pattern instead of a classifier (`prompts`). CHID, multiple choice, is always scored by the
  masked LM over its seven idioms (PET-trained under `finetune`) and reported apart, as FewCLUE does.
- `cmrc2018`: span extraction fine-tuned for a fixed number of epochs (`--cmrc-epochs`) on the official train file (or, when the
  user has none, on the bundled trial set, said so everywhere) and scored on dev, which is the reported split:
  nothing is chosen on it.

The majority rate of each test set is printed beside every score, and with `--baselines` the same architecture
fine-tuned from random weights under the same protocol.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Literal, Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.evaluation.cmrc import load_squad
from zh_bert.evaluation.fewclue import (MULTIPLE_CHOICE, PAIRS, SCORE_TASKS, TEST, check_task_names,
                                        fewclue_score, load_fewclue, public_records, task_files)
from zh_bert.evaluation.finetune import FinetuneConfig, FinetuneJob, mean_std, run
from zh_bert.evaluation.prompts import prompt_data, run_prompt_task
from zh_bert.evaluation.qa import QAConfig, run_cmrc
from zh_bert.evaluation.splits import refuse_shared_spans
from zh_bert.evaluation.step import no_tick
from zh_bert.evaluation.tasks import task_data_dir

#: recorded with every figure: what "fine-tune on train_k, choose the rate and epoch on dev_k" means here
PROTOCOLS = {"fewclue": "fewclue-v2", "cmrc2018": "cmrc2018-v1"}
SUITES = ("fewclue", "cmrc2018")
#: the learning rates tried for every FewCLUE task and pair, chosen on dev_k: 2e-5 is the published
#: base-model rate, 2e-3 what a tiny from-scratch model needs; a decade between them
LR_GRID = (2e-5, 2e-4, 2e-3)
CMRC_TRAIN_NAMES = ("cmrc2018_train.json", "train.json")


@dataclass
class SuiteArgs:
    suite: Literal["fewclue", "cmrc2018", "all"] = option("fewclue", help="the benchmark: fewclue (its nine tasks), "
                                                                          "cmrc2018 (span extraction), all")
    method: Literal["finetune", "zero-shot", "pet"] = option(
        "finetune", help="FewCLUE: finetune (a classifier), zero-shot (the masked LM on a pattern, no training) "
                         "or pet (the masked LM fine-tuned on the pattern)")
    only: list[str] = option_of(Shared, "only", help="only these FewCLUE tasks (repeatable; default: all nine)")
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
    predictions: Optional[str] = option(None, metavar="DIR", help="write every task's test predictions in its "
                                                                  "official scorer's format")
    report: Optional[str] = option(None, metavar="DIR", help="folder for suite.md, suite.png, suite.json "
                                                             "(default: RUN/suite when MODEL is a run)")

    def __post_init__(self):
        if self.suite not in (*SUITES, "all"):
            raise ZhBertError(f"--suite must be one of {', '.join(SUITES)}, all; got {self.suite!r}")
        if self.method not in ("finetune", "zero-shot", "pet"):
            raise ZhBertError(f"--method must be finetune, zero-shot or pet; got {self.method!r}")
        self.only = check_task_names(self.only)
        FinetuneJob(task="fewclue", seed=self.seed, seeds=self.seeds)   # the same seed checks as finetune
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
            cmrc_train_file(self.cmrc_train)

    @property
    def suites(self) -> tuple[str, ...]:
        return SUITES if self.suite == "all" else (self.suite,)

    @property
    def grid(self) -> tuple[float, ...]:
        return tuple(self.lrs) or LR_GRID

    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


def cmrc_train_file(path: str) -> Path:
    """The official train file the user gave: the file, or the one named like it inside a folder."""
    p = Path(path)
    if p.is_dir():
        found = [p / n for n in CMRC_TRAIN_NAMES if (p / n).is_file()]
        if not found:
            raise ZhBertError(f"--cmrc-train {p}: no {' or '.join(CMRC_TRAIN_NAMES)} in this folder")
        return found[0]
    if not p.is_file():
        raise ZhBertError(f"--cmrc-train {p}: no such file or folder")
    return p


def sha256_of(paths: list[Path]) -> str:
    """One digest over the data files a figure was computed from (names and bytes, in order)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- FewCLUE

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


def _label(cfg: FinetuneConfig) -> str:
    return "random init" if cfg.random_init else "pretrained"


def _method_for(name: str, method: str) -> str:
    """CHID has no classifier form: under `finetune` its masked LM is trained over the candidates (PET)."""
    return "pet" if name in MULTIPLE_CHOICE and method == "finetune" else method


def _one_setting(ckpt, name: str, k: int, method: str, cfg: FinetuneConfig, seeds: list[int], log) -> dict:
    if method == "finetune":
        summary = run(ckpt, load_fewclue(name, k), cfg, seeds, log=log)
        summary["test_predictions"] = summary["per_seed"][0].get("test_pred")
        return summary
    return run_prompt_task(ckpt, name, k, method, cfg, seeds, log=log)


def _grid(name: str, args: SuiteArgs, cfg: FinetuneConfig) -> tuple[float, ...]:
    return (cfg.lr,) if _method_for(name, args.method) == "zero-shot" else args.grid


def run_pair(ckpt, name: str, k: int, args: SuiteArgs, cfg: FinetuneConfig, log=print, tick=no_tick) -> dict:
    """Pair k of task `name`: every rate of the grid trained on train_k; the one with the best dev_k accuracy
    (mean over seeds) is kept, whatever its test_public figure. `tick` counts the runs (rates x seeds)."""
    method = _method_for(name, args.method)
    best, chosen = None, None
    for lr in _grid(name, args, cfg):
        summary = _one_setting(ckpt, name, k, method, dataclasses.replace(cfg, lr=lr), args.seed_list(),
                               lambda m, lr=lr: log(f"  {name} pair {k} lr {lr:g}: {m}"))
        tick(len(args.seed_list()))
        if best is None or summary["dev_acc"] > best["dev_acc"]:
            best, chosen = summary, lr
    return {**best, "lr": chosen, "method": method}


def run_task(ckpt, name: str, args: SuiteArgs, cfg: FinetuneConfig, log=print) -> dict:
    """One task over its pairs (zero-shot trains nothing: one pass, pair 0's dev beside it)."""
    pairs = 1 if _method_for(name, args.method) == "zero-shot" else args.splits
    tests, devs, per_pair = [], [], []
    runs = pairs * len(_grid(name, args, cfg)) * args.seeds
    with TaskBar(f"{name} ({_label(cfg)})", runs, "run", log) as bar:
        for k in range(pairs):
            r = run_pair(ckpt, name, k, args, cfg, bar.log, bar.tick)
            bar.note(f"pair {k} dev {r['dev_acc']:.3f}")
            tests += [s["test_acc"] for s in r["per_seed"]]
            devs += [s["dev_acc"] for s in r["per_seed"]]
            per_pair.append({"pair": k, "lr": r["lr"], "test_acc": r["test_acc"], "dev_acc": r["dev_acc"],
                             "test_predictions": r.get("test_predictions")})
    test = load_fewclue(name, 0).test if name not in MULTIPLE_CHOICE else None
    gold = [e.label for e in test] if test else None
    test_mean, test_std = mean_std(tests)
    return {"task": name, "method": r["method"], "test_acc": test_mean, "test_acc_std": test_std,
            "dev_acc": mean_std(devs)[0], "runs": len(tests), "pairs": pairs, "seeds": args.seed_list(),
            "majority_test_acc": (max(gold.count(g) for g in set(gold)) / len(gold)) if gold else 1 / 7,
            "chance": "majority" if gold else "1 in 7", "per_pair": per_pair,
            "data_sha256": sha256_of(task_files(name, pairs))}


# --------------------------------------------------------------------------- CMRC 2018

def cmrc_data(args: SuiteArgs) -> dict:
    """The CMRC 2018 files the suite trains and scores on, read (and checked) once, before any training: the
    train file (or trial) shares no question id and no context with dev, the split it is reported on."""
    root = task_data_dir("cmrc2018")
    train_path = cmrc_train_file(args.cmrc_train) if args.cmrc_train else root / "cmrc2018_trial.json"
    dev_path = root / "cmrc2018_dev.json"
    train, dev = load_squad(train_path), load_squad(dev_path)
    refuse_shared_spans(train, f"--cmrc-train {train_path}" if args.cmrc_train else f"the trial file {train_path}",
                        dev, str(dev_path))
    return {"train": train, "dev": dev, "train_file": train_path.name,
            "trained_on": "train" if args.cmrc_train else "trial", "data_sha256": sha256_of([train_path, dev_path])}


def check_fewclue(args: SuiteArgs) -> None:
    """Every FewCLUE file the suite will read, read and checked before any model is loaded: each pair's
    splits in the form its method reads them (fields, label words, roles kept apart) and every test_public
    record's id and official label (what the prediction files write after all training)."""
    for name in args.only:
        method = _method_for(name, args.method)
        read = load_fewclue if method == "finetune" else prompt_data
        for k in range(1 if method == "zero-shot" else args.splits):
            read(name, k)
        public_records(name)


def check_suite_data(args: SuiteArgs) -> dict:
    """What `run_suite` reads, checked in one pass before any model is loaded: {"cmrc2018": cmrc_data} when
    CMRC 2018 is asked for."""
    if "fewclue" in args.suites:
        check_fewclue(args)
    return {"cmrc2018": cmrc_data(args)} if "cmrc2018" in args.suites else {}


def run_cmrc_suite(ckpt, args: SuiteArgs, cfg: FinetuneConfig, qa: QAConfig, data: dict, log=print) -> dict:
    """Fixed epochs on train (or trial), scored on dev; what it trained on is part of the result."""
    if data["trained_on"] == "trial":
        log(f"cmrc2018: no official train file given (--cmrc-train): training on the trial set "
            f"({len(data['train'])} questions, not the 10k of train); dev figures are not comparable with "
            f"published ones")
    with TaskBar(f"cmrc2018 ({_label(cfg)})", 0, "batch", log) as bar:   # training steps + prediction batches
        res = run_cmrc(ckpt, data["train"], data["dev"], dataclasses.replace(
            cfg, lr=args.cmrc_lr, seq_len=args.cmrc_seq_len, epochs=args.cmrc_epochs), qa, args.seed_list(),
            log=lambda m: bar.log(f"  cmrc2018: {m}"), tick=bar.tick)
    return {**res, **{k: data[k] for k in ("trained_on", "train_file", "data_sha256")}, "reported_split": "dev",
            "seeds": args.seed_list(), "lr": args.cmrc_lr, "seq_len": args.cmrc_seq_len, "epochs": args.cmrc_epochs}


# --------------------------------------------------------------------------- the suite

def run_suite(ckpt, args: SuiteArgs, cfg: FinetuneConfig, qa: QAConfig | None = None, log=print,
              data: dict | None = None) -> dict:
    """Every asked suite, pretrained and (with --baselines) from random weights; `data`: what
    `check_suite_data` returned, when the caller checked the files before resolving the model."""
    qa = qa or QAConfig()
    data = check_suite_data(args) if data is None else data     # a bad file is one line before any training
    t0 = time.perf_counter()
    out = {"suites": list(args.suites), "protocols": {s: PROTOCOLS[s] for s in args.suites},
           "method": args.method, "reported_split": {"fewclue": TEST, "cmrc2018": "dev"}, "checkpoint": str(ckpt),
           "zh_bert_version": version("zh-bert"), "grid": list(args.grid), "config": dataclasses.asdict(cfg),
           "qa_config": dataclasses.asdict(qa), "pretrained": {}, "random_init": {}}
    inits = [("pretrained", cfg)] + ([("random_init", dataclasses.replace(cfg, random_init=True))]
                                     if args.baselines else [])
    cmrc = data.get("cmrc2018")
    out["wall_s_by_init"] = {}
    for key, c in inits:
        t_init = time.perf_counter()
        label = _label(c)
        if "fewclue" in args.suites:
            for name in args.only:
                log(f"{name} ({label}, {_method_for(name, args.method)}): {args.splits} pairs x {args.seeds} "
                    f"seed(s) x {len(args.grid)} learning rate(s)")
                out[key][name] = run_task(ckpt, name, args, c, log)
        if "cmrc2018" in args.suites:
            log(f"cmrc2018 ({label}): {args.seeds} seed(s), {args.cmrc_epochs} epoch(s)")
            out[key]["cmrc2018"] = run_cmrc_suite(ckpt, args, c, qa, cmrc, log)
        out["wall_s_by_init"][key] = round(time.perf_counter() - t_init, 1)
    for key in ("pretrained", "random_init"):
        accs = {n: r["test_acc"] * 100 for n, r in out[key].items() if n != "cmrc2018"}
        out[f"{key}_score"] = fewclue_score(accs) if set(SCORE_TASKS) <= set(accs) else None
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


# --------------------------------------------------------------------------- ablate's downstream columns

#: `zh-bert ablate`'s `finetune: suite:TASK` — a FewCLUE task under the suite's protocol as a downstream column
SUITE_PREFIX = "suite:"


def suite_task_of(task: str) -> str | None:
    """The FewCLUE task a `suite:TASK` entry names (checked, one line if unknown); None for other tasks."""
    if not task.startswith(SUITE_PREFIX):
        return None
    return check_task_names([task[len(SUITE_PREFIX):]])[0]


def suite_summary(model_dir, name: str, cfg: FinetuneConfig, seeds: list[int], pairs: int = PAIRS) -> dict:
    """One FewCLUE task under protocol fewclue-v2 with `cfg.lr` as the grid, in finetune's summary keys: dev
    is the dev_k that chose, test is test_public, mean ± std over pairs x seeds."""
    args = SuiteArgs(only=[name], splits=pairs, seed=seeds[0], seeds=len(seeds), lrs=[cfg.lr])
    r = run_task(model_dir, name, args, cfg, log=lambda m: None)
    return {"seeds": seeds, "dev_acc": r["dev_acc"], "dev_acc_std": None, "test_acc": r["test_acc"],
            "test_acc_std": r["test_acc_std"], "test_macro_f1": None, "test_macro_f1_std": None,
            "protocol": PROTOCOLS["fewclue"], "pairs": pairs}
