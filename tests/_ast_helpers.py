"""The AST walk the layer tests share (tests/test_write_layer.py, tests/test_read_layer.py): every call in the
modules of zh_bert/ and bench/ outside one layer folder, with the function it sits in."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator


def calls_outside(root: Path, scanned: tuple[Path, ...], layer: Path) -> Iterator[tuple[str, ast.AST | None, ast.Call]]:
    """(file relative to `root`, the innermost function holding the call or None at module level, the call) for
    every call in the `.py` files under `scanned`, except those under `layer`."""
    for base in scanned:
        for path in sorted(base.rglob("*.py")):
            if layer in path.parents:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            owner = {}
            for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                for node in ast.walk(fn):   # innermost function wins: walk outer first, inner later overwrite
                    owner[id(node)] = fn
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    yield path.relative_to(root).as_posix(), owner.get(id(node)), node
