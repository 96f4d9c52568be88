"""Scoring blanks with a masked LM: the model of a checkpoint, its vocabulary logits at chosen positions, and
cloze items filled with every candidate (the blank becomes as many [MASK]s as the candidate has tokens, all
predicted at once; candidates with the same token count share one forward pass). `eval cloze`, the demo and
prompt scoring (`prompts`) share it; it imports no command, so every one of them can import it.
"""

from __future__ import annotations

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.cloze_items import ClozeItem
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.train.arch import of_config
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
