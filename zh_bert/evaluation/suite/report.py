"""What `eval suite` leaves behind: the printed tables, `suite.md` + `suite.png` + `suite.json` per model,
`eval_results.json` entries (each naming its split, protocol, method, seeds, data sha256 and zh-bert version), and
`--predictions DIR` in the formats the benchmarks' own scorers read, so anyone can check a figure with them. Every
table, entry and file is made from the task declarations (`zh_bert.corpus.task_registry`): a new task gets its row.

The published rows stand beside ours (`Task.published`): FewCLUE's table (chinese-roberta-wwm-ext; test_public) and
HFL's CMRC 2018 dev figures (mean of their ten runs; the best of ten, which they print first, is a choice made on dev
and is not shown as a comparison).
"""

from __future__ import annotations

from pathlib import Path

from zh_bert.core.fileio import atomic_dir, atomic_write, claim_dir, write_json, write_text
from zh_bert.core.hardware import machine_line
from zh_bert.corpus.task_registry import suite_named, task_named, tasks_of
from zh_bert.corpus.task_spec import Suite, Task
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.heads import head_kind
from zh_bert.evaluation.result import FIGURE_UNIT, percent
from zh_bert.train.curves import cjk_text


def _cell(r: dict | None, key: str = "test_acc") -> str:
    """Mean ± std over the runs (pairs x seeds), in percent; one run has no spread to show."""
    if not r:
        return "-"
    return percent(r[key], r.get(f"{key}_std"))


def _ran(res: dict, suite: Suite) -> list[Task]:
    return [t for t in tasks_of(suite) if t.name in res["pretrained"]]


def chosen_lines(res: dict, suite: Suite, tasks: list[Task]) -> list[str]:
    """A suite whose tasks choose: one row per task, its reported figure beside the figure that chose, chance,
    random init and the published row of the method; the suite's score."""
    split, metric = tasks[0].report_name, tasks[0].main_metric
    lines = [f"{suite.title} ({res['protocols'].get(suite.name, suite.protocol)}, {res['method']}): "
             f"{suite.description} ({metric.name}, %)",
             f"{'task':<9} {split:>13} {'dev (chose)':>11} {'chance':>7} {'random init':>13} {'published':>9}"]
    for task in tasks:
        r, rand = res["pretrained"][task.name], res["random_init"].get(task.name)
        m = task.main_metric
        ref = task.beside(res["method"])
        shown = f"{ref.figures[metric.type]:>9.1f}" if ref else f"{'-':>9}"
        lines.append(f"{task.name:<9} {_cell(r, m.key):>13} {100 * r[head_kind(task).choose_key]:>11.1f} "
                     f"{100 * r['majority_test_acc']:>7.1f} {_cell(rand, m.key):>13} {shown}"
                     + ("" if task.in_score or not suite.score else f"  ({task.description}, not in the score)"))
    if suite.score:
        for key, label in (("pretrained_score", "score"), ("random_init_score", "score (random init)")):
            if res.get(key) is not None:
                lines.append(f"{suite.title} {label}: {res[key]:.2f} ({suite.score.definition})")
        refs = suite.score.published
        lines.append(f"published ({refs[0].note}, {split}): "
                     + ", ".join(f"{r.row} {r.figures['score']}" for r in refs) + f" ({refs[0].source})")
    return lines


def fixed_lines(res: dict, task: Task) -> list[str]:
    """A task that chooses nothing (CMRC 2018, the STS sets): what it ran (its kind's words), this model and random
    init as rows, its kind's floor rows (a character TF-IDF), the published rows below."""
    r, rand = res["pretrained"][task.name], res["random_init"].get(task.name)
    kind = head_kind(task)
    names = " / ".join(m.name for m in task.metrics)
    heads = [f"{task.report_name} {m.name}" for m in task.metrics]
    lines = [f"{task.title} ({res['protocols'].get(task.suites[0], task.protocol)}): {kind.ran(task, r)} ({names}, %)",
             f"{'model':<24}" + "".join(f" {h:>13}" for h in heads),
             f"{'this model':<24}" + "".join(f" {_cell(r, m.key):>13}" for m in task.metrics)]
    if rand:
        lines.append(f"{'random init':<24}" + "".join(f" {_cell(rand, m.key):>13}" for m in task.metrics))
    lines += [f"{label:<24}" + "".join(f" {percent(r.get(key)):>13}" for _ in task.metrics)
              for label, key in kind.floors(task)]
    lines += kind.caveats(task, r)
    lines += [f"{ref.row:<24}" + "".join(f" {ref.figures[m.type]:>13.1f}" for m in task.metrics)
              for ref in task.published]
    if task.published:
        lines.append(f"published: {task.published[0].note} ({task.published[0].source})")
    return lines


def report_lines(res: dict) -> list[str]:
    """Every asked suite's table, a blank line between two."""
    out: list[str] = []
    for name in res["suites"]:
        suite = suite_named(name)
        tasks = _ran(res, suite)
        choosing = [t for t in tasks if head_kind(t).chooses]
        blocks = ([chosen_lines(res, suite, choosing)] if choosing else []) + \
            [fixed_lines(res, t) for t in tasks if not head_kind(t).chooses]
        for block in blocks:
            out += ([""] if out else []) + block
    return out


def suite_entries(res: dict) -> list[dict]:
    """eval_results.json entries: one per task/split/metric, with what makes the figure reproducible."""
    out = []
    common = {"zh_bert_version": res["zh_bert_version"], "method": res["method"]}
    for name, r in res["pretrained"].items():
        task = task_named(name)
        protocol = res["protocols"].get(task.suites[0], task.protocol)
        details = {**common, "method": head_kind(task).recorded_method(res["method"]), "seeds": r["seeds"],
                   "data_sha256": r["data_sha256"], "protocol": protocol, "split": task.report_name}
        if r.get("pooling"):
            details["pooling"] = r["pooling"]
        if "pairs" in r:
            details["pairs"] = r["pairs"]
            how = f"{r['pairs']} pairs x {len(r['seeds'])} seeds"
        elif "trained_on" in r:
            details["trained_on"] = r["trained_on"]
            how = f"trained on {r['trained_on']}, {len(r['seeds'])} seeds"
        else:
            how = "zero-shot"
        label = f"{task.dataset_name or task.title} ({protocol}, {details['method']}, {how})"
        fractions = res.get("figures") == FIGURE_UNIT   # an older suite.json holds each metric's own unit
        out += head_kind(task).mark_entries([entry(
            task.task_type, label, *task.dataset, m.type, f"{task.report_name} {m.type}",
            m.of_fraction(r[m.key]) if fractions else r[m.key], **details) for m in task.metrics], r)
    return out


def claim_outputs(predictions: str | None, report: str | None) -> None:
    """Before any training: the folders the suite will replace must be new, empty or written by it."""
    for folder, flag in ((predictions, "--predictions"), (report, "--report")):
        if folder:
            claim_dir(folder, flag=flag, what=f"a folder zh-bert eval suite wrote ({flag})")


def write_predictions(res: dict, folder: str | Path) -> list[str]:
    """A choosing task's `SUITE/pair_k/TASK_predict.json` (its official lines, the first seed's chosen run of each
    pair); a fixed task's `TASK_predict.json` ({question id: answer text}, the first seed)."""
    written = []
    with atomic_dir(folder, overwrite=True) as tmp:
        _write_predictions(res, tmp, written)
    return written


def _write_predictions(res: dict, folder: Path, written: list[str]) -> None:
    for name, r in res["pretrained"].items():
        task = task_named(name)
        if "per_pair" not in r:
            path = head_kind(task).write_official(task, r["predictions"], folder)
            written.append(path.relative_to(folder).as_posix())
            continue
        for pair in r["per_pair"]:
            if pair.get("test_predictions") is None:
                continue
            where = folder / task.suites[0] / (f"pair_{pair['pair']}" if pair["pair"] is not None else "")
            path = head_kind(task).write_official(task, pair["test_predictions"], where)
            written.append(path.relative_to(folder).as_posix())


def _headline(task: Task, r: dict | None) -> float | None:
    m = task.main_metric
    return None if r is None else 100 * r[m.key]


@cjk_text()
def plot_suite(res: dict, path: Path) -> None:
    """Bars: each task's headline figure, pretrained beside random init, the published row as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [task_named(n) for n in res["pretrained"]]
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(tasks) + 2), 3.6))
    xs = range(len(tasks))
    ours = [_headline(t, res["pretrained"][t.name]) for t in tasks]
    rand = [_headline(t, res["random_init"].get(t.name)) for t in tasks]
    ax.bar([x - 0.2 for x in xs], ours, width=0.4, color="#4c72b0", label="this model")
    if any(v is not None for v in rand):
        ax.bar([x + 0.2 for x in xs], [v or 0 for v in rand], width=0.4, color="#999999", label="random init")
    refs = [t.beside(res["method"]) for t in tasks]
    pub = [r.figures.get(t.main_metric.type) if r else None for t, r in zip(tasks, refs)]
    ax.scatter(list(xs), pub, marker="_", s=400, color="#c44e52", label="published", zorder=3)
    ax.set_xticks(list(xs), [t.name if t.main_metric is t.metrics[0] and len(t.metrics) == 1 else
                             f"{t.name} {t.main_metric.type}" for t in tasks], rotation=20, fontsize=8)
    ax.set_ylabel(" / ".join(dict.fromkeys(f"{t.report_name} {t.main_metric.type}" for t in tasks)) + " (%)")
    ax.set_title(f"eval suite ({res['method']}): {Path(res['checkpoint']).name}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def write_report(res: dict, folder: str | Path, command: str) -> Path:
    """suite.md (the tables, the command, the machine), suite.png, suite.json in `folder` (claimed before the
    run by `claim_outputs`)."""
    with atomic_dir(folder, overwrite=True) as tmp:
        _write_report(res, tmp, command)
    return Path(folder)


def _write_report(res: dict, folder: Path, command: str) -> None:
    md = [f"# eval suite: {res['checkpoint']}", "", f"Command: `{command}`", "",
          f"zh-bert {res['zh_bert_version']}; {machine_line()}; {res['wall_s']:.0f} s", "", "```",
          *report_lines(res), "```", "", "![suite](suite.png)", ""]
    write_text(folder / "suite.md", "\n".join(md))
    plot_suite(res, folder / "suite.png")
    write_json(folder / "suite.json", res)
