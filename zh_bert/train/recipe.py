"""The recipe schema: one flat YAML mapping = one `Recipe`; `--set key=value` overrides one key.

Each `Recipe` field is declared once (type, default, choices from a Literal, help) with `config.option`, the
mechanism of every command's options; `render_recipe` and `markdown_table` turn the fields into the commented
YAML of `--print-recipe` and recipes/tiny-cpu.yaml and into docs/pretrain.md's table. The masking keys (`masking` = the strategy, `mask_rate`, `mask_token_prob`, `random_token_prob`,
`max_ngram`) stay flat in YAML and `--set`, as every recipe writes them, but live in one place in Python:
`Recipe.masking`, a `zh_bert.train.masking.MaskingConfig` (`masking: {strategy: ngram, max_ngram: 4}` is
accepted too). Paths are kept as written; they resolve against the current directory (README commands
run from the repo root).
"""

from __future__ import annotations

import dataclasses
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Union

from zh_bert.core.config import (
    check_bounds,
    check_finite,
    from_dict,
    load_yaml,
    parse_set,
)
from zh_bert.core.errors import ZhBertError, unknown_key_error
from zh_bert.core.fileio import atomic_write
from zh_bert.train.arch import get as get_architecture
from zh_bert.train.masking import MaskingConfig, scheduled_mask_rate
from zh_bert.train.objectives import Objective
from zh_bert.train.objectives import objective_named
from zh_bert.train.recipe_keys import (
    SECTIONS,
    BatchKeys,
    BookkeepingKeys,
    ObjectiveKeys,
    OptimizerKeys,
    PlaceAndModelKeys,
    PrecisionKeys,
    RawCorpusKeys,
)
from zh_bert.train.rundir import RECIPE_HEADER

# accepted alternative spellings -> key; they also feed "did you mean" (`lerning_rate` -> `lr`)
ALIASES = {
    "learning_rate": "lr",
    "steps": "max_steps",
    "train_steps": "max_steps",
    "warmup": "warmup_steps",
    "batch_size": "global_batch",
    "micro_batch_size": "micro_batch",
    "max_seq_len": "seq_len",
    "seq_length": "seq_len",
    "output_dir": "out_dir",
    "masking_strategy": "masking",
    "mixed_precision": "precision",
    "max_grad_norm": "grad_clip",
    "gradient_checkpointing": "grad_checkpointing",
    "tokenizer_dir": "tokenizer",
}
# flat recipe key -> MaskingConfig field (the strategy is the recipe key `masking`, as in `--masking`)
MASKING_KEYS = {("masking" if f.name == "strategy" else f.name): f.name for f in dataclasses.fields(MaskingConfig)}
SEED_MAX = 2**32 - 1   # numpy's and torch's seeds are unsigned 32-bit: outside [0, SEED_MAX] they raise mid-run


def check_seed(name: str, first: int, last: int | None = None) -> None:
    """Refuse a seed (or the seeds first..last) outside [0, SEED_MAX] before any work, naming `name`
    as the user wrote it ('seed', --seed)."""
    last = first if last is None else last
    if first < 0 or last > SEED_MAX:
        span = f"{first}" if last == first else f"{first}..{last}"
        raise ZhBertError(f"{name} must be in [0, {SEED_MAX:,}] (a 32-bit seed), got {span}")


@dataclass
class Recipe(RawCorpusKeys, BookkeepingKeys, PrecisionKeys, OptimizerKeys, BatchKeys, ObjectiveKeys, PlaceAndModelKeys):
    """Every key of a pretraining recipe, each declared once with its type, default and help: validation,
    `zh-bert pretrain --print-recipe`, recipes/tiny-cpu.yaml's comments and docs/pretrain.md's table all
    come from these fields, declared in the key groups above (`GROUPS`), which other commands take keys from
    (`config.keys_of`)."""

    @property
    def data_paths(self) -> list[str]:
        return [self.data] if isinstance(self.data, str) else list(self.data)

    @property
    def objective_spec(self) -> Objective:
        """The `Objective` object of `objective`: everything that differs between the objectives."""
        return objective_named(self.objective)

    @property
    def pairs(self) -> Optional[str]:
        """The sentence pairs the shards must hold for `objective` (`zh-bert shard --pairs`): nsp, sop or None."""
        return self.objective_spec.pairs

    def __post_init__(self):
        """Cross-field checks that a type check cannot do; errors name the keys involved."""
        if not isinstance(self.masking, MaskingConfig):
            raise ZhBertError(f"'masking' must be a MaskingConfig, got {self.masking!r}")
        check_finite(self, as_flag=False)
        if not self.data_paths:
            raise ZhBertError("'data' is empty: give a SHARDDIR or raw corpus files")
        if any(not str(p).strip() for p in self.data_paths):   # '' would be the current directory, read as text
            raise ZhBertError("'data' has an empty path: give a SHARDDIR or raw corpus files (an empty value is "
                              "not taken for the current directory)")
        for key in ("seq_len", "global_batch", "micro_batch", "max_steps", "keep_last", "eval_batches",
                    "max_nan_streak", "loss_scale_growth_interval"):
            if getattr(self, key) < 1:
                raise ZhBertError(f"'{key}' must be at least 1, got {getattr(self, key)}")
        for key in ("warmup_steps", "save_every", "log_every", "eval_every", "valid_docs"):
            if getattr(self, key) < 0:
                raise ZhBertError(f"'{key}' must be >= 0, got {getattr(self, key)}")
        if self.global_batch % self.micro_batch:
            raise ZhBertError(f"global_batch {self.global_batch} is not a multiple of micro_batch {self.micro_batch}")
        for key in ("lr", "loss_scale_init"):
            if not getattr(self, key) > 0:
                raise ZhBertError(f"'{key}' must be positive, got {getattr(self, key)}")
        check_bounds(self)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ZhBertError(f"'betas' must be two numbers in [0, 1), got {self.betas}")
        for key in ("dropout", "attention_dropout"):
            if not 0 <= getattr(self, key) < 1:
                raise ZhBertError(f"'{key}' must be in [0, 1), got {getattr(self, key)}")
        if self.seq_len < 8:
            raise ZhBertError(f"seq_len {self.seq_len} is too short (at least 8)")
        if not 0 < self.generator_ratio <= 1:
            raise ZhBertError(f"'generator_ratio' must be in (0, 1] (the generator's hidden size as a fraction of "
                              f"the discriminator's), got {self.generator_ratio}")
        check_seed("'seed'", self.seed)
        if self.rtd_weight < 0:
            raise ZhBertError(f"'rtd_weight' must be >= 0, got {self.rtd_weight}")
        self.arch.check_recipe(self)
        self.objective_spec.check_recipe(self)
        self._check_schedules()

    def mask_rate_at(self, step: int) -> float:
        """The mask rate of training step `step` (`mask_rate_schedule`)."""
        m = self.masking
        return scheduled_mask_rate(self.mask_rate_schedule, m.mask_rate, self.mask_rate_peak, self.warmup_steps,
                                   self.max_steps, step)

    def mean_mask_rate(self) -> float:
        """The mask rate averaged over the run's steps: what its MLM head costs per token on average."""
        if self.mask_rate_schedule == "constant":
            return self.masking.mask_rate
        return sum(self.mask_rate_at(s) for s in range(self.max_steps)) / self.max_steps

    @property
    def arch(self):
        """The `Architecture` object of `architecture`: what differs between the model families."""
        return get_architecture(self.architecture)

    def _check_schedules(self) -> None:
        """wsd's decay and the rise-decay mask rate must fit the run."""
        if not 0 < self.decay_fraction <= 1:
            raise ZhBertError(f"'decay_fraction' must be in (0, 1], got {self.decay_fraction}")
        if self.mask_rate_schedule == "rise-decay" and not self.masking.mask_rate < self.mask_rate_peak < 1:
            raise ZhBertError(f"'mask_rate_peak' must be in (mask_rate {self.masking.mask_rate}, 1) for "
                              f"mask_rate_schedule rise-decay, got {self.mask_rate_peak}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "recipe") -> "Recipe":
        """A validated Recipe from recipe keys (flat or nested masking, aliases allowed); every error
        starts with `where`."""
        flat = _flat_keys(data, where)
        masking = {MASKING_KEYS[k]: flat.pop(k) for k in list(flat) if k in MASKING_KEYS}
        try:
            flat["masking"] = from_dict(MaskingConfig, masking, where=f"{where}: masking")
            return from_dict(cls, flat, where=where)
        except ZhBertError as e:   # __post_init__ messages do not know the file; from_dict's do
            msg = str(e)
            raise ZhBertError(msg if msg.startswith(f"{where}: ") else f"{where}: {msg}") from None

    def to_dict(self) -> dict[str, Any]:
        """The flat recipe mapping (masking keys inline, as recipes write them): `from_dict` reads it back."""
        out: dict[str, Any] = {}
        for key, value in dataclasses.asdict(self).items():
            if key == "masking":
                out.update({k: value[name] for k, name in MASKING_KEYS.items()})
            else:
                out[key] = value
        return out


# every key a recipe may set, in recipe order
KEYS = tuple(Recipe().to_dict())

# Keys a resumed run may change (by `--set` or an edited recipe); every other key must equal the checkpoint's,
# because it changes what the run computes (model, data, masking, seed, batch, objective, optimizer shape).
CHANGEABLE_ON_RESUME = frozenset({
    "out_dir",                                          # continue in a new run dir (a branch)
    "max_steps", "warmup_steps", "schedule", "lr",      # the lr schedule, recomputed from the resumed step on
    "decay_fraction",
    "grad_clip", "max_nan_streak",                      # read at every step
    "save_every", "keep_last", "log_every", "eval_every", "eval_batches",   # bookkeeping
    "micro_batch", "precision", "grad_checkpointing",   # how a step is computed here, not what it computes
    "deterministic", "tf32", "compile", "loss_scale_init", "loss_scale_growth_interval",
    "data_cache",                                       # where raw-corpus data is cached (rebuilt alike)
})


def changes_on_resume(saved: Mapping[str, Any], recipe: Recipe, where: str) -> dict[str, list]:
    """{key: [checkpoint's value, this run's]} for the keys `recipe` changes relative to the checkpoint's
    recipe `saved`; a key outside CHANGEABLE_ON_RESUME is a ZhBertError naming it."""
    try:
        old = Recipe.from_dict(saved, where).to_dict() if saved else {}
    except ZhBertError:       # a recipe of an older version: compare the keys both know
        old = {k: v for k, v in saved.items() if k in KEYS}
    new = recipe.to_dict()
    changed = {k: [old[k], new[k]] for k in new if k in old and old[k] != new[k]}
    for key, (before, now) in changed.items():
        if key not in CHANGEABLE_ON_RESUME:
            raise ZhBertError(f"{where}: '{key}' cannot change when resuming (checkpoint: {before!r}, now: "
                              f"{now!r}): set it back, or start a new run with its own out_dir")
    return changed


def _flat_keys(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`data` with aliases resolved and a nested `masking:` mapping flattened; unknown keys name `where`."""
    if not isinstance(data, Mapping):
        raise ZhBertError(f"{where}: expected a mapping of key: value, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        key = ALIASES.get(str(key), str(key))
        if key == "masking" and isinstance(value, MaskingConfig):
            value = dataclasses.asdict(value)
        if key == "masking" and isinstance(value, Mapping):
            by_field = {name: k for k, name in MASKING_KEYS.items()}
            for sub, v in value.items():
                if sub not in by_field:
                    raise unknown_key_error(str(sub), by_field, f"{where}: masking")
                out[by_field[sub]] = v
        elif key in KEYS:
            out[key] = value
        else:
            raise unknown_key_error(key, KEYS, where, ALIASES)
    return out


@dataclass(frozen=True)
class KeyDoc:
    """One recipe key as users see it: flat name, type as written in YAML, default and help."""
    name: str
    type: str
    default: Any
    help: str


def _type_text(tp: Any) -> str:
    """A field annotation as a recipe writer reads it: `int`, `str | null`, `token | wwm`, `list[float]`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return " | ".join(map(str, args))
    if origin is Union:
        return " | ".join("null" if a is type(None) else _type_text(a) for a in args)
    if origin is list:
        return f"list[{_type_text(args[0])}]"
    return tp.__name__


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def key_docs() -> list[KeyDoc]:
    """Every recipe key in recipe order, the masking keys inline (their docs are MaskingConfig's options)."""
    out = []
    for cls, prefix in ((Recipe, None), (MaskingConfig, "masking")):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if cls is Recipe and f.name == "masking":
                out.append(None)   # the masking keys go here
                continue
            name = "masking" if (prefix and f.name == "strategy") else f.name
            out.append(KeyDoc(name, _type_text(hints[f.name]), _default(f), f.metadata["cli"]["help"]))
    slot = out.index(None)
    masking = [d for d in out[slot + 1:] if d.name in MASKING_KEYS]
    return [d for d in out[:slot] if d] + masking + [d for d in out[slot + 1:] if d.name not in MASKING_KEYS]


def yaml_value(value: Any) -> str:
    """`value` as one line of YAML (flow style), as recipes write it."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def render_recipe(recipe: Recipe, header: str = "", reasons: Mapping[str, str] | None = None) -> str:
    """`recipe` as commented YAML: each key under its type, default and help (from the schema), with the
    recipe's own one-line reason, if any, after the value. `header` (comment lines) comes first."""
    values, reasons = recipe.to_dict(), reasons or {}
    lines = [header.rstrip("\n")] if header.strip() else []
    for doc in key_docs():
        if doc.name in SECTIONS:
            lines += ["", f"# --- {SECTIONS[doc.name]}"]
        lines += textwrap.wrap(f"[{doc.type}, default {yaml_value(doc.default)}] {doc.help}", width=COMMENT_WIDTH,
                               initial_indent="# ", subsequent_indent="#   ", break_on_hyphens=False)
        line = f"{doc.name}: {yaml_value(values[doc.name])}"
        lines.append(f"{line}  # {reasons[doc.name]}" if doc.name in reasons else line)
    return "\n".join(lines) + "\n"


COMMENT_WIDTH = 110


def recipe_comments(text: str) -> tuple[str, dict[str, str]]:
    """(the leading comment block, {key: the reason written after its value}) of a recipe's text: what
    `render_recipe` needs, besides the values, to write the same file again."""
    lines = text.splitlines()
    head = []
    for line in lines:
        if not line.startswith("#") or line.startswith("# ---"):
            break
        head.append(line)
    reasons = {}
    for line in lines:
        key, sep, rest = line.partition(": ")
        if sep and not line.startswith((" ", "#")) and "  # " in rest:
            reasons[key] = rest.split("  # ", 1)[1].strip()
    return "\n".join(head), reasons


def markdown_table() -> str:
    """docs/pretrain.md's recipe-key table: one row per key, one bold row per section."""
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for doc in key_docs():
        if doc.name in SECTIONS:
            rows.append(f"| **{cell(SECTIONS[doc.name])}** | | | |")
        rows.append(f"| `{doc.name}` | {cell(doc.type)} | `{cell(yaml_value(doc.default))}` | {cell(doc.help)} |")
    return "\n".join(rows) + "\n"


def load_recipe(path: str | Path | None, overrides: dict[str, Any] | list[str] | None = None) -> Recipe:
    """Recipe from a YAML file (None = all defaults) with `--set` overrides applied, validated once on
    the merged keys (so an override may fix what the file alone would not pass)."""
    where = str(path) if path is not None else "recipe"
    data = _flat_keys(load_yaml(path) if path is not None else {}, where)
    if overrides:
        sets = parse_set(overrides) if isinstance(overrides, list) else dict(overrides)
        data.update(_flat_keys(sets, "--set"))
        where += " with --set"
    return Recipe.from_dict(data, where)


def save_recipe(recipe: Recipe, path: str | Path) -> None:
    """The resolved recipe, every key explicit, so a run dir says exactly what ran; its first line marks
    the folder as a pretrain run dir (`rundir.written_by_pretrain`)."""
    import yaml


    with atomic_write(path) as f:
        f.write(RECIPE_HEADER)   # the run dir's marker: pretrain writes into a folder only when it holds this
        yaml.safe_dump(recipe.to_dict(), f, allow_unicode=True, sort_keys=False)
