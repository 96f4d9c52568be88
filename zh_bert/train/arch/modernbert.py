"""Stock ModernBERT (`ModernBertForMaskedLM`, transformers >= 4.48) from zh-bert's presets.

`architecture: modernbert` keeps the BERT preset's layers / hidden / heads and swaps the block for
ModernBERT's (Warner et al. 2024): RoPE instead of learned positions, pre-norm, GeGLU, no biases, global
attention every `global_attn_every_n_layers` layers and a sliding window (`local_attention` tokens) in the
others, tied embeddings. The GeGLU width is solved so that the model has the BERT preset's parameter count:
an architecture comparison at the same size, not a bigger model.

config.json keys changed between transformers 4.x (`global_attn_every_n_layers`, `global_rope_theta`,
`local_rope_theta`) and 5.x (`layer_types`, `rope_parameters`); `write_portable_config` writes both, so one
`final/` loads as the same model in either.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, read_json
from zh_bert.train.arch.base import (
    PRESETS,
    Architecture,
    config_errors,
    config_path,
    register,
)
from zh_bert.train.arch.bert import BERT
from zh_bert.train.objectives.base import OBJECTIVES

MAX_POSITIONS = 8192        # RoPE has no position table; ModernBERT's own context length
GLU_MULTIPLE = 32           # GeGLU width rounded to a multiple of this (matmul-friendly; <1% off the target)


def glu_intermediate(layers: int, hidden: int, bert_intermediate: int, vocab: int) -> int:
    """The GeGLU width at which ModernBERT has the BERT preset's parameters (a GeGLU of width i costs 3·h·i,
    BERT's GELU MLP 2·h·i), rounded to a multiple of GLU_MULTIPLE."""
    target = BERT.params(layers, hidden, bert_intermediate, vocab)
    rest = MODERNBERT.params(layers, hidden, 0, vocab)
    exact = (target - rest) / (3 * hidden * layers)
    return max(GLU_MULTIPLE, int(round(exact / GLU_MULTIPLE)) * GLU_MULTIPLE)


def build_modernbert_config(model: str, vocab_size: int, *, special_ids: dict[str, int], dropout: float = 0.0,
                            attention_dropout: float = 0.0, global_attn_every_n_layers: int = 3,
                            local_attention: int = 128, global_rope_theta: float = 160000.0,
                            local_rope_theta: float = 10000.0):
    """ModernBertConfig for a preset name (the BERT preset's shape, GeGLU sized to its parameters) or a
    config.json with `model_type: modernbert`, with the tokenizer's vocab size and special-token ids.
    `special_ids`: pad, cls, sep (and optionally mask) ids of zh-bert's tokenizer."""
    from transformers import ModernBertConfig

    if model in PRESETS:
        layers, hidden, heads = PRESETS[model]
        cfg = ModernBertConfig(
            vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=glu_intermediate(layers, hidden, 4 * hidden, vocab_size),
            max_position_embeddings=MAX_POSITIONS, hidden_activation="gelu", embedding_dropout=dropout,
            **special_token_ids(special_ids),
            mlp_dropout=dropout, attention_dropout=attention_dropout, local_attention=local_attention,
            layer_types=layer_types(layers, global_attn_every_n_layers),
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": float(global_rope_theta)},
                             "sliding_attention": {"rope_type": "default", "rope_theta": float(local_rope_theta)}})
        where = f"model {model} (modernbert)"
    else:
        cfg, where = _config_file(model, special_token_ids(special_ids)), model
    cfg.vocab_size = vocab_size
    for key, value in special_token_ids(special_ids).items():
        setattr(cfg, key, value)
    check_modernbert_shape(cfg, where)
    return cfg


def recipe_modernbert_config(recipe, vocab_size: int, special_ids: dict[str, int] | None = None):
    """`build_modernbert_config` from a recipe's keys (a `Recipe`, or any object with its model, dropout and
    modernbert fields): the one config pretrain trains, plan counts and ablate budgets. `special_ids` default to
    placeholders (0), which change no count or shape."""
    return build_modernbert_config(
        recipe.model, vocab_size, special_ids=special_ids or {"pad": 0, "cls": 0, "sep": 0}, dropout=recipe.dropout,
        attention_dropout=recipe.attention_dropout, global_attn_every_n_layers=recipe.global_attn_every_n_layers,
        local_attention=recipe.local_attention, global_rope_theta=recipe.global_rope_theta,
        local_rope_theta=recipe.local_rope_theta)


def _config_file(model: str, special: dict[str, int]):
    """A ModernBertConfig from a config.json path (or a folder holding one), with zh-bert's special ids."""
    from transformers import ModernBertConfig

    path = config_path(model)
    data = read_json(path)
    MODERNBERT.check_config_kind(path, data.get("model_type") if isinstance(data, dict) else None)
    try:
        portable_keys(data)   # a layer layout transformers 4.x cannot express: refused now, not at the first save
    except ZhBertError as e:
        raise ZhBertError(f"{path}: {e}") from None
    try:
        return ModernBertConfig.from_dict({**data, **special})
    except config_errors() as e:   # also huggingface_hub's strict field checks ("local_attention": "64")
        raise ZhBertError(f"{path}: not a ModernBERT config: {' '.join(str(e).split())[:200]}") from None


def layer_types(layers: int, every: int) -> list[str]:
    """Layer i attends globally when i % every == 0 (transformers 4.x's `global_attn_every_n_layers` rule)."""
    return ["full_attention" if i % every == 0 else "sliding_attention" for i in range(layers)]


def special_token_ids(ids: dict[str, int]) -> dict[str, int]:
    """Config fields for zh-bert's tokenizer ids, not ModernBERT's English ones: [CLS] is also bos, [SEP] eos."""
    return {"pad_token_id": ids["pad"], "cls_token_id": ids["cls"], "sep_token_id": ids["sep"],
            "bos_token_id": ids["cls"], "eos_token_id": ids["sep"]}


def check_modernbert_shape(cfg, where) -> None:
    """Refuse shapes no ModernBERT can have, in one line: sizes positive, head_dim a whole even number (RoPE
    rotates pairs of dimensions), a local window that is even and at least 2 (each side gets half)."""
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "local_attention"):
        value = getattr(cfg, key, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ZhBertError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    if h % heads or (h // heads) % 2:
        raise ZhBertError(f"{where}: hidden_size {h} / num_attention_heads {heads} must be a whole, even head "
                          f"size (RoPE rotates pairs of dimensions)")
    window = cfg.local_attention
    if window < 2 or window % 2:
        raise ZhBertError(f"{where}: local_attention {window} must be an even number of tokens >= 2 (the window "
                          f"reaches local_attention / 2 to each side)")
    every = global_every(cfg)
    if every < 1:
        raise ZhBertError(f"{where}: global_attn_every_n_layers must be >= 1, got {every}")


def global_every(cfg) -> int:
    """The period of global layers in `cfg.layer_types` (transformers 5) or its 4.x key."""
    types = getattr(cfg, "layer_types", None)
    return global_period(types) if types else int(getattr(cfg, "global_attn_every_n_layers", 3))


def global_period(types: list[str]) -> int:
    """N of 'global every N layers' in a `layer_types` list (its length when only layer 0 is global)."""
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    return full[1] - full[0] if len(full) > 1 else len(types)


def rope_thetas(cfg) -> tuple[float, float]:
    """(global, local) RoPE θ of a config from either transformers major version."""
    params = getattr(cfg, "rope_parameters", None) or {}
    if "full_attention" in params:
        return (float(params["full_attention"].get("rope_theta", 160000.0)),
                float(params.get("sliding_attention", {}).get("rope_theta", 10000.0)))
    return float(getattr(cfg, "global_rope_theta", 160000.0)), float(getattr(cfg, "local_rope_theta", 10000.0))


def portable_keys(config: dict) -> dict:
    """`config` (a ModernBERT config.json as a dict) with the keys of both transformers majors, consistent.

    Why: 5.x writes only `layer_types` / `rope_parameters`; 4.x reads only `global_attn_every_n_layers` /
    `global_rope_theta` / `local_rope_theta` and would otherwise build its defaults. `reference_compile: false`
    keeps 4.x from torch.compile-ing the MLP on GPUs that Triton does not support (Pascal, Kepler)."""
    out = dict(config)
    types = out.get("layer_types")
    if types:
        every = global_period(types)
        if layer_types(len(types), every) != list(types):
            raise ZhBertError(f"layer_types {types} is not 'global every N layers from layer 0': transformers 4.x "
                              f"cannot express it")
        out["global_attn_every_n_layers"] = every
    rope = out.get("rope_parameters") or {}
    if "full_attention" in rope:
        out["global_rope_theta"] = rope["full_attention"].get("rope_theta", 160000.0)
        out["local_rope_theta"] = rope.get("sliding_attention", {}).get("rope_theta", 10000.0)
    out.setdefault("reference_compile", False)
    return out


def write_portable_config(folder: Path) -> None:
    """Rewrite `folder/config.json` (just saved by save_pretrained) with `portable_keys`."""
    path = Path(folder) / "config.json"
    config = read_json(path)
    with atomic_write(path) as f:
        f.write(json.dumps(portable_keys(config), indent=2, sort_keys=True) + "\n")


def attended_keys(seq_len: int, window: int) -> float:
    """Mean number of keys a query sees in a sliding-window layer: |i - j| <= window / 2, clipped at both ends
    of the sequence (what an exact kernel computes; SDPA with a mask computes all seq_len and discards)."""
    half = window // 2
    return sum(min(seq_len - 1, i + half) - max(0, i - half) + 1 for i in range(seq_len)) / seq_len


def modernbert_flops_per_token(cfg, seq_len: int, mask_rate: float) -> float:
    """Training FLOPs per input token (3 × forward, 2 per MAC), counted as `bert.flops_per_token` counts BERT's:
    Wqkv + Wo (4h²) and the GeGLU (3·h·i) per layer, QKᵀ and AV over every key in global layers and over the
    window in local ones, the MLM head (h² + h·V) at masked positions only."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    types = getattr(cfg, "layer_types", None) or layer_types(cfg.num_hidden_layers, global_every(cfg))
    keys = {"full_attention": float(seq_len), "sliding_attention": attended_keys(seq_len, cfg.local_attention)}
    encoder = sum(4 * h * h + 3 * h * i + 2 * keys[t] * h for t in types)
    return 6.0 * (encoder + mask_rate * (h * h + h * v))


def attention_layout(config: dict) -> dict:
    """A ModernBERT config.json's attention layout, read from the keys of either transformers major:
    global_every, window, theta_global, theta_local (a value the config lacks is '?')."""
    every = config.get("global_attn_every_n_layers")
    types = config.get("layer_types")
    if not isinstance(every, int) and isinstance(types, list) and types:
        every = global_period(types)
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    theta_global = (rope.get("full_attention") or {}).get("rope_theta", config.get("global_rope_theta"))
    theta_local = (rope.get("sliding_attention") or {}).get("rope_theta", config.get("local_rope_theta"))
    return {"global_every": every if every is not None else "?", "window": config.get("local_attention", "?"),
            "theta_global": theta_global if theta_global is not None else "?",
            "theta_local": theta_local if theta_local is not None else "?"}


def _global_layers(config: dict, every) -> str:
    """Which layers attend globally, in words: 'every N layers' would mislead when N >= the layer count."""
    layers = config.get("num_hidden_layers")
    if isinstance(every, int) and isinstance(layers, int) and every >= layers:
        return f"global attention in layer 0 only (of {layers})"
    return f"global attention every {every} layers (from layer 0)"


def _with_commas(value) -> str:
    return f"{value:,}" if isinstance(value, (int, float)) else str(value)


class ModernBert(Architecture):
    name, family, paper = "modernbert", "ModernBERT", "modernbert"
    max_positions = MAX_POSITIONS
    objectives = ("mlm", "distill")
    attention_inits = ("stock",)
    uses_token_types = False
    block = "pre-norm-glu"
    ffn_label = "GeGLU width"
    mlm_class_name = "ModernBertForMaskedLM"
    card_recipe_keys = ("global_attn_every_n_layers", "local_attention", "global_rope_theta", "local_rope_theta")

    def check_recipe(self, recipe):
        super().check_recipe(recipe)
        if recipe.global_attn_every_n_layers < 1:
            raise ZhBertError(f"'global_attn_every_n_layers' must be at least 1, got {recipe.global_attn_every_n_layers}")
        if recipe.local_attention < 2 or recipe.local_attention % 2:
            raise ZhBertError(f"'local_attention' must be an even number of tokens >= 2 (half to each side), got "
                              f"{recipe.local_attention}")
        for key in ("global_rope_theta", "local_rope_theta"):
            if not getattr(recipe, key) > 1:
                raise ZhBertError(f"'{key}' must be > 1, got {getattr(recipe, key)}")

    def objective_refusal(self, objective):
        if OBJECTIVES[objective].generator:
            return ("objective electra builds ELECTRA's own BERT-style generator and discriminator: use "
                    "architecture bert with it, or objective mlm with modernbert")
        return (f"objective {objective} needs token-type embeddings and a pooler, which ModernBERT does not have: "
                f"use objective mlm or distill with architecture modernbert")

    def attention_init_refusal(self, value):
        return (f"attention_init {value} writes BERT's learned position embeddings; ModernBERT has RoPE instead: "
                f"set attention_init: stock (or auto) with architecture modernbert")

    def config(self, recipe, vocab_size, special_ids=None):
        return recipe_modernbert_config(recipe, vocab_size, special_ids)

    def init_values(self, config):
        cfg = SimpleNamespace(**config)
        every = global_every(cfg)
        out = {"dropout": config.get("mlp_dropout"), "attention_dropout": config.get("attention_dropout"),
               "local_attention": config.get("local_attention"),
               "global_attn_every_n_layers": every if every >= 1 else None}
        out["global_rope_theta"], out["local_rope_theta"] = rope_thetas(cfg)
        return out

    def save_config(self, folder):
        write_portable_config(folder)

    def params(self, layers, hidden, intermediate, vocab, *, head="mlm", positions=0, type_vocab=0):
        """No biases, norms without bias, RoPE (no position table), no pooler. Token embeddings + embedding
        norm; per layer Wqkv 3h² + Wo h², attn_norm h (layer 0 has none: its input is already normed),
        mlp_norm h, GeGLU Wi h·2i + Wo i·h; then final_norm h. The MLM head: dense h² + norm h, decoder bias."""
        h, i = hidden, intermediate
        base = vocab * h + h + layers * (4 * h * h + 3 * h * i + 2 * h) - (h if layers else 0) + h
        return base if head == "base" else base + (h * h + h) + vocab

    def config_params(self, cfg, head="mlm"):
        return self.params(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, head=head)

    def flops_per_token(self, cfg, seq_len, mask_rate):
        return modernbert_flops_per_token(cfg, seq_len, mask_rate)

    def local_layers(self, cfg):
        types = getattr(cfg, "layer_types", None) or layer_types(cfg.num_hidden_layers, global_every(cfg))
        return sum(t == "sliding_attention" for t in types), cfg.local_attention

    def dropouts(self, cfg):
        return cfg.mlp_dropout, cfg.attention_dropout

    def dropout_kwargs(self, hidden, attention):
        return {"embedding_dropout": hidden, "mlp_dropout": hidden, "attention_dropout": attention}

    def shape_label(self, shape):
        s = shape
        return (f"ModernBERT L{s.layers}/H{s.hidden}/A{s.heads}/GeGLU {s.intermediate}, "
                f"{s.sliding_layers}/{s.layers} layers local ({s.window})")

    def model_class(self, objective):
        from transformers import ModernBertForMaskedLM

        return ModernBertForMaskedLM

    def encode(self, hf, input_ids, attention_mask, token_type_ids):
        return hf.model(input_ids=input_ids, attention_mask=attention_mask)[0], None

    def mlm_logits(self, hf, hidden):
        return hf.decoder(hf.head(hidden))

    def sparse_head(self, model):
        """ModernBERT: `model` then `decoder(head(.))` (give it no token_type_ids)."""
        encoder, dense, decoder = (getattr(model, n, None) for n in ("model", "head", "decoder"))
        if encoder is not None and dense is not None and decoder is not None:
            return encoder, lambda hidden: decoder(dense(hidden))
        return None

    def classifier_kwargs(self, pooling):
        return {"classifier_pooling": pooling}

    def pools_itself(self):
        return True

    def card_rows(self, config):
        """The rows that say what makes it a ModernBERT, not a BERT (Warner et al. 2024)."""
        a = attention_layout(config)
        a = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in a.items()}
        return [f"| position encoding | RoPE, θ {_with_commas(a['theta_global'])} in global layers, "
                f"{_with_commas(a['theta_local'])} in local ones (no position table) |",
                f"| attention | {_global_layers(config, a['global_every'])}, a sliding window of {a['window']} tokens "
                f"in the others |",
                f"| block | pre-norm, GeGLU MLP of width {config.get('intermediate_size', '?')}, no biases, "
                f"tied embeddings; no token types |"]

    def card_usage(self, model_class, widget_text, repo_id, config):
        both = all(k in config for k in ("layer_types", "global_attn_every_n_layers"))   # write_portable_config's
        portable = ("config.json carries the attention layout in the keys of both transformers 4.x and 5.x, so "
                    "`AutoModelForMaskedLM` and `AutoTokenizer` load the same model in either" if both else
                    "`AutoModelForMaskedLM` and `AutoTokenizer` load it")
        return ["Needs transformers >= 4.48 (the first release with ModernBERT).", "", "```python",
                "from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline", "",
                f'model = AutoModelForMaskedLM.from_pretrained("{repo_id}")',
                f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")',
                'fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)',
                f'print(fill("{widget_text}"))', "```", "",
                f"It is a stock `{model_class}` folder (safetensors, `tokenizer.json` and `vocab.txt`); "
                f"{portable}. The model takes no token_type_ids. Fine-tune it with "
                f"`AutoModelForSequenceClassification`, continue pretraining it with zh-bert "
                f"(`architecture: modernbert`), or try it in the browser with `zh-bert demo {repo_id}`."]


MODERNBERT = register(ModernBert())
