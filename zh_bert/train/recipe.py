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

from zh_bert.core.config import check_bounds, check_finite, from_dict, load_yaml, option, parse_set
from zh_bert.core.errors import ZhBertError, unknown_key_error
from zh_bert.train.masking import MaskingConfig, scheduled_mask_rate

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


# The first key of each section of a rendered recipe (`render_recipe`, docs/pretrain.md's table).
SECTIONS = {
    "out_dir": "where things are",
    "objective": "objective and masking",
    "seq_len": "shape and batch",
    "lr": "optimizer and schedule",
    "precision": "precision and memory",
    "save_every": "bookkeeping",
    "vocab_kind": "raw-corpus path only (ignored when data is a SHARDDIR)",
}


@dataclass
class Recipe:
    """Every key of a pretraining recipe, each declared once with its type, default and help: validation,
    `zh-bert pretrain --print-recipe`, recipes/tiny-cpu.yaml's comments and docs/pretrain.md's table all
    come from these fields."""
    # --- where things are
    out_dir: str = option("runs/tiny-cpu", help="run directory: metrics.jsonl, curves.png, run.json, "
                          "checkpoints/, final/ (a new folder, or a run dir of pretrain's own)")
    data: Union[str, list[str]] = option(
        "corpora/sample/zhwiki_sampled.txt",
        help="a SHARDDIR (has meta.json), cleaned documents (a `zh-bert clean` OUTDIR, or a dir of only "
             "*.jsonl / *.jsonl.gz parts of {\"text\", \"source\"} lines: vocab and shard, not cleaned again) or "
             "raw text files/dirs (cleaned, a vocab built and sharded first); a list may not mix cleaned and raw. "
             "Built data is cached under data_cache, keyed by the input bytes and settings")
    tokenizer: Optional[str] = option(None, help="TOKDIR; null = init_from's tokenizer, or the one built from "
                                      "the raw corpus (vocab_kind, vocab_size)")
    model: str = option("tiny", help="preset tiny L2/H128 | mini L4/H256 | small L4/H512 | medium L8/H512 | "
                        "base L12/H768 | large L24/H1024 (UER's names), or a config.json path (model_type bert, "
                        "or modernbert with architecture: modernbert)")
    architecture: Literal["bert", "modernbert"] = option(
        "bert", help="bert = stock BertForMaskedLM (2018); modernbert = stock ModernBertForMaskedLM (RoPE, pre-norm, "
                     "GeGLU sized to the BERT preset's parameter count, no biases, local/global attention): the "
                     "preset's layers/hidden/heads either way")
    init_from: Optional[str] = option(None, help="checkpoint dir to continue pretraining from (its tokenizer, "
                                      "fitted to `tokenizer` if set); null = from scratch")
    attention_init: Literal["stock", "neighbour"] = option(
        "stock", help="start of a from-scratch model: stock = BERT's N(0, 0.02); neighbour = layer-0 heads start "
                      "on the previous/next token (still a stock BERT checkpoint; see model.neighbour_attention_init; "
                      "bert only)")
    global_attn_every_n_layers: int = option(3, help="modernbert: layer i attends globally when i mod N = 0, the "
                                             "others in a sliding window (ModernBERT: 3)")
    local_attention: int = option(128, help="modernbert: sliding-window size in tokens, even (local_attention / 2 to "
                                  "each side; ModernBERT: 128)")
    global_rope_theta: float = option(160000.0, help="modernbert: RoPE base of the global layers (ModernBERT: 160,000)")
    local_rope_theta: float = option(10000.0, help="modernbert: RoPE base of the sliding-window layers (10,000)")
    # --- objective and masking (the masking keys are zh_bert.train.masking.MaskingConfig's fields)
    objective: Literal["mlm", "mlm+nsp", "mlm+sop", "electra"] = option(
        "mlm", help="mlm; mlm+nsp / mlm+sop also train next-sentence / sentence-order prediction on shards built "
                    "with --pairs; electra = generator MLM + rtd_weight × the discriminator's replaced-token "
                    "detection (final/ = discriminator, final/generator/ = the masked LM)")
    generator_ratio: float = option(0.25, help="electra: generator hidden size / discriminator's, in (0, 1] "
                                    "(same layers, intermediate size scaled alike, one head per 64 dims)")
    rtd_weight: float = option(50.0, help="electra: λ in loss = generator MLM + λ · RTD, >= 0 (Clark et al.: 50)")
    masking: MaskingConfig = option(default_factory=MaskingConfig,
                                    help="the masking strategy and its settings (flat keys below)")
    mask_rate_schedule: Literal["constant", "rise-decay"] = option(
        "constant", help="constant = mask_rate at every step; rise-decay = Chinese ModernBERT's (arXiv 2510.12285): "
                         "mask_rate rising linearly to mask_rate_peak over warmup_steps, then falling linearly back to "
                         "mask_rate at max_steps (validation keeps mask_rate, so its figures stay comparable)")
    mask_rate_peak: float = option(0.3, help="rise-decay: the mask rate at the end of warmup, in (mask_rate, 1)")
    # --- shape and batch
    seq_len: int = option(128, help="tokens per packed sequence, [CLS] ... [SEP] (must match the SHARDDIR's)")
    global_batch: int = option(32, help="sequences per optimizer step, all processes together")
    micro_batch: int = option(32, help="sequences per forward pass per process; accumulation = global_batch / "
                              "(micro_batch × processes), which must divide exactly")
    # --- optimizer and schedule
    lr: float = option(1e-4, help="peak AdamW learning rate")
    weight_decay: float = option(0.01, help="AdamW decoupled weight decay (not on biases and LayerNorm)")
    betas: list[float] = option(default_factory=lambda: [0.9, 0.999], help="AdamW betas, two numbers in [0, 1)")
    adam_eps: float = option(1e-6, help="AdamW epsilon")
    grad_clip: float = option(1.0, help="max global gradient norm; 0 = no clipping")
    warmup_steps: int = option(100, help="linear warmup steps")
    max_steps: int = option(1000, help="optimizer steps in the run")
    schedule: Literal["linear", "cosine", "constant", "wsd"] = option(
        "linear", help="lr after warmup: linear or cosine decay to 0, constant, or wsd = warmup-stable-decay (peak lr "
                       "until the last decay_fraction of max_steps, then linear to 0; the weights at the start of the "
                       "decay are kept as checkpoints/nodecay/, to continue pretraining from)")
    decay_fraction: float = option(0.1, help="wsd: fraction of max_steps spent decaying, in (0, 1]")
    dropout: float = option(0.1, help="hidden dropout of models built from scratch (saved in config.json, so "
                            "fine-tuning the checkpoint uses it too)")
    attention_dropout: float = option(0.0, help="attention-probability dropout; 0 keeps SDPA on its fused kernel "
                                      "(on a CPU any other value takes the math path: 4-6x slower attention)")
    # --- precision and memory
    precision: Literal["auto", "fp32", "fp16", "bf16"] = option(
        "auto", help="auto = bf16 where native (CPUs with avx512_bf16, Ampere+ GPUs), fp16 with loss scaling on "
                     "older GPUs, fp32 on Kepler and other CPUs; the log states the precision in effect")
    loss_scale_init: float = option(65536.0, bounds=(1.0, 2.0 ** 24),
                                    help="fp16: the dynamic loss scale at the start (2^16); an overflowed step is "
                                    "skipped and halves it. Bounded because above 2^24 the first steps overflow and "
                                    "are skipped until it halves down, and below 1 small gradients round to 0 in "
                                    "fp16; a run that still skips most steps, or whose every gradient is 0, ends "
                                    "with an error")
    loss_scale_growth_interval: int = option(2000, help="fp16: the loss scale doubles after this many steps in a "
                                             "row without overflow")
    deterministic: Optional[bool] = option(None, help="deterministic kernels, so a resumed run repeats an "
                                           "uninterrupted one exactly; null = true on a CPU (its kernels are), "
                                           "false on CUDA, where true sets torch.use_deterministic_algorithms and "
                                           "CUBLAS_WORKSPACE_CONFIG at some cost in speed (run.json says which)")
    tf32: bool = option(True, help="fp32 on Ampere+ GPUs: matmuls and convolutions in TF32 (10-bit mantissa, "
                        "several times faster); ignored elsewhere")
    compile: bool = option(False, help="torch.compile the encoder (Inductor; on CUDA needs Triton, sm_70+): "
                           "faster steps after a compile of a minute or more at the start")
    grad_checkpointing: bool = option(False, help="recompute activations in backward: less memory, ~30% slower")
    max_nan_streak: int = option(20, help="stop after this many consecutive skipped steps (non-finite loss or "
                                 "gradient norm)")
    # --- bookkeeping
    save_every: int = option(500, help="checkpoint every N steps (also at the end and on SIGINT/SIGTERM); "
                             "0 = only then")
    keep_last: int = option(2, help="keep the newest K checkpoints")
    log_every: int = option(10, help="metrics.jsonl + TensorBoard line every N steps")
    eval_every: int = option(200, help="validation MLM loss/accuracy every N steps (and at the end); 0 = only "
                             "at the end")
    eval_batches: int = option(20, help="validation micro-batches, fixed masks (comparable across evaluations)")
    seed: int = option(42, help="model init, data order, masking, dropout; in [0, 2^32 - 1]")
    # --- raw-corpus path only (ignored when data is a SHARDDIR)
    vocab_kind: Literal["char", "wordpiece", "sentencepiece", "word"] = option(
        "char", help="`zh-bert vocab --kind`")
    vocab_size: Optional[int] = option(None, help="`zh-bert vocab --size`; null = the builder's default")
    doc_sep: Literal["line", "blank"] = option("line", help="`zh-bert clean --doc-sep`: one document per line, "
                                               "or blank-line separated")
    valid_docs: int = option(100, help="`zh-bert shard --valid-docs`: documents held out for validation")
    data_cache: Optional[str] = option(None, help="where the clean/vocab/shard outputs are cached; null = "
                                       "out_dir/data")

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
        positions = 8192 if self.architecture == "modernbert" else 512
        if self.seq_len > positions and self.init_from is None and not self.model.endswith(".json"):
            raise ZhBertError(f"seq_len {self.seq_len} exceeds the {self.architecture} presets' {positions} positions")
        if self.seq_len < 8:
            raise ZhBertError(f"seq_len {self.seq_len} is too short (at least 8)")
        if not 0 < self.generator_ratio <= 1:
            raise ZhBertError(f"'generator_ratio' must be in (0, 1] (the generator's hidden size as a fraction of "
                              f"the discriminator's), got {self.generator_ratio}")
        check_seed("'seed'", self.seed)
        if self.rtd_weight < 0:
            raise ZhBertError(f"'rtd_weight' must be >= 0, got {self.rtd_weight}")
        self._check_architecture()
        self._check_schedules()
        if self.objective == "electra" and self.init_from:
            raise ZhBertError("objective electra trains a generator and a discriminator from scratch; init_from "
                              "is not supported with it (set init_from: null)")

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

    def _check_architecture(self) -> None:
        """What `architecture: modernbert` cannot do, named before any data work."""
        if self.architecture != "modernbert":
            return
        if self.objective in ("mlm+nsp", "mlm+sop"):
            raise ZhBertError(f"objective {self.objective} needs token-type embeddings and a pooler, which ModernBERT "
                              f"does not have: use objective mlm with architecture modernbert")
        if self.objective == "electra":
            raise ZhBertError("objective electra builds ELECTRA's own BERT-style generator and discriminator: use "
                              "architecture bert with it, or objective mlm with modernbert")
        if self.attention_init == "neighbour":
            raise ZhBertError("attention_init neighbour writes BERT's learned position embeddings; ModernBERT has "
                              "RoPE instead: set attention_init: stock with architecture modernbert")
        if self.global_attn_every_n_layers < 1:
            raise ZhBertError(f"'global_attn_every_n_layers' must be at least 1, got {self.global_attn_every_n_layers}")
        if self.local_attention < 2 or self.local_attention % 2:
            raise ZhBertError(f"'local_attention' must be an even number of tokens >= 2 (half to each side), got "
                              f"{self.local_attention}")
        for key in ("global_rope_theta", "local_rope_theta"):
            if not getattr(self, key) > 1:
                raise ZhBertError(f"'{key}' must be > 1, got {getattr(self, key)}")

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

    from zh_bert.core.fileio import atomic_write

    from zh_bert.train.rundir import RECIPE_HEADER

    with atomic_write(path) as f:
        f.write(RECIPE_HEADER)   # the run dir's marker: pretrain writes into a folder only when it holds this
        yaml.safe_dump(recipe.to_dict(), f, allow_unicode=True, sort_keys=False)
