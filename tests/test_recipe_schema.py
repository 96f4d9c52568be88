"""The recipe schema is declared once (`zh_bert.train.recipe.Recipe`): `--print-recipe`, recipes/tiny-cpu.yaml's
comments and docs/pretrain.md's key table are generated from it, and the other recipes set only what they change.

Regenerate after changing a field: `python tests/test_recipe_schema.py --update` (keeps tiny-cpu.yaml's header,
values and reasons; rewrites its schema comments and the docs table).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

from zh_bert.train.masking import MaskingConfig
from zh_bert.train.recipe import (KEYS, SECTIONS, Recipe, key_docs, load_recipe, markdown_table, recipe_comments,
                            render_recipe)

ROOT = Path(__file__).resolve().parent.parent
MAIN_RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
DOCS = ROOT / "docs" / "pretrain.md"
TABLE_START, TABLE_END = "<!-- recipe keys: generated from zh_bert/train/recipe.py -->", "<!-- end of recipe keys -->"
# the recipes that set only what they change, each under the `zh-bert plan` line that sized it (GPU recipes)
OTHER_RECIPES = sorted(p for p in (ROOT / "recipes").glob("*.yaml") if p != MAIN_RECIPE)
PLANNED = ("base-1080ti.yaml", "base-4xk80.yaml", "small-2xp100.yaml", "large-a100.yaml")


def generated_main_recipe() -> str:
    header, reasons = recipe_comments(MAIN_RECIPE.read_text(encoding="utf-8"))
    return render_recipe(load_recipe(MAIN_RECIPE), header, reasons)


def docs_with_table(text: str) -> str:
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    return text[:start] + "\n" + markdown_table() + text[end:]


def test_every_recipe_key_has_type_default_and_help():
    docs = key_docs()
    assert [d.name for d in docs] == list(KEYS)
    assert all(d.help.strip() and d.type for d in docs), [d.name for d in docs if not d.help.strip()]
    assert set(SECTIONS) <= set(KEYS)
    for f in dataclasses.fields(Recipe):
        assert f.metadata.get("cli", {}).get("help"), f"Recipe.{f.name} has no help"
    for f in dataclasses.fields(MaskingConfig):
        assert f.metadata["cli"]["help"], f"MaskingConfig.{f.name} has no help"


def test_main_recipe_comments_are_what_the_schema_generates():
    assert MAIN_RECIPE.read_text(encoding="utf-8") == generated_main_recipe(), \
        "recipes/tiny-cpu.yaml differs from the schema: run python tests/test_recipe_schema.py --update"


def test_docs_table_is_what_the_schema_generates():
    text = DOCS.read_text(encoding="utf-8")
    assert text == docs_with_table(text), \
        "docs/pretrain.md's recipe-key table differs from the schema: run python tests/test_recipe_schema.py --update"


def test_main_recipe_sets_every_key():
    assert list(yaml.safe_load(MAIN_RECIPE.read_text(encoding="utf-8"))) == list(KEYS)


def test_print_recipe_is_the_schema_rendering_and_loads_back(tmp_path, capsys):
    from zh_bert.train.pretrain import main

    assert main([str(MAIN_RECIPE), "--print-recipe", "--set", "max_steps=40"]) == 0
    out = capsys.readouterr().out
    header, reasons = recipe_comments(MAIN_RECIPE.read_text(encoding="utf-8"))
    recipe = load_recipe(MAIN_RECIPE, ["max_steps=40"])
    assert out.splitlines()[0].startswith("# resolved by zh-bert pretrain --print-recipe: ")
    body = lambda text: text.split("\n# --- ", 1)[1]  # noqa: E731
    assert body(out) == body(render_recipe(recipe, header, reasons)) == body(generated_main_recipe()).replace(
        "max_steps: 5000", "max_steps: 40")
    printed = tmp_path / "printed.yaml"
    printed.write_text(out, encoding="utf-8")
    assert load_recipe(printed) == recipe
    assert not (ROOT / "runs" / "printed").exists()


def test_print_recipe_of_a_partial_recipe_shows_every_key_with_defaults(tmp_path, capsys):
    from zh_bert.train.pretrain import main

    r = tmp_path / "r.yaml"
    r.write_text("lr: 3.0e-4  # half the usual\n", encoding="utf-8")
    assert main([str(r), "--print-recipe"]) == 0
    out = capsys.readouterr().out
    assert list(yaml.safe_load(out)) == list(KEYS)
    assert "\nlr: 0.0003  # half the usual\n" in out and "\nseq_len: 128\n" in out


@pytest.mark.parametrize("path", OTHER_RECIPES, ids=lambda p: p.name)
def test_other_recipes_set_only_what_they_change_each_with_a_reason(path):
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    _, reasons = recipe_comments(text)
    defaults = Recipe().to_dict()
    recipe = load_recipe(path).to_dict()
    for key in data:
        assert key in reasons, f"{path.name}: '{key}' has no one-line reason after its value"
        assert recipe[key] != defaults[key], f"{path.name}: '{key}' is the default ({defaults[key]!r}): drop it"
    if path.name in PLANNED:
        assert text.startswith("# zh-bert plan "), f"{path.name}: the `zh-bert plan` line that sized it comes first"


def update() -> None:
    MAIN_RECIPE.write_text(generated_main_recipe(), encoding="utf-8")
    DOCS.write_text(docs_with_table(DOCS.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
    else:
        sys.exit(pytest.main([__file__, "-q"]))
