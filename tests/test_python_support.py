"""`requires-python` is true: on the oldest Python it names, every module compiles and every recipe loads.

.ci/run makes a venv of that Python (with only the light dependencies recipe loading needs) and passes it
as ZH_BERT_OLDEST_PYTHON.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import REPO

CHECK = r"""
import pathlib, sys
for path in sorted(pathlib.Path("zh_bert").rglob("*.py")):
    compile(path.read_text(encoding="utf-8"), str(path), "exec")   # syntax of this Python, nothing written
from zh_bert.train.recipe import load_recipe
names = sorted(str(p) for p in pathlib.Path("recipes").glob("*.yaml"))
for name in names:
    load_recipe(name)
print("%d.%d" % sys.version_info[:2], len(names))
"""


def oldest_supported() -> tuple[int, int]:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    major, minor = re.search(r'requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', text).groups()
    return int(major), int(minor)


@pytest.mark.slow
def test_recipes_load_on_the_oldest_supported_python():
    python = os.environ.get("ZH_BERT_OLDEST_PYTHON")
    if not python:
        pytest.skip("ZH_BERT_OLDEST_PYTHON is not set (.ci/run sets it)")
    out = subprocess.run([python, "-c", CHECK], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    version, n = out.stdout.split()
    assert version == "%d.%d" % oldest_supported() and int(n) >= 5, out.stdout


def test_plain_install_has_everything_the_readme_main_flow_uses():
    """README's main command installs with `pip install -e .` and then offers `zh-bert demo`: gradio must be a
    core dependency, not an extra."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps}
    assert {"gradio", "gradio-client", "torch", "transformers", "accelerate"} <= names
