"""The recipe schema: typos get a suggestion, overrides work, cross-field checks, shipped recipes load and
document every key."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO
from zh_bert.errors import ZhBertError
from zh_bert.recipe import Recipe, load_recipe


def test_typo_names_key_and_suggestion(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: tiny\nlerning_rate: 3e-4\n", encoding="utf-8")
    with pytest.raises(ZhBertError) as e:
        load_recipe(path)
    msg = str(e.value)
    assert "unknown key 'lerning_rate'" in msg and "did you mean 'lr'" in msg and str(path) in msg
    with pytest.raises(ZhBertError, match=r"unknown key 'max_step'.*did you mean 'max_steps'"):
        load_recipe(None, ["max_step=10"])


def test_typo_through_cli_is_one_line_exit_2(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("lerning_rate: 3e-4\n", encoding="utf-8")
    p = subprocess.run([sys.executable, "-m", "zh_bert", "pretrain", str(path)], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zh-bert pretrain: error:") and "did you mean 'lr'" in lines[0]


def test_overrides_and_aliases():
    r = load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["max_steps=40", "learning_rate=3e-4", "masking=token"])
    assert (r.max_steps, r.lr, r.masking) == (40, 3e-4, "token")
    assert r.data == ["corpora/sample/zhwiki_sampled.txt", "corpora/sample/CLUECorpusSmall_sampled.txt"]


@pytest.mark.parametrize("sets, match", [
    (["global_batch=48", "micro_batch=32"], "global_batch 48 is not a multiple of micro_batch 32"),
    (["precision=fp8"], "'precision' must be one of"),
    (["objective=mlm+nspp"], "'objective' must be one of"),
    (["mask_token_prob=0.8", "random_token_prob=0.3"], "mask_token_prob \\+ random_token_prob"),
    (["max_steps=0"], "'max_steps' must be at least 1"),
    (["lr=abc"], "'lr' must be a number"),
])
def test_bad_values(sets, match):
    with pytest.raises(ZhBertError, match=match):
        load_recipe(None, sets)


@pytest.mark.parametrize("name", ["tiny-cpu.yaml", "continue-bert-base-chinese.yaml"])
def test_shipped_recipes_load_and_document_every_key(name):
    path = REPO / "recipes" / name
    load_recipe(path)
    text = path.read_text(encoding="utf-8")
    keys = {m.group(1): m.group(2) for m in re.finditer(r"^(\w+):(.*)$", text, re.M)}
    assert set(keys) == {f for f in Recipe.__dataclass_fields__}, "every Recipe key appears in the recipe"
    for key, rest in keys.items():
        assert "#" in rest, f"{name}: key '{key}' has no comment (type, default, meaning)"
