"""BERT (Devlin et al. 2019): stock `BertForMaskedLM` / `BertForPreTraining` from zh-bert's presets or a
config.json: learned positions, post-norm, GELU MLP of 4 × hidden, token types, a pooler for sentence pairs."""

from __future__ import annotations

from zh_bert.core.errors import ZhBertError, suggest
from zh_bert.train.arch.base import (
    BERT_POSITIONS,
    PRESETS,
    Architecture,
    config_errors,
    config_path,
    model_type,
    register,
)
from zh_bert.train.objectives.base import OBJECTIVES

# BertConfig fields that must be positive integers for a model to be built from it
_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "max_position_embeddings", "type_vocab_size")


def build_config(model: str, vocab_size: int, *, pad_token_id: int = 0, dropout: float = 0.1,
                 attention_dropout: float = 0.0, max_positions: int = BERT_POSITIONS):
    """BertConfig for a preset name or a config.json path, with the tokenizer's vocab size."""
    from transformers import BertConfig

    if model in PRESETS:
        layers, hidden, heads = PRESETS[model]
        return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, intermediate_size=4 * hidden,
                          max_position_embeddings=max_positions, pad_token_id=pad_token_id,
                          hidden_dropout_prob=dropout, attention_probs_dropout_prob=attention_dropout)
    path = config_path(model)
    BERT.check_config_kind(path, model_type(path))
    try:
        cfg = BertConfig.from_json_file(str(path))
    except config_errors() as e:   # UnicodeDecodeError is a ValueError
        raise ZhBertError(f"{path}: not a BERT config: {' '.join(str(e).split())[:200]}") from None
    check_shape(cfg, path)
    cfg.vocab_size = vocab_size
    return cfg


def check_shape(cfg, where) -> None:
    """Refuse a config whose sizes no model can have (transformers would fail deep inside, or `plan` would
    compute with them): each size a positive integer, hidden_size divisible by the heads, dropouts in [0, 1)."""
    for key in _SIZES:
        value = getattr(cfg, key, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ZhBertError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    if cfg.hidden_size % cfg.num_attention_heads:
        raise ZhBertError(f"{where}: hidden_size {cfg.hidden_size} is not a multiple of num_attention_heads "
                          f"{cfg.num_attention_heads}")
    from transformers.activations import ACT2FN

    if isinstance(cfg.hidden_act, str) and cfg.hidden_act not in ACT2FN:
        raise ZhBertError(f"{where}: unknown hidden_act {cfg.hidden_act!r}{suggest(cfg.hidden_act, ACT2FN)}")
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        value = getattr(cfg, key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ZhBertError(f"{where}: '{key}' must be a number in [0, 1), got {value!r}")


def flops_per_token(cfg, seq_len: int, mask_rate: float, sparse: bool = True) -> float:
    """Training FLOPs per input token (forward + backward = 3 × forward, 2 FLOPs per MAC).

    "Useful" FLOPs: encoder matmuls + attention scores, and the MLM head only where a prediction is
    needed (masked positions) — what any implementation must compute; a dense head's extra work is waste.
    """
    h, v = cfg.hidden_size, cfg.vocab_size
    head = h * h + h * v
    return 6.0 * (encoder_macs(cfg, seq_len) + head * (mask_rate if sparse else 1.0))


def encoder_macs(cfg, seq_len: int) -> int:
    """Multiply-accumulates per token of the encoder: qkvo + ffn matmuls, QK^T and AV."""
    h, l, i = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    return l * (4 * h * h + 2 * h * i) + l * 2 * seq_len * h


def layer_params(h: int, i: int) -> int:
    """One post-LN encoder layer: attention (qkvo + biases), FFN, two LayerNorms."""
    return (4 * h * h + 4 * h) + (2 * h * i + i + h) + 2 * 2 * h


class Bert(Architecture):
    name, family, paper = "bert", "BERT", "bert"
    max_positions = BERT_POSITIONS
    attention_inits = ("neighbour", "stock")
    block = "post-norm"
    mlm_class_name = "BertForMaskedLM"
    untyped_configs = True

    @property
    def objectives(self):
        return tuple(OBJECTIVES)   # every objective: read when asked (the registry fills as its modules load)

    def config(self, recipe, vocab_size: int, special_ids: dict[str, int] | None = None):
        return build_config(recipe.model, vocab_size, pad_token_id=(special_ids or {}).get("pad", 0),
                            dropout=recipe.dropout, attention_dropout=recipe.attention_dropout,
                            max_positions=max(BERT_POSITIONS, recipe.seq_len))

    def init_values(self, config: dict) -> dict:
        return {"dropout": config.get("hidden_dropout_prob"),
                "attention_dropout": config.get("attention_probs_dropout_prob")}

    def params(self, layers, hidden, intermediate, vocab, *, head="mlm", positions=BERT_POSITIONS, type_vocab=2):
        h = hidden
        body = (vocab + positions + type_vocab) * h + 2 * h + layers * layer_params(h, intermediate)
        pooler = h * h + h
        mlm = h * h + h + 2 * h + vocab                   # transform + LayerNorm + decoder bias (weight tied)
        return {"base": body + pooler, "mlm": body + mlm, "pairs": body + mlm + pooler + 2 * h + 2}[head]

    def config_params(self, cfg, head="mlm"):
        return self.params(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size,
                           head=head, positions=cfg.max_position_embeddings, type_vocab=cfg.type_vocab_size)

    def flops_per_token(self, cfg, seq_len, mask_rate):
        return flops_per_token(cfg, seq_len, mask_rate)

    def dropouts(self, cfg):
        return cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob

    def dropout_kwargs(self, hidden, attention):
        return {"hidden_dropout_prob": hidden, "attention_probs_dropout_prob": attention}

    def model_class(self, objective):
        from transformers import BertForMaskedLM, BertForPreTraining

        return BertForPreTraining if OBJECTIVES[objective].pairs else BertForMaskedLM

    def encode(self, hf, input_ids, attention_mask, token_type_ids):
        out = hf.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out[0], (out[1] if len(out) > 1 else None)

    def mlm_logits(self, hf, hidden):
        return hf.cls.predictions(hidden)

    def sparse_head(self, model):
        """BERT: `bert` then `cls` (also any model with a base model and a `cls` head)."""
        base_model, head = getattr(model, "base_model", None), getattr(model, "cls", None)
        if base_model is not None and head is not None and base_model is not model:
            return base_model, head
        return None

    def card_usage(self, model_class, widget_text, repo_id, config):
        return ["```python", "from transformers import pipeline", "",
                f'fill = pipeline("fill-mask", model="{repo_id}")',
                f'print(fill("{widget_text}"))', "```", "",
                "It is a stock `BertForMaskedLM` folder (safetensors, `tokenizer.json` and `vocab.txt`): "
                "`AutoModelForMaskedLM`, `AutoTokenizer` and `BertTokenizer` load it in transformers 4.x and 5.x. "
                "Fine-tune it like any BERT checkpoint, continue pretraining it with zh-bert, or try it in the "
                f"browser with `zh-bert demo {repo_id}`."]


BERT = register(Bert())
