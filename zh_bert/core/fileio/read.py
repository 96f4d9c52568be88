"""The one layer through which zh-bert reads what it did not just write.

A manifest, a run's or an evaluation's JSON, a verification record, a card's YAML, a Hub or mirror answer, a
benchmark file: each may have been written by someone else (a run dir copied from a colleague, a downloaded repo,
a mirror in maintenance). So every such read is bounded in size, parsed as data (nothing is executed), and asked
for its fields by type through `Record`, which turns any wrong field into one line naming the file (or URL) and
the field's path. A name from a file is an entry of its own folder, never a path (`entry_name`, `inside`); a
number from a file is finite and in its range (`number`). `tests/test_read_layer.py` keeps raw `json.load`,
`yaml.safe_load` and `.json()` out of every other module.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterator

from zh_bert.core.errors import ZhBertError, suggest

#: the most bytes `read_json` reads of one file: run files, records and manifests are KiB, a tokenizer.json a few
#: MiB; a larger file is refused before it is parsed (a hostile one cannot make zh-bert read gigabytes)
MAX_JSON_BYTES = 64 << 20
#: the most bytes of an endpoint's answer that a message quotes
_QUOTED = 60
#: JSON nested past Python's recursion limit (about 1,000 levels; no file zh-bert reads nests 10): what its parser
#: raises as RecursionError, said as one line
TOO_DEEP = "not valid JSON here (nested deeper than the reader follows: no config, record or line nests so deep)"
#: the most bytes of a vocab.txt read (Google's is 110 KB; a 1M-token vocabulary is ~10 MB)
MAX_VOCAB_BYTES = 64 << 20


def read_text(path: str | os.PathLike, encoding: str = "utf-8", max_bytes: int | None = None) -> str:
    """A whole text file, or a one-line ZhBertError saying it is missing, too large or not valid `encoding`."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: no such file")
    if max_bytes is not None and path.stat().st_size > max_bytes:
        raise ZhBertError(f"{path}: {path.stat().st_size:,} bytes, more than the {max_bytes:,} read of such a file")
    try:
        return path.read_text(encoding=encoding)
    except UnicodeDecodeError as e:
        raise ZhBertError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


_MISSING = object()


def read_json(path: str | os.PathLike, default: Any = _MISSING, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A whole JSON file; a missing, unreadable, oversized or broken file is a one-line ZhBertError naming the
    file and the line, or `default` when one is given (for optional files: a run's summary, a card's metrics)."""
    path = Path(path)
    try:
        return parse_json(read_text(path, max_bytes=max_bytes), str(path))
    except (ZhBertError, OSError) as e:
        if default is not _MISSING:
            return default
        if isinstance(e, ZhBertError):
            raise
        raise ZhBertError(f"{path}: cannot read ({e.strerror or e})") from None


def read_object(path: str | os.PathLike, default: Any = _MISSING, what: str = "a JSON object") -> Record:
    """`read_json` of a file that must hold one JSON object, as a `Record` to ask for its fields."""
    data = read_json(path, default)
    return data if data is default else Record.of(data, str(path), what)


def parse_json(text: str | bytes, where: str) -> Any:
    """JSON text from `where` (a file, a line of one, an answer); one line with the position when it is not JSON.
    NaN and Infinity, which Python's json accepts and JSON does not have, are refused too."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ZhBertError(f"{where}:{e.lineno}: not valid JSON ({e.msg})") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ZhBertError(f"{where}: not valid JSON ({e})") from None
    except RecursionError:
        raise ZhBertError(f"{where}: {TOO_DEEP}") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


#: built once: `json.loads` with a hook builds a decoder at every call (+1.4 µs a line, ~70% of parsing a corpus line)
_LINE_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def parse_json_line(line: str, path: str | os.PathLike, lineno: int) -> Any:
    """One line of a JSON-lines corpus (millions of them: as fast as `json.loads`), NaN/Infinity refused like
    `parse_json`; one line `path:lineno: not JSON (what at column N)` when it is not JSON."""
    try:
        return _LINE_DECODER.decode(line)
    except json.JSONDecodeError as e:
        raise ZhBertError(f"{path}:{lineno}: not JSON ({e.msg} at column {e.colno})") from None
    except ValueError as e:
        raise ZhBertError(f"{path}:{lineno}: not JSON ({e})") from None
    except RecursionError:
        raise ZhBertError(f"{path}:{lineno}: {TOO_DEEP}") from None


def preview(value: Any, limit: int = 40) -> str:
    """At most `limit` characters showing a value read from a stranger's file, built without rendering it whole:
    `str()` of an aliased YAML tree (or of a 700M-character string) would build all of it before any slice."""
    out: list[str] = []
    size = 0
    stack: list[Any] = [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, _Literal):
            piece = item.text
        elif isinstance(item, (dict, list, tuple)):
            pairs = isinstance(item, dict)
            shown = list(itertools.islice(item.items() if pairs else item, limit))
            stack.append(_Literal("}" if pairs else "]"))
            for i in range(len(shown) - 1, -1, -1):     # popped in order: k0: v0, k1: v1 ...
                stack += [shown[i][1], _Literal(": "), shown[i][0]] if pairs else [shown[i]]
                if i:
                    stack.append(_Literal(", "))
            piece = "{" if pairs else "["
        elif isinstance(item, str):
            piece = repr(item[:limit])
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 64:
            piece = f"an integer of {item.bit_length():,} bits"
        else:
            piece = repr(item)[:limit]
        out.append(piece)
        size += len(piece)
    text = "".join(out)
    return text if len(text) <= limit and not stack else text[:limit - 1] + "…"


class _Literal:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text



def json_copy(obj: Any) -> Any:
    """`obj` as a JSON reader would give it back (tuples as lists, keys as strings): what a saved copy compares
    equal to."""
    return json.loads(json.dumps(obj))


def parse_yaml(text: str, where: str) -> Any:
    """YAML text (a card's front matter) as plain data: safe loading, no tags, a key given twice is an error."""
    import yaml

    from zh_bert.core.config import DuplicateKeyError, YamlBudgetError, safe_load_unique

    try:
        return safe_load_unique(text)
    except (DuplicateKeyError, YamlBudgetError) as e:
        raise ZhBertError(f"{where}: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ZhBertError(f"{where}: not valid YAML ({(str(e).splitlines() or [type(e).__name__])[0][:80]})") from None


def api_answer(body: bytes | str, content_type: str | None, where: str, what: str = "the Hub API") -> Any:
    """An HTTP answer that should be JSON: a page of HTML (a mirror's maintenance page, a captive portal) or any
    other text is one line, `ENDPOINT answered text/html, not the Hub API`, never a JSONDecodeError."""
    kind = (content_type or "").split(";")[0].strip().lower()
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if kind and "json" not in kind:
        raise ZhBertError(f"{where} answered {kind}, not {what} ({_quote(text)})")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError:
        raise ZhBertError(f"{where} answered {kind or 'text'} that is not JSON, not {what} ({_quote(text)})") from None


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:_QUOTED] + ("…" if len(flat) > _QUOTED else ""))


# ------------------------------------------------------------------------------------------- names and numbers

_DRIVE = re.compile(r"^[A-Za-z]:")


def name_problem(name: object, nested: bool = True) -> str | None:
    """What makes `name`, read from a manifest or a listing, unfit to become a path, or None: not relative, a
    '.', '..' or empty segment, a backslash, a drive letter, a control character; with `nested=False` any '/'."""
    if not isinstance(name, str):
        return f"a name that is not a string but {_kind(name)}"
    if not name:
        return "an empty name"
    if name.startswith("/") or _DRIVE.match(name):
        return "an absolute path"
    if "\\" in name:
        return "a backslash"
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        return "a control character"
    if any(seg in ("", ".", "..") for seg in name.split("/")):
        return "a '.', '..' or empty path segment"
    if not nested and "/" in name:
        return "a path, not a name"
    return None


def shown_name(name: object) -> str:
    return repr(name[:80]) if isinstance(name, str) else repr(name)[:80]


def entry_name(name: object, where: str, nested: bool = True) -> str:
    """`name` when it is fit to be an entry of the folder it was read for (`name_problem`), else one line
    naming `where`."""
    bad = name_problem(name, nested)
    if bad:
        raise ZhBertError(f"{where}: {bad} ({shown_name(name)}): a name read from a file is never a path outside "
                          f"its folder")
    return name


def inside(folder: str | os.PathLike, name: str) -> Path | None:
    """`folder / name` when, resolved (every symlink followed), it still lies under `folder`, else None: the
    check a delete makes again right before it deletes."""
    root = Path(folder).resolve()
    path = Path(folder) / name
    real = path.resolve()
    return path if real != root and root in real.parents else None


def number(value: object, where: str, lo: float | None = None, hi: float | None = None,
           integer: bool = False) -> float | int:
    """A number read from a file: a JSON number (not a bool, not text), finite, within [lo, hi]."""
    want = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)
                                                                         and not float(value).is_integer()):
        raise ZhBertError(f"{where}: expected {want}{_range(lo, hi)}, got {_kind(value)} {_short(value)}")
    if not math.isfinite(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ZhBertError(f"{where}: expected {want}{_range(lo, hi)}, got {value!r}")
    return int(value) if integer else value


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo:g}, {hi:g}]"
    return f" ≥ {lo:g}" if lo is not None else f" ≤ {hi:g}" if hi is not None else " (finite)"


_KINDS = {bool: "a boolean", int: "a number", float: "a number", type(None): "null", list: "a list",
          dict: "an object", str: "text"}


def _kind(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _short(value: object) -> str:
    return repr(value)[:40]


# ------------------------------------------------------------------------------------------------ Record

class Record:
    """A JSON or YAML object read from `where`, asked for its fields by type. Each accessor checks what it
    returns; a missing or wrong field is one line: `where: path.to.field: expected ..., got ...`. Unknown keys
    are ignored unless `known` is called (a file of zh-bert's own schema, where a typo must be named)."""

    __slots__ = ("data", "where", "path")

    def __init__(self, data: dict, where: str, path: str = ""):
        self.data, self.where, self.path = data, where, path

    @classmethod
    def of(cls, data: object, where: str, what: str = "a JSON object") -> Record:
        if not isinstance(data, dict):
            raise ZhBertError(f"{where}: expected {what}, got {_kind(data)}")
        return cls(data, where)

    def at(self, key: object) -> str:
        """The path of field `key` as a message shows it (`entries[2].metric_value`, `files['a/b'].size`)."""
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        plain = isinstance(key, str) and re.fullmatch(r"[A-Za-z_][\w-]*", key)
        return f"{self.path}.{key}" if plain and self.path else key if plain else f"{self.path}[{key!r}]"

    def error(self, key: object, problem: str) -> ZhBertError:
        return ZhBertError(f"{self.where}: {self.at(key)}: {problem}")

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def keys(self):
        return self.data.keys()

    def raw(self, key: str, default: Any = None) -> Any:
        """A field as it was read, unchecked (for values only shown or compared, never used as a path or number)."""
        return self.data.get(key, default)

    def _get(self, key: str, default: Any, want: str) -> Any:
        if key not in self.data or (self.data[key] is None and default is not _MISSING):
            if default is _MISSING:
                raise self.error(key, f"missing (expected {want})")
            return default
        return self.data[key]

    def text(self, key: str, default: Any = _MISSING, max_len: int = 10_000) -> str:
        value = self._get(key, default, "text")
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str) or len(value) > max_len:
            raise self.error(key, f"expected text{f' of at most {max_len} characters' if isinstance(value, str) else ''}, "
                                  f"got {_kind(value)} {_short(value)}")
        return value

    def number(self, key: str, default: Any = _MISSING, lo: float | None = None, hi: float | None = None) -> float:
        value = self._get(key, default, "a number")
        return value if value is default and default is not _MISSING else number(value, f"{self.where}: {self.at(key)}", lo, hi)

    def integer(self, key: str, default: Any = _MISSING, lo: int | None = None, hi: int | None = None) -> int:
        value = self._get(key, default, "an integer")
        if value is default and default is not _MISSING:
            return value
        return number(value, f"{self.where}: {self.at(key)}", lo, hi, integer=True)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, default, "true or false")
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {_kind(value)} {_short(value)}")
        return value

    def name(self, key: str, default: Any = _MISSING, nested: bool = False) -> str:
        """A file name: an entry of the folder this record describes (`entry_name`)."""
        value = self.text(key, default)
        return value if value is default and default is not _MISSING else entry_name(value, f"{self.where}: {self.at(key)}", nested)

    def record(self, key: str, default: Any = _MISSING) -> Record:
        value = self._get(key, default, "an object")
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, dict):
            raise self.error(key, f"expected an object, got {_kind(value)} {_short(value)}")
        return Record(value, self.where, self.at(key))

    def items(self) -> Iterator[tuple[str, Any]]:
        """(key, value) pairs of this object, keys checked to be text."""
        for key, value in self.data.items():
            if not isinstance(key, str):
                raise self.error(key, "a key that is not text")
            yield key, value

    def records_in(self, key: str) -> Iterator[tuple[str, Record]]:
        """The object fields of the object at `key`, each as a Record (`files: {name: {...}}`)."""
        inner = self.record(key)
        for name, value in inner.items():
            if not isinstance(value, dict):
                raise inner.error(name, f"expected an object, got {_kind(value)} {_short(value)}")
            yield name, Record(value, self.where, inner.at(name))

    def list(self, key: str, default: Any = _MISSING, max_len: int = 1_000_000) -> list:
        value = self._get(key, default, "a list")
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list) or len(value) > max_len:
            raise self.error(key, f"expected a list, got {_kind(value)} {_short(value)}")
        return value

    def records(self, key: str, default: Any = _MISSING) -> list[Record]:
        """A list of objects, each as a Record."""
        values = self.list(key, default)
        if values is default and default is not _MISSING:
            return values
        out = []
        for i, v in enumerate(values):
            if not isinstance(v, dict):
                raise self.error(key, f"[{i}]: expected an object, got {_kind(v)} {_short(v)}")
            out.append(Record(v, self.where, f"{self.at(key)}[{i}]"))
        return out

    def texts(self, key: str, default: Any = _MISSING) -> list[str]:
        values = self.list(key, default)
        if values is default and default is not _MISSING:
            return values
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise self.error(key, f"[{i}]: expected text, got {_kind(v)} {_short(v)}")
        return values

    def known(self, keys) -> Record:
        """Refuse a key not in `keys`, naming the nearest valid one (a file of zh-bert's own schema)."""
        for key in self.data:
            if key not in keys:
                raise self.error(key, f"unknown key{suggest(str(key), keys)}")
        return self


def read_vocab_txt(path: str | os.PathLike) -> list[str]:
    """Tokens of a BERT vocab.txt, one per line. Split on '\\n' only: Google's vocab has U+2028 inside
    two entries, and str.splitlines() would shift every later id."""
    text = read_text(path, max_bytes=MAX_VOCAB_BYTES)
    if text.endswith("\n"):
        text = text[:-1]
    return [t.rstrip("\r") for t in text.split("\n")] if text else []
