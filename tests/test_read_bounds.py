"""What is read bounds itself: a number, shape or dtype written in a file is compared with the data actually there
before it sizes a loop or an allocation, or is trusted as a weight. Each test is named after the defect it
reproduced (D: model inputs, B: data inputs); every one ends as one line, exit 2, nothing written."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

import _tf_index
from conftest import DATA
from zh_bert.cli import main

TF1 = DATA / "convert_fixtures" / "tf1"
GAMMA = "bert/embeddings/LayerNorm/gamma"


def _tf1(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(TF1, src)
    return src


def _convert_says(capsys, src: Path, out: Path, says: str) -> str:
    t0 = time.perf_counter()
    rc = main(["convert", str(src), "-o", str(out)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and says in lines[0] and "Traceback" not in err, err
    assert not out.exists() and time.perf_counter() - t0 < 30
    return lines[0]


@pytest.mark.parametrize("count", [10**12, 10**7, 2, 0])
def test_d1_a_forged_shard_count_costs_a_listing_not_a_list(count, tmp_path, capsys):
    """The header's `num_shards` against the data files there (it built one path per declared shard: 10^12 ->
    MemoryError)."""
    src = _tf1(tmp_path)
    _tf_index.rewrite(src / "bert_model.ckpt.index", num_shards=count)
    _convert_says(capsys, src, tmp_path / "out", f"the header names {count:,} data shards, and 1 ")


def test_d2_a_rank_65_shape_is_one_line(tmp_path, capsys):
    src = _tf1(tmp_path)
    _tf_index.rewrite(src / "bert_model.ckpt.index", name=GAMMA, shape=(1,) * 64 + (32,))
    _convert_says(capsys, src, tmp_path / "out", "a tensor of rank above 8")


def test_d3_a_float_weight_relabelled_int32_is_refused(tmp_path, capsys):
    """The bytes, size and CRC unchanged, only the dtype says DT_INT32: read as ints it 'converted equal' with a
    LayerNorm gamma of 1e9."""
    src = _tf1(tmp_path)
    _tf_index.rewrite(src / "bert_model.ckpt.index", name=GAMMA, dtype=3)
    _convert_says(capsys, src, tmp_path / "out", f"{GAMMA} is stored as <i4 integers, but a weight is floating point")
