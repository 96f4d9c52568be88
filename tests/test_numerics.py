"""Pinned numerics: a 30-step `tiny` pretraining run and `eval mlm` on fixed text give the numbers stored in
tests/data/numerics_reference.json, which were recorded before the code was reorganised. Any change to
masking draws, data order, loss normalisation, optimizer grouping or the schedule moves them.

Regenerate (only when a change of numerics is intended, and say why in the commit):
    python tests/test_numerics.py --write
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from conftest import CHAR_SEQ

REF = Path(__file__).resolve().parent / "data" / "numerics_reference.json"
SEQ = 64
# One short text: it packs into one row, `[CLS] text [SEP] [PAD]...`, both by the shard packer and by the
# packing `eval mlm` used before it shared the shard packer, so the eval numbers are comparable across that change.
EVAL_TEXT = ("北京是中华人民共和国的首都，也是全国的政治中心和文化中心。"
             "长江是中国第一长河，流经青海、西藏、四川、云南、湖北、江苏和上海等地，最后流入东海。")


def build_data(root: Path, docs_jsonl: Path) -> tuple[Path, Path]:
    """The data the tests' `char_shards` fixture builds: 4,000-char vocab, 64-token shards, 40 valid docs."""
    from zh_bert.corpus.shard import main as shard_main
    from zh_bert.corpus.vocab import main as vocab_main

    tokdir, sharddir = root / "tok", root / "shards"
    assert vocab_main([str(docs_jsonl), "-o", str(tokdir), "--kind", "char", "--size", "4000", "-q"]) == 0
    assert shard_main([str(docs_jsonl), "--tokenizer", str(tokdir), "-o", str(sharddir), "--seq-len", str(SEQ),
                       "--valid-docs", "40", "--workers", "1"]) == 0
    return tokdir, sharddir


def train_pinned(root: Path, tokdir: Path, sharddir: Path, **over) -> tuple[list[dict], dict]:
    """The pinned 30 fp32 steps on the shards in `root` (recipe keys `over` on top); the metrics rows and the final
    weights as (sum, sum of squares) per tensor."""
    import torch
    import yaml
    from safetensors.torch import load_file

    from zh_bert.train.pretrain import main as pretrain_main

    torch.set_num_threads(1)
    recipe = {"out_dir": str(root / "run"), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
              "masking": "wwm", "seq_len": SEQ, "global_batch": 16, "micro_batch": 8, "lr": 3e-3,
              "warmup_steps": 5, "max_steps": 30, "log_every": 1, "eval_every": 10, "eval_batches": 4,
              "save_every": 0, "seed": 7, "precision": "fp32", **over}
    (root / "r.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    assert pretrain_main([str(root / "r.yaml")]) == 0
    rows = [json.loads(l) for l in (root / "run" / "metrics.jsonl").read_text(encoding="utf-8").split("\n") if l]
    weights = load_file(str(root / "run" / "final" / "model.safetensors"))
    return rows, {k: [float(v.double().sum()), float(v.double().pow(2).sum())] for k, v in sorted(weights.items())}


def measure(root: Path, tokdir: Path, sharddir: Path) -> dict:
    """Run the pinned steps in `root` (30 fp32 steps on the shards, then eval mlm); return the numbers."""
    from zh_bert.evaluation.heads.cloze import MlmEvalConfig, eval_mlm, load_mlm

    rows, weights = train_pinned(root, tokdir, sharddir)
    model, tok, _ = load_mlm(root / "run" / "final")
    ev = eval_mlm(model, tok, [EVAL_TEXT], MlmEvalConfig(seed=3, seq_len=128, mask_rate=0.3))
    return {
        "losses": [r["loss"] for r in rows if "loss" in r],
        "val_mlm_loss": [r["val_mlm_loss"] for r in rows if "val_mlm_loss" in r],
        "weights": weights,
        "eval_mlm": {k: ev[k] for k in ("mlm_loss", "mlm_acc", "mlm_top5", "n_masked", "n_sequences", "n_tokens")},
    }


def close(a: float, b: float, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


@pytest.mark.slow
def test_numerics_match_the_pinned_reference(tmp_path, char_shards):
    """Per-step losses, validation losses, every weight tensor (sum and sum of squares) and eval mlm."""
    assert SEQ == CHAR_SEQ
    ref = json.loads(REF.read_text(encoding="utf-8"))
    got = measure(tmp_path, *char_shards)
    assert len(got["losses"]) == len(ref["losses"]) == 30
    bad = [(i + 1, a, b) for i, (a, b) in enumerate(zip(got["losses"], ref["losses"])) if not close(a, b)]
    assert not bad, f"per-step losses moved (step, now, reference): {bad[:5]}"
    assert all(close(a, b) for a, b in zip(got["val_mlm_loss"], ref["val_mlm_loss"])), (got["val_mlm_loss"],
                                                                                       ref["val_mlm_loss"])
    assert sorted(got["weights"]) == sorted(ref["weights"])
    moved = [k for k in ref["weights"] if not all(close(a, b, 1e-4, 1e-4) for a, b in zip(got["weights"][k],
                                                                                          ref["weights"][k]))]
    assert not moved, f"final weights moved: {moved[:5]}"
    for k, v in ref["eval_mlm"].items():
        assert close(got["eval_mlm"][k], v), (k, got["eval_mlm"][k], v)


def measure_electra(root: Path, tokdir: Path, sharddir: Path) -> dict:
    """The same 30 steps with `objective: electra`: every loss and accuracy it logs, and the final weights."""
    rows, weights = train_pinned(root, tokdir, sharddir, objective="electra")
    keys = sorted({k for r in rows for k in r if k.endswith(("loss", "acc"))})
    return {"rows": {k: [r[k] for r in rows if k in r] for k in keys}, "weights": weights}


@pytest.mark.slow
def test_electra_numerics_match_the_pinned_reference(tmp_path, char_shards):
    """ELECTRA's generator and discriminator losses and accuracies at every step and validation, and its final
    weights, as recorded before objectives became objects (reference["electra"], written by the code of dfaec58's
    parent; equal there and after to the last bit)."""
    ref = json.loads(REF.read_text(encoding="utf-8"))["electra"]
    got = measure_electra(tmp_path, *char_shards)
    assert sorted(got["rows"]) == sorted(ref["rows"])
    for k, values in ref["rows"].items():
        assert len(got["rows"][k]) == len(values) and all(close(a, b) for a, b in zip(got["rows"][k], values)), k
    assert sorted(got["weights"]) == sorted(ref["weights"])
    moved = [k for k in ref["weights"] if not all(close(a, b, 1e-4, 1e-4) for a, b in zip(got["weights"][k],
                                                                                          ref["weights"][k]))]
    assert not moved, f"final weights moved: {moved[:5]}"


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import SAMPLE, read_lines

    with tempfile.TemporaryDirectory() as d:
        docs = Path(d) / "docs.jsonl"
        texts = read_lines(SAMPLE / "zhwiki_sampled.txt", 300) + read_lines(SAMPLE / "CLUECorpusSmall_sampled.txt", 300)
        docs.write_text("".join(json.dumps({"text": t, "source": f"sample:{i}"}, ensure_ascii=False) + "\n"
                                for i, t in enumerate(texts)), encoding="utf-8")
        data = build_data(Path(d), docs)
        pinned = measure(Path(d), *data)
        (Path(d) / "run").rename(Path(d) / "run-mlm")
        pinned["electra"] = measure_electra(Path(d), *data)
        REF.write_text(json.dumps(pinned, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {REF}")
