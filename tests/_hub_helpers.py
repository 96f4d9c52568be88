"""Fixtures shared by test_publish / test_download: a realistic run dir and a live Hub test server."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from hub_server import HubServer

TOKEN = "hf_test_write_token_0123456789"
OTHER_TOKEN = "hf_test_other_user_token_987654"
SECRET = "hf_leaked_secret_should_never_upload_42"


def tiny_png(w: int = 4, h: int = 3) -> bytes:
    raw = b"".join(b"\x00" + b"\xff\x80\x00" * w for _ in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make_run_dir(root: Path, model_dir: Path) -> Path:
    """A run dir as `zh-bert pretrain` writes it, plus things that must never be uploaded."""
    run = root / "run"
    final = run / "final"
    shutil.copytree(model_dir, final)
    (final / "zh_bert_vocab.json").write_text(json.dumps({"kind": "char", "vocab_size": 21128}))
    (final / "optimizer.pt").write_bytes(b"optimizer state")
    (final / "training_args.bin").write_bytes(b"pickle")
    ckpt = run / "checkpoints" / "step-0000010"
    ckpt.mkdir(parents=True)
    shutil.copy(final / "model.safetensors", ckpt / "model.safetensors")
    shutil.copy(final / "config.json", ckpt / "config.json")
    (ckpt / "optimizer.pt").write_bytes(b"optimizer state")
    (ckpt / "scheduler.pt").write_bytes(b"scheduler")
    (ckpt / "rng_state.pth").write_bytes(b"rng")
    (run / "tb").mkdir()
    (run / "tb" / "events.out.tfevents.1").write_bytes(b"tb")
    (run / ".env").write_text(f"HF_TOKEN={SECRET}\n")
    (run / "wandb_key.txt").write_text(SECRET)
    (run / "recipe.yaml").write_text("out_dir: runs/tiny-cpu\ndata:\n  - corpora/sample/zhwiki_sampled.txt\n"
                                     "  - corpora/sample/CLUECorpusSmall_sampled.txt\nmodel: tiny\nmasking: wwm\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 10 - s / 10}) + "\n" for s in range(10)))
    (run / "curves.png").write_bytes(tiny_png())
    (run / "run.json").write_text(json.dumps({  # the layout zh_bert/train/pretrain.py writes
        "status": "finished",
        "model": {"preset": "tiny", "class": "BertForMaskedLM", "num_hidden_layers": 2, "hidden_size": 128,
                  "attention_init": "neighbour", "parameters": 3_120_000},
        "parameters": 3_120_000,
        "vocab": {"kind": "char", "vocab_size": 21128, "tokenizer": "runs/tiny-cpu/tokenizer"},
        "data": {"sharddir": "runs/tiny-cpu/shards",
                 "shard_meta": {"seq_len": 128, "pairs": None, "vocab_size": 21128, "pad_id": 0, "segmenter": "rjieba",
                                "counts": {"train": {"sequences": 4000}, "valid": {"sequences": 200}},
                                "sources": [{"path": "runs/tiny-cpu/docs.jsonl", "sha256": "ab"}]},
                 "clean_report": {"docs_in": 1000, "docs_out": 870, "chars_out": 412000,
                                  "filtered": {"too_short": 90, "not_chinese": 28}, "duplicates": {"exact": 12}}},
        "objective": "mlm",
        "masking": {"strategy": "wwm", "mask_rate": 0.15},
        "hardware": {"device": "cpu", "device_name": "cpu", "processes": 1, "precision": "fp32",
                     "precision_requested": "auto", "warnings": []},
        "steps": 10, "tokens_seen": 40960, "wall_clock_s": 95.2,
        "final_validation": {"mlm_loss": 9.81, "mlm_acc": 0.021},
    }))
    (run / "eval_results.json").write_text(json.dumps([
        {"task_type": "text-classification", "task_name": "ChnSentiCorp", "dataset_type": "chnsenticorp",
         "dataset_name": "ChnSentiCorp", "metric_type": "accuracy", "metric_name": "accuracy", "metric_value": 0.61},
        {"task_type": "text-classification", "task_name": "ChnSentiCorp", "dataset_type": "chnsenticorp",
         "dataset_name": "ChnSentiCorp", "metric_type": "accuracy", "metric_name": "accuracy", "metric_value": 0.66},
        {"task_type": "fill-mask", "task_name": "cloze", "dataset_type": "zh-cloze", "dataset_name": "zh cloze",
         "metric_type": "accuracy", "metric_name": "top-1 accuracy", "metric_value": 0.05},
    ]))
    return run


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("publish"), tiny_model_dir)


@pytest.fixture(scope="module")
def hub():
    with HubServer(tokens={TOKEN: ("alice", ["zh-org"]), OTHER_TOKEN: ("mallory", [])}) as server:
        yield server


@pytest.fixture
def online(monkeypatch):
    """conftest sets HF_HUB_OFFLINE=1 (no test reaches the internet); our servers are on 127.0.0.1."""
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")


def top5(model_dir: Path, text: str = "北京是中国的[MASK]都。") -> list[tuple[str, float]]:
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir), top_k=5, device="cpu")
    return [(r["token_str"], round(r["score"], 6)) for r in fill(text)]


def seed_repo(hub: HubServer, repo_id: str, files: dict[str, bytes] | Path, *, downloads: int = 0, likes: int = 0,
              tags: tuple[str, ...] = (), pipeline_tag: str | None = None, last_modified: float | None = None,
              private: bool = False, answer: dict | None = None):
    """Put a repo straight into the test Hub's memory (no upload): `files` as {path: bytes} or a model folder
    (its top-level files), with the counters and tags its listing shows and `answer`'s fields put over its listing
    row and model info. Any name is accepted, so a test can hold a repo id or a file name the real Hub would
    refuse."""
    from hub_server import Repo

    if isinstance(files, Path):
        files = {p.name: p.read_bytes() for p in sorted(files.iterdir()) if p.is_file()}
    repo = Repo(owner=repo_id.split("/")[0], private=private, downloads=downloads, likes=likes, tags=list(tags),
                pipeline_tag=pipeline_tag, answer=dict(answer or {}))
    repo.commit("main", dict(files), "seed")
    if last_modified is not None:
        repo.last_modified = last_modified
    hub.repos[repo_id] = repo
    return repo
