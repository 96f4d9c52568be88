"""One ablation run's row of the table: pretrained (or the finished run reused), then scored the same way as
every other run, each eval cached under the settings it depends on; and the report of all rows."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

from zh_bert.evaluation.ablation.spec import AblationRun, AblationSpec, check_same_recipe, run_recipe, slug
from zh_bert.corpus.corpus_io import read_documents
from zh_bert.train.curves import cjk_text
from zh_bert.core.errors import ZhBertError
from zh_bert.evaluation.eval_results import entry, record
from zh_bert.evaluation.heads.cloze import MlmEvalConfig, eval_mlm, load_mlm
from zh_bert.core.fileio import ABLATE_EVALS, CHECKPOINTS, RUN_SUMMARY, Record, atomic_write, read_json, read_object, write_json
from zh_bert.evaluation.heads.classify import eval_entries, run_classifier
from zh_bert.evaluation.result import percent
from zh_bert.train.masking import MaskingConfig
from zh_bert.train.rundir import FINAL, is_model_dir
from zh_bert.evaluation.suite.protocol import suite_summary, suite_task_of
from zh_bert.evaluation.tasks.classification import load_task


def run_one(spec: AblationSpec, run: AblationRun, base: dict, out: Path, data_files: list[str] | None,
            heldout: Path | None, cli_set: dict, log=print) -> dict:
    """Pretrain (or reuse a finished run), then the evals (or reuse them); returns the table row."""
    run_dir = out / "runs" / slug(run.label)
    recipe = run_recipe(spec, run, base, out, data_files, cli_set)
    summary_path = run_dir / RUN_SUMMARY
    summary = read_object(summary_path).data if summary_path.is_file() else {}
    check_same_recipe(run_dir, recipe)
    if summary.get("status") == "finished" and is_model_dir(run_dir / FINAL):
        log(f"[{run.label}] reusing finished run {run_dir}")
    else:
        from zh_bert.train.pretrain import train

        log(f"[{run.label}] pretrain -> {run_dir}")
        resume = "auto" if (run_dir / CHECKPOINTS).is_dir() else None
        summary = train(recipe, resume=resume, log=lambda m: log(f"[{run.label}] {m}"))
        if summary.get("status") != "finished":
            raise ZhBertError(f"[{run.label}] pretraining ended with status {summary.get('status')!r}")
    s = Record(summary, str(summary_path))   # a run.json of an earlier run: its figures checked, not trusted
    row = {"label": run.label, "value": run.value, "run_dir": str(run_dir), "tokens": s.integer("tokens_seen", None, lo=0),
           "steps": s.integer("steps", None, lo=0), "train_s": s.number("train_seconds", None, lo=0),
           "wall_clock_s": s.number("wall_clock_s", None, lo=0), "params": s.integer("parameters", None, lo=0),
           "val_mlm_acc": s.record("final_validation", Record({}, "")).number("mlm_acc", None, lo=0, hi=1),
           "vocab_size": s.record("vocab", Record({}, "")).integer("vocab_size", None, lo=0)}
    evals_path = run_dir / ABLATE_EVALS
    evals = read_object(evals_path).data if evals_path.is_file() else {}
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
    suite_task = suite_task_of(task)
    if suite_task:      # `suite:TASK`: its suite's protocol (FewCLUE: five pairs, chosen on dev_k, test_public)
        return suite_summary(model_dir, suite_task, cfg, spec.finetune.seed_list())
    return run_classifier(model_dir, load_task(task), cfg, spec.finetune.seed_list(), log=lambda m: None).summary()


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


def random_init_rows(spec: AblationSpec, rows: list[dict], out: Path, log=print) -> list[dict]:
    """A random-init row for the first run of each architecture (model_type of its final/config.json) in
    `rows`: each architecture beside what its own pretraining has to beat."""
    firsts: dict[str, dict] = {}
    for row in rows:
        config = read_json(Path(row["run_dir"]) / FINAL / "config.json", default={})
        kind = str(config.get("model_type", "bert")) if isinstance(config, dict) else "bert"
        firsts.setdefault(kind, row)
    names = ["random_init_baseline.json"] + [f"random_init_{kind}.json" for kind in list(firsts)[1:]]
    return [random_init_row(spec, row, out, log=log, name=name) for row, name in zip(firsts.values(), names)]


def random_init_row(spec: AblationSpec, first: dict, out: Path, log=print,
                    name: str = "random_init_baseline.json") -> dict:
    """The run's architecture fine-tuned from random weights on every task: what pretraining has to beat."""
    path = out / name
    cached = read_object(path).data if path.is_file() else {}
    results = cached.get("finetune") if isinstance(cached.get("finetune"), dict) else {}
    finetune_tasks(spec, Path(first["run_dir"]) / FINAL, results, lambda: write_json(path, {"finetune": results}),
                   f"random init, {first['label']}'s architecture", log, key={"run_dir": first["run_dir"]},
                   random_init=True)
    row = {"label": "random init", "value": f"random init ({first['value']} arch.), no pretraining", "tokens": 0,
           "train_s": 0}
    return _with_tasks(row, spec, results)


def run_evals(spec: AblationSpec, run: AblationRun, run_dir: Path, heldout: Path | None, log=print) -> dict:
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

def figure(task: str) -> str:
    """A task's figure in column titles: accuracy, or its suite task's own metric (Resume NER: entity F1)."""
    suite_task = suite_task_of(task)
    return suite_task.main_metric.name if suite_task else "acc"


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
              + "".join(f"{t} dev {figure(t)} (mean ± std, {fs.seeds} seeds) | {t} test {figure(t)} | " for t in fs.tasks)
              + ("steps | " if spec.budget == "flops" else "") + "tokens | wall-clock |",
              "|---" * (6 + 2 * len(fs.tasks) + (spec.budget == "flops")) + "|"]
    for r in rows:
        tasks = "".join(f"{percent(f.get('dev_acc'), f.get('dev_acc_std'))} | {percent(f.get('test_acc'), f.get('test_acc_std'))} | "
                        for f in ((r.get("finetune") or {}).get(t) or {} for t in fs.tasks))
        lines.append(f"| {r['value']} | {percent(r.get('val_mlm_acc'), None)} | {percent(r.get('heldout_mlm_acc'), None)} | "
                     f"{_gain(r.get('heldout_order_gain'))} | {tasks}"
                     + (f"{r.get('steps') or 0:,} | " if spec.budget == "flops" else "")
                     + f"{r.get('tokens') or 0:,} | {(r.get('train_s') or 0) / 60:.1f} min |")
    vocab_sizes = {r["vocab_size"] for r in rows if r.get("vocab_size")}
    budget = ", ".join(f"{k}={v}" for k, v in (spec.set if shared is None else shared).items())
    lines += ["", "Figures in %. Order gain: held-out MLM accuracy minus the same with each sequence's tokens "
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


@cjk_text()   # a spec's name or values in Chinese
def plot_results(spec: AblationSpec, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(r["value"]) for r in rows]
    rows = [{**r, **{f"{t}:{k}": v for t, f in (r.get("finetune") or {}).items() for k, v in f.items()}} for r in rows]
    panels = [("heldout_mlm_acc", None, f"held-out MLM acc ({spec.eval_masking})"),
              ("val_mlm_acc", None, "val MLM acc (own masking)")]
    for t in spec.finetune.tasks:
        panels += [(f"{t}:dev_acc", f"{t}:dev_acc_std", f"{t} dev {figure(t)} (± std)"),
                   (f"{t}:test_acc", f"{t}:test_acc_std", f"{t} test {figure(t)} (± std)")]
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
