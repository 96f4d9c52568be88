"""Scoring blanks with a masked LM: the model of a checkpoint, its vocabulary logits at chosen positions, and
cloze items filled with every candidate (the blank becomes as many [MASK]s as the candidate has tokens, all
predicted at once; candidates with the same token count share one forward pass), and held-out text packed like
the training rows and masked once from a seed (`eval mlm`, the ablation's held-out figures). `eval cloze`, `eval
mlm`, the demo, prompt scoring (`choice`) and the ablation share it; it imports no command, so every one of them
can import it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import InitVar, dataclass, field
from typing import Optional

import numpy as np

from zh_bert.core.config import at_least, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.corpus.segment import SEGMENTERS, Segmenter, SegmenterName
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.corpus.shard.encode import Specials, TextEncoder, pack_sequences
from zh_bert.corpus.cloze_items import ClozeItem
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.train.arch import of_config
from zh_bert.train.masking import MaskingConfig, mask_batch
from zh_bert.train.rundir import masked_lm_dir
from zh_bert.train.weights import load_for_rows

# --------------------------------------------------------------------------- model

def load_mlm(ckpt):
    """(model in eval mode, tokenizer, model dir) for a checkpoint folder or run dir (an ELECTRA one: its
    generator)."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    ckpt_dir = masked_lm_dir(ckpt)
    tok = load_tokenizer(ckpt_dir)
    hf_logging.disable_progress_bar()
    model = load_for_rows(AutoModelForMaskedLM, ckpt_dir, "a masked-LM model", tok)
    import torch

    return model.to("cuda" if torch.cuda.is_available() else "cpu").eval(), tok, ckpt_dir


def masked_logits(model, batch: dict, positions):
    """Vocabulary logits only at `positions` (a (B, L) bool tensor): for BERT the 21k-way head runs on the
    masked rows alone, which is most of the cost of a small model."""
    import torch

    batch = {k: v.to(model.device) for k, v in batch.items()}
    positions = positions.to(model.device)
    with torch.no_grad():
        split = sparse_head(model)
        if split is not None:
            encoder, head = split
            return head(encoder(**batch)[0][positions]).float()
        return model(**batch).logits[positions].float()


def sparse_head(model):
    """(encoder, head) of a stock masked LM whose head can run on chosen positions only, else None (dense
    logits): its architecture knows where the head is (BERT `bert` then `cls`; ModernBERT `model` then
    `decoder(head(.))`, given no token_type_ids: `model_batch`)."""
    return of_config(getattr(model, "config", None)).sparse_head(model)


def model_batch(model, input_ids, attention_mask) -> dict:
    """The inputs of one forward pass: token_type_ids (all segment A) only for a model that has token types
    (BERT, ELECTRA). ModernBERT has no token types: its forward would pass them on unread in **kwargs."""
    import torch

    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if getattr(model.config, "type_vocab_size", None) and of_config(model.config).uses_token_types:
        batch["token_type_ids"] = torch.zeros_like(input_ids)
    return batch


# --------------------------------------------------------------------------- eval cloze

def _text_ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"] if text else []


def candidate_logprobs(model, tok, items: list[ClozeItem], seq_len: int = 256, batch_size: int = 32) -> list[dict]:
    """Per item: {candidate: [log p of each of its tokens]} with the blank masked to the candidate's length.

    Items without candidates get their answer's length and `"_argmax"`: the greedy fill of that blank.
    """
    import torch

    jobs = []  # (item index, k, input ids, mask start)
    wanted: list[dict[int, list[str]]] = []
    for i, it in enumerate(items):
        by_len: dict[int, list[str]] = {}
        for c in it.candidates or [it.answer]:
            by_len.setdefault(len(_text_ids(tok, c)), []).append(c)
        if 0 in by_len:
            raise ZhBertError(f"{it.where}: candidate {by_len[0][0]!r} tokenizes to nothing")
        wanted.append(by_len)
        pre, suf = _text_ids(tok, it.prefix), _text_ids(tok, it.suffix)
        for k in by_len:
            room = seq_len - 2 - k
            if room < 0:
                raise ZhBertError(f"{it.where}: a {k}-token candidate does not fit --seq-len {seq_len}")
            keep_pre = min(len(pre), max(room // 2, room - len(suf)))   # centre the window on the blank
            keep_suf = min(len(suf), room - keep_pre)
            p = pre[len(pre) - keep_pre:]
            ids = [tok.cls_token_id] + p + [tok.mask_token_id] * k + suf[:keep_suf] + [tok.sep_token_id]
            jobs.append((i, k, ids, 1 + len(p)))
    out = [{} for _ in items]
    for s in range(0, len(jobs), batch_size):
        chunk = jobs[s:s + batch_size]
        width = max(len(j[2]) for j in chunk)
        inp = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        pos = torch.zeros((len(chunk), width), dtype=torch.bool)
        for r, (_, k, ids, start) in enumerate(chunk):
            inp[r, :len(ids)] = torch.tensor(ids)
            pos[r, start:start + k] = True
        batch = model_batch(model, inp, (inp != tok.pad_token_id).long())
        logp = torch.log_softmax(masked_logits(model, batch, pos), dim=-1).cpu()  # rows in (job, position) order
        row = 0
        for i, k, _, _ in chunk:
            lp = logp[row:row + k]
            row += k
            for c in wanted[i][k]:
                cid = torch.tensor(_text_ids(tok, c))
                out[i][c] = lp[torch.arange(k), cid].tolist()
            if items[i].candidates is None:
                out[i]["_argmax"] = lp.argmax(-1).tolist()
    return out


def eval_cloze(model, tok, items: list[ClozeItem], score: str = "sum", seq_len: int = 256,
               batch_size: int = 32) -> tuple[dict, list[dict]]:
    """Accuracy under sum and mean log-probability; `score` picks the headline `accuracy`."""
    lps = candidate_logprobs(model, tok, items, seq_len, batch_size)
    hits = {"sum": 0, "mean": 0}
    preds = []
    for it, lp in zip(items, lps):
        if it.candidates is None:
            ok = lp["_argmax"] == _text_ids(tok, it.answer)
            fill = tok.decode(lp["_argmax"]).replace(" ", "")
            hits["sum"] += ok
            hits["mean"] += ok
            preds.append({"where": it.where, "answer": it.answer, "prediction": fill, "correct": bool(ok)})
            continue
        sums = {c: float(sum(lp[c])) for c in it.candidates}
        means = {c: sums[c] / len(lp[c]) for c in it.candidates}
        best = {"sum": max(it.candidates, key=sums.get), "mean": max(it.candidates, key=means.get)}
        for m in hits:
            hits[m] += best[m] == it.answer
        preds.append({"where": it.where, "answer": it.answer, "prediction": best[score],
                      "correct": best[score] == it.answer, "scores": sums if score == "sum" else means})
    n = len(items)
    return ({"accuracy": hits[score] / n, "n": n, "score": score, "accuracy_sum": hits["sum"] / n,
             "accuracy_mean": hits["mean"] / n}, preds)


# --------------------------------------------------------------------------- held-out text (`eval mlm`)

def encode_and_pack(docs: list[str], tok, seq_len: int, segmenter: str = "rjieba") -> tuple[np.ndarray, np.ndarray]:
    """(N, seq_len) ids and word starts, packed by the shard packer itself: full rows `[CLS] doc [SEP] doc
    ... [SEP]`, the last one padded. Held-out text then looks to the model exactly like its training rows."""
    encoder = TextEncoder(tok, Segmenter(segmenter))
    if not encoder.self_check(docs[:100]):   # as `zh-bert shard` does: never trade exact ids for speed
        encoder.lut = None
    packed = pack_sequences(encoder.encode(docs), seq_len,
                            Specials(cls=tok.cls_token_id, sep=tok.sep_token_id, pad=tok.pad_token_id))
    if not len(packed["ids"]):
        raise ZhBertError("the text tokenizes to nothing")
    return packed["ids"], packed["word_start"]


@dataclass
class MlmEvalConfig:
    """Settings of `eval mlm`. `masking` holds the masking options (--masking, --mask-rate, ...);
    `mask_rate=` is accepted as a shorthand for `masking.mask_rate`."""
    seed: int = option_of(Shared, "seed", default=0, help="masking seed (same seed = same blanks)")
    seq_len: int = option_of(ShardConfig, "seq_len", help="tokens per packed sequence, [CLS] and [SEP] included")
    batch_size: int = option_of(Shared, "batch_size", help="sequences per forward pass (does not change the figures)")
    max_seqs: int = option(0, help="evaluate the first N packed sequences (0: all)")
    segmenter: SegmenterName = option_of(ShardConfig, "segmenter", help="word boundaries for wwm/ngram")
    order_check: bool = option(False, help="also score the same blanks with each sequence's tokens shuffled; "
                                           "reports mlm_acc_shuffled and order_gain (≈0: the model ignores "
                                           "word order)")
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    mask_rate: InitVar[Optional[float]] = None

    def __post_init__(self, mask_rate: Optional[float]):
        if mask_rate is not None:
            self.masking = dataclasses.replace(self.masking, mask_rate=mask_rate)
        at_least(self, 1, "batch_size")
        at_least(self, 8, "seq_len")
        at_least(self, 0, "max_seqs")
        if self.segmenter not in SEGMENTERS:
            raise ZhBertError(f"--segmenter must be one of {', '.join(SEGMENTERS)}, got {self.segmenter!r}")


def eval_mlm(model, tok, docs: list[str], cfg: MlmEvalConfig) -> dict:
    """Masked-LM loss / accuracy / top-5 on `docs`, masked deterministically from cfg.seed."""
    max_pos = getattr(model.config, "max_position_embeddings", 512)
    if not 8 <= cfg.seq_len <= max_pos:
        raise ZhBertError(f"--seq-len {cfg.seq_len}: must be between 8 and the model's {max_pos} positions")
    ids, ws = encode_and_pack(docs, tok, cfg.seq_len, cfg.segmenter)
    if cfg.max_seqs:
        ids, ws = ids[:cfg.max_seqs], ws[:cfg.max_seqs]
    vocab_size = model.config.vocab_size
    unigram = None
    if cfg.masking.strategy == "unigram-noise":
        unigram = np.bincount(ids.ravel(), minlength=vocab_size).astype(np.float64)
        unigram[list(tok.all_special_ids)] = 0
        unigram /= unigram.sum()
    masked, labels = mask_batch(ids, ws, cfg.masking, np.random.default_rng(cfg.seed), mask_id=tok.mask_token_id,
                                special_ids=tok.all_special_ids, vocab_size=vocab_size, unigram_probs=unigram)
    loss_sum, top1, top5, n = _score(model, tok, masked, labels, ids, cfg.batch_size)
    if n == 0:
        raise ZhBertError("no token was masked: the text is too short")
    loss = loss_sum / n
    out = {"mlm_loss": loss, "mlm_acc": top1 / n, "mlm_top5": top5 / n, "perplexity": math.exp(min(loss, 700)),
            "n_masked": n, "n_sequences": int(len(ids)), "n_tokens": int((ids != tok.pad_token_id).sum()),
            "seed": cfg.seed, "masking": cfg.masking.strategy, "mask_rate": cfg.masking.mask_rate,
            "seq_len": cfg.seq_len}
    if cfg.order_check:
        # Same blanks, same tokens, random order within each sequence (padding stays at the end). A model
        # that only counts which characters are around (bag of words) scores the same; one that reads its
        # neighbours loses accuracy. order_gain = mlm_acc - mlm_acc_shuffled.
        rng = np.random.default_rng([cfg.seed, 1])
        sm, sl, si = masked.copy(), labels.copy(), ids.copy()
        for r in range(len(ids)):
            real = np.flatnonzero(ids[r] != tok.pad_token_id)
            perm = real[rng.permutation(len(real))]
            sm[r, real], sl[r, real], si[r, real] = masked[r, perm], labels[r, perm], ids[r, perm]
        s_loss, s_top1, _, s_n = _score(model, tok, sm, sl, si, cfg.batch_size)
        out.update(mlm_loss_shuffled=s_loss / s_n, mlm_acc_shuffled=s_top1 / s_n,
                   order_gain=out["mlm_acc"] - s_top1 / s_n)
    return out


def _score(model, tok, masked: np.ndarray, labels: np.ndarray, ids: np.ndarray, batch_size: int):
    """(loss sum, top-1 hits, top-5 hits, n) over the masked positions of packed (N, L) arrays."""
    import torch

    loss_sum, top1, top5, n = 0.0, 0, 0, 0
    for s in range(0, len(ids), batch_size):
        lab = torch.from_numpy(labels[s:s + batch_size])
        if not (lab != -100).any():
            continue
        inp = torch.from_numpy(masked[s:s + batch_size])
        batch = model_batch(model, inp, (torch.from_numpy(ids[s:s + batch_size]) != tok.pad_token_id).long())
        pos = lab != -100
        logits = masked_logits(model, batch, pos).cpu()
        gold = lab[pos]
        loss_sum += float(torch.nn.functional.cross_entropy(logits, gold, reduction="sum"))
        best5 = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
        top1 += int((best5[:, 0] == gold).sum())
        top5 += int((best5 == gold[:, None]).any(-1).sum())
        n += int(pos.sum())
    return loss_sum, top1, top5, n
