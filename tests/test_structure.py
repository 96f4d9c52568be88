"""The shape of the code, measured: short functions, no import cycle, every CLI option written once.

Run as a script for the full report: `python tests/test_structure.py`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "zh_bert"
MAX_FUNCTION_LINES = 100
CLI_HELPER = PKG / "config.py"    # the one place that calls argparse's add_argument


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(file:function, lines) for every function or method longer than `limit` lines."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append((f"{path.relative_to(PKG.parent)}:{node.name}", n))
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> zh_bert modules it imports anywhere (module level or inside functions)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != name and not name.startswith(t + "."):   # a module needs its package: not a cycle
                    graph[name].add(t)
    return graph


def import_cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph, index, low, stack, on, out = import_graph(), {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def hand_written_options() -> list[str]:
    """`add_argument` calls outside the CLI helper: options not derived from a dataclass field."""
    found = []
    for path in modules().values():
        if path == CLI_HELPER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                found.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    return found


def test_no_function_over_100_lines():
    assert not long_functions(), long_functions()


def test_no_import_cycle():
    assert not import_cycles(), import_cycles()


def test_every_cli_option_is_a_dataclass_field():
    assert not hand_written_options(), hand_written_options()


def test_every_command_builds_its_parser_from_dataclasses():
    """Each command's --help works and every option it shows belongs to a dataclass field."""
    import importlib

    from zh_bert.cli import COMMANDS

    for name, (module, _) in COMMANDS.items():
        mod = importlib.import_module(module)
        parser = mod.build_parser()
        assert parser.prog.startswith(f"zh-bert {name}"), (name, parser.prog)
        parser.format_help()


if __name__ == "__main__":
    print(f"functions over {MAX_FUNCTION_LINES} lines:", *long_functions(), sep="\n  ")
    print("import cycles:", *import_cycles(), sep="\n  ")
    print(f"hand-written add_argument calls: {len(hand_written_options())}", *hand_written_options(), sep="\n  ")
    sys.exit(0)
