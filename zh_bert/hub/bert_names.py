"""Which tensor of a released BERT checkpoint is which: Google's TensorFlow names, UER-py's and TencentPretrain's
two generations of names, and Hugging Face's, each mapped to the Hugging Face name it becomes.

The tables are written out name by name rather than derived by string surgery, because the formats do not
correspond piece by piece (UER numbers q/k/v as `linear_layers.0/1/2`, Google calls the MLM bias `output_bias`,
UER-py's "Modify Target" commit moved `target.mlm_linear_1` to `target.mlm.linear_1` but its own converter kept
writing `target.layer_norm` for three months), and a conversion that guesses a name wrong loads, runs and is
silently wrong. Every name a checkpoint holds must be claimed by the table, skipped by name (optimizer slots,
`global_step`), or the checkpoint is refused naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zh_bert.core.errors import ZhBertError

#: per encoder layer: (HF suffix, Google's suffix, UER's suffix); HF prefix bert.encoder.layer.N., Google's
#: bert/encoder/layer_N/, UER's encoder.transformer.N.
_LAYER = (
    ("attention.self.query.weight", "attention/self/query/kernel", "self_attn.linear_layers.0.weight"),
    ("attention.self.query.bias", "attention/self/query/bias", "self_attn.linear_layers.0.bias"),
    ("attention.self.key.weight", "attention/self/key/kernel", "self_attn.linear_layers.1.weight"),
    ("attention.self.key.bias", "attention/self/key/bias", "self_attn.linear_layers.1.bias"),
    ("attention.self.value.weight", "attention/self/value/kernel", "self_attn.linear_layers.2.weight"),
    ("attention.self.value.bias", "attention/self/value/bias", "self_attn.linear_layers.2.bias"),
    ("attention.output.dense.weight", "attention/output/dense/kernel", "self_attn.final_linear.weight"),
    ("attention.output.dense.bias", "attention/output/dense/bias", "self_attn.final_linear.bias"),
    ("attention.output.LayerNorm.weight", "attention/output/LayerNorm/gamma", "layer_norm_1.gamma"),
    ("attention.output.LayerNorm.bias", "attention/output/LayerNorm/beta", "layer_norm_1.beta"),
    ("intermediate.dense.weight", "intermediate/dense/kernel", "feed_forward.linear_1.weight"),
    ("intermediate.dense.bias", "intermediate/dense/bias", "feed_forward.linear_1.bias"),
    ("output.dense.weight", "output/dense/kernel", "feed_forward.linear_2.weight"),
    ("output.dense.bias", "output/dense/bias", "feed_forward.linear_2.bias"),
    ("output.LayerNorm.weight", "output/LayerNorm/gamma", "layer_norm_2.gamma"),
    ("output.LayerNorm.bias", "output/LayerNorm/beta", "layer_norm_2.beta"),
)

_SP = ("sp", "nsp", "sop")   # UER's sentence-pair target: "sp" since Feb 2022, "nsp" before; ALBERT-style "sop"
#: the rest: (HF name, Google's name or None, UER's names: the legacy generation's first, then the modular one's)
_GLOBAL = (
    ("bert.embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings",
     ("embedding.word_embedding.weight", "embedding.word.embedding.weight")),
    ("bert.embeddings.position_embeddings.weight", "bert/embeddings/position_embeddings",
     ("embedding.position_embedding.weight", "embedding.pos.embedding.weight")),
    ("bert.embeddings.token_type_embeddings.weight", "bert/embeddings/token_type_embeddings",
     ("embedding.segment_embedding.weight", "embedding.seg.embedding.weight")),
    ("bert.embeddings.LayerNorm.weight", "bert/embeddings/LayerNorm/gamma", ("embedding.layer_norm.gamma",)),
    ("bert.embeddings.LayerNorm.bias", "bert/embeddings/LayerNorm/beta", ("embedding.layer_norm.beta",)),
    ("bert.pooler.dense.weight", "bert/pooler/dense/kernel",
     tuple(f"target.{s}_linear_1.weight" for s in _SP) + tuple(f"target.{s}.linear_1.weight" for s in _SP)),
    ("bert.pooler.dense.bias", "bert/pooler/dense/bias",
     tuple(f"target.{s}_linear_1.bias" for s in _SP) + tuple(f"target.{s}.linear_1.bias" for s in _SP)),
    ("cls.predictions.transform.dense.weight", "cls/predictions/transform/dense/kernel",
     ("target.mlm_linear_1.weight", "target.mlm.linear_1.weight")),
    ("cls.predictions.transform.dense.bias", "cls/predictions/transform/dense/bias",
     ("target.mlm_linear_1.bias", "target.mlm.linear_1.bias")),
    ("cls.predictions.transform.LayerNorm.weight", "cls/predictions/transform/LayerNorm/gamma",
     ("target.layer_norm.gamma", "target.mlm.layer_norm.gamma")),
    ("cls.predictions.transform.LayerNorm.bias", "cls/predictions/transform/LayerNorm/beta",
     ("target.layer_norm.beta", "target.mlm.layer_norm.beta")),
    ("cls.predictions.bias", "cls/predictions/output_bias", ("target.mlm_linear_2.bias", "target.mlm.linear_2.bias")),
    ("cls.predictions.decoder.weight", None, ("target.mlm_linear_2.weight", "target.mlm.linear_2.weight")),
    ("cls.seq_relationship.weight", "cls/seq_relationship/output_weights",
     tuple(f"target.{s}_linear_2.weight" for s in _SP) + tuple(f"target.{s}.linear_2.weight" for s in _SP)),
    ("cls.seq_relationship.bias", "cls/seq_relationship/output_bias",
     tuple(f"target.{s}_linear_2.bias" for s in _SP) + tuple(f"target.{s}.linear_2.bias" for s in _SP)),
)

#: HF roles a BERT masked LM cannot do without
OPTIONAL = {"bert.pooler.dense.weight", "bert.pooler.dense.bias", "cls.seq_relationship.weight",
            "cls.seq_relationship.bias", "cls.predictions.decoder.weight"}
NSP_HEAD = ("cls.seq_relationship.weight", "cls.seq_relationship.bias")
POOLER = ("bert.pooler.dense.weight", "bert.pooler.dense.bias")
WORD = "bert.embeddings.word_embeddings.weight"
DECODER = "cls.predictions.decoder.weight"
TOKEN_TYPES = "bert.embeddings.token_type_embeddings.weight"

#: Google's optimizer state and counters: (suffix or name, what it is), skipped and counted
TF_SKIPPED = (("/adam_m", "adam_m"), ("/adam_v", "adam_v"), ("/Adam", "adam_m"), ("/Adam_1", "adam_v"),
              ("/lamb_m", "adam_m"), ("/lamb_v", "adam_v"))
TF_COUNTERS = ("global_step", "good_steps", "loss_scale", "current_loss_scale")
#: names that say which other architecture a checkpoint is (name pattern, architecture)
OTHER_ARCHITECTURES = (
    (re.compile(r"(^|/)(transformer/group_\d|embedding_hidden_mapping_in)|^albert\.|\.albert_layer|"
                r"embedding\.linear|factorized"), "ALBERT"),
    (re.compile(r"^model/transformer/|^transformer\.(layer|word_embedding)|rel_attn|^xlnet"), "XLNet"),
    (re.compile(r"^electra/|^discriminator_predictions|^generator"), "ELECTRA"),
    (re.compile(r"^roberta\.|^lm_head\."), "RoBERTa (Hugging Face's RobertaModel)"),
    (re.compile(r"^(encoder|decoder)\.(block|final_layer_norm)|relative_attention_bias"), "T5"),
)


def hf_names(layers: int) -> list[str]:
    return [n for n, _, _ in _GLOBAL[:5]] + [f"bert.encoder.layer.{i}.{s}" for i in range(layers) for s, _, _ in _LAYER] \
        + [n for n, _, _ in _GLOBAL[5:]]


def table(kind: str, layers: int) -> dict[str, tuple[str, ...]]:
    """HF name -> the source names it may come from (first present wins), for source kind tf1, uer or hf."""
    out: dict[str, tuple[str, ...]] = {}
    for hf, tf, uer in _GLOBAL:
        out[hf] = {"tf1": (tf,) if tf else (), "uer": uer, "hf": _hf_alternatives(hf)}[kind]
    for i in range(layers):
        for hf, tf, uer in _LAYER:
            name = f"bert.encoder.layer.{i}.{hf}"
            out[name] = {"tf1": (f"bert/encoder/layer_{i}/{tf}",), "uer": (f"encoder.transformer.{i}.{uer}",),
                         "hf": _hf_alternatives(name)}[kind]
    return out


def _hf_alternatives(name: str) -> tuple[str, ...]:
    """A Hugging Face name, and the spelling pytorch-pretrained-bert checkpoints (2018-2019) used for it:
    LayerNorm `gamma`/`beta`, and the MLM bias saved only as the decoder's bias."""
    alts = [name]
    if "LayerNorm." in name:
        alts.append(name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"))
    if name == "cls.predictions.bias":
        alts.append("cls.predictions.decoder.bias")
    return tuple(alts)


def is_kernel(source_name: str) -> bool:
    """Google's dense kernels are stored [in, out]; every other matrix of every format is [out, in]."""
    return source_name.endswith("/kernel")


def generation(found: dict[str, str]) -> str:
    """UER's key generation from the names found (HF name -> source name): `legacy` (UER-py before its "Modular
    Embedding" #366 / "Modify Target" #368 of July 2023, TencentPretrain before Oct 2022), `modular` after, or
    `mixed` (a checkpoint written between the two commits)."""
    emb = "legacy" if found[WORD] == "embedding.word_embedding.weight" else "modular"
    tgt = "legacy" if found["cls.predictions.transform.dense.weight"].startswith("target.mlm_") else "modular"
    if emb != tgt:
        return f"mixed (embedding {emb}, target {tgt})"
    if emb == "modular" and found["cls.predictions.transform.LayerNorm.weight"] == "target.layer_norm.gamma":
        return "modular (target.layer_norm, as UER-py's converter wrote it from July to October 2023)"
    return emb


def other_architecture(names) -> str | None:
    """"tensor NAME is ARCH's" when a tensor name shows an architecture zh-bert cannot express as BERT."""
    for name in names:
        for pattern, arch in OTHER_ARCHITECTURES:
            if pattern.search(name):
                return f"tensor {name} is {arch}'s, an architecture zh-bert cannot express as BERT"
    return None


@dataclass(frozen=True)
class Dims:
    """The shape a config gives, against which every tensor is checked."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    positions: int
    type_vocab: int

    def expected(self, hf_name: str) -> tuple[int, ...]:
        """The Hugging Face shape of `hf_name`."""
        h, i = self.hidden, self.intermediate
        if hf_name in (WORD, DECODER):
            return self.vocab, h
        if hf_name == "cls.predictions.bias":
            return (self.vocab,)
        if hf_name == "bert.embeddings.position_embeddings.weight":
            return self.positions, h
        if hf_name == TOKEN_TYPES:
            return self.type_vocab, h
        if hf_name == "cls.seq_relationship.weight":
            return 2, h
        if hf_name == "cls.seq_relationship.bias":
            return (2,)
        if hf_name.endswith("intermediate.dense.weight"):
            return i, h
        if hf_name.endswith("intermediate.dense.bias"):
            return (i,)
        if re.search(r"layer\.\d+\.output\.dense\.weight$", hf_name):
            return h, i
        return (h, h) if hf_name.endswith("weight") and "LayerNorm" not in hf_name else (h,)


def check_heads(dims: Dims, where: str) -> None:
    if dims.heads < 1 or dims.hidden % dims.heads:
        raise ZhBertError(f"{where}: {dims.heads} attention heads do not divide hidden size {dims.hidden}")
