"""Fixtures for the demo tests: a tiny model that has memorised a few real sentences (so the page shows
meaningful candidates), and the Gradio app served in-process on a free 127.0.0.1 port."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hub_server import free_port

SENTENCES = ["北京是中国的首都。", "今天天气很好，我们去公园散步吧。", "他是一名优秀的老师，每天都给学生上课。",
             "长江是中国最长的河流，全长约六千三百公里。", "北京是中华人民共和国的首都。", "上海是中国最大的城市。"]


def memorise(src: Path, out: Path, steps: int = 80, seed: int = 0) -> Path:
    """Train the tiny model briefly on SENTENCES with random masks (a few seconds). The (tied) word
    embeddings stay frozen: the encoder alone learns to point at them, and AdamW skips 2.7M parameters."""
    import torch
    from transformers import AutoModelForMaskedLM

    from zh_bert.tokenizer_files import load_tokenizer

    torch.manual_seed(seed)
    shutil.copytree(src, out)
    tok = load_tokenizer(out)
    model = AutoModelForMaskedLM.from_pretrained(str(out))
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    model.get_input_embeddings().weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(steps):
        ids = enc["input_ids"].clone()
        maskable = enc["attention_mask"].bool() & (ids != tok.cls_token_id) & (ids != tok.sep_token_id)
        pick = maskable & (torch.rand(ids.shape) < 0.3)
        labels = torch.where(pick, enc["input_ids"], torch.full_like(ids, -100))
        ids[pick] = tok.mask_token_id
        loss = model(input_ids=ids, attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def trained_tiny(tmp_path_factory, tiny_model_dir) -> Path:
    return memorise(tiny_model_dir, tmp_path_factory.mktemp("demo") / "tiny-memorised")


@pytest.fixture(scope="module")
def demo_url(trained_tiny, tiny_model_dir):
    from zh_bert.demo import build_app, serve

    app = build_app([str(trained_tiny), str(tiny_model_dir)])
    port = free_port()
    serve(app, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.close()
