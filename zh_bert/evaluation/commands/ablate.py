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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.config import (
    config_from_args,
    load_yaml,
    option,
    option_of,
    parse_set,
)
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import claim_dir
from zh_bert.core.options import Shared
from zh_bert.corpus.pipeline import data_inputs, is_sharddir
from zh_bert.evaluation.ablation.corpus import (
    carve_corpus,
    carved_paths,
    check_carved,
    check_corpus_size,
    split_corpus,
)
from zh_bert.evaluation.ablation.results import random_init_rows, run_one, write_results
from zh_bert.evaluation.ablation.spec import (
    FLAT,
    AblationRun,
    AblationSpec,
    check_same_recipe,
    load_spec,
    plan_runs,
    run_recipe,
    slug,
    spec_keys,
)
from zh_bert.evaluation.heads.classify import check_trainable
from zh_bert.evaluation.suite.protocol import suite_task_of
from zh_bert.evaluation.tasks.classification import load_task
from zh_bert.train.recipe import load_recipe


@dataclass
class AblateArgs:
    spec: str = option(positional=True, metavar="recipes/ablations/NAME.yaml", help="the ablation spec")
    set: list[str] = option_of(Shared, "set", help="override for every run: a recipe key (e.g. max_steps=100) or a key of the ablation spec (e.g. finetune_max_train=1000)")
    out_dir: Optional[str] = option(None, help="override the spec's out_dir")
    only: list[str] = option_of(Shared, "only", help="run only these settings (labels or values; repeatable)")
    dry_run: bool = option_of(Shared, "dry_run", help="print the runs and their overrides, run nothing")


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert ablate", __doc__.split("\n\n")[0], AblateArgs)


def _select(runs: list[AblationRun], only: list[str]) -> list[AblationRun]:
    if not only:
        return runs
    unknown = set(only) - {r.label for r in runs} - {str(r.value) for r in runs}
    if unknown:
        raise ZhBertError(f"--only {sorted(unknown)}: not in the grid ({', '.join(r.label for r in runs)})")
    return [r for r in runs if r.label in only or str(r.value) in only]


@dataclass
class AblationPlan:
    """An ablation checked whole: every run's recipe, the corpus and the fine-tuning task, before any work."""
    spec: AblationSpec
    spec_path: Path
    base: Path
    base_data: dict          # the base recipe read once: every run derives from this snapshot
    runs: list[AblationRun]
    out: Path
    cli_set: dict
    corpus: list[Path] | None    # raw corpus files to carve; None for a SHARDDIR
    doc_sep: str = "line"


def _check_data(spec: AblationSpec, spec_path: Path, base_recipe, runs: list[AblationRun],
                out: Path) -> list[Path] | None:
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


def plan_ablation(args: AblateArgs) -> AblationPlan:
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
    from zh_bert.train.pretrain import check_recipe

    for r in all_runs:   # each run's recipe as pretrain checks it (--only or not), refused now, not mid-grid
        recipe = run_recipe(spec, r, base_data, out, None, cli_set)
        try:
            check_recipe(recipe)
            if corpus is not None:
                check_corpus_size(recipe, corpus, spec.heldout_docs, r.fraction)
        except ZhBertError as e:
            raise ZhBertError(f"{spec_path}: run {r.label}: {e}") from None
    for r in runs:   # a run dir from other settings is refused now, not after the runs before it trained
        check_same_recipe(out / "runs" / slug(r.label), run_recipe(spec, r, base_data, out, data.get(r.fraction),
                                                                   cli_set))
    for task in spec.finetune.tasks:
        try:
            if suite_task_of(task):      # a suite's task: its pairs are checked data
                continue
            check_trainable(load_task(task), spec.finetune.config, spec.finetune.seed_list())
        except ZhBertError as e:   # the spec file spells --max-train finetune_max_train
            raise ZhBertError(f"{spec_path}: finetune {task}: "
                              f"{str(e).replace('--max-train', FLAT + 'max_train')}") from None
    return AblationPlan(spec, spec_path, base, base_data, runs, out, cli_set, corpus, shared.doc_sep)


def prepare_correction_data(p: AblationPlan, data_by_fraction: dict, log=print) -> None:
    """The exact check of `check_corpus_size`, before the first run trains: every correction run's data is
    prepared (the cache its run then reuses) and its train split counted."""
    from zh_bert.corpus.pipeline import prepare_data
    from zh_bert.corpus.sharddir import read_meta
    from zh_bert.corpus.similar_words import check_possible

    for r in p.runs:
        recipe = run_recipe(p.spec, r, p.base_data, p.out, data_by_fraction.get(r.fraction), p.cli_set)
        if recipe.masking.strategy != "correction":
            continue
        try:
            prepared = prepare_data(recipe, log=lambda m, label=r.label: log(f"[{label}] {m}"))
            check_possible(read_meta(prepared.sharddir), prepared.sharddir)
        except ZhBertError as e:
            raise ZhBertError(f"{p.spec_path}: run {r.label}: {e}") from None


def _ablate_entry(name: str, is_dir: bool) -> bool:
    """What ablate writes at the top of its out_dir (before manifests): the run dirs, carved corpus, shared
    data cache, the results, and the random-init fine-tuning records."""
    if name.startswith("."):
        return ".tmp-" in name or ".old-" in name
    return name in (("runs", "corpus", "data") if is_dir else ("results.md", "results.json", "results.png")) or (
        not is_dir and name.endswith(".json"))


def main(argv: list[str]) -> int:
    args = config_from_args(AblateArgs, build_parser().parse_args(argv))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "newly initialised classifier" reports are expected for every run
    hf_logging.disable_progress_bar()
    p = plan_ablation(args)
    spec, runs, out, cli_set = p.spec, p.runs, p.out, p.cli_set
    for r in runs:
        sets = {**spec.set, **r.overrides, **cli_set}
        if spec.budget == "flops":
            sets["max_steps"] = run_recipe(spec, r, p.base_data, out, None, cli_set).max_steps
        print(f"{r.label}: pretrain {p.base} --set " + " ".join(f"{k}={v}" for k, v in sets.items()), flush=True)
    if args.dry_run:
        return 0
    claim_dir(out, inputs=[p.spec_path, p.base, *(p.corpus or [])], legacy=_ablate_entry, flag="out_dir",
              what="an ablation folder of zh-bert ablate")
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
        rows += random_init_rows(spec, rows, out, log=log)
    write_results(spec, rows, out, "zh-bert ablate " + " ".join(argv), time.time() - t0,
                  shared={**spec.set, **cli_set})
    print((out / "results.md").read_text(encoding="utf-8"), flush=True)
    print(json.dumps({"results": str(out / "results.md"), "rows": rows}, ensure_ascii=False), flush=True)
    return 0
