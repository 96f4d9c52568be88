"""The proof that a converted checkpoint computes what its source computed.

A conversion that loads is not a conversion that is right: a transposed square kernel, a segment table shifted
by UER's padding row, a LayerNorm that normalises differently or a `gelu` that means another curve all load
without a warning and give a model that is a little or entirely wrong (Chinese-BERT-wwm #25, transformers #634).
So `convert` runs the source's own forward — written here from the source format's definition, in float64, on
the source's tensors as stored (Google's kernels as `x @ kernel`, UER's segment ids 1/2 into its 3-row table,
UER's LayerNorm over the unbiased deviation) — and the converted folder, loaded back from disk by transformers,
on the same probe, and records the largest difference of the masked-LM and next-sentence logits.
"""

from __future__ import annotations

import math

from zh_bert.hub.bert_names import DECODER, NSP_HEAD, TOKEN_TYPES, WORD, is_kernel

#: the probe's sentence pair; [MASK] where a model has something to predict
PROBE_TEXT = ("北京是中国的首[MASK]，也是一座历史悠久的城市。", "它有三千多年的建[MASK]史。")
PROBE_LEN = 32


def probe(vocab: list[str], positions: int, type_vocab: int) -> dict:
    """Two rows of ids: the sentence pair from `vocab` (one token per character, padded), and ids spread over the
    whole vocabulary (every part of the embedding table matters), each with token types and attention mask."""
    index = {t: i for i, t in enumerate(vocab)}
    n = len(vocab)
    unk = index.get("[UNK]", min(100, n - 1))

    def tok(t: str) -> int:
        return index.get(t, unk)

    def chars(text: str) -> list[int]:
        parts = text.split("[MASK]")
        out: list[int] = []
        for i, part in enumerate(parts):
            out += [tok(c) for c in part] + ([tok("[MASK]")] if i < len(parts) - 1 else [])
        return out

    size = min(PROBE_LEN, positions)
    a, b = chars(PROBE_TEXT[0]), chars(PROBE_TEXT[1])
    row = ([tok("[CLS]")] + a + [tok("[SEP]")] + b + [tok("[SEP]")])[:size]
    second = 1 if type_vocab > 1 else 0
    types = ([0] * (len(a) + 2) + [second] * (len(b) + 1))[:size]
    pad = index.get("[PAD]", 0)
    ids = [row + [pad] * (size - len(row)), [(i * 7919 + 13) % n for i in range(size)]]
    return {"input_ids": ids, "token_type_ids": [types + [0] * (size - len(row)), [0] * (size // 2) + [second] * (size - size // 2)],
            "attention_mask": [[1] * len(row) + [0] * (size - len(row)), [1] * size]}


def _source_activation(name: str, fmt_kind: str, gelu: str = "erf"):
    """The source's own activation `name`: its `gelu` is the `gelu` curve (erf, or tanh for Google's code after
    2019-02-07: `sources.TF1_TANH_SINCE`), UER's gelu_fast tanh."""
    import torch

    tanh_gelu = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # noqa: E731
    erf_gelu = lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))  # noqa: E731
    if fmt_kind == "hf":
        from transformers.activations import ACT2FN

        return ACT2FN[name]
    own = {"relu": torch.relu, "tanh": torch.tanh, "linear": lambda x: x, "silu": torch.nn.functional.silu,
           "gelu_fast": tanh_gelu, "gelu": tanh_gelu if gelu == "tanh" else erf_gelu}
    return own.get(name, erf_gelu)


def source_logits(raw: dict, found: dict, source, batch: dict):
    """(MLM logits [B, S, V], NSP logits [B, 2] or None) of the source's forward, float64, from its tensors as
    stored (`raw`: HF name -> source tensor; `found`: HF name -> source name)."""
    import torch

    t = {k: v.double() for k, v in raw.items()}
    fmt, dims = source.fmt, source.dims
    act = _source_activation(source.source_act, fmt.kind, source.gelu)

    def linear(x, name):
        w, b = t[f"{name}.weight"], t[f"{name}.bias"]
        return x @ w + b if is_kernel(found[f"{name}.weight"]) else x @ w.T + b

    def norm(x, name):
        g, b = t[f"{name}.weight"], t[f"{name}.bias"]
        centred = x - x.mean(-1, keepdim=True)
        if fmt.unbiased_norm:
            return g * centred / (x.std(-1, keepdim=True) + source.norm_eps) + b
        return g * centred / torch.sqrt((centred ** 2).mean(-1, keepdim=True) + source.norm_eps) + b

    ids, types, mask = (torch.tensor(batch[k]) for k in ("input_ids", "token_type_ids", "attention_mask"))
    segments = (types + 1) * mask if fmt.segment_pad_row else types   # UER: 1 = first, 2 = second, 0 = padding
    size = ids.shape[1]
    x = t[WORD][ids] + t["bert.embeddings.position_embeddings.weight"][:size] + t[TOKEN_TYPES][segments]
    x = norm(x, "bert.embeddings.LayerNorm")
    adder = (1.0 - mask[:, None, None, :].double()) * -10000.0
    heads, width = dims.heads, dims.hidden // dims.heads
    for i in range(dims.layers):
        p = f"bert.encoder.layer.{i}"
        q, k, v = (linear(x, f"{p}.attention.self.{n}").view(len(ids), size, heads, width).transpose(1, 2)
                   for n in ("query", "key", "value"))
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(width) + adder, -1)
        context = (probs @ v).transpose(1, 2).reshape(len(ids), size, dims.hidden)
        a = norm(linear(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        x = norm(linear(act(linear(a, f"{p}.intermediate.dense")), f"{p}.output.dense") + a, f"{p}.output.LayerNorm")
    h = norm(act(linear(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    mlm = h @ t.get(DECODER, t[WORD]).T + t["cls.predictions.bias"]
    if NSP_HEAD[0] not in t:
        return mlm, None
    pooled = torch.tanh(linear(x[:, 0], "bert.pooler.dense"))
    return mlm, linear(pooled, "cls.seq_relationship")


def model_logits(model, batch: dict):
    """(MLM logits, NSP logits or None) of a transformers BERT (BertForMaskedLM or BertForPreTraining)."""
    import torch

    model.eval()
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in batch.items()})
    mlm = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
    nsp = getattr(out, "seq_relationship_logits", None)
    return mlm.double(), None if nsp is None else nsp.double()


def max_difference(mine, theirs, batch: dict) -> dict:
    """The largest |Δ| of the MLM logits over attended positions (and of the NSP logits), with the scale."""
    import torch

    valid = torch.tensor(batch["attention_mask"]).bool()
    out = {"mlm_max_abs_diff": float((mine[0] - theirs[0]).abs()[valid].max()),
           "mlm_max_abs_logit": float(theirs[0].abs()[valid].max())}
    if theirs[1] is not None and mine[1] is not None:
        out["nsp_max_abs_diff"] = float((mine[1] - theirs[1]).abs().max())
    return out
