"""The shape of the code, measured: short functions and modules, no import cycle, every import arrow
pointing down (the shard writer never loads the trainer's side, `eval mlm` never loads datatrove), one name
for one thing, every CLI option written once.

Run as a script for the full report: `python tests/test_structure.py`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "zh_bert"
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 500
CLI_HELPER = PKG / "core" / "config.py"    # the one place that calls argparse's add_argument
COMMAND_PROTOCOL = {"main", "build_parser"}   # what zh_bert.cli calls in every command module


def modules(pkg: Path = PKG) -> dict[str, Path]:
    """dotted module name -> file, for the package at `pkg` (zh_bert/ unless a test builds another)."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
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


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """module -> modules of the package `root` it imports anywhere (module level or inside functions).

    `from PKG import NAME` is an edge to the submodule PKG.NAME when there is one, else to PKG itself, also
    from a submodule of PKG (it needs what PKG's __init__ defines). Only the implicit edge, that importing a
    submodule runs its package's __init__ first, is left out: see `implicit_package_edges`."""
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}

    def resolve(t: str) -> str:
        while t and t not in mods:
            t = t.rsplit(".", 1)[0] if "." in t else ""
        return t

    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else resolve(base) for a in node.names]
            graph[name].update(t for t in targets if t and t != name)
    return graph


def implicit_package_edges() -> dict[str, set[str]]:
    """module -> the packages above it, whose __init__ runs before it when it is imported."""
    parts = {m: m.split(".") for m in modules()}
    return {m: {".".join(p[:i]) for i in range(1, len(p))} for m, p in parts.items()}


def imports_transitively(module: str) -> set[str]:
    """Every zh_bert module that importing `module` can load: explicit edges, function-local imports and
    the packages whose __init__ runs first."""
    graph, above = import_graph(), implicit_package_edges()
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        for n in graph[m] | above[m]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    seen.discard(module)
    return seen


def path_to(source: str, target: str) -> list[str]:
    """One import chain source -> ... -> target (breadth first), or [] when there is none."""
    graph, above = import_graph(), implicit_package_edges()
    prev, todo = {source: None}, [source]
    while todo:
        m = todo.pop(0)
        if m == target:
            chain = []
            while m is not None:
                chain.append(m)
                m = prev[m]
            return chain[::-1]
        for n in sorted(graph[m] | above[m]):
            if n not in prev:
                prev[n] = m
                todo.append(n)
    return []


def import_cycles(root: Path = PKG) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph, index, low, stack, on, out = import_graph(root), {}, {}, [], set(), []

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


#: third-party packages a module imports inside the function that needs them, never at module level: each costs
#: a noticeable part of a second or more to import (or has side effects), and `zh-bert COMMAND --help` must not
#: pay for it. A function-local import of anything else (the standard library, a zh_bert module that loads
#: none of these) belongs at module level, where the import graph shows it.
HEAVY = {
    "torch", "transformers", "accelerate", "safetensors", "tokenizers", "sentencepiece", "huggingface_hub",  # ML
    "gradio", "gradio_client", "fastapi", "uvicorn", "matplotlib", "tensorboard",                          # UI
    "datatrove", "ray", "loguru", "multiprocess", "dill", "fsspec", "psutil",                            # engines
    "jieba", "rjieba", "opencc", "mwparserfromhell", "mwxml", "datasketch",                              # text
    "numpy", "scipy", "yaml", "tqdm", "pyarrow", "zstandard",
}


def _module_level_imports(path: Path) -> set[str]:
    """Modules a file imports when it loads (its body, `if`/`try` blocks included; not functions)."""
    found, todo = set(), list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, "handlers", []) + getattr(node, "finalbody", [])
        elif isinstance(node, ast.ExceptHandler):
            todo += node.body
    return found


def heavy_dependencies() -> dict[str, set[str]]:
    """zh_bert module -> the HEAVY packages that importing it loads (its packages' __init__ included)."""
    mods, memo = modules(), {}

    def of(m: str, stack: tuple = ()) -> set[str]:
        if m not in memo:
            parts, out = m.split("."), set()
            deps = {".".join(parts[:i]) for i in range(1, len(parts))} | _module_level_imports(mods[m])
            for d in deps:
                if d.split(".")[0] in HEAVY:
                    out.add(d.split(".")[0])
                elif d in mods and d != m and d not in stack:
                    out |= of(d, stack + (m,))
            memo[m] = out
        return memo[m]

    return {m: of(m) for m in mods}


def needless_local_imports() -> list[str]:
    """Function-local imports of what costs nothing to load at module level (see HEAVY)."""
    mods, heavy, found = modules(), heavy_dependencies(), []
    for name, path in mods.items():
        for fn in (n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                               for a in node.names]
                else:
                    continue
                light = [t for t in targets if t.split(".")[0] not in HEAVY and not heavy.get(t)
                         and (t in mods or t.split(".")[0] in sys.stdlib_module_names)]
                found += [f"{path.relative_to(PKG.parent)}:{node.lineno} {fn.name}: {t}" for t in light]
    return sorted(set(found))


#: the names of model families and objectives, and the one place each kind is defined as objects
VARIANTS = {"bert", "modernbert", "mlm", "mlm+nsp", "mlm+sop", "electra", "distill"}
VARIANT_HOMES = (PKG / "train" / "arch", PKG / "train" / "objectives")


def variant_comparisons() -> list[str]:
    """`x == "modernbert"`, `kind in ("bert", ...)`, `objective != "electra"`... outside the variant objects: a
    branch on a family or objective name, where asking the object (`recipe.arch`, `of_config`,
    `recipe.objective_spec`) belongs."""
    found = []
    for path in modules().values():
        if any(path == home or home in path.parents for home in VARIANT_HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            for side in [node.left, *node.comparators]:
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                names = {i.value for i in items if isinstance(i, ast.Constant) and i.value in VARIANTS}
                if names - {"mlm"} or (names and "objective" in ast.unparse(node)):   # `eval mlm` is a command
                    found.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {ast.unparse(node)}")
    return found


#: the one module that declares benchmark tasks and suites, and may therefore spell their names
TASK_HOME = PKG / "corpus" / "task_registry.py"


def task_names() -> set[str]:
    """Every declared task's and suite's name, the dataset types and board column keys they give their figures,
    and the prefixes those are made from (`fewclue-`, `fewclue/`)."""
    from zh_bert.corpus.task_registry import suites, tasks

    names = {t.name for t in tasks()} | {s.name for s in suites()} | {t.dataset_type for t in tasks() if t.dataset_type}
    names |= {c.key for t in tasks() for c in t.columns} | {s.score.column.key for s in suites() if s.score}
    return names | {f"{s.name}{sep}" for s in suites() for sep in "-/"}


def _names_task(node: ast.AST, names: set[str]) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value in names or any(node.value.startswith(n) for n in names if n[-1] in "-/"))


def operands(node: ast.AST) -> list[ast.AST]:
    """What a name check looks at in `node`: both sides of a comparison (each element of a literal tuple, list or
    set), a subscript's key, a dict's keys; nothing for other nodes."""
    if isinstance(node, ast.Compare):
        return [e for side in [node.left, *node.comparators]
                for e in (side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side])]
    if isinstance(node, ast.Subscript):
        return [node.slice]
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if k is not None]
    return []


def task_name_uses(root: Path = PKG) -> list[str]:
    """A task or suite named outside the registry: compared (`name == "cmrc2018"`, `t in ("tnews", ...)`), looked
    up (`res["cmrc2018"]`, `.get("fewclue")`), a dict keyed by one, or a name built from a suite's prefix
    (`f"fewclue-{t}"`). Each is a branch on a task that its declaration should answer."""
    names, found = task_names(), []
    for path in modules(root).values():
        if path == TASK_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            sides = operands(node)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "pop", "setdefault"):
                sides = node.args[:1]
            elif isinstance(node, ast.JoinedStr):
                sides = node.values[:1]
            if any(_names_task(side, names) for side in sides):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {ast.unparse(node)[:80]}")
    return sorted(set(found))


#: the one module that turns a head kind's name into its object, and so may compare kinds
HEAD_HOME = PKG / "evaluation" / "heads" / "__init__.py"
#: where the kinds' names are declared (task_spec) and given to tasks (task_registry's declarations)
HEAD_DECLARED = (PKG / "corpus" / "task_spec.py", PKG / "corpus" / "task_registry.py")
HEAD_CONSTANTS = {"CLASSIFY", "CHOICE", "SPAN", "TAG", "EMBED"}


def head_kind_uses(root: Path = PKG) -> list[str]:
    """A head kind named outside the registry: compared (`task.head == "tag"`, `kind.name in (CLASSIFY, ...)`,
    `t.head != EMBED`), looked up or used as a key (`{CLASSIFY: ...}`, `x[TAG]`). Each is a branch on a kind that
    its object (`zh_bert.evaluation.heads`) should answer."""
    from zh_bert.evaluation.heads import HEAD_KINDS

    names, found = set(HEAD_KINDS), []

    def kind(node: ast.AST) -> bool:
        return (isinstance(node, ast.Constant) and node.value in names) or \
            (isinstance(node, ast.Name) and node.id in HEAD_CONSTANTS) or \
            (isinstance(node, ast.Attribute) and (node.attr in HEAD_CONSTANTS or node.attr == "head"))

    for path in modules(root).values():
        if path == root / "evaluation" / "heads" / "__init__.py" or path in [root / p.relative_to(PKG)
                                                                            for p in HEAD_DECLARED]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if any(kind(side) for side in operands(node)):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {ast.unparse(node)[:80]}")
    return sorted(set(found))


def scaler_none_checks() -> list[str]:
    """`scaler is None` / `is not None`: the loss scaler is always an object (disabled unless fp16)."""
    found = []
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Compare) and any(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops)
                    and "scaler" in ast.unparse(node.left)):
                found.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {ast.unparse(node)}")
    return found


#: option names that two commands declare for different things (each its own declaration, on purpose)
DIFFERENT_THINGS: dict[str, str] = {
    "corpus": "vocab reads plain text as well as cleaned JSONL; shard reads only `zh-bert clean` output",
    "data": "a recipe's pretraining corpus; `eval cloze`'s file of cloze items",
    "dropout": "a recipe's dropout of the model it builds (a float); finetune's, the dropout an embedder trains with "
               "(default by its loss: SimCSE's 0.1, else the checkpoint's own)",
    "eval_every": "pretrain: validation every N steps, 0 = at the end only; finetune: dev evals, 0 = every epoch",
    "out_dir": "a recipe's run dir; ablate's folder of runs",
    "output": "what each command writes (documents, TOKDIR, SHARDDIR, a downloaded or a staged folder, a board); "
              "required by some, optional in others: the same -o convention, not the same value",
    "search": "models --hub --search TEXT: repos whose id contains TEXT; embed --search FILE: FILE's lines ranked by "
              "cosine to --query",
    "source": "download: the hub to fetch from (hf, modelscope); publish: the run or checkpoint to upload",
    "text": "vocab report: texts to tokenize; eval mlm: texts to score",
    "tokenizer": "shard needs the TOKDIR to encode with; a recipe may leave it null (built from the raw corpus), "
                 "inspect too (the one meta.json records)",
}


def option_declarations() -> dict[str, list[str]]:
    """option name -> the `module.Class` of every `name: T = option(...)` declaration in zh_bert/. A field shared
    with `config.option_of` / `config.keys_of` is the same declaration, not another one."""
    found: dict[str, list[str]] = {}
    for name, path in modules().items():
        for cls in (n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and isinstance(st.value, ast.Call)
                        and getattr(st.value.func, "id", None) == "option"):
                    found.setdefault(st.target.id, []).append(f"{name}.{cls.name}")
    return found


def shared_option_types() -> list[str]:
    """`name: T = option_of(Cls, "name")` whose annotation T is not the one Cls declares: a shared option whose
    type drifted."""
    declared, found = {}, []
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules().items()}
    for tree in trees.values():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    declared[(cls.name, st.target.id)] = ast.unparse(st.annotation)
    for name, tree in trees.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                v = st.value if isinstance(st, ast.AnnAssign) else None
                if isinstance(v, ast.Call) and getattr(v.func, "id", None) == "option_of":
                    key = (v.args[0].id, v.args[1].value)
                    if declared.get(key) != ast.unparse(st.annotation):
                        found.append(f"{name}.{cls.name}.{st.target.id}: {ast.unparse(st.annotation)} "
                                     f"(declared {declared.get(key)} in {key[0]})")
    return found


def options_declared_twice() -> list[str]:
    return [f"{n}: {', '.join(where)}" for n, where in sorted(option_declarations().items())
            if len(where) > 1 and n not in DIFFERENT_THINGS]


def long_modules(limit: int = MAX_MODULE_LINES) -> list[tuple[str, int]]:
    """(file, lines) for every module of zh_bert/ longer than `limit` lines."""
    found = []
    for path in modules().values():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            found.append((str(path.relative_to(PKG.parent)), n))
    return found


def wrong_way_imports() -> list[str]:
    """Arrows that point up: the shard writer (and the SHARDDIR format) loading the training side
    (`zh_bert.train.data`, `zh_bert.train.masking`), and `zh_bert.plan` loading `zh_bert.train.pretrain`; each with its chain."""
    rules = [(m, banned) for m in modules() if m.startswith("zh_bert.corpus.shard")
             for banned in ("zh_bert.train.data", "zh_bert.train.masking")] + [("zh_bert.plan", "zh_bert.train.pretrain")]
    return [" -> ".join(path_to(m, banned)) for m, banned in rules if banned in imports_transitively(m)]


#: the stages, bottom up: a module may import its own stage and the stages before it, never one after.
#: plan comes before evaluation because `ablate` plans its grid; hub before evaluation because an evaluation
#: takes a catalog alias or Hub id; release after evaluation because the model card and the demo show
#: evaluation results.
LAYERS = ("core", "corpus", "train", "plan", "hub", "evaluation", "leaderboard", "release")


def layer_of(module: str) -> int | None:
    """Index of a module's stage in LAYERS; None for the top (zh_bert, cli, __main__), which may import all."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports() -> list[str]:
    """`a -> b` for every import (module level or inside a function) from a stage to a later one."""
    found = []
    for m, targets in sorted(import_graph().items()):
        for t in sorted(targets):
            lm, lt = layer_of(m), layer_of(t)
            if lm is not None and (lt is None or lt > lm):
                found.append(f"{m} -> {t}")
    return found


def datatrove_loaded_by(module: str) -> list[str]:
    """The datatrove modules a fresh interpreter has loaded after `import module`."""
    code = f"import sys, {module}; print(' '.join(m for m in sys.modules if m.startswith('datatrove')))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=PKG.parent, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def _defined_names(node: ast.stmt) -> list[str]:
    """The names a module-level statement defines that must be one thing: a class, a function, or an
    UPPER_CASE constant (`NAME = ...` or `NAME: type = ...`; not `__all__`, not one-letter names)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if not isinstance(node, (ast.Assign, ast.AnnAssign)):
        return []
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper() and len(t.id) > 1]


def module_level_names() -> dict[str, list[str]]:
    """name -> the zh_bert modules that define a class, function or UPPER_CASE constant of that name at
    module level."""
    found: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            for defined in _defined_names(node):
                if name not in found.setdefault(defined, []):   # a module may rebind its own constant
                    found[defined].append(name)
    return found


def name_collisions() -> list[str]:
    """Module-level classes, functions or constants of the same name in two modules (the command protocol
    aside)."""
    return [f"{n}: {', '.join(ms)}" for n, ms in sorted(module_level_names().items())
            if len(ms) > 1 and n not in COMMAND_PROTOCOL]


def functions_named_like_modules() -> list[str]:
    """Module-level functions named like a module beside them (a function `evaluate` in zh_bert.train.pretrain
    beside the module zh_bert.evaluation.commands.evaluate; a function `report` in zh_bert/corpus/clean/__init__ beside
    zh_bert.corpus.clean.report). A module's own entry function of its name (`zh_bert.release.publish.publish`) is fine."""
    mods = modules()
    found = []
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            beside = f"{pkg}.{node.name}" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else ""
            if beside in mods and beside != name:
                found.append(f"{name}.{node.name} (module {beside})")
    return found


def test_no_function_over_100_lines():
    assert not long_functions(), long_functions()


def test_no_import_cycle():
    assert not import_cycles(), f"import cycles (package/submodule edges included): {import_cycles()}"


def test_import_cycles_count_package_submodule_edges(tmp_path):
    """`from PKG import NAME` in PKG.sub, NAME defined in PKG's __init__, is an edge PKG.sub -> PKG: with
    PKG importing PKG.sub (here inside a function) that is a cycle. Importing a submodule, which runs the
    package's __init__ first, is not an edge by itself."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n\n\ndef run():\n    from pkg.worker import go\n    go()\n")
    (pkg / "worker.py").write_text("from pkg import X\n\n\ndef go():\n    return X\n")
    (pkg / "leaf.py").write_text("import pkg.other\nfrom pkg import other\n")
    (pkg / "other.py").write_text("VALUE = 2\n")
    graph = import_graph(pkg)
    assert graph["pkg.worker"] == {"pkg"}, f"`from pkg import X` must be an edge to pkg: {graph}"
    assert graph["pkg.leaf"] == {"pkg.other"}, f"importing a submodule is an edge to it, not its package: {graph}"
    assert import_cycles(pkg) == [["pkg", "pkg.worker"]], f"the package/submodule cycle is missed: {import_cycles(pkg)}"


def test_no_module_over_500_lines():
    assert not long_modules(), f"modules over {MAX_MODULE_LINES} lines: {long_modules()}"


def test_stages_import_only_themselves_and_earlier_stages():
    layout = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert layout == set(LAYERS), f"stage folders of zh_bert/ and LAYERS differ: {sorted(layout ^ set(LAYERS))}"
    loose = sorted(p.name for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__", "cli"))
    assert not loose, f"modules outside a stage folder: {loose}"
    assert not upward_imports(), f"imports from a stage to a later one ({' <- '.join(LAYERS)}): {upward_imports()}"


def test_shard_writer_does_not_import_the_loader_or_masking():
    bad = [c for c in wrong_way_imports() if c.split(" -> ")[-1] in ("zh_bert.train.data", "zh_bert.train.masking")]
    assert not bad, f"a zh_bert.corpus.shard* module loads the training side: {bad}"


def test_plan_does_not_import_pretrain():
    bad = [c for c in wrong_way_imports() if c.startswith("zh_bert.plan ")]
    assert not bad, f"zh_bert.plan loads zh_bert.train.pretrain: {bad}"


def test_eval_mlm_does_not_import_datatrove():
    loaded = datatrove_loaded_by("zh_bert.evaluation.commands.evaluate")
    assert not loaded, f"importing zh_bert.evaluation.commands.evaluate loads datatrove: {loaded[:5]}"


def test_one_name_for_one_thing():
    assert not name_collisions(), f"module-level names defined in two modules: {name_collisions()}"


def test_no_function_named_like_a_module():
    assert not functions_named_like_modules(), \
        f"functions named like a zh_bert module: {functions_named_like_modules()}"


def test_function_local_imports_only_for_heavy_dependencies():
    assert not needless_local_imports(), f"function-local imports of light modules: {needless_local_imports()}"


def test_variants_are_asked_not_compared():
    assert not variant_comparisons(), f"family/objective names compared outside zh_bert/train/arch and " \
                                      f"train/objectives: {variant_comparisons()}"


def test_every_family_and_objective_is_a_variant_the_comparison_test_knows():
    """A new family or objective (a module of train/arch/ or train/objectives/) is covered by the test above:
    its name is in VARIANTS."""
    from zh_bert.train.arch import ARCHITECTURES
    from zh_bert.train.objectives import OBJECTIVES

    assert set(ARCHITECTURES) | set(OBJECTIVES) <= VARIANTS, sorted(set(ARCHITECTURES) | set(OBJECTIVES) - VARIANTS)


def test_tasks_are_asked_not_named():
    """No module outside the task registry compares, looks up or builds a task's or a suite's name: a new task is
    one declaration (zh_bert/corpus/task_registry.py), and every command asks its object."""
    assert not task_name_uses(), f"task/suite names used outside {TASK_HOME.name}: {task_name_uses()}"


def planted(root: Path, files: dict[str, str]) -> Path:
    """A package `zh_bert` under `root` holding `files` (path under zh_bert/ -> source): what a check must find."""
    for rel, code in files.items():
        (root / "zh_bert" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "zh_bert" / rel).write_text(code, encoding="utf-8")
    return root / "zh_bert"


def test_the_task_name_check_finds_each_kind_of_use(tmp_path):
    """The check above is not blind: each form it looks for, planted in a module, is found."""
    found = task_name_uses(planted(tmp_path, {"evaluation/planted.py": (
        'def f(name, res, t):\n'
        '    if name == "cmrc2018":\n        return res["fewclue"]\n'
        '    return {"tnews": 1}.get("csl"), f"fewclue-{t}", t in ("eprstmt", "x")\n')}))
    assert len(found) == 6, found


def test_head_kinds_are_asked_not_compared():
    """No module outside the head registry (zh_bert/evaluation/heads/__init__.py) compares a head kind's name or
    keys anything by one: a new head is one module there, and every command asks the kind's object."""
    assert not head_kind_uses(), f"head kinds compared outside {HEAD_HOME.relative_to(PKG.parent)}: {head_kind_uses()}"


def test_the_head_kind_check_finds_each_kind_of_use(tmp_path):
    """The check above is not blind: a planted compare of each form is found, the registry's own is not."""
    found = head_kind_uses(planted(tmp_path, {
        "evaluation/planted.py": ('from zh_bert.corpus.task_spec import TAG\n\n\ndef f(task, kind, x):\n'
                                  '    if task.head == "tag":\n        return {TAG: 1}\n'
                                  '    return kind.name in ("classify", "embed"), x[TAG]\n'),
        "evaluation/heads/__init__.py": 'def head_kind(task, kinds):\n    return kinds[task.head] if task.head in kinds else None\n'}))
    assert len(found) == 4 and all("planted.py" in f for f in found), found


def test_no_scaler_none_branch():
    assert not scaler_none_checks(), f"branches on a missing loss scaler: {scaler_none_checks()}"


def test_each_option_is_declared_once():
    """A key two commands share is one declaration (`config.option_of`, `config.keys_of`), so its type, help and
    checks cannot drift apart; a name two commands use for different things is listed, with what each means."""
    assert not options_declared_twice(), f"options declared in more than one config class: {options_declared_twice()}"
    assert not shared_option_types(), f"shared options whose type differs from the declaration: {shared_option_types()}"
    unused = sorted(set(DIFFERENT_THINGS) - {n for n, w in option_declarations().items() if len(w) > 1})
    assert not unused, f"DIFFERENT_THINGS lists names declared once (remove them): {unused}"


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
        text = parser.format_help()
        assert "option_strings" not in text and "%%" not in text, f"zh-bert {name} --help: a % in a help text"


if __name__ == "__main__":
    print(f"functions over {MAX_FUNCTION_LINES} lines:", *long_functions(), sep="\n  ")
    print(f"modules over {MAX_MODULE_LINES} lines:", *long_modules(), sep="\n  ")
    print("import cycles (package/submodule edges included):", *import_cycles(), sep="\n  ")
    print("imports pointing the wrong way:", *wrong_way_imports(), *upward_imports(), sep="\n  ")
    print("datatrove modules loaded by importing zh_bert.evaluation.commands.evaluate:", *datatrove_loaded_by("zh_bert.evaluation.commands.evaluate")[:5],
          sep="\n  ")
    print("module-level names defined in two modules:", *name_collisions(), sep="\n  ")
    print("functions named like a zh_bert module:", *functions_named_like_modules(), sep="\n  ")
    print("needless function-local imports:", *needless_local_imports(), sep="\n  ")
    print("family/objective name comparisons:", *variant_comparisons(), sep="\n  ")
    print("task/suite names outside the registry:", *task_name_uses(), sep="\n  ")
    print("head kinds compared outside the registry:", *head_kind_uses(), sep="\n  ")
    print("options declared more than once:", *options_declared_twice(), sep="\n  ")
    print(f"hand-written add_argument calls: {len(hand_written_options())}", *hand_written_options(), sep="\n  ")
    sys.exit(0)
