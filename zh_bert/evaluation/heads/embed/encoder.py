"""The embedder's model and how it encodes: the checkpoint's stock encoder (`AutoModel`: BertModel, ModernBertModel;
no head), its tokens pooled (`pooling`) and L2-normalised.

Speed on a CPU comes from not computing padding: texts are tokenized once, sorted by length, and cut into batches
of about `BATCH_TOKENS` padded tokens (`token_batches`), so a batch of short sentences holds many rows and one of
long ones few; each vector is put back at its text's position. A stream of texts (`encode_stream`) is encoded
`CHUNK_TEXTS` at a time, so memory holds one chunk, never the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from zh_bert.core.fileio import read_json
from zh_bert.evaluation.heads.embed.pooling import Pooling
from zh_bert.evaluation.length_groups import length_groups
from zh_bert.evaluation.step import precision_autocast
from zh_bert.train.arch import of_config
from zh_bert.train.weights import load_for_rows

#: padded tokens per encoding batch: large enough that a CPU's matrix kernels run at speed, small enough that a
#: batch of 512-token texts stays a few rows (measured in bench/embed_speed.py)
BATCH_TOKENS = 8192
#: the most rows of one batch (short texts)
ENCODE_MAX_ROWS = 256
#: texts tokenized, sorted and encoded together when a file is streamed
CHUNK_TEXTS = 16384
#: characters of a text tokenized per token of `--seq-len` (a token is at least one character but for specials)
CUT_CHARS_PER_TOKEN = 4


def load_encoder(ckpt_dir: Path, tok, seq_len: int, random_init: bool = False, dropout: float | None = None):
    """The checkpoint's encoder (random weights of its config for a baseline), on the best device, in eval mode;
    `dropout`: the hidden and attention dropout it trains with (None: its config's). Refused in one line when the
    tokenizer outgrows its vocabulary or `seq_len` its positions."""
    import torch
    from transformers import AutoModel

    kw = {}
    if dropout is not None:
        kw = of_config(read_json(Path(ckpt_dir) / "config.json", default={})).dropout_kwargs(dropout, dropout)
    model = load_for_rows(AutoModel, ckpt_dir, "an encoder", tok, random_init, seq_len, **kw)
    return model.to("cuda" if torch.cuda.is_available() else "cpu").eval()


def pad_id_of(tok) -> int:
    return tok.pad_token_id if tok.pad_token_id is not None else 0


def tokenize(tok, texts: list[str], seq_len: int) -> tuple[list[list[int]], int]:
    """Token ids of each text ([CLS] ... [SEP]), cut at `seq_len`; and how many texts were cut. A text longer than
    `CUT_CHARS_PER_TOKEN` characters per token is tokenized from its start only (a 5,000-character line costs
    its first few hundred), and again whole in the rare case that start yields fewer than `seq_len` tokens
    (whitespace): the ids are always those of the whole text cut at `seq_len`."""
    budget = CUT_CHARS_PER_TOKEN * seq_len
    ids, cut = _tokenize(tok, [t[:budget] for t in texts], seq_len)
    short = [i for i, t in enumerate(texts) if len(t) > budget and len(ids[i]) < seq_len]
    if short:
        redo, _ = _tokenize(tok, [texts[i] for i in short], seq_len)
        for i, row in zip(short, redo):
            ids[i] = row
    cut = sum(1 for i, t in enumerate(texts) if len(ids[i]) == seq_len and (len(t) > budget or cut[i]))
    return ids, cut


def _tokenize(tok, texts: list[str], seq_len: int) -> tuple[list[list[int]], list[bool]]:
    enc = tok(texts, truncation=True, max_length=seq_len)
    encodings = getattr(enc, "encodings", None) or [None] * len(texts)
    return enc["input_ids"], [bool(e.overflowing) if e is not None else False for e in encodings]


def forward_rows(model, rows: list[list[int]], pooling: Pooling, pad_id: int):
    """The pooled, L2-normalised vectors (fp32 tensor) of `rows` (token id lists) in one padded forward."""
    import torch

    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    ids, mask = torch.from_numpy(ids).to(model.device), torch.from_numpy(mask).to(model.device)
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=pooling.all_layers)
    return torch.nn.functional.normalize(pooling.pool(out, mask), dim=-1)


def grouped_rows(model, rows: list[list[int]], pooling: Pooling, pad_id: int, overhead: int):
    """`forward_rows` of many rows run as groups of similar length (`length_groups`), vectors in the rows' order:
    a training batch of short and long sentences pads each group to its own longest only."""
    import torch

    groups = length_groups(np.array([len(r) for r in rows]), len(rows), overhead)
    vecs = torch.cat([forward_rows(model, [rows[i] for i in g], pooling, pad_id) for g in groups])
    order = torch.from_numpy(np.argsort(np.concatenate(groups), kind="stable")).to(vecs.device)
    return vecs.index_select(0, order)


def token_batches(lengths: np.ndarray, batch_tokens: int = BATCH_TOKENS, max_rows: int = ENCODE_MAX_ROWS) -> list[np.ndarray]:
    """Positions into `lengths`, longest first, cut so that rows x longest stays within `batch_tokens`."""
    order = np.argsort(-lengths, kind="stable")
    out, start = [], 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        rows = max(1, min(max_rows, batch_tokens // longest))
        out.append(order[start:start + rows])
        start += rows
    return out


def encode_ids(model, ids: list[list[int]], pooling: Pooling, pad_id: int, precision: str = "fp32",
               tick=None) -> np.ndarray:
    """Vectors (float32, L2-normalised) of token id lists, in their order; `tick(n)` after each batch of n."""
    import torch

    was_training = model.training
    model.eval()
    lengths = np.array([len(x) for x in ids])
    out = np.zeros((len(ids), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode(), precision_autocast(model.device, precision):
        for idx in token_batches(lengths):
            out[idx] = forward_rows(model, [ids[i] for i in idx], pooling, pad_id).cpu().numpy()
            if tick:
                tick(len(idx))
    model.train(was_training)
    return out


def encode_texts(model, tok, texts: list[str], pooling: Pooling, seq_len: int, precision: str = "fp32",
                 tick=None) -> tuple[np.ndarray, int]:
    """(vectors of `texts` in their order, how many texts were cut at `seq_len`)."""
    ids, cut = tokenize(tok, texts, seq_len)
    return encode_ids(model, ids, pooling, pad_id_of(tok), precision, tick), cut


def encode_stream(model, tok, texts: Iterable[str], pooling: Pooling, seq_len: int, precision: str = "fp32",
                  tick=None, chunk: int = CHUNK_TEXTS) -> Iterator[tuple[np.ndarray, int]]:
    """(vectors, texts cut) of each chunk of `chunk` texts of a stream, in order: memory holds one chunk."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == chunk:
            yield encode_texts(model, tok, batch, pooling, seq_len, precision, tick)
            batch = []
    if batch:
        yield encode_texts(model, tok, batch, pooling, seq_len, precision, tick)
