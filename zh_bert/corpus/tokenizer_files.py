"""Loading tokenizer dirs and fingerprinting them, shared by every stage after `vocab`.

The fingerprint is a hash of the token -> id mapping (not of file bytes), so shards built with one
tokenizer are refused by training with another even if both dirs were re-saved or reformatted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from zh_bert.core.errors import ZhBertError

#: every file a tokenizer may need, across vocab kinds and transformers 4.x/5.x (vocab.txt for BertTokenizer)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "added_tokens.json", "spiece.model", "zh_bert_vocab.json")


def load_tokenizer(tokdir: str | Path):
    """AutoTokenizer from a tokenizer dir (or a model dir that has tokenizer files), with clear errors."""
    tokdir = Path(tokdir)
    if not tokdir.is_dir():
        raise ZhBertError(f"{tokdir}: tokenizer directory not found")
    if not any((tokdir / n).exists() for n in ("tokenizer.json", "tokenizer_config.json")):
        raise ZhBertError(f"{tokdir}: not a tokenizer dir (no tokenizer.json / tokenizer_config.json); "
                          f"build one with `zh-bert vocab`")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(tokdir))
    except Exception as e:  # transformers raises many types for broken dirs
        raise ZhBertError(f"{tokdir}: cannot load tokenizer: {e}") from None
    if len(tok) <= 10:
        raise ZhBertError(f"{tokdir}: tokenizer loaded with only {len(tok)} tokens: its vocabulary file was ignored")
    return tok


def tokenizer_fingerprint(tok_or_dir) -> str:
    """sha256 (first 16 hex) of the sorted token->id mapping plus special-token ids."""
    tok = load_tokenizer(tok_or_dir) if isinstance(tok_or_dir, (str, Path)) else tok_or_dir
    vocab = tok.get_vocab()
    payload = json.dumps({"vocab": sorted(vocab.items(), key=lambda kv: kv[1]),
                          "special": {k: str(v) for k, v in sorted(tok.special_tokens_map.items())}},
                         ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
