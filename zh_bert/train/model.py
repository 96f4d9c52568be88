"""Stock BERT models (presets named as UER's miniatures), continued pretraining, vocab extension, and the
sparse MLM head that makes training fast.

Checkpoints stay stock `BertForMaskedLM` / `BertForPreTraining`: `PretrainModel` only changes *where* the
stock head is applied (at masked positions instead of all 128), never its weights or names.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_object, read_vocab_txt
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.train.arch import Architecture, of_config
from zh_bert.train.weights import load_pretrained


def neighbour_attention_init(hf, amplitude: float = 0.05, sharpness: float = 2.0, n_freq: int = 16) -> None:
    """Start layer 0 with half its heads looking at the next token and half at the previous one.

    Why: from BERT's N(0, 0.02) init a small post-LN BERT spends its first thousands of steps as a
    bag-of-words model (attention uniform, word order unused: shuffling the context leaves its predictions
    unchanged), which is all a CPU budget affords; it never learns that 共和[MASK] is 国. Here the first
    2*n_freq dimensions of each position embedding get sinusoids (p_i = amplitude * (cos iw, sin iw) for
    n_freq frequencies w from 0.95*pi down to pi/63), and each layer-0 head gets W_k = sharpness*I and
    W_q = sharpness*R(±w) on that subspace, R rotating p_i into p_{i±1}: q_i . k_j peaks at j = i ± 1
    (~75% of the attention at init). Only starting values change: the checkpoint is a stock BERT, and
    training is free to move away (it keeps ~1/3 on the neighbours). Measured in docs/results.md.
    """
    cfg = hf.config
    heads, hidden = cfg.num_attention_heads, cfg.hidden_size
    head_dim = hidden // heads
    n_freq = min(n_freq, head_dim // 2, hidden // 2)
    base = hf.base_model                                  # BertModel, or ElectraModel of a discriminator
    emb = base.embeddings.position_embeddings.weight
    w = math.pi * 0.95 * (1 / 60) ** (torch.arange(n_freq, dtype=torch.float32) / max(n_freq - 1, 1))
    angle = torch.arange(emb.shape[0], dtype=torch.float32)[:, None] * w
    attn = base.encoder.layer[0].attention.self
    d = 2 * n_freq
    with torch.no_grad():
        emb[:, 0:d:2] = amplitude * torch.cos(angle)
        emb[:, 1:d:2] = amplitude * torch.sin(angle)
        for h in range(heads):
            sign = 1.0 if h % 2 == 0 else -1.0           # even heads look right (i+1), odd heads left
            cos, sin = torch.cos(sign * w), torch.sin(sign * w)
            rot = torch.zeros(d, d)
            rot[0::2, 0::2] = torch.diag(cos)
            rot[0::2, 1::2] = torch.diag(-sin)
            rot[1::2, 0::2] = torch.diag(sin)
            rot[1::2, 1::2] = torch.diag(cos)
            rows = slice(h * head_dim, h * head_dim + d)
            attn.query.weight[rows, :d] = sharpness * rot
            attn.key.weight[rows, :d] = sharpness * torch.eye(d)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: decay on weight matrices, none on biases and LayerNorm weights (BERT's rule)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _checkpoint_vocab(ckpt: Path) -> list[str] | None:
    """The token list a checkpoint was trained with, read through its own tokenizer when it ships one (so
    both sides are normalised alike, e.g. the U+2028 entries of Google's vocab), else from vocab.txt."""

    if (ckpt / "tokenizer.json").is_file() or (ckpt / "tokenizer_config.json").is_file():
        tok = load_tokenizer(ckpt)
        return tok.convert_ids_to_tokens(list(range(len(tok))))
    if (ckpt / "vocab.txt").is_file():
        return read_vocab_txt(ckpt / "vocab.txt")
    return None


def load_init(init_from: str | Path, tokenizer, objective: str, seq_len: int, arch: Architecture | None = None):
    """A stock model from checkpoint dir `init_from`, fitted to `tokenizer`.

    `arch` None: the checkpoint's own family. Same vocab size: loaded as is. Tokenizer larger and its first N tokens equal to the checkpoint's N:
    embeddings extended (`extend_vocab`). Anything else: refused, naming both sizes — training on ids
    that mean different characters would silently destroy the checkpoint.
    """
    ckpt = Path(init_from)
    if not (ckpt / "config.json").is_file():
        raise ZhBertError(f"init_from: {ckpt} is not a checkpoint dir (no config.json)")
    try:   # not JSON, not a mapping, a size not a whole number in range
        config = read_object(ckpt / "config.json", what="a model config")
        old_n = config.integer("vocab_size", 0, lo=0, hi=2**32 - 1)
        max_pos = config.integer("max_position_embeddings", 512, lo=1, hi=1 << 20)
    except ZhBertError as e:
        raise ZhBertError(f"init_from: {ckpt / 'config.json'} is not a model config: "
                          f"{str(e).removeprefix(str(ckpt / 'config.json') + ': ')[:200]}") from None
    cfg = config.data
    new_n = len(tokenizer)
    if seq_len > max_pos:
        raise ZhBertError(f"seq_len {seq_len} exceeds the checkpoint's max_position_embeddings "
                          f"{cfg.get('max_position_embeddings')} ({ckpt})")
    new_tokens = tokenizer.convert_ids_to_tokens(list(range(new_n)))
    if new_n != old_n:
        old_tokens = _checkpoint_vocab(ckpt)
        extendable = new_n > old_n and old_tokens is not None and old_tokens[:old_n] == new_tokens[:old_n]
        if not extendable:
            why = ("the tokenizer is smaller" if new_n < old_n else
                   "the checkpoint ships no vocab to compare" if old_tokens is None else
                   f"their first {old_n} tokens differ")
            raise ZhBertError(f"vocab size mismatch: checkpoint {ckpt} has vocab_size {old_n} but the tokenizer "
                              f"has {new_n} tokens ({why}); use the checkpoint's tokenizer or one that extends it")

    model = load_pretrained((arch or of_config(cfg)).model_class(objective), ckpt, "init_from")
    if new_n > old_n:
        extend_vocab(model, new_tokens, old_n, tokenizer)
    return model


@torch.no_grad()
def extend_vocab(model, tokens: list[str], old_n: int, tokenizer=None) -> None:
    """Grow the (tied) embeddings from `old_n` to len(tokens) rows.

    A new token made of known pieces (e.g. a word whose characters are in the old vocab) starts as the
    mean of their embeddings, so the model already "reads" it roughly right; any other new token starts
    at the mean of all old rows (Hewitt 2021: keeps the softmax from being dominated by new rows).
    The output bias gets the old mean bias for the same reason.
    """
    emb = model.get_input_embeddings().weight
    mean = emb[:old_n].mean(0)
    model.resize_token_embeddings(len(tokens), mean_resizing=False)
    emb = model.get_input_embeddings().weight
    index = {t: i for i, t in enumerate(tokens[:old_n])}
    for i in range(old_n, len(tokens)):
        text = tokens[i][2:] if tokens[i].startswith("##") else tokens[i]
        parts = [index[c] for c in text if c in index] if text else []
        emb[i] = emb[parts].mean(0) if parts and len(parts) == len(text) else mean
    head = getattr(model, "cls", None)
    bias = getattr(getattr(head, "predictions", None), "bias", None)
    if bias is None and getattr(model, "decoder", None) is not None:   # ModernBertForMaskedLM
        bias = model.decoder.bias
    if bias is not None and bias.shape[0] == len(tokens):
        bias[old_n:] = bias[:old_n].mean()
    model.config.vocab_size = len(tokens)


class PretrainModel(nn.Module):
    """Wraps a stock BertForMaskedLM/BertForPreTraining/ModernBertForMaskedLM; forward computes the losses
    sparsely.

    The 21k-way projection is most of a small BERT's FLOPs; running it on the ~15% masked positions only
    (UER-py does the same; ModernBERT's `sparse_prediction` too) is the main speed-up. Returns sums, not means,
    so the caller can normalise by the masked-token count of the whole accumulated/distributed batch: 4×8 then
    equals 1×32 exactly.
    """

    def __init__(self, hf_model):
        super().__init__()
        self.hf = hf_model
        self.arch = of_config(hf_model.config)
        self.pairs = hasattr(getattr(hf_model, "cls", None), "seq_relationship")

    def encode(self, input_ids, attention_mask, token_type_ids):
        """(hidden states, pooled output or None) of the stock encoder (the architecture knows its inputs)."""
        return self.arch.encode(self.hf, input_ids, attention_mask, token_type_ids)

    def mlm_logits(self, h):
        """The stock MLM head on the rows `h` (masked positions only)."""
        return self.arch.mlm_logits(self.hf, h)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                next_sentence_label=None) -> dict[str, torch.Tensor]:
        hidden, pooled = self.encode(input_ids, attention_mask, token_type_ids)
        flat = labels.reshape(-1)
        pos = (flat != -100).nonzero(as_tuple=True)[0]
        target = flat.index_select(0, pos)
        h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, pos)
        logits = self.mlm_logits(h).float()
        result = {
            "mlm_loss_sum": F.cross_entropy(logits, target, reduction="sum"),
            "mlm_correct": top1_correct(logits, target),
            # filled on the device, not copied from the host: torch.tensor(n, device=cuda) would sync
            "mlm_count": torch.full((), target.numel(), device=logits.device),
        }
        if self.pairs and next_sentence_label is not None:
            nsp = self.hf.cls.seq_relationship(pooled).float()
            result["nsp_loss_sum"] = F.cross_entropy(nsp, next_sentence_label, reduction="sum")
            result["nsp_correct"] = (nsp.argmax(-1) == next_sentence_label).sum()
        return result


def top1_correct(logits, target):
    """How many rows rank their target first. amax is vectorised on CPU, argmax is not: over 512 × 8,000
    fp32 logits this takes ~1 ms instead of ~4.5 ms, 2% of a `tiny-cpu` step. A tie counts as correct."""
    return (logits.gather(1, target[:, None]).squeeze(1) >= logits.amax(-1)).sum()
