"""A run dir is one household: every entry any command writes at the top of `RUN/`, listed once.

`zh-bert pretrain` makes a run dir, and other commands then write beside its files: `eval` and `finetune`
record their figures, `eval suite` its report, `leaderboard verify` its record, `ablate` its eval cache.
Evaluating a run half-way and training on is the normal workflow, so each of these is an entry here (its
name, file or folder, the command that writes it, and why) and each writer takes its name from here. A command
that claims the run dir (a resume, a rotation, a `--force`) then knows every entry another command may have put
there: it neither takes one for a user's file (refusing to go on) nor replaces or deletes one that is not its
own. The leftovers of a killed writer of any entry (`.NAME.tmp-PID...`, `.NAME.old-PID`: the layer's atomic
writes) are the household's too, so they never block a resume; the writer that owns NAME removes them
(`atomic.recover`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUN_RECIPE = "recipe.yaml"
RUN_SUMMARY = "run.json"
METRICS_LOG = "metrics.jsonl"
CURVES_PNG = "curves.png"
FINAL = "final"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tb"
DATA_CACHE = "data"
EVAL_RESULTS = "eval_results.json"
SUITE_DIR = "suite"
VERIFICATION_FILE = "verification.json"
ABLATE_EVALS = "ablate_evals.json"


@dataclass(frozen=True)
class HouseholdEntry:
    """One entry at the top of a run dir: `folder` or file, the command that writes it, why, and whether
    `publish` uploads it with the model."""
    name: str
    folder: bool
    command: str
    why: str
    published: bool = False


HOUSEHOLD: tuple[HouseholdEntry, ...] = (
    HouseholdEntry(RUN_RECIPE, False, "pretrain", "the resolved recipe; its first line marks the folder as a run "
                   "dir, written before anything else", published=True),
    HouseholdEntry(RUN_SUMMARY, False, "pretrain", "what ran and what it gave: status (and the signal that stopped "
                   "it), steps, hardware, final validation", published=True),
    HouseholdEntry(METRICS_LOG, False, "pretrain", "one line per log_every steps; a resume keeps the lines up to "
                   "its checkpoint", published=True),
    HouseholdEntry(CURVES_PNG, False, "pretrain", "loss, MLM accuracy and lr against step", published=True),
    HouseholdEntry(FINAL, True, "pretrain", "the finished model, a stock HF folder (replaced at the end of a run)"),
    HouseholdEntry(CHECKPOINTS, True, "pretrain", "resumable checkpoints step-N/, rotated by keep_last"),
    HouseholdEntry(TENSORBOARD, True, "pretrain", "TensorBoard scalars"),
    HouseholdEntry(DATA_CACHE, True, "pretrain", "the default data_cache: the shards a raw corpus was built into"),
    HouseholdEntry(EVAL_RESULTS, False, "eval mlm|cloze|suite, finetune, ablate", "the run's evaluation figures, "
                   "newest per task and metric: the model card's model-index", published=True),
    HouseholdEntry(SUITE_DIR, True, "eval suite", "the suite's report of this run: suite.md, suite.png, suite.json"),
    HouseholdEntry(VERIFICATION_FILE, False, "leaderboard verify", "the re-run of the run's claims; `publish "
                   "--with-verification` uploads it"),
    HouseholdEntry(ABLATE_EVALS, False, "ablate", "ablate's cache of this run's evals, keyed by their settings"),
)
#: what `publish` uploads from the top of a run dir (ablate's cache stays: its figures are in eval_results.json)
PUBLISHED_RUN_FILES = tuple(e.name for e in HOUSEHOLD if e.published and not e.folder)

# `.NAME.tmp-PID` (atomic_write), `.NAME.tmp-PID-XXXX` (atomic_dir), `.NAME.old-PID` (replace_dir)
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?:tmp-\d+(?:-[A-Za-z0-9_]+)?|old-\d+)")


def household_entry(name: str, is_dir: bool, extra_dirs: tuple[str, ...] = ()) -> HouseholdEntry | None:
    """The entry a top-level `name` of a run dir is (or is a writer's leftover of), None for anything else.
    `extra_dirs`: folders a run put there by its settings (a data_cache inside the run dir)."""
    leftover = _TEMP_NAME.fullmatch(name)
    base = leftover.group("name") if leftover else name
    if is_dir and base in extra_dirs:
        return HouseholdEntry(base, True, "pretrain", "the data_cache the recipe set inside the run dir")
    return next((e for e in HOUSEHOLD if e.name == base and e.folder == is_dir), None)


def in_household(name: str, is_dir: bool, extra_dirs: tuple[str, ...] = ()) -> bool:
    """Whether a top-level entry of a run dir is one a zh-bert command writes there (the `legacy` rule a claim
    of the run dir takes)."""
    return household_entry(name, is_dir, extra_dirs) is not None
