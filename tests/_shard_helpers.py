"""Plain helpers shared by test_shard.py and test_masking.py (the shard fixtures live in conftest.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

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
