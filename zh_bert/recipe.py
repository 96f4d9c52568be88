"""The recipe schema: one flat YAML mapping = one `Recipe`; `--set key=value` overrides one key.

The field comments below are the schema documentation; `recipes/*.yaml` repeat them next to each key.
The masking keys (`masking` = the strategy, `mask_rate`, `mask_token_prob`, `random_token_prob`,
`max_ngram`) stay flat in YAML and `--set`, as every recipe writes them, but live in one place in Python:
`Recipe.masking`, a `zh_bert.masking.MaskingConfig` (`masking: {strategy: ngram, max_ngram: 4}` is
accepted too). Paths are kept as written; they resolve against the current directory (README commands
run from the repo root).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Union

from zh_bert.config import check_finite, from_dict, load_yaml, parse_set
from zh_bert.errors import ZhBertError, unknown_key_error
from zh_bert.masking import MaskingConfig

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
class Recipe:
    # --- where things are
    out_dir: str = "runs/tiny-cpu"          # run directory (metrics, checkpoints, final/)
    data: Union[str, list[str]] = "corpora/sample/zhwiki_sampled.txt"
    # ^ a SHARDDIR (has meta.json) or a corpus (file, dir or list) -> vocab/shard first, cached; raw text is
    #   cleaned first, cleaned documents (a `zh-bert clean` OUTDIR, pipeline.is_cleaned_dir) are not
    tokenizer: Optional[str] = None          # TOKDIR; null = init_from's tokenizer or the one built from raw data
    model: str = "tiny"                      # preset tiny|mini|small|medium|base|large, or a BertConfig json path
    init_from: Optional[str] = None          # HF checkpoint dir to continue from (null = from scratch)
    attention_init: Literal["stock", "neighbour"] = "stock"  # from-scratch start; see model.neighbour_attention_init
    # --- objective and masking (see zh_bert.masking)
    objective: Literal["mlm", "mlm+nsp", "mlm+sop", "electra"] = "mlm"
    # ^ electra: generator (MLM at the masked positions) + discriminator (replaced-token detection on every
    #   token), see model.ElectraPretrainModel; final/ = discriminator, final/generator/ = the masked LM
    generator_ratio: float = 0.25            # electra: generator hidden size / discriminator's, in (0, 1]
    rtd_weight: float = 50.0                 # electra: λ in loss = generator MLM + λ · RTD (Clark et al.: 50)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    # ^ flat keys: masking (strategy token|wwm|ngram|unigram-noise, "wwm"), mask_rate (0.15), mask_token_prob
    #   (0.8), random_token_prob (0.1), max_ngram (3, 1..4); their meaning: zh_bert.masking.MaskingConfig
    # --- shape and batch
    seq_len: int = 128                       # tokens per sequence (must match the SHARDDIR's)
    global_batch: int = 32                   # sequences per optimizer step, all processes together
    micro_batch: int = 32                    # sequences per forward pass per process; accumulation derived
    # --- optimizer and schedule
    lr: float = 1e-4                         # peak learning rate (AdamW)
    weight_decay: float = 0.01               # AdamW decoupled weight decay (not on biases/LayerNorm)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    adam_eps: float = 1e-6                   # AdamW epsilon
    grad_clip: float = 1.0                   # max global grad norm (0 = off)
    warmup_steps: int = 100                  # linear warmup steps
    max_steps: int = 1000                    # optimizer steps in the run
    schedule: Literal["linear", "cosine", "constant"] = "linear"  # decay after warmup
    dropout: float = 0.1                     # hidden dropout for models built from scratch
    attention_dropout: float = 0.0           # attention-probability dropout; 0 lets SDPA use its fused kernel
    # ^ (on CPU a nonzero value falls back to the math path, 4-6x slower attention; short pretraining runs
    #    lose nothing from it, cf. Geiping & Goldstein 2022 "Cramming")
    # --- precision and memory
    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"   # auto: bf16 where native, fp16 on older GPUs
    grad_checkpointing: bool = False         # recompute activations in backward (less memory, ~30% slower)
    max_nan_streak: int = 20                 # stop after this many skipped non-finite steps in a row
    # --- bookkeeping
    save_every: int = 500                    # checkpoint every N steps (0 = only at the end / on signal)
    keep_last: int = 2                       # keep the newest K checkpoints
    log_every: int = 10                      # metrics.jsonl / TensorBoard line every N steps
    eval_every: int = 200                    # validation every N steps (0 = only at the end)
    eval_batches: int = 20                   # validation micro-batches (fixed masking: comparable over time)
    seed: int = 42                           # model init, data order, masking, dropout
    # --- raw-corpus path only (ignored when data is a SHARDDIR)
    vocab_kind: Literal["char", "wordpiece", "sentencepiece", "word"] = "char"  # `zh-bert vocab --kind`
    vocab_size: Optional[int] = None         # `zh-bert vocab --size` (null = the builder's default)
    doc_sep: Literal["line", "blank"] = "line"   # `zh-bert clean --doc-sep`: one doc per line or blank-separated
    valid_docs: int = 100                    # `zh-bert shard --valid-docs`: documents held out for validation
    data_cache: Optional[str] = None         # cache dir for clean/vocab/shard outputs (null = out_dir/data)

    @property
    def data_paths(self) -> list[str]:
        return [self.data] if isinstance(self.data, str) else list(self.data)

    @property
    def pairs(self) -> Optional[str]:
        """The sentence pairs the shards must hold for `objective` (`zh-bert shard --pairs`): nsp, sop or None."""
        return {"mlm+nsp": "nsp", "mlm+sop": "sop"}.get(self.objective)

    def __post_init__(self):
        """Cross-field checks that a type check cannot do; errors name the keys involved."""
        if not isinstance(self.masking, MaskingConfig):
            raise ZhBertError(f"'masking' must be a MaskingConfig, got {self.masking!r}")
        check_finite(self, as_flag=False)
        if not self.data_paths:
            raise ZhBertError("'data' is empty: give a SHARDDIR or raw corpus files")
        for key in ("seq_len", "global_batch", "micro_batch", "max_steps", "keep_last", "eval_batches",
                    "max_nan_streak"):
            if getattr(self, key) < 1:
                raise ZhBertError(f"'{key}' must be at least 1, got {getattr(self, key)}")
        for key in ("warmup_steps", "save_every", "log_every", "eval_every", "valid_docs"):
            if getattr(self, key) < 0:
                raise ZhBertError(f"'{key}' must be >= 0, got {getattr(self, key)}")
        if self.global_batch % self.micro_batch:
            raise ZhBertError(f"global_batch {self.global_batch} is not a multiple of micro_batch {self.micro_batch}")
        if not self.lr > 0:
            raise ZhBertError(f"'lr' must be positive, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ZhBertError(f"'betas' must be two numbers in [0, 1), got {self.betas}")
        for key in ("dropout", "attention_dropout"):
            if not 0 <= getattr(self, key) < 1:
                raise ZhBertError(f"'{key}' must be in [0, 1), got {getattr(self, key)}")
        if self.seq_len > 512 and self.init_from is None and not self.model.endswith(".json"):
            raise ZhBertError(f"seq_len {self.seq_len} exceeds the presets' 512 positions")
        if self.seq_len < 8:
            raise ZhBertError(f"seq_len {self.seq_len} is too short (at least 8)")
        if not 0 < self.generator_ratio <= 1:
            raise ZhBertError(f"'generator_ratio' must be in (0, 1] (the generator's hidden size as a fraction of "
                              f"the discriminator's), got {self.generator_ratio}")
        check_seed("'seed'", self.seed)
        if self.rtd_weight < 0:
            raise ZhBertError(f"'rtd_weight' must be >= 0, got {self.rtd_weight}")
        if self.objective == "electra" and self.init_from:
            raise ZhBertError("objective electra trains a generator and a discriminator from scratch; init_from "
                              "is not supported with it (set init_from: null)")

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
    "grad_clip", "max_nan_streak",                      # read at every step
    "save_every", "keep_last", "log_every", "eval_every", "eval_batches",   # bookkeeping
    "micro_batch", "precision", "grad_checkpointing",   # how a step is computed here, not what it computes
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

    from zh_bert.fileio import atomic_write

    from zh_bert.rundir import RECIPE_HEADER

    with atomic_write(path) as f:
        f.write(RECIPE_HEADER)   # the run dir's marker: pretrain writes into a folder only when it holds this
        yaml.safe_dump(recipe.to_dict(), f, allow_unicode=True, sort_keys=False)
