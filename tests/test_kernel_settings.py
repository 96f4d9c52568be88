"""The CUDA-ready details of a run, stated in run.json and checked before any work: deterministic kernels,
TF32, the SDPA kernel in use, pinned batches, torch.compile (refused where Triton cannot run)."""

from __future__ import annotations

import json

import pytest
import torch

from _run_helpers import save_recipe
from conftest import CHAR_SEQ
from zh_bert.core.errors import ZhBertError
from zh_bert.core.hardware import check_compile, kernel_settings, sdpa_backend
from zh_bert.train.recipe import Recipe, load_recipe

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("value", ["3", "maybe", "[true]"])
def test_deterministic_must_be_a_bool(value):
    with pytest.raises(ZhBertError, match="'deterministic' must be true or false"):
        load_recipe(None, [f"deterministic={value}"])


def test_compile_is_refused_in_one_line_on_gpus_triton_cannot_run(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 1))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce GTX 1080 Ti")
    with pytest.raises(ZhBertError, match=r"compile: true needs Triton.*GTX 1080 Ti is sm_61; set compile: false"):
        check_compile(torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    check_compile(torch.device("cuda"))     # V100: fine
    check_compile(torch.device("cpu"))      # Inductor's CPU backend


def test_cpu_settings_and_sdpa_choice():
    from zh_bert.train.arch.bert import build_config

    assert kernel_settings(Recipe(), torch.device("cpu")) == {"deterministic": True, "tf32": False,
                                                               "pinned_memory": False, "compile": False}
    assert kernel_settings(Recipe(deterministic=False), torch.device("cpu"))["deterministic"] is False
    cfg = build_config("tiny", 4000, attention_dropout=0.0)
    assert sdpa_backend(cfg, torch.device("cpu"), "fp32", 128) == "FLASH_ATTENTION"   # CPU's fused kernel
    cfg = build_config("tiny", 4000, attention_dropout=0.1)
    assert sdpa_backend(cfg, torch.device("cpu"), "fp32", 128) == "MATH"   # dropout: the slow path on a CPU


@pytest.mark.slow
def test_run_json_states_the_kernels_and_compile_trains_on_a_cpu(tmp_path, char_shards, monkeypatch):
    """`compile: true` trains and checkpoints under the weights' usual names; run.json states deterministic,
    tf32, pinned memory, compile, the attention implementation and the SDPA kernel. (Inductor's code generation
    takes minutes on 2 cores, so the test compiles with dynamo's eager backend: the graph capture and the
    in-place compile of the encoder are zh-bert's part; Inductor is torch's.)"""
    from transformers import AutoModelForMaskedLM

    from zh_bert.train.pretrain import main

    compiled, real = [], torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile",
                        lambda self, **kw: compiled.append(self) or real(self, backend="eager"))

    tokdir, sharddir = char_shards
    recipe = save_recipe(tmp_path / "r.yaml", {
        "out_dir": str(tmp_path / "run"), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
        "seq_len": CHAR_SEQ, "global_batch": 8, "micro_batch": 8, "max_steps": 3, "warmup_steps": 1,
        "log_every": 1, "eval_every": 0, "save_every": 0, "precision": "fp32", "compile": True})
    assert main([str(recipe)]) == 0
    kernels = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))["hardware"]["kernels"]
    assert kernels == {"deterministic": True, "tf32": False, "pinned_memory": False, "compile": True,
                       "attention": "sdpa", "sdpa_backend": "FLASH_ATTENTION"}
    assert len(compiled) == 1 and type(compiled[0]).__name__ == "BertEncoder"
    AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "final")   # every weight found under its name
