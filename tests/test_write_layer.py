"""Ownership by construction: every file zh-bert (package and bench/) creates, replaces or deletes goes through
`zh_bert.core.fileio`, which refuses a target no manifest of ours accounts for. This test reads the code (AST) and
fails on any call outside that layer that writes, renames or deletes by path: `open(..., "w"/"a"/"x")`,
`write_text`, `write_bytes`, `unlink`, `rmdir`, `rmtree`, `os.rename`/`os.replace`/`os.remove`, a one-argument
`.rename`/`.replace` (pathlib), `shutil.copy*`/`move`/`copytree`, `np.save*`, `.tofile`, `torch.save`,
`save_pretrained`, `save_file`. A library call that writes into a file *handle* the layer opened
(`with atomic_write(...) as f: torch.save(obj, f)`, `open_append`, `open_for_write`) is fine. The exceptions below are the few left, each with
its reason.

Run as a script to list the calls: `python tests/test_write_layer.py`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from _ast_helpers import calls_outside

ROOT = Path(__file__).resolve().parent.parent
LAYER = ROOT / "zh_bert" / "core" / "fileio"
SCANNED = (ROOT / "zh_bert", ROOT / "bench")
BY_PATH = {"write_text", "write_bytes", "unlink", "rmdir", "rmtree", "tofile", "save_pretrained", "save_file",
           "savez", "savez_compressed", "copyfile", "copy2", "copytree", "move", "to_json_file", "removedirs",
           "symlink_to", "hardlink_to"}
MODULE_ONLY = {("os", "rename"), ("os", "replace"), ("os", "remove"), ("os", "unlink"), ("os", "rmdir"),
               ("shutil", "copy"), ("torch", "save"), ("np", "save"), ("numpy", "save")}
LAYER_OPENERS = {"atomic_write", "open_append", "open_for_write"}   # `with LAYER_OPENER(...) as f`: writes into f are the layer's

# (file, function, call) -> why it may write outside the layer
EXCEPTIONS = {
    ("bench/plan_memory_check.py", "child", "write_text"):
        "/proc/self/clear_refs is a kernel control file (resets the peak RSS), not a file on disk",
    ("zh_bert/corpus/executors.py", "add_task_logger", "open"):
        "datatrove's DataFolder writes its task logs inside the logging dir that `JobMarker.claim` claimed",
}


def _mode(call: ast.Call) -> str:
    args = call.args[1:2] + [k.value for k in call.keywords if k.arg == "mode"]
    return args[0].value if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) else "r"


def _handles(func: ast.AST) -> set[str]:
    """Names bound by `with atomic_write(...) as NAME` (or another layer opener) in `func`."""
    out = set()
    for node in ast.walk(func):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                c = item.context_expr
                name = c.func.attr if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) else \
                    c.func.id if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) else None
                if name in LAYER_OPENERS and isinstance(item.optional_vars, ast.Name):
                    out.add(item.optional_vars.id)
    return out


def _writes(call: ast.Call, handles: set[str]) -> str | None:
    """The name of the write `call` makes by path, or None."""
    f = call.func
    if isinstance(f, ast.Name) and f.id == "open" or isinstance(f, ast.Attribute) and f.attr == "open":
        return "open" if set(_mode(call)) & set("wax+") else None
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if any(isinstance(a, ast.Name) and a.id in handles for a in call.args):
        return None   # into a handle the layer opened
    if (owner, f.attr) in MODULE_ONLY or f.attr in BY_PATH:
        return f.attr
    if f.attr in ("rename", "replace") and len(call.args) == 1 and not call.keywords and owner != "re":
        return f.attr   # pathlib's Path.rename/replace (str.replace takes two arguments)
    return None


def unowned_writes() -> list[tuple[str, str, str, int]]:
    """(file, function, call, line) for every write by path outside zh_bert/core/fileio/."""
    found = []
    for rel, fn, node in calls_outside(ROOT, SCANNED, LAYER):
        what = _writes(node, _handles(fn) if fn else set())
        if what:
            found.append((rel, fn.name if fn else "<module>", what, node.lineno))
    return found


def test_every_write_goes_through_the_ownership_layer():
    bad = [f"{f}:{line} {fn}() calls {what}" for f, fn, what, line in unowned_writes()
           if (f, fn, what) not in EXCEPTIONS]
    assert not bad, "writes outside zh_bert.core.fileio:\n" + "\n".join(bad)


def test_every_exception_is_still_needed_and_says_why():
    used = {(f, fn, what) for f, fn, what, _ in unowned_writes()}
    assert set(EXCEPTIONS) <= used, f"stale exceptions: {sorted(set(EXCEPTIONS) - used)}"
    assert all(len(why) > 30 for why in EXCEPTIONS.values())


def test_the_scanner_sees_each_kind_of_write(tmp_path):
    src = ("import os, shutil, torch, numpy as np\n"
           "def f(p, q, obj):\n"
           "    open(p, 'w'); p.write_text('x'); p.unlink(); shutil.rmtree(p); os.replace(p, q); p.rename(q)\n"
           "    np.save(p, obj); torch.save(obj, p); obj.save_pretrained(p); shutil.copy(p, q)\n"
           "    'a'.replace('a', 'b'); open(p); d = {}.copy()\n"
           "    with atomic_write(p, 'wb') as fh:\n"
           "        torch.save(obj, fh); np.save(fh, obj)\n")
    tree = ast.parse(src)
    fn = tree.body[1]
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    seen = [w for c in calls if (w := _writes(c, _handles(fn)))]
    assert sorted(seen) == sorted(["open", "write_text", "unlink", "rmtree", "replace", "rename", "save", "save",
                                   "save_pretrained", "copy"])


if __name__ == "__main__":
    for f, fn, what, line in unowned_writes():
        mark = "  (exception)" if (f, fn, what) in EXCEPTIONS else ""
        print(f"{f}:{line} {fn}() {what}{mark}")
    sys.exit(0)
