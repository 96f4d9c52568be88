"""ELECTRA's torch side (Clark et al. 2020), the networks of `objectives.electra.Electra`: a small generator fills
the masked positions, a discriminator learns which tokens were replaced. Both are stock transformers classes
(`ElectraForMaskedLM`, `ElectraForPreTraining`) sharing one embedding module; the wrapper only decides where
heads run, and the generator's samples are keyed per sequence so accumulation, DDP and resume draw alike."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from zh_bert.train.arch.bert import encoder_macs
from zh_bert.train.model import top1_correct


def electra_flops_per_token(disc, gen, seq_len: int, mask_rate: float) -> float:
    """Training FLOPs per input token of ELECTRA (ElectraConfigs of `electra_configs`), counted as
    `flops_per_token`: the generator's encoder at its size + its embedding projection (E×h_g) + its MLM
    head (h_g×E transform, E×V output) at masked positions only; the discriminator's full encoder + its RTD
    head at every token (h×h + h). Sampling (a softmax over the masked rows) is not a matmul: not counted."""
    e, hg, v = gen.embedding_size, gen.hidden_size, gen.vocab_size
    generator = encoder_macs(gen, seq_len) + (e * hg if e != hg else 0) + mask_rate * (hg * e + e * v)
    h = disc.hidden_size
    discriminator = encoder_macs(disc, seq_len) + h * h + h
    return 6.0 * (generator + discriminator)


SAMPLE_SALT = 0x454C4543   # keeps the generator's sampling stream apart from the loader's masking stream


def electra_configs(cfg, generator_ratio: float = 0.25):
    """(discriminator, generator) ElectraConfig from the BertConfig of the recipe's `model:`.

    The discriminator has the BERT's shape (embedding_size = hidden_size, so no projection). The generator
    has hidden_size = round(ratio × hidden), intermediate scaled alike, the same number of layers and one
    head per 64 dimensions (at least one, dividing its hidden size) — the official ELECTRA code's generator
    rule. Its embedding_size is the discriminator's hidden size, so both can share one embedding module;
    stock `ElectraModel.embeddings_project` maps it down to the generator's width.
    """
    from transformers import ElectraConfig

    h, i = cfg.hidden_size, cfg.intermediate_size
    common = dict(vocab_size=cfg.vocab_size, embedding_size=h, num_hidden_layers=cfg.num_hidden_layers,
                  hidden_act=cfg.hidden_act, hidden_dropout_prob=cfg.hidden_dropout_prob,
                  attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
                  max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
                  initializer_range=cfg.initializer_range, layer_norm_eps=cfg.layer_norm_eps,
                  pad_token_id=cfg.pad_token_id)
    disc = ElectraConfig(hidden_size=h, num_attention_heads=cfg.num_attention_heads, intermediate_size=i,
                         **common)
    gh = max(1, int(round(h * generator_ratio)))
    heads = max(1, gh // 64)
    while gh % heads:
        heads -= 1
    gen = ElectraConfig(hidden_size=gh, num_attention_heads=heads, intermediate_size=max(1, int(round(i * gh / h))),
                        **common)
    disc.architectures, gen.architectures = ["ElectraForPreTraining"], ["ElectraForMaskedLM"]
    return disc, gen


def build_electra(cfg, generator_ratio: float = 0.25):
    """(discriminator ElectraForPreTraining, generator ElectraForMaskedLM), fresh, sharing one embedding
    module (token, position and token-type tables + their LayerNorm, as the official code shares them)."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    dcfg, gcfg = electra_configs(cfg, generator_ratio)
    disc = ElectraForPreTraining(dcfg)
    gen = ElectraForMaskedLM(gcfg)
    share_embeddings(disc, gen)
    return disc, gen


def share_embeddings(disc, gen) -> None:
    """Make `gen` use `disc`'s embedding module; its output layer stays tied to the (now shared) word table."""
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight


def sampling_uniforms(keys, seq_len: int, seed: int) -> np.ndarray:
    """(len(keys), seq_len) float32 uniforms in [0, 1), row r drawn from (seed, SALT, *keys[r]): the
    generator samples the replacement at a masked position with that position's number, so a sample depends
    on the sequence's key alone, never on the batch, process or micro-batch it falls in."""
    return np.stack([np.random.default_rng([seed, SAMPLE_SALT, *map(int, k)]).random(seq_len, dtype=np.float32)
                     for k in keys])


def add_sampling_noise(micro_batches: list[dict], seed: int, step: int, rank: int, world: int) -> list[dict]:
    """`micro_batches` (this process's share of optimizer step `step`) with `sample_u` added, keyed by
    (step, the sequence's place in the global batch). The loader gives micro-batch i of rank r the global
    batch's sequences i·m·W + j·W + r (j < m), so the key of a sequence is the same for any number of
    processes, micro-batch size or accumulation, and a resumed run draws what an uninterrupted one would."""
    out = []
    for i, b in enumerate(micro_batches):
        rows, seq_len = b["input_ids"].shape
        keys = [(step, i * rows * world + j * world + rank) for j in range(rows)]
        out.append({**b, "sample_u": torch.from_numpy(sampling_uniforms(keys, seq_len, seed))})
    return out


def sample_replacements(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """A token per row of `logits` (n, V), drawn from softmax(logits) by inverting its CDF at `u` (n,):
    deterministic given `u`; a row whose probability mass sits on one token always returns that token."""
    cdf = torch.softmax(logits.float(), dim=-1).cumsum(-1)
    pick = torch.searchsorted(cdf, (u.float() * cdf[:, -1]).unsqueeze(1).contiguous(), right=True)
    return pick.squeeze(1).clamp_(max=logits.shape[-1] - 1)


def replaced_token_labels(original: torch.Tensor, disc_ids: torch.Tensor) -> torch.Tensor:
    """1 where the discriminator's input differs from the original text, else 0 (a generator sample that
    equals the original counts as original, as in the paper)."""
    return (disc_ids != original).long()


class ElectraPretrainModel(nn.Module):
    """Generator (stock ElectraForMaskedLM, `generator`) + discriminator (stock ElectraForPreTraining, `hf`)
    with shared embeddings; forward returns sums like `PretrainModel` so the caller normalises by the global
    batch (masked tokens for the generator's MLM loss, real tokens for the RTD loss).

    Generator: the loader's masked input, its head only at masked positions. Its samples (no gradient) replace
    the masked positions of the original text; the discriminator classifies every real token as original (0)
    or replaced (1).
    """

    needs_noise = True

    def __init__(self, discriminator, generator):
        super().__init__()
        self.hf = discriminator
        self.generator = generator

    def corrupt(self, input_ids, labels, pos, logits, sample_u):
        """(original ids, discriminator input, RTD labels), flat (B·L,): `pos` the masked flat positions,
        `logits` the generator's there."""
        flat_in = input_ids.reshape(-1)
        target = labels.reshape(-1).index_select(0, pos)
        original = flat_in.index_put((pos,), target)
        with torch.no_grad():
            sampled = sample_replacements(logits.detach(), sample_u.reshape(-1).index_select(0, pos))
        disc_ids = original.index_put((pos,), sampled)
        return original, disc_ids, replaced_token_labels(original, disc_ids)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, sample_u=None,
                next_sentence_label=None) -> dict[str, torch.Tensor]:
        gen = self.generator
        hidden = gen.electra(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        flat = labels.reshape(-1)
        pos = (flat != -100).nonzero(as_tuple=True)[0]
        target = flat.index_select(0, pos)
        h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, pos)
        logits = gen.generator_lm_head(gen.generator_predictions(h)).float()
        if sample_u is None:
            raise ValueError("ElectraPretrainModel needs sample_u (see add_sampling_noise)")
        _, disc_ids, rtd = self.corrupt(input_ids, labels, pos, logits, sample_u)
        disc_out = self.hf.electra(input_ids=disc_ids.view_as(input_ids), attention_mask=attention_mask,
                                   token_type_ids=token_type_ids)[0]
        rtd_logits = self.hf.discriminator_predictions(disc_out).float().reshape(-1)
        rtd_f = rtd.to(rtd_logits.dtype)
        real = attention_mask.reshape(-1).to(rtd_logits.dtype) if attention_mask is not None else None
        right = ((rtd_logits > 0).long() == rtd)
        if real is not None:
            right, rtd = right & (real > 0), rtd * real.long()
        return {
            "mlm_loss_sum": F.cross_entropy(logits, target, reduction="sum"),
            "mlm_correct": top1_correct(logits, target),
            "mlm_count": torch.full((), target.numel(), device=logits.device),
            "rtd_loss_sum": F.binary_cross_entropy_with_logits(rtd_logits, rtd_f, weight=real, reduction="sum"),
            "rtd_correct": right.sum(),
            "rtd_count": real.sum() if real is not None else torch.full((), rtd.numel(), device=logits.device),
            "replaced": rtd.sum(),
        }
