"""Shared fixtures: real Chinese text (copies from shared/data with SOURCE.md), real tokenizers, real
tiny models. Fixtures that every stage needs live here; stage-specific ones live in the stage's test file.
Nothing here touches the network."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# fixtures that several stages' tests share, kept beside the helpers they use
pytest_plugins = ("_hub_helpers", "_demo_helpers", "_run_helpers", "_embed_helpers")

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
SAMPLE = REPO / "corpora" / "sample"
TASKS = REPO / "corpora" / "tasks"     # ChnSentiCorp, TNEWS (attribution in each SOURCE.md)
GOOGLE_VOCAB = DATA / "bert_base_chinese_vocab" / "vocab.txt"
OUTPUT = REPO / "tests" / "output"  # CI artifacts (screenshots, reports); git-ignored


def read_lines(path: Path, n: int | None = None) -> list[str]:
    lines = [l for l in path.read_text(encoding="utf-8").split("\n") if l.strip()]
    return lines[:n] if n else lines


@pytest.fixture(scope="session")
def output_dir() -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return OUTPUT


#: how the browser tests start Debian's Chromium: headless, offline (no background fetches on a closed network)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Playwright); a missing one fails under CI (.ci/run installs it) and skips elsewhere."""
    import shutil

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install chromium fonts-wqy-microhei)")
        pytest.skip("chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def sample_docs() -> list[str]:
    """600 real documents: 300 zhwiki + 300 CLUECorpusSmall lines (one document per line)."""
    return (read_lines(SAMPLE / "zhwiki_sampled.txt", 300)
            + read_lines(SAMPLE / "CLUECorpusSmall_sampled.txt", 300))


@pytest.fixture(scope="session")
def sample_jsonl(tmp_path_factory, sample_docs) -> Path:
    """The documents above in `zh-bert clean` output format: {"text": ..., "source": ...} per line."""
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(sample_docs):
            f.write(json.dumps({"text": text, "source": f"sample:{i}"}, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="session")
def google_tokdir(tmp_path_factory) -> Path:
    """A tokenizer dir with Google's bert-base-chinese vocab (21,128), as `zh-bert vocab` would write it."""
    from transformers import BertTokenizer

    out = tmp_path_factory.mktemp("google_tok")
    tok = BertTokenizer(vocab=str(GOOGLE_VOCAB))
    assert tok.convert_tokens_to_ids("[MASK]") == 103 and len(tok) == 21128
    tok.save_pretrained(str(out))
    (out / "vocab.txt").write_bytes(GOOGLE_VOCAB.read_bytes())
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, google_tokdir) -> Path:
    """A real (randomly initialised, seed 0) L2/H128 BertForMaskedLM with Google's vocab + tokenizer files."""
    import shutil

    import torch
    from transformers import BertConfig, BertForMaskedLM

    out = tmp_path_factory.mktemp("tiny_model")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=21128, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, max_position_embeddings=512)
    BertForMaskedLM(cfg).save_pretrained(str(out))
    for f in google_tokdir.iterdir():
        shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def tiny_modernbert_dir(tmp_path_factory, google_tokdir) -> Path:
    """A real (randomly initialised, seed 0) `tiny` ModernBertForMaskedLM as `pretrain` builds it (L2/H128, GeGLU
    sized to BERT's parameters, config keys of both transformers majors) with Google's vocab + tokenizer files."""
    import shutil

    import torch
    from transformers import ModernBertForMaskedLM

    from zh_bert.core.fileio import claim_dir
    from zh_bert.train.arch.modernbert import build_modernbert_config, write_portable_config

    out = tmp_path_factory.mktemp("tiny_modernbert")
    claim_dir(out)   # the test's own model folder: write_portable_config rewrites its config.json
    torch.manual_seed(0)
    cfg = build_modernbert_config("tiny", 21128, special_ids={"pad": 0, "cls": 101, "sep": 102})
    ModernBertForMaskedLM(cfg).save_pretrained(str(out))
    write_portable_config(out)
    for f in google_tokdir.iterdir():
        shutil.copy(f, out / f.name)
    return out


@pytest.fixture
def optimizers_made(monkeypatch) -> list[tuple[float, float, str]]:
    """(lr, Adam eps, kernel) of every optimizer `zh_bert.train.training.make_optimizer` makes in the test."""
    from zh_bert.train import training

    made, real = [], training.make_optimizer

    def recording(model, recipe):
        opt, kind = real(model, recipe)
        made.append((recipe.lr, recipe.adam_eps, kind))
        return opt, kind

    monkeypatch.setattr(training, "make_optimizer", recording)
    return made


@pytest.fixture(scope="session")
def build_shards(tmp_path_factory):
    """`build_shards(corpus, tokdir, *flags)`: `zh-bert shard` with these arguments, built once per distinct
    argument list for the whole test run and shared by every test that asks for the same shards."""
    from zh_bert.corpus.shard import main

    built: dict[tuple, Path] = {}

    def build(corpus: Path, tokdir: Path, *extra: str) -> Path:
        key = (str(corpus), str(tokdir), extra)
        if key not in built:
            out = tmp_path_factory.mktemp("shards") / "shards"
            assert main([str(corpus), "--tokenizer", str(tokdir), "-o", str(out), "--workers", "1", *extra]) == 0
            built[key] = out
        return built[key]

    return build


CHAR_SEQ = 64   # sequence length of `char_shards`


@pytest.fixture(scope="session")
def char_shards(tmp_path_factory, sample_jsonl, build_shards) -> tuple[Path, Path]:
    """(TOKDIR, SHARDDIR) that the pretraining tests train on: a 4,000-character vocab built by `zh-bert vocab`
    and 64-token shards (40 validation documents) of the 600 sample documents."""
    from zh_bert.corpus.vocab import main as vocab_main

    tokdir = tmp_path_factory.mktemp("char_tok") / "tok"
    assert vocab_main([str(sample_jsonl), "-o", str(tokdir), "--kind", "char", "--size", "4000", "-q"]) == 0
    return tokdir, build_shards(sample_jsonl, tokdir, "--seq-len", str(CHAR_SEQ), "--valid-docs", "40")


# --- the fast default suite and the slow proofs --------------------------------------------------------------
# `python -m pytest` runs the fast suite: every command end to end on tiny inputs. Tests marked `slow` (scaling
# runs, subprocess benchmarks, kill -9 and fault grids, DDP, the browser, other Pythons and transformers majors)
# are deselected unless `--slow` is given or ZH_BERT_SLOW=1 is set; `python -m pytest --slow -m slow` runs only
# them. See docs/testing.md.
def _slow_enabled(config) -> bool:
    return bool(config.getoption("--slow")) or os.environ.get("ZH_BERT_SLOW", "").strip() not in ("", "0")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked `slow` (same as ZH_BERT_SLOW=1); see docs/testing.md")


def pytest_collection_modifyitems(config, items):
    if _slow_enabled(config):
        return
    keep, slow = [], []
    for item in items:
        (slow if item.get_closest_marker("slow") else keep).append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep
