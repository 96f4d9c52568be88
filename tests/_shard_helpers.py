"""Shared by test_shard.py and test_masking.py: shard dirs built once per session from the real sample
corpus with Google's vocab (a builder cache, since fixtures cannot be shared outside conftest.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

_BUILT: dict[tuple, Path] = {}


def build_shards(root: Path, corpus: Path, tokdir: Path, *extra: str) -> Path:
    """`zh-bert shard corpus --tokenizer tokdir -o <dir> *extra` once per distinct argument list."""
    from zh_bert.shard import main

    key = (str(corpus), str(tokdir), extra)
    if key not in _BUILT:
        out = root / f"shards{len(_BUILT)}"
        assert main([str(corpus), "--tokenizer", str(tokdir), "-o", str(out), "--workers", "1", *extra]) == 0
        _BUILT[key] = out
    return _BUILT[key]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"text": t, "source": f"test:{i}"}, ensure_ascii=False) + "\n")
    return path


def chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper critical value of chi-square(df) at the normal quantile z (3.09 -> p = 0.001),
    Wilson-Hilferty approximation (no scipy dependency)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(observed: np.ndarray, expected_p: np.ndarray) -> float:
    n = observed.sum()
    e = expected_p * n
    return float(((observed - e) ** 2 / e).sum())
