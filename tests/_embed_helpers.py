"""The tiny sentence embedder the embed tests and the demo's browser test share: `embedder`, trained by CoSENT one
epoch on 64 real STS-B pairs (the bundled corpora/tasks/sts) from the tiny BERT and saved with `finetune --save`."""

from __future__ import annotations

from pathlib import Path

import pytest

from zh_bert import cli

STS = Path(__file__).resolve().parent.parent / "corpora" / "tasks" / "sts"
TINY = ["--seq-len", "32", "--batch-size", "8", "--no-record", "--precision", "fp32"]


def stsb_rows(split: str, n: int) -> list[str]:
    return [x for x in (STS / f"STS-B.{split}.data").read_text(encoding="utf-8").split("\n") if x.strip()][:n]


def pairs_file(path: Path, rows: list[str]) -> str:
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def embedder(tiny_model_dir, tmp_path_factory) -> Path:
    """A tiny embedder trained one epoch by CoSENT on 64 STS-B pairs and saved with --save."""
    tmp = tmp_path_factory.mktemp("embedder")
    train = pairs_file(tmp / "train.tsv", stsb_rows("train", 64))
    dev = pairs_file(tmp / "dev.tsv", stsb_rows("valid", 24))
    test = pairs_file(tmp / "test.tsv", stsb_rows("test", 24))
    out = tmp / "model"
    assert cli.main(["finetune", str(tiny_model_dir), "--task", f"pairs:{train},{dev},{test}", "--epochs", "1",
                     "--lr", "1e-3", "--save", str(out), *TINY]) == 0
    return out
