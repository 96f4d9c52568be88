"""The run-dir layout, resolved in one place.

`zh-bert pretrain` writes `RUN/run.json` and `RUN/recipe.yaml`, the finished model in `RUN/final/` and
resumable checkpoints in `RUN/checkpoints/step-N/`; what every command writes at the top of a run dir is listed
once, in `zh_bert.core.fileio.household`. `eval`, `finetune`, `publish` and `demo` accept a run dir,
a checkpoint inside one, or any model folder (has config.json); resolving it here makes them accept the same
paths, refuse the same way, and agree on which run (so which `eval_results.json`) a checkpoint belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import CHECKPOINTS, FINAL, RUN_RECIPE, RUN_SUMMARY, read_object

GENERATOR = "generator"   # objective electra: FINAL/ (and each checkpoint) = discriminator, GENERATOR/ = masked LM
MARKERS = (RUN_SUMMARY, RUN_RECIPE)  # written at the top of every run dir
RECIPE_HEADER = "# written by zh-bert pretrain: the resolved recipe of this run dir, every key explicit\n"
# what `final/` of older versions (before its manifest) holds: a model folder's files, and ELECTRA's generator/
FINAL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "generation_config.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "vocab.txt", "zh_bert_vocab.json", "spiece.model", "chat_template.jinja")


def final_entry(name: str, is_dir: bool) -> bool:
    """Whether an entry of a `final/` written before manifests is one pretrain writes there."""
    if is_dir:
        return name == GENERATOR
    return name in FINAL_FILES or (name.startswith("model-") and name.endswith(".safetensors"))


def written_by_pretrain(path: str | Path) -> bool:
    """The marker that proves a folder is a pretrain run dir, so that pretrain may write into it again:
    its recipe.yaml with pretrain's header, its run.json, or a complete checkpoint (run dirs of versions
    before the header). A recipe.yaml alone proves nothing: a user may keep one of their own."""
    path = Path(path)
    recipe = path / RUN_RECIPE
    if recipe.is_file():
        with open(recipe, encoding="utf-8", errors="replace") as f:
            if f.readline() == RECIPE_HEADER:
                return True
    return _run_summary(path / RUN_SUMMARY) or any((path / CHECKPOINTS).glob("step-*/trainer_state.json"))


def _run_summary(path: Path) -> bool:
    """Whether `path` is the run.json pretrain writes (a JSON object with its 'status' text and 'steps' count);
    one that is not proves nothing."""
    try:
        summary = read_object(path)
        return bool(summary.text("status")) and summary.integer("steps", lo=0) >= 0
    except ZhBertError:
        return False


def is_model_dir(path: str | Path) -> bool:
    return (Path(path) / "config.json").is_file()


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return any((path / m).is_file() for m in MARKERS) or is_model_dir(path / FINAL)


def find_run_dir(path: str | Path) -> Path | None:
    """The run dir (absolute) holding `path`: the dir itself, `RUN/final` or `RUN/checkpoints/step-N`;
    None for a folder outside any run."""
    p = Path(path).resolve()
    return next((cand for cand in (p, p.parent, p.parent.parent) if is_run_dir(cand)), None)


@dataclass(frozen=True)
class Checkpoint:
    """A model folder to load and the run dir it belongs to (None for a bare model folder)."""
    model_dir: Path
    run_dir: Path | None


def locate(path: str | Path) -> Checkpoint:
    """A model folder (`path` itself, or `path/final` for a run dir) and its run dir; ZhBertError otherwise."""
    p = Path(path)
    if not p.exists():
        raise ZhBertError(f"{p}: no such checkpoint or run dir")
    for cand in (p, p / FINAL):
        if is_model_dir(cand):
            return Checkpoint(cand, find_run_dir(cand))
    if is_run_dir(p):
        raise ZhBertError(f"{p}: run dir has no {FINAL}/ model yet; use one of {p / CHECKPOINTS}/step-* instead")
    raise ZhBertError(f"{p}: not a checkpoint (no config.json) nor a run dir with {FINAL}/")


def model_dir(path: str | Path) -> Path:
    """The folder `from_pretrained` loads for a run dir, checkpoint or model folder."""
    return locate(path).model_dir


def masked_lm_dir(path: str | Path) -> Path:
    """The folder a masked-LM command (`eval mlm|cloze`, `demo`) loads: `model_dir(path)`, or its
    `generator/` when it has one (an ELECTRA run's final/ or checkpoint is the discriminator, which predicts
    no tokens; the generator beside it is the masked LM)."""
    folder = model_dir(path)
    return folder / GENERATOR if is_model_dir(folder / GENERATOR) else folder


def finished_runs(root: str | Path) -> list[Path]:
    """The `final/` model folders of the runs directly under `root` (e.g. runs/*/final)."""
    root = Path(root)
    return sorted(p.parent for p in root.glob(f"*/{FINAL}/config.json")) if root.is_dir() else []
