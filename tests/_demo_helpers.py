"""Fixtures for the demo tests: the tiny random model with its output bias nudged towards 首 (so the page has
a known top candidate without any training), and the Gradio app served in-process on a free port."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from hub_server import free_port

SHOU = 7674  # id of 首 in Google's vocab


def nudge(src: Path, out: Path, token_id: int = SHOU, by: float = 9.0) -> Path:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    state = load_file(str(out / "model.safetensors"))
    state["cls.predictions.bias"][token_id] += by
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def nudged_tiny(tmp_path_factory, tiny_model_dir) -> Path:
    return nudge(tiny_model_dir, tmp_path_factory.mktemp("demo") / "tiny-nudged")


@contextlib.contextmanager
def served(models: list[Path]):
    """`zh-bert demo MODELS...`'s app on a free port of 127.0.0.1, in this process: its URL."""
    from zh_bert.release.demo import build_app, serve

    app = build_app([str(m) for m in models])
    port = free_port()
    serve(app, "127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.close()


@pytest.fixture(scope="module")
def demo_url(nudged_tiny, tiny_model_dir):
    with served([nudged_tiny, tiny_model_dir]) as url:
        yield url
