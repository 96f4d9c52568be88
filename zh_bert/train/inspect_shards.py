"""`zh-bert inspect SHARDDIR`: shard sequences as text, with word boundaries and masking visible.

Text mode prints, per sequence, the tokens with a space before every word start (so jieba's words show),
then the masked input where each predicted token appears as 【original→input】. `--json` prints one JSON
object per line (tokens, input_ids, labels, word_start, ...) for scripts and tests.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np

from zh_bert.core.config import build_parser as _build_parser
from zh_bert.core.config import config_from_args, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.options import Shared
from zh_bert.corpus.sharddir import read_meta
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.train.data import ShardDataset
from zh_bert.train.masking import STRATEGIES, MaskingConfig, mask_batch


@dataclass
class InspectConfig:
    """`zh-bert inspect SHARDDIR [options]`; the masking options are MaskingConfig's."""
    sharddir: str = option(positional=True, metavar="SHARDDIR")
    tokenizer: Optional[str] = option(None, metavar="TOKDIR", help="tokenizer dir for token strings "
                                      "(default: the one recorded in meta.json)")
    samples: int = option(3, help="sequences to show (random, from --seed)")
    seed: int = option_of(Shared, "seed", default=0, help="masking seed (same seed = same blanks)")
    split: Literal["train", "valid"] = option("train")
    json: bool = option_of(Shared, "json", help="one JSON object per sequence")

    def __post_init__(self):
        if self.samples < 1:
            raise ZhBertError(f"--samples must be >= 1, got {self.samples}")


def build_parser() -> argparse.ArgumentParser:
    """InspectConfig's and MaskingConfig's options. `--masking` also takes `none` (the input unmasked), and
    its value is checked by MaskingConfig rather than argparse, whose error cannot suggest the nearest name."""
    p = _build_parser("zh-bert inspect", __doc__.split("\n")[0], InspectConfig, MaskingConfig)
    for action in p._actions:
        if action.dest == "strategy":
            action.type, action.metavar = str, "STRATEGY"
            action.help = f"{'|'.join(STRATEGIES)}|none (default: {action.default})"
    return p


def _words(tokens: list[str], starts: list[bool]) -> str:
    return "".join((" " if s and i else "") + t for i, (t, s) in enumerate(zip(tokens, starts)))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    masking = None if args.strategy == "none" else config_from_args(MaskingConfig, args)
    inspect_shards(config_from_args(InspectConfig, args), masking)
    return 0


def inspect_shards(cfg: InspectConfig, masking: MaskingConfig | None) -> None:
    """Print `cfg.samples` random sequences of a split, masked with `masking` (None: unmasked)."""
    meta = read_meta(cfg.sharddir)
    tokdir = cfg.tokenizer or meta.get("tokenizer")
    if not tokdir or not Path(tokdir).is_dir():
        raise ZhBertError(f"{cfg.sharddir}: its tokenizer {tokdir!r} is not available; pass --tokenizer TOKDIR")
    tok = load_tokenizer(tokdir)
    ds = ShardDataset(cfg.sharddir, cfg.split, tokenizer_fingerprint=tok)
    if len(ds) == 0:
        raise ZhBertError(f"{cfg.sharddir}: split '{cfg.split}' has no sequences")
    rng = np.random.default_rng(cfg.seed)
    idx = np.sort(rng.choice(len(ds), size=min(cfg.samples, len(ds)), replace=False))
    b = ds.batch(idx)
    if masking is None:
        ids, labels = b["input_ids"], np.full_like(b["input_ids"], -100)
    else:
        from zh_bert.corpus.similar_words import load_or_build

        ids, labels = mask_batch(b["input_ids"], b["word_start"], masking, rng, mask_id=ds.mask_id,
                                 special_ids=ds.special_ids, vocab_size=ds.vocab_size,
                                 unigram_probs=ds.unigram_probs() if masking.strategy == "unigram-noise" else None,
                                 similar=load_or_build(ds) if masking.strategy == "correction" else None)
    for r, i in enumerate(idx.tolist()):
        n = int(b["attention_mask"][r].sum())
        orig = b["input_ids"][r, :n].tolist()
        inp = ids[r, :n].tolist()
        lab = labels[r, :n].tolist()
        ws = b["word_start"][r, :n].astype(bool).tolist()
        tokens = tok.convert_ids_to_tokens(orig)
        if cfg.json:
            obj = {"index": i, "split": cfg.split, "tokens": tokens, "input_ids": inp, "labels": lab,
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
        how = masking.strategy if masking else "none"
        print(f"#{i} ({cfg.split}, {n} tokens, {n_pred} predicted, masking {how}{extra})")
        print(f"  words : {_words(tokens, ws)}")
        print(f"  masked: {_words(masked, ws)}")
        print()
