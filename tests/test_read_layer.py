"""Trust nothing read, by construction: everything zh-bert (package and bench/) reads that it did not just write
goes through `zh_bert.core.fileio.read` (bounded, typed, one line naming the file and the field). This test reads
the code (AST) and fails on any parse outside that layer: `json.load`/`json.loads`, `yaml.*load*`, the recipe
loader's `safe_load_unique`, an HTTP response's `.json()`, `pickle.load*`/`marshal.load*`, and `torch.load` without
`weights_only=True` (only tensors are ever unpickled). The exceptions below are the few left, each with its reason.

Run as a script to list the calls: `python tests/test_read_layer.py`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from _ast_helpers import calls_outside

ROOT = Path(__file__).resolve().parent.parent
LAYER = ROOT / "zh_bert" / "core" / "fileio"
SCANNED = (ROOT / "zh_bert", ROOT / "bench")
#: (module, function) pairs that parse what they are given
PARSERS = {("json", "load"), ("json", "loads"), ("yaml", "load"), ("yaml", "safe_load"), ("yaml", "full_load"),
           ("yaml", "unsafe_load"), ("yaml", "load_all"), ("yaml", "safe_load_all"), ("pickle", "load"),
           ("pickle", "loads"), ("marshal", "load"), ("marshal", "loads"), ("tomllib", "load"), ("tomllib", "loads")}
#: parsers called by bare name (imported with `from X import name`)
BARE = {"safe_load_unique"}

# (file, function, call) -> why it may parse outside the layer
EXCEPTIONS = {
    ("zh_bert/core/config.py", "safe_load_unique", "yaml.load"):
        "the recipe schema's YAML loader (a SafeLoader subclass that refuses duplicate keys); every recipe, "
        "ablation spec and --set value it returns is then checked key by key by `from_dict`",
    ("zh_bert/core/config.py", "parse_set", "safe_load_unique"):
        "a `--set key=value` typed by the user on this command line, parsed as a YAML scalar and checked by "
        "`from_dict` like a recipe key",
    ("zh_bert/core/config.py", "load_yaml", "safe_load_unique"):
        "the recipe file reader itself: its mapping goes through `from_dict` (unknown key -> the nearest valid one)",
}


def _call_name(call: ast.Call) -> str | None:
    """`json.loads`, `resp.json`, `torch.load`, `safe_load_unique`, ... for a call, or None."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id if f.id in BARE else None
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if (owner, f.attr) in PARSERS:
        return f"{owner}.{f.attr}"
    if f.attr == "json" and not call.args and not call.keywords:
        return ".json()"   # an HTTP response (requests, httpx, urllib3) parsed as it came
    if (owner, f.attr) == ("torch", "load"):
        safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in call.keywords)
        return None if safe else "torch.load without weights_only=True"
    return None


def unchecked_reads() -> list[tuple[str, str, str, int]]:
    """(file, function, call, line) for every parse of read data outside zh_bert/core/fileio/."""
    return [(rel, fn.name if fn else "<module>", name, node.lineno)
            for rel, fn, node in calls_outside(ROOT, SCANNED, LAYER) if (name := _call_name(node))]


def test_everything_read_goes_through_the_reading_layer():
    bad = [f"{f}:{line} {fn}: {call}" for f, fn, call, line in unchecked_reads() if (f, fn, call) not in EXCEPTIONS]
    assert not bad, ("parses outside zh_bert/core/fileio/read.py (use read_json / read_object / Record / parse_json / "
                     f"parse_yaml / api_answer, or add a reasoned exception): {bad}")


def test_every_exception_is_still_needed():
    used = {(f, fn, call) for f, fn, call, _ in unchecked_reads()}
    stale = sorted(set(EXCEPTIONS) - used)
    assert not stale, f"exceptions that no longer match a call (remove them): {stale}"


def test_the_scan_sees_each_kind_of_parse(tmp_path, monkeypatch):
    """The AST scan finds each form it bans (so a rename in the scan cannot silently pass everything)."""
    pkg = tmp_path / "zh_bert"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import json, yaml, pickle, torch\n"
        "def a(p):\n    return json.loads(p)\n"
        "def b(p):\n    return yaml.safe_load(p)\n"
        "def c(r):\n    return r.json()\n"
        "def d(p):\n    return torch.load(p)\n"
        "def e(p):\n    return torch.load(p, weights_only=True)\n"
        "def f(p):\n    return pickle.loads(p)\n"
        "def g(p):\n    return safe_load_unique(p)\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "SCANNED", (pkg,))
    found = {(fn, call) for _, fn, call, _ in unchecked_reads()}
    assert found == {("a", "json.loads"), ("b", "yaml.safe_load"), ("c", ".json()"),
                     ("d", "torch.load without weights_only=True"), ("f", "pickle.loads"),
                     ("g", "safe_load_unique")}, found


if __name__ == "__main__":
    for f, fn, call, line in unchecked_reads():
        mark = "  (exception)" if (f, fn, call) in EXCEPTIONS else ""
        print(f"{f}:{line} {fn}: {call}{mark}")


# ------------------------------------------------------------------------------------------------ the layer itself

def test_record_names_the_file_and_the_field_of_every_wrong_value():
    import pytest

    from zh_bert.core.errors import ZhBertError
    from zh_bert.core.fileio import Record

    r = Record.of({"entries": [{"metric_value": "abc"}, {"metric_value": float("nan")}, {"metric_value": -5}],
                   "files": {"a/b": {"size": 1.5}}, "model": {"source": 3}}, "RUN/eval_results.json")
    e0, e1, e2 = r.records("entries")
    for rec, got in ((e0, "text 'abc'"), (e1, "nan"), (e2, "-5")):
        with pytest.raises(ZhBertError) as err:
            rec.number("metric_value", lo=0, hi=100)
        assert str(err.value).startswith("RUN/eval_results.json: entries[") and got in str(err.value), err.value
    with pytest.raises(ZhBertError, match=r"files\['a/b'\]\.size: expected an integer"):
        [e.integer("size") for _, e in r.records_in("files")]
    with pytest.raises(ZhBertError, match=r"^RUN/eval_results.json: model.source: expected text, got a number 3$"):
        r.record("model").text("source")
    with pytest.raises(ZhBertError, match=r"missing"):
        r.text("nothing")
    assert r.text("nothing", None) is None and r.number("nothing", 7) == 7
    with pytest.raises(ZhBertError, match=r"^f: entrys: unknown key \(did you mean 'entries'\?\)"):
        Record.of({"entrys": []}, "f").known(("entries", "model"))
    with pytest.raises(ZhBertError, match="^f: expected a JSON object, got a list$"):
        Record.of([], "f")


def test_names_read_from_files_are_entries_of_their_folder(tmp_path):
    import pytest

    from zh_bert.core.errors import ZhBertError
    from zh_bert.core.fileio import entry_name, inside

    for good in ("model.safetensors", "generator/config.json", "中文.txt", "x..y"):
        assert entry_name(good, "m") == good
    for bad in ("../../victim/thesis.txt", "/etc/passwd", "a/../../b", "C:x", "a\\b", "", ".", "a//b", 3, None,
                "x\x00y"):
        with pytest.raises(ZhBertError, match="^m: .*never a path outside its folder"):
            entry_name(bad, "m")
    with pytest.raises(ZhBertError, match="a path, not a name"):
        entry_name("a/b", "m", nested=False)
    (tmp_path / "run" / "ckpt").mkdir(parents=True)
    (tmp_path / "victim").mkdir()
    (tmp_path / "run" / "ckpt" / "out").symlink_to(tmp_path / "victim")
    assert inside(tmp_path / "run" / "ckpt", "model.safetensors") is not None
    assert inside(tmp_path / "run" / "ckpt", "out/thesis.txt") is None      # a symlinked folder leads out
    assert inside(tmp_path / "run" / "ckpt", "../x") is None


def test_json_and_api_answers_are_one_line():
    import pytest

    from zh_bert.core.errors import ZhBertError
    from zh_bert.core.fileio import api_answer, number, parse_json, parse_yaml

    with pytest.raises(ZhBertError, match=r"^r.json:1: not valid JSON"):
        parse_json('{"a": ', "r.json")
    with pytest.raises(ZhBertError, match="NaN is not a JSON number"):
        parse_json('{"a": NaN}', "r.json")
    with pytest.raises(ZhBertError, match=r"^http://127.0.0.1:9/api answered text/html, not the Hub API \('<html>maint"):
        api_answer(b"<html>maintenance</html>", "text/html; charset=utf-8", "http://127.0.0.1:9/api")
    with pytest.raises(ZhBertError, match="answered text that is not JSON"):
        api_answer("oops", None, "E")
    assert api_answer(b'{"Data": 1}', "application/json", "E") == {"Data": 1}
    with pytest.raises(ZhBertError, match="given twice"):
        parse_yaml("a: 1\na: 2\n", "README.md")
    with pytest.raises(ZhBertError, match="^README.md: not valid YAML"):
        parse_yaml("a: [1, 2\n", "README.md")
    for bad in (True, "1", float("inf"), -1, 1e9):
        with pytest.raises(ZhBertError, match=r"^x: expected a number in \[0, 100\]"):
            number(bad, "x", 0, 100)
    assert number(3.0, "x", 0, 10, integer=True) == 3


def test_a_forged_shard_meta_is_one_line_before_any_array_is_opened(char_shards, tmp_path):
    """SHARDDIR/meta.json names the part folders the loader opens and the sizes it maps arrays by: a part named
    `../x`, a size that is text or negative, a special id outside the vocabulary is one line naming the field."""
    import shutil

    import pytest

    from zh_bert.core.errors import ZhBertError
    from zh_bert.core.fileio import read_json
    from zh_bert.train.data import ShardDataset

    _, shards = char_shards
    for field, value, message in (("parts", [{"name": "../../victim", "counts": {}}], r"parts\[0\]\.name"),
                                  ("seq_len", "64", r"seq_len: expected an integer"),
                                  ("vocab_size", -3, r"vocab_size: expected an integer in"),
                                  ("mask_id", 10**9, r"mask_id: expected an integer in")):
        forged = tmp_path / field
        shutil.copytree(shards, forged)
        meta = read_json(forged / "meta.json")
        meta[field] = value
        (forged / "meta.json").write_text(__import__("json").dumps(meta), encoding="utf-8")
        with pytest.raises(ZhBertError, match=rf"^{forged}/meta.json: {message}"):
            ShardDataset(forged)
