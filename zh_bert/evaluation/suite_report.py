"""What `eval suite` leaves behind: the printed table, `suite.md` + `suite.png` + `suite.json` per model,
`eval_results.json` entries (each naming its split, protocol, seeds, data sha256 and zh-bert version), and
`--predictions DIR` in the formats the benchmarks' own scorers read, so anyone can check a figure with them.

The published rows stand beside ours: FewCLUE's table (chinese-roberta-wwm-ext; test_public) and HFL's CMRC 2018
dev figures (mean of their ten runs; the best of ten, which they print first, is a choice made on dev and is
not shown as a comparison).
"""

from __future__ import annotations

import json
from pathlib import Path

from zh_bert.core.fileio import atomic_dir, atomic_write, claim_dir, write_json, write_text
from zh_bert.core.hardware import machine_line
from zh_bert.evaluation.eval_results import entry
from zh_bert.evaluation.fewclue import MULTIPLE_CHOICE, PUBLISHED, SOURCE_URL, TEST, official_predictions
from zh_bert.evaluation.finetune import percent
from zh_bert.train.curves import cjk_text

#: CMRC 2018 dev EM / F1, mean of ten runs (HFL's tables: Chinese-BERT-wwm README and LERT README)
CMRC_PUBLISHED = {
    "BERT (google)": (64.4, 84.0), "BERT-wwm": (65.0, 84.7), "BERT-wwm-ext": (65.6, 85.0),
    "RoBERTa-wwm-ext": (66.5, 86.5), "MacBERT-base": (67.3, 87.1), "RoBERTa-wwm-ext-large": (67.6, 87.9),
}
CMRC_SOURCES = ("https://github.com/ymcui/Chinese-BERT-wwm", "https://github.com/ymcui/LERT")
#: the published FewCLUE row each --method stands beside
PUBLISHED_ROW = {"finetune": "FineTuning", "zero-shot": "Zero-shot", "pet": "PET"}


def _cell(r: dict | None, key: str = "test_acc") -> str:
    """Mean ± std over the runs (pairs x seeds); one run has no spread to show."""
    if not r:
        return "-"
    return percent(r[key], r.get(f"{key}_std") if r.get("runs", len(r.get("per_seed", []))) > 1 else None)


def fewclue_lines(res: dict) -> list[str]:
    tasks = {n: r for n, r in res["pretrained"].items() if n != "cmrc2018"}
    if not tasks:
        return []
    method = PUBLISHED_ROW[res["method"]]
    ref = PUBLISHED[method]
    lines = [f"FewCLUE ({res['protocols']['fewclue']}, {res['method']}): trained on train_k, learning rate and "
             f"epoch chosen on dev_k, reported on {TEST} (accuracy, %)",
             f"{'task':<9} {'test_public':>13} {'dev (chose)':>11} {'chance':>7} {'random init':>13} "
             f"{'published':>9}"]
    for name, r in tasks.items():
        rand = res["random_init"].get(name)
        lines.append(f"{name:<9} {_cell(r):>13} {r['dev_acc'] * 100:>11.1f} {r['majority_test_acc'] * 100:>7.1f} "
                     f"{_cell(rand):>13} {ref[name]:>9.1f}" + ("  (multiple choice, not in the score)"
                                                               if name in MULTIPLE_CHOICE else ""))
    for key, label in (("pretrained_score", "score"), ("random_init_score", "score (random init)")):
        if res.get(key) is not None:
            lines.append(f"FewCLUE {label}: {res[key]:.2f} (mean of the eight tasks other than CHID)")
    lines.append(f"published (chinese-roberta-wwm-ext, {TEST}): fine-tuning {PUBLISHED['FineTuning']['score']}, "
                 f"PET {PUBLISHED['PET']['score']}, zero-shot {PUBLISHED['Zero-shot']['score']}, human "
                 f"{PUBLISHED['Human']['score']} ({SOURCE_URL})")
    return lines


def cmrc_lines(res: dict) -> list[str]:
    r = res["pretrained"].get("cmrc2018")
    if not r:
        return []
    rand = res["random_init"].get("cmrc2018")
    lines = [f"CMRC 2018 ({res['protocols']['cmrc2018']}): fine-tuned {r['epochs']} epoch(s) on "
             f"{r['trained_on']} ({r['n_train']} questions), reported on dev ({r['n_dev']} questions), nothing "
             f"chosen on dev (EM / F1, %)",
             f"{'model':<24} {'dev EM':>13} {'dev F1':>13}",
             f"{'this model':<24} {_cell(_pc(r), 'em'):>13} {_cell(_pc(r), 'f1'):>13}"]
    if rand:
        lines.append(f"{'random init':<24} {_cell(_pc(rand), 'em'):>13} {_cell(_pc(rand), 'f1'):>13}")
    if r["trained_on"] == "trial":
        lines.append("trained on the trial set, not the official train split: not comparable with the rows below")
    lines += [f"{name:<24} {em:>13.1f} {f1:>13.1f}" for name, (em, f1) in CMRC_PUBLISHED.items()]
    lines.append(f"published: HFL, trained on train, mean of ten runs ({', '.join(CMRC_SOURCES)})")
    return lines


def _pc(r: dict) -> dict:
    """CMRC figures are percents already; `percent` takes fractions."""
    return {k: (v / 100 if k in ("em", "em_std", "f1", "f1_std") and v is not None else v) for k, v in r.items()}


def report_lines(res: dict) -> list[str]:
    return fewclue_lines(res) + ([""] if res["pretrained"].get("cmrc2018") and len(res["pretrained"]) > 1 else []) \
        + cmrc_lines(res)


def suite_entries(res: dict) -> list[dict]:
    """eval_results.json entries: one per task/split/metric, with what makes the figure reproducible."""
    out = []
    common = {"zh_bert_version": res["zh_bert_version"], "method": res["method"]}
    for name, r in res["pretrained"].items():
        details = {**common, "seeds": r["seeds"], "data_sha256": r["data_sha256"]}
        if name == "cmrc2018":
            details = {**details, "protocol": res["protocols"]["cmrc2018"], "split": "dev", "trained_on": r["trained_on"]}
            task = f"CMRC 2018 ({details['protocol']}, trained on {r['trained_on']}, {len(r['seeds'])} seeds)"
            for metric, key in (("exact_match", "em"), ("f1", "f1")):
                out.append(entry("question-answering", task, "cmrc2018", "CMRC 2018", metric, f"dev {metric}",
                                 r[key], **details))
            continue
        details = {**details, "protocol": res["protocols"]["fewclue"], "split": TEST, "pairs": r["pairs"]}
        task = f"FewCLUE {name} ({details['protocol']}, {res['method']}, {r['pairs']} pairs x {len(r['seeds'])} seeds)"
        out.append(entry("text-classification", task, f"fewclue-{name}", f"FewCLUE {name}", "accuracy",
                         f"{TEST} accuracy", r["test_acc"], **details))
    return out


def claim_outputs(predictions: str | None, report: str | None) -> None:
    """Before any training: the folders the suite will replace must be new, empty or written by it."""
    for folder, flag in ((predictions, "--predictions"), (report, "--report")):
        if folder:
            claim_dir(folder, flag=flag, what=f"a folder zh-bert eval suite wrote ({flag})")


def write_predictions(res: dict, folder: str | Path) -> list[str]:
    """FewCLUE: `fewclue/pair_k/TASK_predict.json` ({"id", "label"} lines, the first seed's chosen run of each
    pair); CMRC 2018: `cmrc2018_predict.json` ({question id: answer text}, the first seed)."""
    written = []
    with atomic_dir(folder, overwrite=True) as tmp:
        _write_predictions(res, tmp, written)
    return written


def _write_predictions(res: dict, folder: Path, written: list[str]) -> None:
    for name, r in res["pretrained"].items():
        if name == "cmrc2018":
            path = folder / "cmrc2018_predict.json"
            write_json(path, r["predictions"], indent=None)
            written.append(path.relative_to(folder).as_posix())
            continue
        for pair in r["per_pair"]:
            if pair.get("test_predictions") is None:
                continue
            path = folder / "fewclue" / f"pair_{pair['pair']}" / f"{name}_predict.json"
            lines = official_predictions(name, pair["test_predictions"])
            write_text(path, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
            written.append(path.relative_to(folder).as_posix())


@cjk_text()
def plot_suite(res: dict, path: Path) -> None:
    """Bars: each task's headline figure, pretrained beside random init, the published row as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res["pretrained"])
    method = PUBLISHED_ROW[res["method"]]

    def figure(r):
        return None if r is None else (r["f1"] if "f1" in r and "test_acc" not in r else r["test_acc"] * 100)

    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names) + 2), 3.6))
    xs = range(len(names))
    ours = [figure(res["pretrained"][n]) for n in names]
    rand = [figure(res["random_init"].get(n)) for n in names]
    ax.bar([x - 0.2 for x in xs], ours, width=0.4, color="#4c72b0", label="this model")
    if any(v is not None for v in rand):
        ax.bar([x + 0.2 for x in xs], [v or 0 for v in rand], width=0.4, color="#999999", label="random init")
    pub = [PUBLISHED[method].get(n) if n != "cmrc2018" else CMRC_PUBLISHED["RoBERTa-wwm-ext"][1] for n in names]
    ax.scatter(list(xs), pub, marker="_", s=400, color="#c44e52", label="published (RoBERTa-wwm-ext)", zorder=3)
    ax.set_xticks(list(xs), [n if n != "cmrc2018" else "cmrc2018 F1" for n in names], rotation=20, fontsize=8)
    ax.set_ylabel(f"{TEST} accuracy / dev F1 (%)")
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
