"""The one result type of every head: what a fine-tuning or scoring command gives for one task.

A `Result` holds one row per run (a seed; under the suite, a pair x seed) with the run's figures, and makes the
summary every command prints, `eval suite` writes to suite.json and `ablate` caches: each figure as mean ± sample
std (ddof=1; no std for one run), the init (pretrained or random), the seeds, the rows rounded to 4 decimals. Every
figure is a fraction (accuracy, entity F1, CMRC EM/F1, a Spearman correlation in [-1, 1]); screens show percent
(`percent`), and eval_results.json entries write each benchmark's own unit (`task_spec.Metric.of_fraction`), so
a figure has one unit wherever zh-bert itself reads it back.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

#: the unit of every figure in a Result (what suite.json declares as `figures`; files without it are older)
FIGURE_UNIT = "fraction"
#: what a run's row holds beside its figures: bookkeeping, never averaged
BOOKKEEPING = ("seed", "pair", "lr", "steps", "best_step", "train_s", "predict_s")
INITS = {False: "pretrained", True: "random"}


def mean_std(xs: list[float]) -> tuple[float, float]:
    return float(statistics.fmean(xs)), float(statistics.stdev(xs)) if len(xs) > 1 else 0.0


def percent(mean: float | None, std: float | None = None) -> str:
    """A fraction as a table cell: 86.5 ± 0.3 (percent), "–" when there is none; no ± without a spread."""
    if mean is None:
        return "–"
    return f"{mean * 100:.1f} ± {std * 100:.1f}" if std is not None else f"{mean * 100:.1f}"


def _rounded(row: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}


@dataclass
class Result:
    """The runs of one head on one task. `runs`: one dict per run (its seed and figures, fractions; what else the
    head reports per run); `facts`: what the summary says beside the figures (checkpoint, sizes, splits, notes,
    config); `figures`: the figure keys the summary always carries (None where no run has one: a task without a
    test split); other numeric keys of the rows are summarised when present."""
    task: str
    random_init: bool
    seeds: list[int]
    runs: list[dict] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    predictions: list | None = None     # the first run's predictions of the reported split (prediction files)

    @property
    def init(self) -> str:
        return INITS[self.random_init]

    def keys(self) -> list[str]:
        """The figure keys, declared first, then any other number every row holds."""
        found = [k for r in self.runs for k, v in r.items() if k not in BOOKKEEPING
                 and isinstance(v, (int, float)) and not isinstance(v, bool)]
        return list(dict.fromkeys([*self.figures, *found]))

    def mean(self, key: str) -> float | None:
        vals = [r[key] for r in self.runs if r.get(key) is not None]
        return mean_std(vals)[0] if vals else None

    def std(self, key: str) -> float | None:
        """Sample std over the runs that have the figure; None for fewer than two."""
        vals = [r[key] for r in self.runs if r.get(key) is not None]
        return mean_std(vals)[1] if len(vals) > 1 else None

    def summary(self) -> dict:
        """What commands print and files hold: task, init, seeds, the facts, each figure's mean (and `_std` over
        two or more runs), the rows (`per_seed`), rounded."""
        out: dict = {"task": self.task, "init": self.init, "seeds": self.seeds, **self.facts}
        for key in self.keys():
            out[key] = self.mean(key)
            if self.std(key) is not None:
                out[f"{key}_std"] = self.std(key)
        out["per_seed"] = [_rounded(r) for r in self.runs]
        return out
