"""`zh-bert ablate recipes/ablations/NAME.yaml`: pretraining runs that differ in ONE setting, same evals.

Each run is `zh-bert pretrain BASE --set <shared overrides> --set <the varied key>=<value>`, so every run
sees the same token budget (same steps × global batch × seq_len). Every run is then scored the same way:

- held-out masked-LM accuracy on text carved off the training corpus before any run sees it (the last
  `heldout_docs` documents of each corpus file), masked once from a fixed seed with a fixed strategy, so
  all runs are scored on the same blanks (comparable unless the vocabulary itself differs);
- the run's own validation MLM accuracy (from run.json: its own masking, its own shard's held-out docs);
- downstream accuracy: `zh-bert finetune` on each task of `finetune` (default ChnSentiCorp; a list, e.g.
  `[chnsenticorp, tnews]`, fine-tunes on each), mean ± std over seeds, with the `finetune_*` settings of the spec.

Outputs in `out_dir`: `results.md` (table + the exact command + caveats), `results.png`, `results.json`,
and one run dir per setting under `runs/`. A re-run reuses finished runs, and their evals as long as the
eval settings are unchanged: the held-out eval's (`eval_settings`) and, per task, the whole fine-tuning spec
(`task_settings`), so adding a task to `finetune` runs only that task.
The pseudo-key `corpus_fraction` trains on the first fraction of every corpus file's training documents.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Literal, Optional


from zh_bert.config import build_parser as derive_parser, config_from_args, from_dict, load_yaml, option, parse_set
from zh_bert.corpus_io import iter_lines, read_documents
from zh_bert.errors import ZhBertError, unknown_key_error
from zh_bert.eval_results import entry, record
from zh_bert.evaluate import MlmEvalConfig, eval_mlm, load_mlm
from zh_bert.fileio import atomic_write, read_text, write_json
from zh_bert.finetune import FinetuneConfig, check_trainable, eval_entries, run as run_finetune
from zh_bert.masking import STRATEGIES, MaskingConfig
from zh_bert.pipeline import data_inputs, is_sharddir
from zh_bert.recipe import check_seed, load_recipe
from zh_bert.rundir import FINAL, is_model_dir
from zh_bert.tasks import load_task

FLAT = "finetune_"                                  # spec files spell the fine-tuning settings finetune_<key>
SPEC_FINETUNE = {"lr": 2e-3, "pooling": "mean"}     # tiny models need large lrs; MLM-only checkpoints, mean pooling
CONFIG_KEYS = tuple(f.name for f in fields(FinetuneConfig) if f.name != "random_init")  # the baseline's job


@dataclass
class FinetuneSpec:
    """How every run is fine-tuned downstream. Per task, its whole value is the cache key of a run's results,
    so changing any part of it (the precision too) re-runs them. Spec files write `finetune: TASK` (or a list of
    tasks) and `finetune_<key>: value` for `seeds` and every FinetuneConfig setting (finetune_lr, ...)."""
    tasks: list[str] = field(default_factory=lambda: ["chnsenticorp"])   # `zh-bert finetune --task` values; [] = none
    seeds: int = 3                             # seeds 1..N; the table shows mean ± sample std
    config: FinetuneConfig = field(default_factory=lambda: FinetuneConfig(**SPEC_FINETUNE))

    def __post_init__(self):
        if self.seeds < 1:
            raise ZhBertError(f"'finetune_seeds' must be >= 1, got {self.seeds}")
        check_seed("'finetune_seeds'", 1, self.seeds)   # seeds 1..N
        twice = sorted({t for t in self.tasks if self.tasks.count(t) > 1})
        if twice:
            raise ZhBertError(f"'finetune' names {', '.join(twice)} twice")

    def seed_list(self) -> list[int]:
        return list(range(1, self.seeds + 1))

    @property
    def task(self) -> Optional[str]:
        """The first task: the one the plots and the flat `dev_acc`/`test_acc` keys of a row are about."""
        return self.tasks[0] if self.tasks else None


def _task_list(value) -> list[str]:
    """`finetune:` as written: null, one task, a list, or `--set finetune=chnsenticorp,tnews`. A `tsv:` spec
    keeps its commas (TRAIN,DEV[,TEST]); several tsv tasks are written as a YAML list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.startswith("tsv:") else [v.strip() for v in value.split(",") if v.strip()]
    tasks = list(value) if isinstance(value, (list, tuple)) else [value]
    bad = [t for t in tasks if not isinstance(t, str)]
    if bad:
        raise ZhBertError(f"'finetune' must be a task name (chnsenticorp, tnews, tsv:TRAIN,DEV[,TEST]), a list of "
                          f"them or null, got {bad[0]!r}")
    return tasks


@dataclass
class AblationSpec:
    name: str                                   # short name, used in titles
    grid: dict[str, Any]                        # exactly one key -> list of values (scalars, or {label, set})
    question: str = ""                          # what the grid answers (printed in results.md)
    base: str = "../tiny-cpu.yaml"              # base recipe, relative to this file
    out_dir: Optional[str] = None               # default runs/ablations/NAME
    set: dict[str, Any] = field(default_factory=dict)   # overrides shared by every run (the budget)
    heldout_docs: int = 100                     # last N documents of each corpus file: held out for eval mlm
    eval_masking: Literal["token", "wwm", "ngram", "unigram-noise"] = "token"  # the held-out MLM eval's masking
    eval_seed: int = 0
    eval_max_seqs: int = 200                    # packed held-out sequences scored (0 = all)
    finetune: FinetuneSpec = field(default_factory=FinetuneSpec)
    random_init_baseline: bool = True           # also fine-tune the same architecture from random weights
    budget: Literal["tokens", "flops"] = "tokens"  # tokens: every run trains `set`'s max_steps; flops: each run's
                                                # max_steps is scaled so that steps × training FLOPs per token
                                                # (zh-bert plan's count) equal the first grid value's

    def __post_init__(self):
        if not isinstance(self.grid, dict) or len(self.grid) != 1:
            raise ZhBertError(f"'grid' must have exactly one key (the setting that varies), "
                              f"got {list(self.grid) if isinstance(self.grid, dict) else self.grid!r}")
        key, values = next(iter(self.grid.items()))
        if not isinstance(values, list) or len(values) < 2:
            raise ZhBertError(f"grid.{key} must be a list of at least two values")
        for name in ("heldout_docs", "eval_max_seqs"):
            if getattr(self, name) < 0:
                raise ZhBertError(f"'{name}' must be >= 0, got {getattr(self, name)}")
        check_seed("'eval_seed'", self.eval_seed)
        if self.budget not in ("tokens", "flops"):
            raise ZhBertError(f"'budget' must be tokens or flops, got {self.budget!r}")
        if self.eval_masking not in STRATEGIES:
            raise ZhBertError(f"'eval_masking' must be one of {', '.join(STRATEGIES)}, got {self.eval_masking!r}")
        plan_runs(self)   # every grid value makes a run: refused now, not after the first pretraining


@dataclass
class Run:
    label: str                 # "masking=wwm"
    value: Any                 # shown in the table
    overrides: dict[str, Any]
    fraction: float = 1.0      # corpus_fraction


REQUIRED = ("name", "grid")


def spec_keys() -> list[str]:
    """Every key a spec file (or `ablate --set`) may use."""
    return [f.name for f in fields(AblationSpec)] + [FLAT + k for k in ("seeds",) + CONFIG_KEYS]


def _finetune_spec(data: dict, where: str) -> FinetuneSpec:
    """`finetune: TASK` + the flat `finetune_<key>` entries of `data` (removed from it) -> FinetuneSpec."""
    given = {k[len(FLAT):]: data.pop(k) for k in [k for k in data if k.startswith(FLAT)]}
    top = {}
    if "seeds" in given:
        top["seeds"] = given.pop("seeds")
    try:
        if "finetune" in data:
            top["tasks"] = _task_list(data.pop("finetune"))
        config = from_dict(FinetuneConfig, {**SPEC_FINETUNE, **given}, where)
        return from_dict(FinetuneSpec, {**top, "config": config}, where)
    except ZhBertError as e:   # FinetuneConfig names 'lr' / --lr; the spec file says finetune_lr
        msg = str(e)
        for k in given:
            msg = msg.replace(f"'{k}'", f"'{FLAT}{k}'").replace(f"--{k.replace('_', '-')} ", f"{FLAT}{k} ")
        raise ZhBertError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def load_spec(path: str | Path, overrides: dict | None = None) -> AblationSpec:
    """The spec file with `overrides` (spec keys given to `--set`), validated whole before any run."""
    where = str(path)
    data = {str(k): v for k, v in {**load_yaml(path), **(overrides or {})}.items()}
    valid = spec_keys()
    for key in data:
        if key not in valid:
            raise unknown_key_error(key, valid, where)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ZhBertError(f"{where}: {'empty spec' if not data else 'missing'} "
                          f"({', '.join(missing)} required): a spec needs a name and a grid of one setting's "
                          f"values, e.g. grid: {{masking: [token, wwm]}}")
    data["finetune"] = _finetune_spec(data, where)
    try:
        return from_dict(AblationSpec, data, where)
    except ZhBertError as e:
        raise ZhBertError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "-", s).strip("-")


def plan_runs(spec: AblationSpec) -> list[Run]:
    key, values = next(iter(spec.grid.items()))
    runs = []
    for v in values:
        if isinstance(v, dict):   # {label: "...", set: {...}}: a setting that needs several keys
            if "label" not in v or not isinstance(v.get("set"), dict):
                raise ZhBertError(f"grid.{key}: a mapping entry needs 'label' and 'set', got {v}")
            runs.append(Run(f"{key}={v['label']}", v["label"], dict(v["set"])))
        elif key == "corpus_fraction":
            f = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
            if f is None or not 0 < f <= 1:   # nan fails `0 < f` too
                raise ZhBertError(f"grid.corpus_fraction: {v!r} is not in (0, 1] (a number: the fraction of "
                                  f"the corpus)")
            runs.append(Run(f"corpus={int(round(f * 100))}%", f"{f:.0%}", {}, fraction=float(f)))
        else:
            runs.append(Run(f"{key}={v}", v, {key: v}))
    seen: dict[str, str] = {}
    for r in runs:   # each label names a run dir: two runs in one dir would overwrite each other
        other = seen.get(_slug(r.label))
        if other is not None:
            twice = f"{r.label!r} appears twice" if other == r.label else f"{r.label!r} and {other!r} name the same run"
            raise ZhBertError(f"grid.{key}: {twice} (runs/{_slug(r.label)}); every grid value needs its own label")
        seen[_slug(r.label)] = r.label
    return runs


# --------------------------------------------------------------------------- data: carve held-out docs

def _docs(path: Path, doc_sep: str) -> list[str]:
    if path.name.endswith(".gz"):   # a part of a `zh-bert clean --executor` OUTDIR: one document per line
        return [line for _, line in iter_lines(path)]
    text = read_text(path)
    if doc_sep == "blank":
        return [d.strip("\n") for d in re.split(r"\n\s*\n", text) if d.strip()]
    return [l for l in text.split("\n") if l.strip()]


def split_corpus(files: list[Path], heldout_docs: int, doc_sep: str) -> list[tuple[list[str], list[str]]]:
    """(training docs, held-out docs) per corpus file; reads only, so a dry run can check the corpus."""
    out = []
    for path in files:
        docs = _docs(path, doc_sep)
        if len(docs) <= 2 * heldout_docs:
            raise ZhBertError(f"{path}: {len(docs)} documents is too few to hold out {heldout_docs}")
        out.append((docs[:-heldout_docs], docs[-heldout_docs:]) if heldout_docs else (docs, []))
    return out


def _carve_key(files: list[Path], heldout_docs: int, doc_sep: str) -> dict:
    return {"files": [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files],
            "heldout_docs": heldout_docs, "doc_sep": doc_sep}


def check_carved(files: list[Path], corpus: Path, heldout_docs: int, doc_sep: str) -> None:
    """A `corpus` folder carved from other files or another heldout_docs is refused, never reused: its runs
    trained on other documents and its held-out text is another set."""
    path = corpus / "carve.json"
    if not path.is_file():
        return
    try:
        old = json.loads(read_text(path))
    except ValueError:
        old = None
    if old != json.loads(json.dumps(_carve_key(files, heldout_docs, doc_sep))):
        raise ZhBertError(f"{corpus} was carved from other corpus files or another heldout_docs; delete "
                          f"{corpus.parent} or use --out-dir")


def check_corpus_size(recipe, files: list[Path], heldout_docs: int, fraction: float) -> None:
    """Masking correction needs MIN_TRAIN_TOKENS train tokens in its shards; a raw corpus has no token count
    before it is sharded, so a dry run refuses what cannot reach it even at one token per byte of text (with
    room for every special token): an upper bound, never a false refusal. `prepare_correction_data`
    makes the exact check before any run trains."""
    from zh_bert.similar_words import MIN_TRAIN_TOKENS

    if recipe.masking.strategy != "correction":
        return
    docs = [d for keep, _ in split_corpus(files, heldout_docs, recipe.doc_sep)
            for d in keep[:max(1, int(len(keep) * fraction))]]
    upper = 2 * (sum(len(d.encode("utf-8")) for d in docs) + len(docs)) + 2
    if upper < MIN_TRAIN_TOKENS:
        raise ZhBertError(f"masking correction learns its similar words from the shards' train split, and this "
                          f"run's {len(docs)} training documents give at most {upper:,} tokens (needs at least "
                          f"{MIN_TRAIN_TOKENS:,}); use more text or another masking (wwm)")


def prepare_correction_data(p: "Plan", data_by_fraction: dict, log=print) -> None:
    """The exact check of `check_corpus_size`, before the first run trains: every correction run's data is
    prepared (the cache its run then reuses) and its train split counted."""
    from zh_bert.data import read_meta
    from zh_bert.pipeline import prepare_data
    from zh_bert.similar_words import check_possible

    for r in p.runs:
        recipe = run_recipe(p.spec, r, p.base_data, p.out, data_by_fraction.get(r.fraction), p.cli_set)
        if recipe.masking.strategy != "correction":
            continue
        try:
            prepared = prepare_data(recipe, log=lambda m, label=r.label: log(f"[{label}] {m}"))
            check_possible(read_meta(prepared.sharddir), prepared.sharddir)
        except ZhBertError as e:
            raise ZhBertError(f"{p.spec_path}: run {r.label}: {e}") from None


def carved_paths(files: list[Path], out: Path, fractions: set[float]) -> dict[float, list[str]]:
    """Where `carve_corpus` puts each fraction's training copies: known before (and without) carving."""
    return {f: [str(out / f"train-{int(round(f * 100))}" / f"{i:02d}-{path.name.removesuffix('.gz')}")
                for i, path in enumerate(files)] for f in fractions}   # copies are written uncompressed


def carve_corpus(files: list[Path], out: Path, heldout_docs: int, fractions: set[float],
                 doc_sep: str) -> tuple[dict, Path]:
    """Training copies of the corpus without the held-out docs (per fraction) + one held-out text file."""
    sep = "\n\n" if doc_sep == "blank" else "\n"
    check_carved(files, out, heldout_docs, doc_sep)
    heldout, train = [], carved_paths(files, out, fractions)
    for i, (keep, held) in enumerate(split_corpus(files, heldout_docs, doc_sep)):
        heldout += [d.replace("\n", " ") for d in held]
        for f in fractions:
            dst = Path(train[f][i])
            if not dst.is_file():
                with atomic_write(dst) as fh:
                    fh.write(sep.join(keep[:max(1, int(len(keep) * f))]) + "\n")
    held_path = out / "heldout.txt"
    if heldout and not held_path.is_file():
        with atomic_write(held_path) as fh:
            fh.write("\n".join(heldout) + "\n")
    write_json(out / "carve.json", _carve_key(files, heldout_docs, doc_sep))   # last: the carve is complete
    return train, held_path


# --------------------------------------------------------------------------- one run

def _check_same_recipe(run_dir: Path, recipe) -> None:
    """A run dir from other settings is refused, never silently reused or mixed into the table."""
    path = run_dir / "recipe.yaml"
    if not path.is_file():
        return
    old, new = load_yaml(path), json.loads(json.dumps(recipe.to_dict()))
    diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        raise ZhBertError(f"{run_dir} holds a run with other settings ({'; '.join(diff[:4])}); delete it or "
                          f"use --out-dir")


def run_recipe(spec: AblationSpec, run: Run, base: dict, out: Path, data_files: list[str] | None,
               cli_set: dict):
    """The recipe `run` pretrains with: base + the spec's shared set + its grid value + `ablate --set`; with
    `budget: flops`, its max_steps scaled to the first grid value's training FLOPs."""
    overrides = {**base, **spec.set, **run.overrides, **cli_set, "out_dir": str(out / "runs" / _slug(run.label)),
                 "data_cache": str(out / "data")}
    if data_files is not None:
        overrides["data"] = data_files
    try:
        recipe = load_recipe(None, overrides)
        if spec.budget == "flops":
            first = plan_runs(spec)[0]
            ref = load_recipe(None, {**base, **spec.set, **first.overrides, **cli_set})
            steps = round(ref.max_steps * recipe_flops_per_token(ref) / recipe_flops_per_token(recipe))
            if steps != recipe.max_steps:
                recipe = load_recipe(None, {**overrides, "max_steps": steps})
        return recipe
    except ZhBertError as e:
        raise ZhBertError(f"run {run.label}: {str(e).removeprefix('recipe with --set: ')}") from None


def recipe_flops_per_token(recipe) -> float:
    """Training FLOPs per token of `recipe` as `zh-bert plan` counts them (both networks for electra), at the
    recipe's vocab_size (21,128 when it sets none)."""
    from zh_bert.plan import PlanArgs, model_config, shape_and_flops

    args = PlanArgs(model=recipe.model, seq_len=recipe.seq_len, vocab_size=recipe.vocab_size or 21128,
                    mask_rate=recipe.masking.mask_rate, objective=recipe.objective,
                    generator_ratio=recipe.generator_ratio)
    return shape_and_flops(args, model_config(args.model, args.vocab_size, 0.1, 0.0))[1]


def run_one(spec: AblationSpec, run: Run, base: dict, out: Path, data_files: list[str] | None,
            heldout: Path | None, cli_set: dict, log=print) -> dict:
    """Pretrain (or reuse a finished run), then the evals (or reuse them); returns the table row."""
    run_dir = out / "runs" / _slug(run.label)
    recipe = run_recipe(spec, run, base, out, data_files, cli_set)
    summary_path = run_dir / "run.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    _check_same_recipe(run_dir, recipe)
    if summary.get("status") == "finished" and is_model_dir(run_dir / FINAL):
        log(f"[{run.label}] reusing finished run {run_dir}")
    else:
        from zh_bert.pretrain import train

        log(f"[{run.label}] pretrain -> {run_dir}")
        resume = "auto" if (run_dir / "checkpoints").is_dir() else None
        summary = train(recipe, resume=resume, log=lambda m: log(f"[{run.label}] {m}"))
        if summary.get("status") != "finished":
            raise ZhBertError(f"[{run.label}] pretraining ended with status {summary.get('status')!r}")
    row = {"label": run.label, "value": run.value, "run_dir": str(run_dir), "tokens": summary.get("tokens_seen"),
           "steps": summary.get("steps"), "train_s": summary.get("train_seconds"),
           "wall_clock_s": summary.get("wall_clock_s"),
           "params": summary.get("parameters"), "val_mlm_acc": (summary.get("final_validation") or {}).get("mlm_acc"),
           "vocab_size": (summary.get("vocab") or {}).get("vocab_size")}
    evals_path = run_dir / "ablate_evals.json"
    evals = json.loads(evals_path.read_text(encoding="utf-8")) if evals_path.is_file() else {}
    want = eval_settings(spec, heldout)
    if evals.get("settings") != want:   # the held-out eval changed: its figures are stale, the tasks' are not
        evals = {"settings": want, "finetune": evals.get("finetune", {}), **run_evals(spec, run, run_dir, heldout, log)}
        write_json(evals_path, evals)
    finetune_tasks(spec, run_dir / FINAL, evals["finetune"], lambda: write_json(evals_path, evals), run.label, log,
                   on_result=lambda task, s: record(run_dir, eval_entries(s, task)))
    row.update({k: v for k, v in evals.items() if k not in ("settings", "finetune")})
    return _with_tasks(row, spec, evals["finetune"])


def _with_tasks(row: dict, spec: AblationSpec, results: dict) -> dict:
    """`row["finetune"][task]` = that task's summary; the first task's figures also flat (dev_acc, test_acc...)."""
    row["finetune"] = {t: {k: (results.get(t) or {}).get(k) for k in SUMMARY_KEYS} for t in spec.finetune.tasks}
    if spec.finetune.task:
        row.update(row["finetune"][spec.finetune.task])
        row["finetune_seeds"] = (results.get(spec.finetune.task) or {}).get("seeds")
    return row


def eval_settings(spec: AblationSpec, heldout: Path | None) -> dict:
    """What a run's cached held-out MLM figures depend on: a change to any of it re-runs them."""
    return {"heldout": str(heldout) if heldout else None, "eval_masking": spec.eval_masking,
            "eval_seed": spec.eval_seed, "eval_max_seqs": spec.eval_max_seqs, "order_check": True}


def task_settings(spec: AblationSpec, task: str) -> dict:
    """What a run's cached results on `task` depend on: the task, the seeds and every fine-tuning setting."""
    return {"task": task, "seeds": spec.finetune.seeds, "config": asdict(spec.finetune.config)}


SUMMARY_KEYS = ("dev_acc", "dev_acc_std", "test_acc", "test_acc_std", "test_macro_f1", "test_macro_f1_std")


def _finetune(spec: AblationSpec, task: str, model_dir: Path, random_init: bool = False) -> dict:
    """`zh-bert finetune` of `model_dir` on `task` with the spec's settings, seeds 1..N; the summary dict."""
    cfg = replace(spec.finetune.config, random_init=random_init)
    return run_finetune(model_dir, load_task(task), cfg, spec.finetune.seed_list(), log=lambda m: None)


def finetune_tasks(spec: AblationSpec, model_dir: Path, results: dict, save: Callable[[], None], label: str,
                   log=print, *, key: dict | None = None, random_init: bool = False,
                   on_result: Callable[[str, dict], None] | None = None) -> None:
    """Fine-tune `model_dir` on each of the spec's tasks whose entry in `results` (task -> summary, updated in
    place) was made with other settings (`key` + `task_settings`); `save()` after each task, so a killed grid
    keeps every finished task."""
    for task in spec.finetune.tasks:
        want = {**(key or {}), **task_settings(spec, task)}
        if (results.get(task) or {}).get("settings") == want:
            continue
        log(f"[{label}] finetune {task}" + (" from random weights" if random_init else ""))
        s = _finetune(spec, task, model_dir, random_init)
        log(f"[{label}] finetune {task}: dev {s['dev_acc']:.4f} ± {s.get('dev_acc_std', 0):.4f}"
            + (f", test {s['test_acc']:.4f} ± {s.get('test_acc_std', 0):.4f}" if s.get("test_acc") is not None else ""))
        results[task] = {"settings": want, "seeds": s["seeds"], **{k: s.get(k) for k in SUMMARY_KEYS}}
        if on_result:
            on_result(task, s)
        save()


def random_init_row(spec: AblationSpec, first: dict, out: Path, log=print) -> dict:
    """The first run's architecture fine-tuned from random weights on every task: what pretraining has to beat."""
    path = out / "random_init_baseline.json"
    cached = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    results = cached.get("finetune") if isinstance(cached.get("finetune"), dict) else {}
    finetune_tasks(spec, Path(first["run_dir"]) / FINAL, results, lambda: write_json(path, {"finetune": results}),
                   f"random init, {first['label']}'s architecture", log, key={"run_dir": first["run_dir"]},
                   random_init=True)
    row = {"label": "random init", "value": f"random init ({first['value']} arch.), no pretraining", "tokens": 0,
           "train_s": 0}
    return _with_tasks(row, spec, results)


def run_evals(spec: AblationSpec, run: Run, run_dir: Path, heldout: Path | None, log=print) -> dict:
    """Held-out masked-LM accuracy of the run's final model (nothing without held-out text)."""
    out: dict[str, Any] = {}
    if heldout is None:
        return out
    model, tok, _ = load_mlm(run_dir / FINAL)
    cfg = MlmEvalConfig(seed=spec.eval_seed, masking=MaskingConfig(strategy=spec.eval_masking),
                        max_seqs=spec.eval_max_seqs, seq_len=min(128, model.config.max_position_embeddings),
                        order_check=True)
    res = eval_mlm(model, tok, read_documents([str(heldout)]), cfg)
    log(f"[{run.label}] held-out MLM ({spec.eval_masking}, seed {spec.eval_seed}): acc {res['mlm_acc']:.4f} "
        f"top-5 {res['mlm_top5']:.4f} loss {res['mlm_loss']:.4f}; context shuffled: acc {res['mlm_acc_shuffled']:.4f}")
    out.update(heldout_mlm_acc=res["mlm_acc"], heldout_mlm_top5=res["mlm_top5"],
               heldout_mlm_loss=res["mlm_loss"], heldout_masked=res["n_masked"],
               heldout_mlm_acc_shuffled=res["mlm_acc_shuffled"], heldout_order_gain=res["order_gain"])
    task = f"Masked LM ({spec.eval_masking} masking, seed {spec.eval_seed})"
    record(run_dir, [entry("fill-mask", task, "text", heldout.name, "accuracy", "MLM accuracy", res["mlm_acc"])])
    return out


# --------------------------------------------------------------------------- report

def _pm(mean, std) -> str:
    if mean is None:
        return "–"
    return f"{mean * 100:.1f} ± {std * 100:.1f}" if std is not None else f"{mean * 100:.1f}"


def _gain(g) -> str:
    return "–" if g is None else f"{g * 100:+.1f}"


def write_results(spec: AblationSpec, rows: list[dict], out: Path, command: str, elapsed: float,
                  shared: dict | None = None) -> None:
    key, fs = next(iter(spec.grid)), spec.finetune
    lines = [f"# Ablation: {spec.name}", ""]
    if spec.question:
        lines += [spec.question.strip(), ""]
    lines += [f"Command: `{command}` (this invocation {elapsed / 60:.1f} min; finished runs and evals of earlier "
              f"invocations are reused)", "",
              f"| {key} | val MLM acc (own masking) | held-out MLM acc ({spec.eval_masking}, seed {spec.eval_seed}) "
              f"| order gain | "
              + "".join(f"{t} dev acc (mean ± std, {fs.seeds} seeds) | {t} test acc | " for t in fs.tasks)
              + ("steps | " if spec.budget == "flops" else "") + "tokens | wall-clock |",
              "|---" * (6 + 2 * len(fs.tasks) + (spec.budget == "flops")) + "|"]
    for r in rows:
        tasks = "".join(f"{_pm(f.get('dev_acc'), f.get('dev_acc_std'))} | {_pm(f.get('test_acc'), f.get('test_acc_std'))} | "
                        for f in ((r.get("finetune") or {}).get(t) or {} for t in fs.tasks))
        lines.append(f"| {r['value']} | {_pm(r.get('val_mlm_acc'), None)} | {_pm(r.get('heldout_mlm_acc'), None)} | "
                     f"{_gain(r.get('heldout_order_gain'))} | {tasks}"
                     + (f"{r.get('steps') or 0:,} | " if spec.budget == "flops" else "")
                     + f"{r.get('tokens') or 0:,} | {(r.get('train_s') or 0) / 60:.1f} min |")
    vocab_sizes = {r["vocab_size"] for r in rows if r.get("vocab_size")}
    budget = ", ".join(f"{k}={v}" for k, v in (spec.set if shared is None else shared).items())
    lines += ["", "Accuracies in %. Order gain: held-out MLM accuracy minus the same with each sequence's tokens "
              "shuffled (same blanks), in points; about 0 = the model ignores word order (a bag of words). Wall-clock: "
              "training only (data preparation is shared and cached). "
              + (f"Same training FLOPs for every run (`budget: flops`: each run's max_steps scaled to the first "
                 f"run's FLOPs as `zh-bert plan` counts them; {budget}). " if spec.budget == "flops" else
                 f"Same token budget for every run{f' ({budget})' if budget else ''}. ")
              + f"Held-out text: the last "
              f"{spec.heldout_docs} documents of each corpus file, removed from training for every run. "
              f"Downstream: `zh-bert finetune` ({fs.config.epochs} epochs, lr {fs.config.lr}, "
              f"--pooling {fs.config.pooling}, --precision {fs.config.precision}, seq-len {fs.config.seq_len}"
              f"{f', {fs.config.max_train} train examples' if fs.config.max_train else ''}"
              f"), std is the sample std over seeds."]
    if len(vocab_sizes) > 1:
        lines += ["", f"Vocabularies differ between runs ({sorted(vocab_sizes)}): MLM accuracies "
                      "are over different units and do not compare directly; the downstream column does."]
    with atomic_write(out / "results.md") as f:
        f.write("\n".join(lines) + "\n")
    write_json(out / "results.json", {"spec": asdict(spec), "command": command, "rows": rows})
    plot_results(spec, rows, out / "results.png")


def plot_results(spec: AblationSpec, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(r["value"]) for r in rows]
    rows = [{**r, **{f"{t}:{k}": v for t, f in (r.get("finetune") or {}).items() for k, v in f.items()}} for r in rows]
    panels = [("heldout_mlm_acc", None, f"held-out MLM acc ({spec.eval_masking})"),
              ("val_mlm_acc", None, "val MLM acc (own masking)")]
    for t in spec.finetune.tasks:
        panels += [(f"{t}:dev_acc", f"{t}:dev_acc_std", f"{t} dev acc (± std)"),
                   (f"{t}:test_acc", f"{t}:test_acc_std", f"{t} test acc (± std)")]
    panels = [p for p in panels if any(r.get(p[0]) is not None for r in rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4), squeeze=False)
    for ax, (key, std, title) in zip(axes[0], panels):
        shown = [i for i, r in enumerate(rows) if r.get(key) is not None]
        vals = [rows[i][key] * 100 for i in shown]
        errs = [(rows[i].get(std) or 0) * 100 for i in shown] if std else None
        colors = ["#999999" if rows[i]["label"] == "random init" else "#4c72b0" for i in shown]
        ax.bar(range(len(shown)), vals, yerr=errs, capsize=4, color=colors)
        ax.set_xticks(range(len(shown)), [labels[i].split(" (")[0] for i in shown], rotation=20, fontsize=8)
        ax.set_title(title, fontsize=9)
        lo = min(vals) - max(errs or [0]) - 2
        ax.set_ylim(max(0, lo), max(vals) + max(errs or [0]) + 2)
    fig.suptitle(f"ablation: {spec.name} ({next(iter(spec.grid))})")
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- CLI

@dataclass
class AblateArgs:
    spec: str = option(positional=True, metavar="recipes/ablations/NAME.yaml", help="the ablation spec")
    set: list[str] = option(default_factory=list, action="append", metavar="KEY=VALUE",
                            help="override for every run: a recipe key (e.g. max_steps=100) or a key of the "
                                 "ablation spec (e.g. finetune_max_train=1000)")
    out_dir: Optional[str] = option(None, help="override the spec's out_dir")
    only: list[str] = option(default_factory=list, action="append", metavar="LABEL",
                             help="run only these settings")
    dry_run: bool = option(False, help="print the runs and their overrides, run nothing")


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert ablate", __doc__.split("\n\n")[0], AblateArgs)


def _select(runs: list[Run], only: list[str]) -> list[Run]:
    if not only:
        return runs
    unknown = set(only) - {r.label for r in runs} - {str(r.value) for r in runs}
    if unknown:
        raise ZhBertError(f"--only {sorted(unknown)}: not in the grid ({', '.join(r.label for r in runs)})")
    return [r for r in runs if r.label in only or str(r.value) in only]


@dataclass
class Plan:
    """An ablation checked whole: every run's recipe, the corpus and the fine-tuning task, before any work."""
    spec: AblationSpec
    spec_path: Path
    base: Path
    base_data: dict          # the base recipe read once: every run derives from this snapshot
    runs: list[Run]
    out: Path
    cli_set: dict
    corpus: list[Path] | None    # raw corpus files to carve; None for a SHARDDIR
    doc_sep: str = "line"


def _check_data(spec: AblationSpec, spec_path: Path, base_recipe, runs: list[Run], out: Path) -> list[Path] | None:
    """The corpus files to carve (read, never written: a dry run checks them too); None for a SHARDDIR."""
    if len(base_recipe.data_paths) == 1 and is_sharddir(base_recipe.data_paths[0]):
        if any(r.fraction < 1 for r in runs) or spec.heldout_docs:
            raise ZhBertError(f"{spec_path}: the base recipe's data is a SHARDDIR; corpus_fraction and "
                              f"heldout_docs need a raw corpus (set heldout_docs: 0 to skip the held-out eval)")
        return None
    files, _ = data_inputs([Path(p) for p in base_recipe.data_paths])
    split_corpus(files, spec.heldout_docs, base_recipe.doc_sep)
    check_carved(files, out / "corpus", spec.heldout_docs, base_recipe.doc_sep)
    return files


def plan(args: AblateArgs) -> Plan:
    """Every check `ablate` makes, in one pass that writes nothing: a mistake in the last grid value is
    refused before the first run trains."""
    spec_path = Path(args.spec)
    cli_set = parse_set(args.set)
    overridable = set(spec_keys()) - {"name", "grid", "set", "base", "out_dir"}
    spec = load_spec(spec_path, {k: cli_set.pop(k) for k in list(cli_set) if k in overridable})
    base = (spec_path.parent / spec.base) if not Path(spec.base).is_absolute() else Path(spec.base)
    if not base.is_file():
        raise ZhBertError(f"{spec_path}: base recipe {base} not found")
    out = Path(args.out_dir or spec.out_dir or f"runs/ablations/{spec.name}")
    load_recipe(base)             # errors in the base recipe name its file
    base_data = load_yaml(base)
    all_runs = plan_runs(spec)
    for r in all_runs:            # every grid value, not only --only's: the spec is checked whole
        try:
            run_recipe(spec, r, base_data, out, None, cli_set)
        except ZhBertError as e:
            raise ZhBertError(f"{spec_path}: {e}") from None
    runs = _select(all_runs, args.only)
    shared = load_recipe(None, {**base_data, **spec.set, **cli_set})
    corpus = _check_data(spec, spec_path, shared, runs, out)
    data = carved_paths(corpus, out / "corpus", {r.fraction for r in runs}) if corpus is not None else {}
    from zh_bert.pretrain import check_recipe

    for r in all_runs:   # each run's recipe as pretrain checks it (--only or not), refused now, not mid-grid
        recipe = run_recipe(spec, r, base_data, out, None, cli_set)
        try:
            check_recipe(recipe)
            if corpus is not None:
                check_corpus_size(recipe, corpus, spec.heldout_docs, r.fraction)
        except ZhBertError as e:
            raise ZhBertError(f"{spec_path}: run {r.label}: {e}") from None
    for r in runs:   # a run dir from other settings is refused now, not after the runs before it trained
        _check_same_recipe(out / "runs" / _slug(r.label), run_recipe(spec, r, base_data, out, data.get(r.fraction),
                                                                     cli_set))
    for task in spec.finetune.tasks:
        try:
            check_trainable(load_task(task), spec.finetune.config, spec.finetune.seed_list())
        except ZhBertError as e:   # the spec file spells --max-train finetune_max_train
            raise ZhBertError(f"{spec_path}: finetune {task}: "
                              f"{str(e).replace('--max-train', FLAT + 'max_train')}") from None
    return Plan(spec, spec_path, base, base_data, runs, out, cli_set, corpus, shared.doc_sep)


def main(argv: list[str]) -> int:
    args = config_from_args(AblateArgs, build_parser().parse_args(argv))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "newly initialised classifier" reports are expected for every run
    hf_logging.disable_progress_bar()
    p = plan(args)
    spec, runs, out, cli_set = p.spec, p.runs, p.out, p.cli_set
    for r in runs:
        sets = {**spec.set, **r.overrides, **cli_set}
        if spec.budget == "flops":
            sets["max_steps"] = run_recipe(spec, r, p.base_data, out, None, cli_set).max_steps
        print(f"{r.label}: pretrain {p.base} --set " + " ".join(f"{k}={v}" for k, v in sets.items()), flush=True)
    if args.dry_run:
        return 0
    data_by_fraction, heldout = {}, None
    if p.corpus is not None:
        data_by_fraction, heldout = carve_corpus(p.corpus, out / "corpus", spec.heldout_docs,
                                                 {r.fraction for r in runs}, p.doc_sep)
        heldout = heldout if spec.heldout_docs else None
    log = lambda m: print(m, flush=True)  # noqa: E731
    if p.corpus is not None:
        prepare_correction_data(p, data_by_fraction, log)
    t0 = time.time()
    rows = [run_one(spec, r, p.base_data, out, data_by_fraction.get(r.fraction), heldout, cli_set, log=log)
            for r in runs]
    if spec.finetune.tasks and spec.random_init_baseline and rows:
        rows.append(random_init_row(spec, rows[0], out, log=log))
    write_results(spec, rows, out, "zh-bert ablate " + " ".join(argv), time.time() - t0,
                  shared={**spec.set, **cli_set})
    print((out / "results.md").read_text(encoding="utf-8"), flush=True)
    print(json.dumps({"results": str(out / "results.md"), "rows": rows}, ensure_ascii=False), flush=True)
    return 0
