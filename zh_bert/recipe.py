"""The recipe schema: one flat YAML mapping = one `Recipe`; `--set key=value` overrides one key.

The field comments below are the schema documentation; `recipes/*.yaml` repeat them next to each key.
Paths are kept as written; they resolve against the current directory (README commands run from the
repo root).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from zh_bert.config import from_dict, load_yaml, parse_set
from zh_bert.errors import ZhBertError

OBJECTIVES = ("mlm", "mlm+nsp", "mlm+sop")
MASKINGS = ("token", "wwm", "ngram", "unigram-noise")

# accepted alternative spellings -> field; they also feed "did you mean" (`lerning_rate` -> `lr`)
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


@dataclass
class Recipe:
    # --- where things are
    out_dir: str = "runs/tiny-cpu"          # run directory (metrics, checkpoints, final/)
    data: Union[str, list[str]] = "corpora/sample/zhwiki_sampled.txt"
    # ^ a SHARDDIR (has meta.json) or a raw corpus (file, dir or list) -> clean/vocab/shard first, cached
    tokenizer: Optional[str] = None          # TOKDIR; null = init_from's tokenizer or the one built from raw data
    model: str = "tiny"                      # preset tiny|mini|small|medium|base|large, or a BertConfig json path
    init_from: Optional[str] = None          # HF checkpoint dir to continue from (null = from scratch)
    attention_init: Literal["stock", "neighbour"] = "stock"  # from-scratch start; see model.neighbour_attention_init
    # --- objective and masking (see zh_bert.masking)
    objective: Literal["mlm", "mlm+nsp", "mlm+sop"] = "mlm"
    masking: Literal["token", "wwm", "ngram", "unigram-noise"] = "wwm"
    mask_rate: float = 0.15                  # fraction of tokens predicted
    mask_token_prob: float = 0.8             # of predicted tokens: replaced by [MASK]
    random_token_prob: float = 0.1           # of predicted tokens: replaced by a random token (rest kept)
    max_ngram: int = 3                       # longest span for masking: ngram
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
    max_nan_streak: int = 20                 # stop after this many consecutive non-finite losses
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

    def validate(self, where: str = "recipe") -> "Recipe":
        """Cross-field checks that a type check cannot do; errors name the keys involved."""
        def bad(msg):
            raise ZhBertError(f"{where}: {msg}")

        if not self.data_paths:
            bad("'data' is empty: give a SHARDDIR or raw corpus files")
        for key in ("seq_len", "global_batch", "micro_batch", "max_steps", "keep_last", "eval_batches",
                    "max_nan_streak"):
            if getattr(self, key) < 1:
                bad(f"'{key}' must be at least 1, got {getattr(self, key)}")
        for key in ("warmup_steps", "save_every", "log_every", "eval_every", "max_ngram", "valid_docs"):
            if getattr(self, key) < 0:
                bad(f"'{key}' must be >= 0, got {getattr(self, key)}")
        if self.global_batch % self.micro_batch:
            bad(f"global_batch {self.global_batch} is not a multiple of micro_batch {self.micro_batch}")
        if not 0 < self.mask_rate < 1:
            bad(f"'mask_rate' must be between 0 and 1, got {self.mask_rate}")
        if min(self.mask_token_prob, self.random_token_prob) < 0 or self.mask_token_prob + self.random_token_prob > 1:
            bad(f"mask_token_prob + random_token_prob must be within [0, 1], got "
                f"{self.mask_token_prob} + {self.random_token_prob}")
        if not self.lr > 0:
            bad(f"'lr' must be positive, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            bad(f"'betas' must be two numbers in [0, 1), got {self.betas}")
        for key in ("dropout", "attention_dropout"):
            if not 0 <= getattr(self, key) < 1:
                bad(f"'{key}' must be in [0, 1), got {getattr(self, key)}")
        if self.seq_len > 512 and self.init_from is None and not self.model.endswith(".json"):
            bad(f"seq_len {self.seq_len} exceeds the presets' 512 positions")
        if self.seq_len < 8:
            bad(f"seq_len {self.seq_len} is too short (at least 8)")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_recipe(path: str | Path | None, overrides: dict[str, Any] | list[str] | None = None) -> Recipe:
    """Recipe from a YAML file (None = all defaults) with `--set` overrides applied, validated."""
    data = load_yaml(path) if path is not None else {}
    where = str(path) if path is not None else "recipe"
    recipe = from_dict(Recipe, data, where=where, aliases=ALIASES)
    if overrides:
        sets = parse_set(overrides) if isinstance(overrides, list) else dict(overrides)
        given = from_dict(Recipe, sets, where="--set", aliases=ALIASES)  # checks names and types
        for key in sets:
            name = ALIASES.get(key, key)
            setattr(recipe, name, getattr(given, name))
    return recipe.validate(where)


def save_recipe(recipe: Recipe, path: str | Path) -> None:
    """The resolved recipe, every key explicit, so a run dir says exactly what ran."""
    import yaml

    from zh_bert.fileio import atomic_write

    with atomic_write(path) as f:
        yaml.safe_dump(recipe.to_dict(), f, allow_unicode=True, sort_keys=False)
