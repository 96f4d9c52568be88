"""An ablation spec file, checked whole: its grid of one setting's values, the budget every run shares, the
evals; the runs the grid makes and the recipe each run pretrains with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Optional

from zh_bert.core.config import from_dict, load_yaml
from zh_bert.core.errors import ZhBertError, unknown_key_error
from zh_bert.core.fileio import RUN_RECIPE, json_copy
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.plan.memory_model import model_config, shape_and_flops
from zh_bert.train.masking import STRATEGIES
from zh_bert.train.recipe import check_seed, load_recipe

FLAT = "finetune_"                                  # spec files spell the fine-tuning settings finetune_<key>
SPEC_FINETUNE = {"lr": 2e-3, "pooling": "mean"}     # tiny models need large lrs; MLM-only checkpoints, mean pooling
CONFIG_KEYS = tuple(f.name for f in fields(FinetuneConfig) if f.name != "random_init")  # the baseline's job


@dataclass
class FinetuneSpec:
    """How every run is fine-tuned downstream. Per task, its whole value is the cache key of a run's results,
    so changing any part of it (the precision too) re-runs them. Spec files write `finetune: TASK` (or a list of
    tasks) and `finetune_<key>: value` for `seeds` and every FinetuneConfig setting (finetune_lr, ...)."""
    tasks: list[str] = field(default_factory=lambda: ["chnsenticorp"])   # `zh-bert finetune --task` values or
    #                                                                       suite:FEWCLUE_TASK; [] = none
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
        raise ZhBertError(f"'finetune' must be a task name (chnsenticorp, tnews, tsv:TRAIN,DEV[,TEST], suite:eprstmt), a list of "
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
class AblationRun:
    """One grid value: what it sets, and the label that names its run dir and its row."""
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


def slug(s: str) -> str:
    """A run's label as the name of its folder under runs/."""
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "-", s).strip("-")


def plan_runs(spec: AblationSpec) -> list[AblationRun]:
    key, values = next(iter(spec.grid.items()))
    runs = []
    for v in values:
        if isinstance(v, dict):   # {label: "...", set: {...}}: a setting that needs several keys
            if "label" not in v or not isinstance(v.get("set"), dict):
                raise ZhBertError(f"grid.{key}: a mapping entry needs 'label' and 'set', got {v}")
            runs.append(AblationRun(f"{key}={v['label']}", v["label"], dict(v["set"])))
        elif key == "corpus_fraction":
            f = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
            if f is None or not 0 < f <= 1:   # nan fails `0 < f` too
                raise ZhBertError(f"grid.corpus_fraction: {v!r} is not in (0, 1] (a number: the fraction of "
                                  f"the corpus)")
            runs.append(AblationRun(f"corpus={int(round(f * 100))}%", f"{f:.0%}", {}, fraction=float(f)))
        else:
            runs.append(AblationRun(f"{key}={v}", v, {key: v}))
    seen: dict[str, str] = {}
    for r in runs:   # each label names a run dir: two runs in one dir would overwrite each other
        other = seen.get(slug(r.label))
        if other is not None:
            twice = f"{r.label!r} appears twice" if other == r.label else f"{r.label!r} and {other!r} name the same run"
            raise ZhBertError(f"grid.{key}: {twice} (runs/{slug(r.label)}); every grid value needs its own label")
        seen[slug(r.label)] = r.label
    return runs


def run_recipe(spec: AblationSpec, run: AblationRun, base: dict, out: Path, data_files: list[str] | None,
               cli_set: dict):
    """The recipe `run` pretrains with: base + the spec's shared set + its grid value + `ablate --set`; with
    `budget: flops`, its max_steps scaled to the first grid value's training FLOPs."""
    overrides = {**base, **spec.set, **run.overrides, **cli_set, "out_dir": str(out / "runs" / slug(run.label)),
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
    from zh_bert.plan import PlanArgs

    vocab = recipe.vocab_size or 21128
    if not recipe.objective_spec.generator:   # one network: the architecture counts it
        return recipe.arch.flops_per_token(recipe.arch.config(recipe, vocab), recipe.seq_len, recipe.mean_mask_rate())
    args = PlanArgs(model=recipe.model, seq_len=recipe.seq_len, vocab_size=vocab,
                    mask_rate=recipe.mean_mask_rate(), objective=recipe.objective,
                    generator_ratio=recipe.generator_ratio)
    return shape_and_flops(args, model_config(args.model, args.vocab_size, 0.1, 0.0))[1]


def check_same_recipe(run_dir: Path, recipe) -> None:
    """A run dir from other settings is refused, never silently reused or mixed into the table."""
    path = run_dir / RUN_RECIPE
    if not path.is_file():
        return
    old, new = load_yaml(path), json_copy(recipe.to_dict())
    diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        raise ZhBertError(f"{run_dir} holds a run with other settings ({'; '.join(diff[:4])}); delete it or "
                          f"use --out-dir")
