"""The recipe schema: typos get a suggestion, overrides work, cross-field checks, shipped recipes load and
document every key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from zh_bert.core.errors import ZhBertError
from zh_bert.train.masking import MaskingConfig
from zh_bert.train.recipe import KEYS, Recipe, load_recipe, save_recipe


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
    assert (r.max_steps, r.lr, r.masking.strategy) == (40, 3e-4, "token")
    assert r.data == ["corpora/sample/zhwiki_sampled.txt", "corpora/sample/CLUECorpusSmall_sampled.txt"]


@pytest.mark.parametrize("sets, match", [
    (["global_batch=48", "micro_batch=32"], "global_batch 48 is not a multiple of micro_batch 32"),
    (["precision=fp8"], "'precision' must be one of"),
    (["objective=mlm+nspp"], "'objective' must be one of"),
    (["mask_token_prob=0.8", "random_token_prob=0.3"], "mask_token_prob \\+ random_token_prob"),
    (["max_steps=0"], "'max_steps' must be at least 1"),
    (["max_ngram=0"], "max_ngram must be 1..4, got 0"),
    (["masking=wwwm"], "'wwwm'"),
    (["lr=abc"], "'lr' must be a number"),
    (["lr=inf"], "'lr' must be a finite number"),
    (["lr=.nan"], "'lr' must be a finite number"),
    (["grad_clip=-.inf"], "'grad_clip' must be a finite number"),
    (["betas=[0.9, .inf]"], "'betas' must be a finite number"),
    (["mask_rate=inf"], "'mask_rate' must be a finite number"),
    (["seed=-1"], "'seed' must be in \\[0, 4,294,967,295\\]"),        # out of range: numpy raised mid-run
    (["seed=4294967296"], "'seed' must be in .* got 4294967296"),
])
def test_bad_values(sets, match):
    with pytest.raises(ZhBertError, match=match):
        load_recipe(None, sets)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "recipes").glob("*.yaml")))
def test_shipped_recipes_load(name):
    """Every shipped recipe passes validation; their comments are checked against the schema in
    tests/test_recipe_schema.py."""
    load_recipe(REPO / "recipes" / name)


def test_max_ngram_5_is_refused_at_load_before_any_data_work(tmp_path):
    """The masking keys are checked with the recipe: a bad one fails `zh-bert pretrain` before the raw corpus
    is cleaned, tokenized or sharded (nothing is written to out_dir)."""
    from zh_bert.train.pretrain import main

    path = tmp_path / "r.yaml"
    path.write_text(f"out_dir: {tmp_path / 'run'}\ndata: {REPO / 'corpora/sample/zhwiki_sampled.txt'}\n"
                    "masking: ngram\nmax_ngram: 5\n", encoding="utf-8")
    with pytest.raises(ZhBertError) as e:
        main([str(path)])
    assert str(path) in str(e.value) and "max_ngram" in str(e.value) and "1..4" in str(e.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ZhBertError, match=r"max_ngram must be 1\.\.4, got 5"):
        load_recipe(None, {"masking": {"strategy": "ngram", "max_ngram": 5}})


def test_masking_keys_flat_nested_and_aliased_give_one_masking_config():
    want = MaskingConfig(strategy="ngram", mask_rate=0.2, max_ngram=4)
    assert load_recipe(None, ["masking=ngram", "mask_rate=0.2", "max_ngram=4"]).masking == want
    assert load_recipe(None, {"masking": {"strategy": "ngram", "mask_rate": 0.2, "max_ngram": 4}}).masking == want
    assert load_recipe(None, {"masking_strategy": "ngram", "mask_rate": "0.2", "max_ngram": 4}).masking == want
    assert not {"mask_rate", "max_ngram", "mask_token_prob", "random_token_prob"} & set(Recipe.__dataclass_fields__)
    with pytest.raises(ZhBertError, match=r"masking: unknown key 'max_gram'.*did you mean 'max_ngram'"):
        load_recipe(None, {"masking": {"max_gram": 2}})


def test_saved_recipe_round_trips_and_old_flat_run_dirs_load(tmp_path):
    r = load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["masking=ngram", "max_ngram=2", "max_steps=7"])
    save_recipe(r, tmp_path / "recipe.yaml")
    assert load_recipe(tmp_path / "recipe.yaml") == r
    text = (tmp_path / "recipe.yaml").read_text(encoding="utf-8")
    assert "\nmasking: ngram\n" in text and "\nmax_ngram: 2\n" in text   # flat, as recipes write it
    old = tmp_path / "old.yaml"   # a run dir's recipe.yaml from before masking was nested
    old.write_text("out_dir: runs/x\nmasking: token\nmask_rate: 0.2\nmask_token_prob: 0.8\n"
                   "random_token_prob: 0.1\nmax_ngram: 3\nmax_steps: 5\n", encoding="utf-8")
    assert load_recipe(old).masking == MaskingConfig(strategy="token", mask_rate=0.2)


def test_python_api_validates_like_the_recipe_file():
    with pytest.raises(ZhBertError, match="'lr' must be a finite number"):
        Recipe(lr=float("inf"))
    with pytest.raises(ZhBertError, match="'betas' must be a finite number"):
        Recipe(betas=[0.9, float("nan")])
    with pytest.raises(ZhBertError, match="global_batch 48 is not a multiple of micro_batch 32"):
        Recipe(global_batch=48, micro_batch=32)
    with pytest.raises(ZhBertError, match="max_ngram must be 1..4"):
        Recipe(masking=MaskingConfig(max_ngram=5))


def test_resume_changes_name_the_key_that_cannot_change():
    from zh_bert.train.recipe import CHANGEABLE_ON_RESUME, changes_on_resume

    saved = Recipe(max_steps=100).to_dict()
    assert changes_on_resume(saved, load_recipe(None, ["max_steps=200", "lr=5e-4"]), "--resume auto") == {
        "max_steps": [100, 200], "lr": [1e-4, 5e-4]}
    with pytest.raises(ZhBertError, match="--resume auto: 'mask_rate' cannot change when resuming"):
        changes_on_resume(saved, load_recipe(None, ["max_steps=100", "mask_rate=0.3"]), "--resume auto")
    assert CHANGEABLE_ON_RESUME <= set(KEYS)


def test_saved_recipe_marks_the_run_dir_and_loads_back(tmp_path):
    """save_recipe's first line is pretrain's run-dir marker; the file still loads as the same recipe."""
    from zh_bert.train.recipe import save_recipe
    from zh_bert.train.rundir import RECIPE_HEADER, written_by_pretrain

    recipe = load_recipe(None, ["max_steps=7"])
    save_recipe(recipe, tmp_path / "recipe.yaml")
    assert (tmp_path / "recipe.yaml").read_text(encoding="utf-8").startswith(RECIPE_HEADER)
    assert load_recipe(tmp_path / "recipe.yaml") == recipe and written_by_pretrain(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "recipe.yaml").write_text("max_steps: 7\n", encoding="utf-8")   # the user's own recipe: no marker
    (mine / "run.json").write_text('{"notes": "mine"}', encoding="utf-8")     # nor is a run.json of another shape
    assert not written_by_pretrain(mine)
