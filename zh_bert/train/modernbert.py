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

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, read_json
from zh_bert.train.model import PRESETS, _config_errors, config_path

ARCHITECTURES = ("bert", "modernbert")
MAX_POSITIONS = 8192        # RoPE has no position table; ModernBERT's own context length
GLU_MULTIPLE = 32           # GeGLU width rounded to a multiple of this (matmul-friendly; <1% off the target)


def bert_mlm_params(layers: int, hidden: int, intermediate: int, vocab: int, positions: int = 512) -> int:
    """Parameters of a `BertForMaskedLM` (tied decoder; no pooler): what a modernbert preset is sized to."""
    h, i = hidden, intermediate
    emb = (vocab + positions + 2) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    head = h * h + h + 2 * h + vocab
    return emb + layers * layer + head


def modernbert_mlm_params(layers: int, hidden: int, intermediate: int, vocab: int) -> int:
    """Parameters of a `ModernBertForMaskedLM` (tied decoder with a bias; layer 0 has no attention norm)."""
    h, i = hidden, intermediate
    layer = 4 * h * h + 3 * h * i + 2 * h
    return vocab * h + h + layers * layer - h + h + (h * h + h) + vocab


def glu_intermediate(layers: int, hidden: int, bert_intermediate: int, vocab: int) -> int:
    """The GeGLU width at which ModernBERT has the BERT preset's parameters (a GeGLU of width i costs 3·h·i,
    BERT's GELU MLP 2·h·i), rounded to a multiple of GLU_MULTIPLE."""
    target = bert_mlm_params(layers, hidden, bert_intermediate, vocab)
    rest = modernbert_mlm_params(layers, hidden, 0, vocab)
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
    kind = data.get("model_type") if isinstance(data, dict) else None
    if kind != "modernbert":
        raise ZhBertError(f"{path}: model_type {kind!r}, but architecture is modernbert: give a config.json with "
                          f"model_type: modernbert, or set architecture: {kind if kind in ARCHITECTURES else 'bert'}")
    try:
        portable_keys(data)   # a layer layout transformers 4.x cannot express: refused now, not at the first save
    except ZhBertError as e:
        raise ZhBertError(f"{path}: {e}") from None
    try:
        return ModernBertConfig.from_dict({**data, **special})
    except _config_errors() as e:   # also huggingface_hub's strict field checks ("local_attention": "64")
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
    """Rewrite `folder/config.json` (just saved by save_pretrained) with `portable_keys`; BERT's is left as is."""
    path = Path(folder) / "config.json"
    config = read_json(path)
    if config.get("model_type") != "modernbert":
        return
    with atomic_write(path) as f:
        f.write(json.dumps(portable_keys(config), indent=2, sort_keys=True) + "\n")


def check_init_architecture(init_from: str | Path, architecture: str) -> None:
    """`init_from` must hold the architecture the recipe names: continuing a BERT as a ModernBERT (or the
    reverse) would load nothing that fits."""
    cfg = Path(init_from) / "config.json"
    if not cfg.is_file():
        return   # load_init names the missing file
    try:
        kind = read_json(cfg).get("model_type")
    except (ZhBertError, AttributeError):
        return   # load_init names what is wrong with it
    have = "modernbert" if kind == "modernbert" else "bert"
    if have != architecture:
        raise ZhBertError(f"init_from {init_from} is a {kind} checkpoint, but the recipe says architecture: "
                          f"{architecture}; set architecture: {have}")


def attended_keys(seq_len: int, window: int) -> float:
    """Mean number of keys a query sees in a sliding-window layer: |i - j| <= window / 2, clipped at both ends
    of the sequence (what an exact kernel computes; SDPA with a mask computes all seq_len and discards)."""
    half = window // 2
    return sum(min(seq_len - 1, i + half) - max(0, i - half) + 1 for i in range(seq_len)) / seq_len


def modernbert_flops_per_token(cfg, seq_len: int, mask_rate: float) -> float:
    """Training FLOPs per input token (3 × forward, 2 per MAC), counted as `model.flops_per_token` counts BERT's:
    Wqkv + Wo (4h²) and the GeGLU (3·h·i) per layer, QKᵀ and AV over every key in global layers and over the
    window in local ones, the MLM head (h² + h·V) at masked positions only."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    types = getattr(cfg, "layer_types", None) or layer_types(cfg.num_hidden_layers, global_every(cfg))
    keys = {"full_attention": float(seq_len), "sliding_attention": attended_keys(seq_len, cfg.local_attention)}
    encoder = sum(4 * h * h + 3 * h * i + 2 * keys[t] * h for t in types)
    return 6.0 * (encoder + mask_rate * (h * h + h * v))
