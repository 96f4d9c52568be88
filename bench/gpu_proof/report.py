"""gpu_proof.md from gpu_proof.json: one section per measurement, each saying what ran, on what, and, where it
has no figures, why. The JSON is the record; this file only renders it (so a --science run that joins an
earlier report re-renders the whole)."""

from __future__ import annotations

TITLES = {"device": "Device and matmul peak", "throughput": "Training throughput beside the transformers Trainer",
          "memory": "Memory: `zh-bert plan` vs the allocator", "fp16_vs_fp32": "fp16 + loss scaling vs fp32",
          "resume": "kill -9 + `--resume auto`", "science": "--science: equal-FLOPs objective grid"}


def render(report: dict) -> str:
    lines = ["# zh-bert GPU proof", "",
             f"Device: **{report['device_name']}**{' (--quick: toy sizes, the figures mean nothing)' if report['quick'] else ''}. "
             "Every figure below was measured by the invocation named in its section, except columns marked *plan*: "
             "those are `zh-bert plan`'s model and datasheet figures, shown beside the measurement they are checked "
             "against.", "", "| # | command | started (UTC) | wall | sections |", "|---|---|---|---|---|"]
    for i, inv in enumerate(report["invocations"]):
        lines.append(f"| {i} | `{inv['command']}` | {inv['started']} | {inv.get('wall_s', '–')} s | "
                     f"{', '.join(inv['sections'])} |")
    for name, title in TITLES.items():
        sec = report["sections"].get(name) or {"status": "not run"}
        lines += ["", f"## {title}", "", f"Status: **{sec['status']}**"
                  + (f" (invocation {sec['invocation']}, {sec.get('seconds', '–')} s)" if "invocation" in sec else "")
                  + (f". {sec['headline']}" if sec.get("headline") else "")]
        if sec.get("reason"):
            lines.append(f"Reason: {sec['reason']}")
        if sec.get("error"):
            lines += ["", "```", sec["error"], "```"]
        if sec["status"] in ("measured", "partial"):
            lines += [""] + RENDER[name](sec)
    return "\n".join(lines) + "\n"


def _table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join("–" if v is None else str(v) for v in r) + " |" for r in rows]


def _pct(x) -> str | None:
    return None if x is None else f"{x:.1%}"


def _device(s: dict) -> list[str]:
    facts = [["name", s.get("name")], ["capability", s.get("capability")], ["memory", s.get("memory_gib") and
             f"{s['memory_gib']} GiB"], ["driver", s.get("driver")], ["CUDA runtime / cuDNN",
             s.get("cuda_runtime") and f"{s['cuda_runtime']} / {s.get('cudnn')}"], ["torch", s["torch"]],
             ["transformers", s["transformers"]], ["accelerate", s["accelerate"]], ["python", s["python"]],
             ["host CPU", s["cpu"]]]
    peaks = [[k, f"{v:,.4g}"] for k, v in s["matmul"]["tflops"].items()]
    return (_table(["", ""], [f for f in facts if f[1]]) + ["", f"Measured matmul peak ({s['matmul']['n']}², best "
            f"of three windows; TF32 = fp32 inputs with TF32 tensor-core math):", ""] + _table(["precision", "TFLOP/s"], peaks)
            + (["", s["matmul"]["tf32"]] if isinstance(s["matmul"].get("tf32"), str) else []))


def _throughput(s: dict) -> list[str]:
    rows = [[r["model"], r["precision"], _n(r["trainer_tokens_per_s"]), _n(r["zh_bert_tokens_per_s"]),
             r["ratio"] and f"**{r['ratio']:.2f}×**", _pct(r["useful_flop_utilisation"]),
             _pct(r["trainer_useful_flop_utilisation"]), _pct((r.get("plan") or {}).get("measured_utilisation_of_datasheet")),
             _pct((r.get("plan") or {}).get("assumed_utilisation")), _n((r.get("plan") or {}).get("plan_tokens_per_s"))]
            for r in s["rows"]]
    spec = next((r["plan"]["spec"] for r in s["rows"] if r.get("plan")), None)
    out = [f"Batch {s['batch']} × {s['seq_len']} tokens ({s['batches']}, masked fraction {s['masked_fraction']}), vocab "
           f"{s['vocab']:,}, AdamW; {s['warmup_steps']} warm-up + {s['timed_steps']} timed steps per side, medians, "
           "steps interleaved (Trainer, zh-bert, ...). Useful-FLOP utilisation = useful FLOPs (encoder + MLM head at "
           "masked positions, `zh_bert.train.arch.bert.flops_per_token`) per second ÷ the measured matmul peak of that precision."
           + (f" *plan* columns: `zh-bert plan`'s spec {spec} (datasheet peak × assumed utilisation); 'of datasheet' "
              "is the measured rate over that datasheet peak, the figure that replaces plan's assumption "
              "(fp32 and TF32 rows both against the fp32 datasheet peak, as plan counts them)." if spec else ""), ""]
    out += _table(["model", "precision", "Trainer tokens/s", "zh-bert tokens/s", "ratio", "zh-bert utilisation",
                   "Trainer utilisation", "of datasheet", "*plan* assumed", "*plan* tokens/s"], rows)
    notes = sorted({r["trainer_note"] for r in s["rows"] if r.get("trainer_note")})
    return out + ([""] + notes if notes else []) + (["", f"Skipped: {'; '.join(s['skipped'])}"] if s["skipped"] else [])


def _n(x) -> str | None:
    return None if x is None else f"{x:,}"


def _memory(s: dict) -> list[str]:
    cuda = any("device_used_gib" in r for r in s["rows"])
    head = ["model", "micro-batch", "seq", "precision", "measured GiB", "*plan* GiB", "error"]
    head += ["peak reserved GiB", "device used GiB", "*plan* total GiB"] if cuda else []
    rows = []
    for r in s["rows"]:
        row = [r["model"], r["micro_batch"], r["seq_len"], r["precision"]]
        if "skipped" in r:
            rows.append(row + [f"skipped: {r['skipped']}"] + [None] * (len(head) - 5))
            continue
        row += [r["measured_gib"], r["planned_gib"], f"{r['error_pct']:+.1f}%"]
        if cuda:
            row += [r.get("peak_reserved_gib"), r.get("device_used_gib"), r.get("plan_total_gib")]
        rows.append(row)
    return [f"Measured: {s['method']}. *plan*: {s['planned']}. Error = (plan − measured) ÷ measured.", ""] + _table(head, rows)


def _fp16(s: dict) -> list[str]:
    a, b = s["runs"]["fp32"], s["runs"]["fp16"]
    n = len(a["loss"])
    picks = sorted({1, n} | {max(1, round(n * f)) for f in (0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9)})
    rows = [[k, f"{a['loss'][k - 1]:.4f}", f"{b['loss'][k - 1]:.4f}",
             _rel(abs(b['loss'][k - 1] - a['loss'][k - 1]) / a['loss'][k - 1])] for k in picks if k <= len(b["loss"])]
    trace = ", ".join(f"step {k}: {v:g}" for k, v in s["loss_scale_trace"])
    return ([f"`{s['model']}`, {s['steps']} steps of {s['batch']} × {s['seq_len']} tokens, lr {s['lr']}, the same seed "
             "(same init, data order and masks) in fp32 (TF32 off) and in fp16 with zh-bert's dynamic loss scaler "
             "(recipe defaults: init 2^16, growth interval 2000).", "",
             f"- max relative gap of the per-step training loss: **{_rel(s['max_rel_gap'])}** (step "
             f"{s['max_rel_gap_step']}); over a {s['smoothing_steps']}-step moving mean: **{_rel(s['max_rel_gap_smoothed'])}**",
             f"- final validation MLM loss: fp32 {a['val_mlm_loss']}, fp16 {b['val_mlm_loss']} (relative gap "
             f"{_rel(s['val_rel_gap'])})",
             f"- tokens/s: fp32 {a['tokens_per_s']:,}, fp16 {b['tokens_per_s']:,} (whole run, logging every step)",
             f"- loss-scale trace: {trace}",
             f"- steps skipped by the scaler (overflow): **{s['skipped_steps']}**"
             + (f" at steps {', '.join(map(str, s['skipped_at'][:30]))}" if s["skipped_at"] else ""), ""]
            + _table(["step", "fp32 loss", "fp16 loss", "relative gap"], rows))


def _rel(x) -> str:
    """A relative gap readable at any size: 1.2e-05 (0.0012%)."""
    return "–" if x is None else f"{x:.2e} ({x:.4%})"


def _resume(s: dict) -> list[str]:
    return [f"`{s['model']}`, {s['steps']} steps, precision {s['precision']}, deterministic {s['deterministic']}, "
            f"checkpoint every {s['checkpoint_every']} steps. One `python -m zh_bert pretrain` ran uninterrupted; a "
            f"second was sent SIGKILL as soon as its step-{s['checkpoint_every']} checkpoint was complete (it had "
            f"logged step {s['killed_after_step']}), then rerun with `--resume auto` (resumed at step "
            f"{s['resumed_from_step']}).", "",
            f"- per-step training loss, resumed vs uninterrupted: max |difference| **{s['max_abs_loss_diff']}** over "
            f"{s['steps_compared']} steps ({s['identical_steps']} bit-identical); after the resume point: "
            f"{s['max_abs_loss_diff_after_resume']}",
            f"- steps missing from the resumed run's metrics: {s['missing_steps'] or 'none'}",
            f"- loss scaler at the end: {s['loss_scaler']}"] + (
            [f"- `deterministic: true` was refused on this device, so the pair ran with `deterministic: false`: "
             f"{s['deterministic_true_failed']}"] if s.get("deterministic_true_failed") else [])


def _science(s: dict) -> list[str]:
    sets = ", ".join(f"{k}={v}" for k, v in s["overrides"].items() if k not in ("data", "tokenizer"))
    out = [f"`zh-bert ablate {s['spec']}` on the prepared zh_real_text shards ({s['attribution']}), with "
           f"`--set {sets}`. Runs done: {', '.join(s['runs_done']) or 'none'}"
           + (f"; missing: {', '.join(s['missing'])} (rerun the same command with the same --work: finished runs "
              "and evals are reused)" if s["missing"] else "") + ".", ""]
    if s.get("results_md"):
        out += [l.replace("# Ablation", "### Ablation", 1) for l in s["results_md"].strip().splitlines()]
    else:
        tasks = ("chnsenticorp", "tnews")
        out += _table(["run", "tokens", "val MLM acc", *(f"{t} test acc" for t in tasks)],
                      [[r["label"], _n(r.get("tokens")), _pct(r.get("val_mlm_acc")),
                        *(_acc(((r.get("finetune") or {}).get(t) or {})) for t in tasks)] for r in s.get("rows", [])])
    e = s.get("electra")
    if e:
        out += ["", f"ELECTRA's discriminator: validation RTD accuracy {_pct(e['val_rtd_acc'])} vs "
                f"{_pct(e['all_original_prior'])} for calling every token original: margin "
                f"**{e['margin_points']} points**."]
    for task, gains in (s.get("answers") or {}).items():
        out += ["", f"{task} test accuracy minus random init: " + "; ".join(
            f"{k} {v['gain_points']:+.1f} ({_verdict(v['beats_random_init'])})"
            for k, v in gains.items())]
    return out


def _acc(f: dict) -> str | None:
    if f.get("test_acc") is None:
        return None
    return f"{f['test_acc'] * 100:.1f}" + (f" ± {f['test_acc_std'] * 100:.1f}" if f.get("test_acc_std") is not None else "")


def _verdict(beats) -> str:
    if beats is None:
        return "one seed: no std to judge by"
    return "beats it by more than either seed std" if beats else "not beyond the seed std"


RENDER = {"device": _device, "throughput": _throughput, "memory": _memory, "fp16_vs_fp32": _fp16,
          "resume": _resume, "science": _science}
