"""gpu_proof sections that train: fp16 against fp32 from the same init, kill -9 + `--resume auto` of a real
`python -m zh_bert pretrain` process, and the --science objective grid (`zh_bert.evaluation.commands.ablate`).

All of them run zh-bert's own entry points on the prepared shards (`zh_bert.train.pretrain.train`, the CLI, the
ablation machinery) rather than re-implementing a loop: what is proven is what a user runs."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

from bench import REPO
from zh_bert.core.fileio import open_append, open_for_write, read_json, write_text

BASE_RECIPE = REPO / "recipes" / "tiny-cpu.yaml"
SPEC = REPO / "recipes" / "ablations" / "objective-compute.yaml"
GRID = ("mlm+wwm", "mlm+correction", "electra")


def recipe_for(ctx, dataset: str, overrides: dict):
    """tiny-cpu.yaml on the prepared `dataset`, with `overrides`; keys this zh-bert does not know yet
    (deterministic, tf32: newer recipe keys) are dropped rather than refused."""
    from zh_bert.train.recipe import Recipe, load_recipe

    tok, shards = ctx.dataset(dataset)
    known = {f.name for f in fields(Recipe)}
    return load_recipe(BASE_RECIPE, {"data": str(shards), "tokenizer": str(tok),
                                     **{k: v for k, v in overrides.items() if k in known}})


def _loss_rows(run: Path) -> list[dict]:
    from zh_bert.train.curves import read_metrics

    return [r for r in read_metrics(run / "metrics.jsonl") if "loss" in r]


def _smooth(xs: list[float], w: int) -> list[float]:
    return [sum(xs[max(0, i - w + 1):i + 1]) / len(xs[max(0, i - w + 1):i + 1]) for i in range(len(xs))]


# --------------------------------------------------------------------------- fp16 vs fp32

def fp16_section(ctx) -> dict:
    """The same recipe from the same init (same seed: same weights, data order and masks) in fp32 and in fp16
    with zh-bert's dynamic loss scaler: loss curves side by side, their largest relative gap, the scale's
    trace and the steps the scaler skipped."""
    from zh_bert.train.pretrain import train

    steps = 8 if ctx.quick else 300
    batch = 4 if ctx.quick else 32   # fp16 matmuls on a CPU without fp16 units run at ~1/40 of fp32
    common = {"model": "tiny" if ctx.quick else "small", "max_steps": steps, "global_batch": batch,
              "micro_batch": batch, "lr": 1e-3, "warmup_steps": 2 if ctx.quick else 30, "log_every": 1,
              "eval_every": 0, "save_every": 0, "eval_batches": 2 if ctx.quick else 20, "seed": 42, "tf32": False}
    root = ctx.fresh_dir("fp16")
    runs = {}
    for prec in ("fp32", "fp16"):
        summary = train(recipe_for(ctx, "main", {**common, "precision": prec, "out_dir": str(root / prec)}),
                        log=ctx.quiet)
        rows = _loss_rows(root / prec)
        runs[prec] = {"precision": summary["hardware"]["precision"], "loss": [r["loss"] for r in rows],
                      "val_mlm_loss": (summary["final_validation"] or {}).get("mlm_loss"),
                      "tokens_per_s": round(summary["tokens_per_s"] or 0), "skipped_steps": summary["skipped_steps"],
                      "loss_scaler": summary["hardware"].get("loss_scaler"),
                      "scale": [r.get("loss_scale") for r in rows], "skipped": [r["skipped_steps"] for r in rows]}
    a, b = runs["fp32"]["loss"], runs["fp16"]["loss"]
    w = 4 if ctx.quick else 10
    rel = [abs(y - x) / x for x, y in zip(a, b)]
    rel_s = [abs(y - x) / x for x, y in zip(_smooth(a, w), _smooth(b, w))]
    va, vb = runs["fp32"]["val_mlm_loss"], runs["fp16"]["val_mlm_loss"]
    scale, counts = runs["fp16"].pop("scale"), runs["fp16"].pop("skipped")
    trace = [(i + 1, s) for i, s in enumerate(scale) if i == 0 or s != scale[i - 1] or i == len(scale) - 1]
    skipped_at = [i + 1 for i, n in enumerate(counts) if n > (counts[i - 1] if i else 0)]
    runs["fp32"].pop("scale"), runs["fp32"].pop("skipped")
    out = {"model": common["model"], "steps": steps, "batch": batch, "seq_len": 128, "lr": common["lr"],
           "max_rel_gap": float(f"{max(rel):.4g}"), "max_rel_gap_step": rel.index(max(rel)) + 1,
           "max_rel_gap_smoothed": float(f"{max(rel_s):.4g}"), "smoothing_steps": w,
           "val_rel_gap": float(f"{abs(vb - va) / va:.4g}") if va and vb else None,
           "loss_scale_trace": trace, "skipped_steps": runs["fp16"]["skipped_steps"], "skipped_at": skipped_at,
           "runs": runs}
    ctx.headline = (f"max relative loss gap {out['max_rel_gap']:.2e} per step, {out['max_rel_gap_smoothed']:.2e} "
                    f"over {w} steps; {out['skipped_steps']} skipped, scale {trace[-1][1]:g}")
    return out


# --------------------------------------------------------------------------- kill -9 + --resume auto

def resume_section(ctx) -> dict:
    """An uninterrupted `python -m zh_bert pretrain` and one killed with SIGKILL right after a checkpoint, then
    continued with `--resume auto`: the per-step loss difference (0 when every kernel is deterministic). Under
    `deterministic: true`; if this device has a kernel without a deterministic version (the run says so), the
    pair is measured again with `deterministic: false` and the refusal is recorded."""
    try:
        return _resume_pair(ctx, True)
    except RuntimeError as e:
        if "determinis" not in str(e):
            raise
        return {**_resume_pair(ctx, False), "deterministic_true_failed": str(e)[:600]}


def _resume_pair(ctx, deterministic: bool) -> dict:
    steps, every = (9, 3) if ctx.quick else (200, 50)
    root = ctx.fresh_dir("resume")
    over = {"model": "tiny" if ctx.quick else "small", "max_steps": steps, "save_every": every, "keep_last": 8,
            "global_batch": 2 if ctx.quick else 32, "micro_batch": 2 if ctx.quick else 32, "lr": 1e-3,
            "warmup_steps": 2 if ctx.quick else 20, "log_every": 1, "eval_every": 0, "eval_batches": 2,
            "precision": "fp16", "deterministic": deterministic, "seed": 42}
    recipe = recipe_for(ctx, "main", over)
    path = root / "recipe.yaml"
    import yaml

    write_text(path, yaml.safe_dump(recipe.to_dict(), allow_unicode=True, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}

    def cmd(name):
        return [sys.executable, "-m", "zh_bert", "pretrain", str(path), "--set", f"out_dir={root / name}"]

    _run(cmd("reference"), env, root / "reference.log")
    killed_at = _kill_then_resume(cmd("resumed"), root / "resumed", env, every, steps, root / "resumed.log")
    ref = {r["step"]: r["loss"] for r in _loss_rows(root / "reference")}
    got = {r["step"]: r["loss"] for r in _loss_rows(root / "resumed")}
    diffs = {s: abs(got[s] - ref[s]) for s in sorted(ref) if s in got}
    after = [d for s, d in diffs.items() if s > every]
    hw = read_json(root / "resumed" / "run.json")
    out = {"model": over["model"], "steps": steps, "checkpoint_every": every, "precision": hw["hardware"]["precision"],
           "deterministic": hw["hardware"].get("deterministic", recipe.to_dict().get("deterministic")),
           "killed_after_step": killed_at, "resumed_from_step": (hw.get("resumes") or [{}])[-1].get("step"),
           "steps_compared": len(diffs), "missing_steps": sorted(set(ref) - set(got)),
           "max_abs_loss_diff": max(diffs.values()) if diffs else None,
           "max_abs_loss_diff_after_resume": max(after) if after else None,
           "identical_steps": sum(d == 0 for d in diffs.values()),
           "loss_scaler": hw["hardware"].get("loss_scaler")}
    ctx.headline = (f"killed after step {killed_at}, resumed from {out['resumed_from_step']}: max |loss diff| "
                    f"{out['max_abs_loss_diff']:.3g} over {len(diffs)} steps ({out['identical_steps']} identical)")
    return out


def _run(cmd: list[str], env: dict, log: Path) -> None:
    with open_for_write(log, "w") as f:
        p = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=400)
    if p.returncode:
        text = log.read_text(encoding="utf-8", errors="replace")
        why = next((l for l in text.splitlines() if "deterministic" in l and "Error" in l), "")
        raise RuntimeError(f"{' '.join(cmd[2:4])} exited {p.returncode}: {why or _tail(log)}")


def _tail(log: Path, n: int = 3) -> str:
    return " | ".join(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-n:])


def _kill_then_resume(cmd: list[str], run: Path, env: dict, step: int, last: int, log: Path) -> int:
    """Start `cmd`, SIGKILL it as soon as the checkpoint of `step` is complete, check the kill landed
    mid-run, rerun with `--resume auto`; returns the last step the killed process logged."""
    from zh_bert.train.checkpoint import step_dir_name

    marker = run / "checkpoints" / step_dir_name(step) / "trainer_state.json"
    with open_for_write(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.time() + 400
        while not marker.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended (exit {proc.returncode}) before its step-{step} checkpoint: "
                                   f"{_tail(log)}")
            if time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"no step-{step} checkpoint within 400 s")
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    logged = max(r["step"] for r in _loss_rows(run))
    if logged >= last:
        raise RuntimeError(f"the kill landed after the last step ({logged} of {last}): nothing was resumed")
    _run(cmd + ["--resume", "auto"], env, log.with_suffix(".resume.log"))
    return logged


# --------------------------------------------------------------------------- --science: the objective grid

def science_overrides(ctx, vocab: int) -> dict:
    """`ablate --set` values: the prepared shards and the budget. Full: `mini`, batch 256 × 128 tokens (a
    GPU step of `mini` is launch-bound: fewer, larger steps), the reference run long enough that the run with
    the fewest tokens at equal FLOPs (ELECTRA) still sees `ctx.science_tokens`; --quick: tiny, a few steps, one
    seed, one epoch."""
    tok, shards = ctx.dataset("science")
    sets = {"data": str(shards), "tokenizer": str(tok), "heldout_docs": 0, "vocab_size": vocab}
    if ctx.quick:
        return {**sets, "model": "tiny", "max_steps": 6, "global_batch": 8, "micro_batch": 8, "warmup_steps": 1,
                "eval_batches": 2, "finetune_seeds": 1, "finetune_epochs": 1, "finetune_seq_len": 32}
    from zh_bert.evaluation.ablation.spec import recipe_flops_per_token
    from zh_bert.train.recipe import load_recipe

    base = {"data": str(shards), "model": "mini", "vocab_size": vocab, "mask_rate": 0.15}
    ratio = min(1.0, recipe_flops_per_token(load_recipe(None, base))
                / recipe_flops_per_token(load_recipe(None, {**base, "objective": "electra"})))
    steps = math.ceil(ctx.science_tokens / (256 * 128) / ratio)
    sets.update(model="mini", max_steps=steps, global_batch=256, micro_batch=256, lr=1e-3, warmup_steps=300,
                eval_batches=10)
    if ctx.device.type == "cuda" and ctx.device_capability >= (8, 0):
        sets["finetune_precision"] = "bf16"
    return sets


def science_section(ctx) -> dict:
    """recipes/ablations/objective-compute.yaml through `zh_bert.evaluation.commands.ablate` on the prepared zh_real_text shards:
    one `--only` invocation per objective (the time budget is checked between them, and a rerun in the same
    --work reuses finished runs), then the whole grid, which reuses them and adds random init."""
    from zh_bert.evaluation.commands import ablate

    manifest = ctx.manifest["datasets"]["science"]
    sets = {**science_overrides(ctx, manifest["vocab_size"]), **ctx.science_set}
    out = ctx.work / "science"
    argv = [str(SPEC), "--out-dir", str(out)] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    done, rows, took = [], {}, []
    res = {"spec": str(SPEC.relative_to(REPO)), "overrides": sets, "runs_done": done, "complete": False,
           "corpus": manifest.get("sources"), "attribution": "science/SOURCE.md of the prepared dir (CC-BY-4.0)"}
    with _task_data(ctx), open_append(ctx.work / "science.log") as log, \
            contextlib.redirect_stdout(log):
        for label in GRID:
            if took and not ctx.has_time(1.2 * max(took)):
                break
            t0 = time.time()
            ablate.main(argv + ["--set", "random_init_baseline=false", "--only", label])
            took.append(time.time() - t0)
            rows[label] = read_json(out / "results.json")["rows"][0]
            done.append(label)
            ctx.log(f"[science] {label}: {took[-1]:.0f} s")
            ctx.save_partial("science", {**res, "rows": list(rows.values()),
                                         "missing": [g for g in GRID if g not in done] + ["random init"]})
        res["complete"] = len(done) == len(GRID) and ctx.has_time(0.5 * max(took))
        if res["complete"]:
            ablate.main(argv)
    final = read_json(out / "results.json")["rows"] if res["complete"] else list(rows.values())
    res.update(rows=final, missing=[g for g in GRID if g not in done] + ([] if res["complete"] else ["random init"]),
               results_md=(out / "results.md").read_text(encoding="utf-8") if res["complete"] else None,
               electra=_electra_prior(out / "runs" / "objective=electra"), answers=_answers(final))
    ctx.headline = f"{len(done)} of {len(GRID)} objectives" + (" + random init" if res["complete"] else " (partial)")
    return res


@contextlib.contextmanager
def _task_data(ctx):
    """--quick fine-tunes on the prepared toy task copies (ZH_BERT_TASK_DATA); a full run on corpora/tasks."""
    old = os.environ.get("ZH_BERT_TASK_DATA")
    if ctx.manifest.get("tasks"):
        os.environ["ZH_BERT_TASK_DATA"] = str(ctx.data / ctx.manifest["tasks"])
    try:
        yield
    finally:
        if ctx.manifest.get("tasks"):
            os.environ.pop("ZH_BERT_TASK_DATA") if old is None else os.environ.__setitem__("ZH_BERT_TASK_DATA", old)


def _electra_prior(run: Path) -> dict | None:
    """Does the discriminator leave the 'all original' prior? Its validation RTD accuracy beside 1 - the
    replaced fraction of the last training rows (what calling every token original scores)."""
    if not (run / "run.json").is_file():
        return None
    val = read_json(run / "run.json").get("final_validation") or {}
    rows = [r for r in _loss_rows(run) if "replaced_frac" in r]
    tail = rows[-max(1, len(rows) // 10):]
    prior = 1 - sum(r["replaced_frac"] for r in tail) / len(tail) if tail else None
    acc = val.get("rtd_acc")
    return {"val_rtd_acc": acc, "all_original_prior": prior,
            "margin_points": round((acc - prior) * 100, 2) if acc is not None and prior is not None else None}


def _answers(rows: list[dict]) -> dict:
    """Per task: each objective's test accuracy minus random init's, and whether it beats random init by more
    than both seed stds (the bar the CPU results were read against)."""
    rand = next((r for r in rows if r["label"] == "random init"), None)
    out = {}
    for task in ("chnsenticorp", "tnews"):
        base = ((rand or {}).get("finetune") or {}).get(task) or {}
        for r in rows:
            f = (r.get("finetune") or {}).get(task) or {}
            if r is rand or f.get("test_acc") is None or base.get("test_acc") is None:
                continue
            gain = f["test_acc"] - base["test_acc"]
            stds = (f.get("test_acc_std"), base.get("test_acc_std"))
            beats = None if None in stds else gain > max(stds)   # one seed has no std: no verdict
            out.setdefault(task, {})[str(r["value"])] = {"gain_points": round(gain * 100, 2),
                                                         "beats_random_init": beats}
    return out
