"""`zh-bert eval mlm|cloze CKPT ...`: masked-LM figures that compare checkpoints fairly.

`eval mlm` packs held-out text with the shard packer itself (rows `[CLS] doc [SEP] doc ... [SEP]`, exactly
like the training rows) and masks them once with `zh_bert.train.masking.mask_batch` from a fixed seed, over the
whole set at once, so the masked positions depend only on (text, tokenizer, seed, masking) — not on batch
size or model — and two checkpoints with the same tokenizer are scored on exactly the same blanks.

`eval cloze` fills each blank with every candidate: the blank becomes as many [MASK]s as the candidate has
tokens, and the candidate's score is the sum (or mean) of its tokens' log-probabilities, all predicted at
once. Candidates with the same token count share one forward pass (ChID's are all four characters).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Literal, Optional

import numpy as np

from zh_bert.core.config import at_least, config_from_args, option, option_of
from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.corpus.corpus_io import read_documents, read_jsonl
from zh_bert.corpus.segment import SEGMENTERS, Segmenter, SegmenterName
from zh_bert.corpus.shard.build import ShardConfig
from zh_bert.corpus.shard.encode import Specials, TextEncoder, pack_sequences
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.eval_results import CheckpointArgs, entry, record_for_checkpoint
from zh_bert.evaluation.finetune import FinetuneConfig
from zh_bert.evaluation.suite import SuiteArgs, report_lines, run_suite, suite_entries
from zh_bert.train.arch import of_config
from zh_bert.train.masking import MaskingConfig, mask_batch
from zh_bert.train.rundir import masked_lm_dir
from zh_bert.train.weights import load_pretrained

# --------------------------------------------------------------------------- model

def load_mlm(ckpt):
    """(model in eval mode, tokenizer, model dir) for a checkpoint folder or run dir (an ELECTRA one: its
    generator)."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    ckpt_dir = masked_lm_dir(ckpt)
    tok = load_tokenizer(ckpt_dir)
    hf_logging.disable_progress_bar()
    model = load_pretrained(AutoModelForMaskedLM, ckpt_dir, "a masked-LM model")
    if model.config.vocab_size < len(tok):
        raise ZhBertError(f"{ckpt_dir}: tokenizer has {len(tok)} tokens but the model's vocab_size is "
                          f"{model.config.vocab_size}")
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


# --------------------------------------------------------------------------- options shared by the commands

# --------------------------------------------------------------------------- eval mlm

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


# --------------------------------------------------------------------------- eval cloze

BLANK = re.compile(r"#idiom\d*#")


@dataclass
class ClozeItem:
    where: str                  # file:line
    prefix: str
    suffix: str
    candidates: list[str] | None
    answer: str


def _item(obj, where: str, mask_token: str) -> ClozeItem:
    if not isinstance(obj, dict):
        raise ZhBertError(f"{where}: expected a JSON object")
    cands = obj.get("candidates")
    if cands is not None and (not isinstance(cands, list) or not cands or not all(isinstance(c, str) and c for c in cands)):
        raise ZhBertError(f"{where}: 'candidates' must be a non-empty list of strings")
    if "content" in obj:                      # ChID style: "...#idiom#..." + candidates + answer
        text = obj["content"]
        if not isinstance(text, str):
            raise ZhBertError(f"{where}: 'content' must be a string with one #idiom# blank")
        blanks = BLANK.findall(text)
        if len(blanks) != 1:
            raise ZhBertError(f"{where}: 'content' must contain exactly one #idiom# blank, found {len(blanks)}")
        if not cands:
            raise ZhBertError(f"{where}: a #idiom# item needs 'candidates'")
        prefix, suffix = BLANK.split(text)
    elif "text" in obj:                       # plain: "...[MASK]..." + answer (+ candidates)
        text = obj["text"]
        runs = list(re.finditer(rf"(?:{re.escape(mask_token)})+", text if isinstance(text, str) else ""))
        if len(runs) != 1:
            raise ZhBertError(f"{where}: 'text' must contain exactly one {mask_token} blank (a run of "
                              f"{mask_token}), found {len(runs)}")
        prefix, suffix = text[:runs[0].start()], text[runs[0].end():]
    else:
        raise ZhBertError(f"{where}: expected 'content' (with #idiom#) or 'text' (with [MASK])")
    ans = obj.get("answer")
    if isinstance(ans, bool) or ans is None:
        raise ZhBertError(f"{where}: missing 'answer' (a candidate index or the answer text)")
    if isinstance(ans, int):
        if not cands or not 0 <= ans < len(cands):
            raise ZhBertError(f"{where}: answer index {ans} is out of range for {len(cands or [])} candidates")
        ans = cands[ans]
    elif not isinstance(ans, str) or not ans:
        raise ZhBertError(f"{where}: 'answer' must be a candidate index or a non-empty string")
    elif cands and ans not in cands:
        raise ZhBertError(f"{where}: answer '{ans}' is not among the candidates")
    return ClozeItem(where, prefix, suffix, cands, ans)


def read_cloze(path: str | Path, mask_token: str = "[MASK]") -> list[ClozeItem]:
    items = [_item(obj, where, mask_token) for where, obj in read_jsonl(path)]
    if not items:
        raise ZhBertError(f"{path}: no cloze items")
    return items


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
    out = [dict() for _ in items]
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


# --------------------------------------------------------------------------- CLI

@dataclass
class MlmText:
    text: list[str] = option(metavar="FILE", help="held-out text: `zh-bert clean` JSONL or plain text, "
                                                  "one document per line, or a directory of parts "
                                                  "(a `zh-bert clean` OUTDIR)")


@dataclass
class ClozeEvalConfig:
    """Settings of `eval cloze`."""
    data: str = option(metavar="FILE", help='JSON lines: {"content": "..#idiom#..", "candidates": [..], '
                                            '"answer": i} or {"text": "..[MASK]..", "answer": "..", '
                                            '"candidates": [..] (optional)}')
    score: Literal["sum", "mean"] = option("sum", help="rank candidates by summed or mean token log-probability")
    seq_len: int = option_of(ShardConfig, "seq_len", default=256, help="longest input; the window is centred on the blank")
    batch_size: int = option_of(Shared, "batch_size", help="inputs per forward pass")
    show: int = option(5, help="print the first N predictions")

    def __post_init__(self):
        if self.score not in ("sum", "mean"):
            raise ZhBertError(f"--score must be sum or mean, got {self.score!r}")
        at_least(self, 1, "batch_size")
        at_least(self, 3, "seq_len")
        at_least(self, 0, "show")


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert eval", __doc__.split("\n\n")[0], subcommands={
        "mlm": ("masked-LM loss, perplexity, top-1/top-5 accuracy on held-out text",
                (CheckpointArgs, MlmText, MlmEvalConfig, MaskingConfig)),
        "cloze": ("multiple-choice cloze (ChID #idiom# or [MASK] sentences)", (CheckpointArgs, ClozeEvalConfig)),
        "suite": ("a benchmark under its own protocol: FewCLUE (fine-tune on train_k, choose on dev_k, report "
                  "test_public)", (CheckpointArgs, SuiteArgs, FinetuneConfig))})


def _main_mlm(ckpt: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    cfg = dataclasses.replace(config_from_args(MlmEvalConfig, args), masking=config_from_args(MaskingConfig, args))
    text = config_from_args(MlmText, args).text
    docs = read_documents(text)
    model, tok, ckpt_dir = load_mlm(ckpt)
    res = eval_mlm(model, tok, docs, cfg)
    res["checkpoint"] = str(ckpt_dir)
    print(f"{ckpt_dir}: {res['n_sequences']} sequences, {res['n_masked']} masked tokens ({res['masking']}, "
          f"seed {cfg.seed}): loss {res['mlm_loss']:.4f}, perplexity {res['perplexity']:.2f}, "
          f"acc {res['mlm_acc']:.4f}, top-5 {res['mlm_top5']:.4f}", flush=True)
    if cfg.order_check:
        print(f"context shuffled: acc {res['mlm_acc_shuffled']:.4f} (order gain {res['order_gain'] * 100:+.1f} "
              f"points), loss {res['mlm_loss_shuffled']:.4f}", flush=True)
    name = ", ".join(Path(t).name for t in text)
    task = f"Masked LM ({res['masking']} masking, seed {cfg.seed})"
    return res, [entry("fill-mask", task, "text", name, "accuracy", "MLM accuracy", res["mlm_acc"]),
                 entry("fill-mask", task, "text", name, "accuracy", "MLM top-5 accuracy", res["mlm_top5"]),
                 entry("fill-mask", task, "text", name, "perplexity", "perplexity", res["perplexity"])]


def _main_cloze(ckpt: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    cfg = config_from_args(ClozeEvalConfig, args)
    items = read_cloze(cfg.data)
    model, tok, ckpt_dir = load_mlm(ckpt)
    res, preds = eval_cloze(model, tok, items, cfg.score, cfg.seq_len, cfg.batch_size)
    res["checkpoint"] = str(ckpt_dir)
    for p in preds[:cfg.show]:
        print(f"{p['where']}: {'✓' if p['correct'] else '✗'} predicted {p['prediction']!r}, answer {p['answer']!r}")
    print(f"{ckpt_dir}: cloze accuracy {res['accuracy']:.4f} on {res['n']} items "
          f"(sum {res['accuracy_sum']:.4f}, mean {res['accuracy_mean']:.4f})", flush=True)
    return res, [entry("fill-mask", f"Cloze ({cfg.score} log-prob)", "cloze", Path(cfg.data).name, "accuracy",
                       "cloze accuracy", res["accuracy"])]


def _main_suite(ckpt: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    from transformers.utils import logging as hf_logging

    suite, cfg = config_from_args(SuiteArgs, args), config_from_args(FinetuneConfig, args)
    hf_logging.set_verbosity_error()  # "newly initialised classifier" warnings are expected here
    hf_logging.disable_progress_bar()
    res = run_suite(ckpt, suite, cfg, log=lambda m: print(m, flush=True))
    print("\n".join(report_lines(res)), flush=True)
    return res, suite_entries(res)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    target = config_from_args(CheckpointArgs, args)
    res, entries = {"mlm": _main_mlm, "cloze": _main_cloze, "suite": _main_suite}[args.command](target.ckpt, args)
    if not target.no_record:
        where = record_for_checkpoint(target.ckpt, entries)
        if where:
            print(f"recorded in {where}", flush=True)
    print(json.dumps(res, ensure_ascii=False), flush=True)
    return 0
