"""`zh-bert inspect SHARDDIR`: shard sequences as text, with word boundaries and masking visible.

Text mode prints, per sequence, the tokens with a space before every word start (so jieba's words show),
then the masked input where each predicted token appears as 【original→input】. `--json` prints one JSON
object per line (tokens, input_ids, labels, word_start, ...) for scripts and tests.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from zh_bert.data import ShardDataset, read_meta
from zh_bert.errors import ZhBertError
from zh_bert.masking import STRATEGIES, MaskingConfig, mask_batch


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zh-bert inspect", description=__doc__.split("\n")[0])
    p.add_argument("sharddir", metavar="SHARDDIR")
    p.add_argument("--tokenizer", metavar="TOKDIR", default=None,
                   help="tokenizer dir for token strings (default: the one recorded in meta.json)")
    p.add_argument("--masking", default="wwm", metavar="STRATEGY", help=f"{'|'.join(STRATEGIES)}|none")
    p.add_argument("--mask-rate", type=float, default=0.15)
    p.add_argument("--samples", type=int, default=3, help="sequences to show (random, from --seed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=("train", "valid"), default="train")
    p.add_argument("--json", action="store_true", help="one JSON object per sequence")
    return p


def _words(tokens: list[str], starts: list[bool]) -> str:
    return "".join((" " if s and i else "") + t for i, (t, s) in enumerate(zip(tokens, starts)))


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    meta = read_meta(args.sharddir)
    tokdir = args.tokenizer or meta.get("tokenizer")
    if not tokdir or not Path(tokdir).is_dir():
        raise ZhBertError(f"{args.sharddir}: its tokenizer {tokdir!r} is not available; pass --tokenizer TOKDIR")
    from zh_bert.tokenizer_files import load_tokenizer

    tok = load_tokenizer(tokdir)
    ds = ShardDataset(args.sharddir, args.split, tokenizer_fingerprint=tok)
    if len(ds) == 0:
        raise ZhBertError(f"{args.sharddir}: split '{args.split}' has no sequences")
    if args.samples < 1:
        raise ZhBertError(f"--samples must be >= 1, got {args.samples}")
    rng = np.random.default_rng(args.seed)
    idx = np.sort(rng.choice(len(ds), size=min(args.samples, len(ds)), replace=False))
    b = ds.batch(idx)
    if args.masking == "none":
        ids, labels = b["input_ids"], np.full_like(b["input_ids"], -100)
    else:
        cfg = MaskingConfig(strategy=args.masking, mask_rate=args.mask_rate)
        ids, labels = mask_batch(b["input_ids"], b["word_start"], cfg, rng, mask_id=ds.mask_id,
                                 special_ids=ds.special_ids, vocab_size=ds.vocab_size,
                                 unigram_probs=ds.unigram_probs() if cfg.strategy == "unigram-noise" else None)
    for r, i in enumerate(idx.tolist()):
        n = int(b["attention_mask"][r].sum())
        orig = b["input_ids"][r, :n].tolist()
        inp = ids[r, :n].tolist()
        lab = labels[r, :n].tolist()
        ws = b["word_start"][r, :n].astype(bool).tolist()
        tokens = tok.convert_ids_to_tokens(orig)
        if args.json:
            obj = {"index": i, "split": args.split, "tokens": tokens, "input_ids": inp, "labels": lab,
                   "word_start": ws, "original_ids": orig,
                   "token_type_ids": b["token_type_ids"][r, :n].tolist()}
            if "next_sentence_label" in b:
                obj["next_sentence_label"] = int(b["next_sentence_label"][r])
            print(json.dumps(obj, ensure_ascii=False))
            continue
        shown = tok.convert_ids_to_tokens(inp)
        masked = [f"【{t}→{s}】" if l != -100 else s for t, s, l in zip(tokens, shown, lab)]
        extra = f", nsp/sop label {int(b['next_sentence_label'][r])}" if "next_sentence_label" in b else ""
        n_pred = sum(l != -100 for l in lab)
        print(f"#{i} ({args.split}, {n} tokens, {n_pred} predicted, masking {args.masking}{extra})")
        print(f"  words : {_words(tokens, ws)}")
        print(f"  masked: {_words(masked, ws)}")
        print()
    return 0
