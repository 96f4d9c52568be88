"""One schema for YAML, `--set key=value`, CLI flags and Python: dataclasses validated on load.

An unknown key is an error that names the key and the nearest valid one; a value of the wrong type is an
error that names the key, the expected type and the value. Stages build their config dataclasses with
`from_dict` so that every entry point reports mistakes the same way.

Each command's CLI is derived from its config dataclass (`option` fields, `build_parser`, `parse_config`):
an option is written once, as a field with its type, default and help, and the dataclass's `__post_init__`
validates it, so the Python API and the CLI refuse exactly the same values.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from zh_bert.core.errors import ZhBertError, suggest, unknown_key_error

T = TypeVar("T")


def _coerce(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check/convert one value against a dataclass field type (str, int, float, bool, Optional, list, Literal)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key, where)
            except ZhBertError as e:
                errors.append(str(e))
        raise ZhBertError(errors[0] if errors else f"{where}: '{key}' has an invalid value {value!r}")
    if origin is typing.Literal:
        if value in args:
            return value
        raise ZhBertError(f"{where}: '{key}' must be one of {', '.join(map(repr, args))}, got {value!r}")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ZhBertError(f"{where}: '{key}' must be a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, key, where) for v in value]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ZhBertError(f"{where}: '{key}' must be a mapping, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
        raise ZhBertError(f"{where}: '{key}' must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ZhBertError(f"{where}: '{key}' must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                f = float(value)
                if f.is_integer():
                    return int(f)
            except ValueError:
                pass
        raise ZhBertError(f"{where}: '{key}' must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ZhBertError(f"{where}: '{key}' must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ZhBertError(f"{where}: '{key}' must be a number, got {value!r}") from None
        if not math.isfinite(number):   # nan/inf pass every range check written as `x < limit` and train garbage
            raise ZhBertError(f"{where}: '{key}' must be a finite number, got {value!r}")
        return number
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ZhBertError(f"{where}: '{key}' must be a string, got {value!r}")
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "config",
              aliases: Mapping[str, str] | None = None) -> T:
    """Build dataclass `cls` from a mapping; unknown keys and wrong types raise ZhBertError.

    `aliases` maps accepted alternative names to field names (e.g. learning_rate -> lr); they also serve
    as targets for the "did you mean" suggestion, so `lerning_rate` suggests `lr` via `learning_rate`.
    """
    aliases = dict(aliases or {})
    if not isinstance(data, Mapping):
        raise ZhBertError(f"{where}: expected a mapping of key: value, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        key = str(key)
        key = aliases.get(key, key)
        if key not in fields:
            raise unknown_key_error(key, fields, where, aliases)
        kwargs[key] = _coerce(value, hints[key], key, where)
    missing = [f.name for f in fields.values() if f.name not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ZhBertError(f"{where}: missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    return cls(**kwargs)


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` pairs; values are parsed as YAML scalars (so 3e-4, true, null work)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ZhBertError(f"--set expects key=value, got '{item}'")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = safe_load_unique(raw) if raw != "" else ""
        except DuplicateKeyError as e:   # `--set masking={strategy: a, strategy: b}`: not a plain string either
            raise ZhBertError(f"--set {item}: {e.problem}") from None
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A YAML mapping that gives one key twice (`_UniqueKeyLoader`)."""


class YamlBudgetError(yaml.composer.ComposerError):
    """YAML nested deeper than `MAX_YAML_DEPTH`, or whose aliases expand past `MAX_YAML_NODES`."""


#: the deepest YAML nesting read (a recipe is 3 levels, a model card's model-index 6)
MAX_YAML_DEPTH = 64
#: the most nodes a YAML document may stand for with every alias expanded (a C-MTEB card's model-index is a few
#: thousand): 827 bytes of aliases to aliases stand for 10^9 strings, which anything that walks them would build
MAX_YAML_NODES = 200_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error: YAML's own rule lets the
    last one win silently, so `max_steps` written twice would train for the other value than the user read.
    And bounded: nesting past `MAX_YAML_DEPTH` and an alias tree expanding past `MAX_YAML_NODES` are errors,
    counted while the document is composed (each node's expanded size once, an alias at the size of its anchor)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent, index):
        if self._depth >= MAX_YAML_DEPTH:
            raise YamlBudgetError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) not in self._sizes:
            children = (node.value if isinstance(node, yaml.SequenceNode) else
                        [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
            size = 1 + sum(self._sizes.get(id(c), 1) for c in children)
            if size > MAX_YAML_NODES:
                raise YamlBudgetError(None, None, f"its aliases stand for more than {MAX_YAML_NODES:,} values",
                                      node.start_mark)
            self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                first, again = seen[key] + 1, key_node.start_mark.line + 1
                raise DuplicateKeyError(None, None, f"key '{key}' given twice" + (
                    f" (lines {first} and {again})" if first != again else ""), key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def safe_load_unique(text: str) -> Any:
    """`yaml.safe_load` that refuses duplicate keys and unbounded documents (`_UniqueKeyLoader`); a value PyYAML
    cannot build (an integer of 5,000 digits: Python's ValueError) is a YAMLError like any other."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
    except (ValueError, RecursionError) as e:
        raise yaml.YAMLError(str(e).splitlines()[0][:80] if str(e) else type(e).__name__) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from `path`, with file-and-line errors for bad YAML (a key given twice included)."""
    path = Path(path)
    if not path.is_file():
        raise ZhBertError(f"{path}: no such file")
    try:
        data = safe_load_unique(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ZhBertError(f"{where}: invalid YAML: {getattr(e, 'problem', e)}") from None
    except UnicodeDecodeError:
        raise ZhBertError(f"{path}: not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ZhBertError(f"{path}: expected a mapping of key: value at the top level")
    return data


def to_dict(obj) -> dict[str, Any]:
    return dataclasses.asdict(obj)


# ---------------------------------------------------------------------------------------------------------
# CLI derived from dataclasses


def option(default: Any = dataclasses.MISSING, *, help: str = "", flags: tuple[str, ...] = (),
           metavar: str | None = None, positional: bool = False, default_factory: Any = dataclasses.MISSING,
           bounds: tuple[float, float] | None = None, **argparse_kw: Any) -> Any:
    """A dataclass field that is also a CLI option.

    The flag is `--field-name` (plus `flags`, e.g. ("-o",); a long flag in `flags` replaces the derived one),
    its type and choices come from the annotation (int, float, str, bool, Literal, Optional, list), and
    `argparse_kw` passes what the annotation cannot say (nargs, action="append"). A field without a default
    is a required option; `positional=True` makes it a positional argument. `bounds=(lo, hi)`: the closed
    range a number must lie in, stated in the help and checked on load (`check_bounds`).
    """
    if bounds is not None:
        help = f"{help} (range {_number(bounds[0])} to {_number(bounds[1])})"
    meta = {"cli": {"help": help, "flags": tuple(flags), "metavar": metavar, "positional": positional,
                    "kw": argparse_kw}, "bounds": bounds}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def option_of(cls: type, key: str, **changes: Any) -> Any:
    """The field `key` of dataclass `cls` again, for another dataclass: one declaration (type, help, bounds,
    default) shared by two commands' configs, e.g. a recipe key that a stage's option also sets. `changes`
    (default=..., help=...) says in the code what differs, where a command needs another default."""
    f = {f.name: f for f in dataclasses.fields(cls)}[key]
    meta = dict(f.metadata)
    if "help" in changes:
        meta["cli"] = {**meta["cli"], "help": changes.pop("help")}
    default = changes.pop("default", f.default)
    if changes:
        raise TypeError(f"option_of: unknown changes {sorted(changes)}")
    if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def keys_of(cls: type, *names: str, name: str) -> type:
    """A dataclass (named `name`) whose fields are the fields `names` of dataclass `cls` (or of a dataclass field
    of it, e.g. a recipe's `masking`), the same declarations: type, default, help, bounds. A command that takes
    some of another's keys subclasses it instead of declaring them again, so the two cannot drift."""
    found = {}
    for owner in [cls] + [tp for tp in typing.get_type_hints(cls).values() if dataclasses.is_dataclass(tp)]:
        hints = typing.get_type_hints(owner)
        for f in dataclasses.fields(owner):
            found.setdefault(f.name, (hints[f.name], f))
    spec = []
    for key in names:
        tp, f = found[key]
        spec.append((key, tp, dataclasses.field(default=f.default, default_factory=f.default_factory,
                                                 metadata=f.metadata)))
    return dataclasses.make_dataclass(name, spec)


def check_bounds(obj) -> None:
    """One line for the first field of dataclass `obj` outside its declared `bounds`."""
    for f in dataclasses.fields(obj):
        bounds, value = f.metadata.get("bounds"), getattr(obj, f.name)
        if bounds and isinstance(value, (int, float)) and not bounds[0] <= value <= bounds[1]:
            raise ZhBertError(f"'{f.name}' must be in [{_number(bounds[0])}, {_number(bounds[1])}], got {value:g}")


def _number(x: float) -> str:
    """A bound as a reader checks it: 16777216, not 1.67772e+07 (which rounds 2^24 away)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


class Choice:
    """argparse `type` for a Literal field: like `choices`, but the error names the nearest valid value."""

    def __init__(self, values: tuple):
        self.values = values

    def __call__(self, text: str) -> Any:
        for v in self.values:
            if str(v) == text:
                return v
        raise argparse.ArgumentTypeError(f"invalid choice {text!r}{suggest(text, map(str, self.values))}; "
                                         f"choose from {', '.join(map(str, self.values))}")


def check_finite(cfg: Any, as_flag: bool = True) -> None:
    """Refuse nan/inf in any float field of dataclass `cfg` (the Python API, where `_coerce` does not run),
    naming the field as the flag the user typed (`as_flag`) or as the key ('lr')."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            name = f"--{f.name.replace('_', '-')}" if as_flag else f"'{f.name}'"
            raise ZhBertError(f"{name} must be a finite number, got {value!r}")


def at_least(cfg: Any, minimum: float, *names: str) -> None:
    """Refuse a numeric setting below `minimum`, naming it as the flag the user typed (--batch-size)."""
    for name in names:
        value = getattr(cfg, name)
        if value < minimum:
            raise ZhBertError(f"--{name.replace('_', '-')} must be >= {minimum}, got {value}")


def check_choices(cfg: Any) -> None:
    """Refuse a Literal-typed field whose value is not one of its choices (argparse checks the CLI; this
    checks the Python API the same way), naming the flag and the nearest valid value."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        tp = _unwrap_optional(hints[f.name])
        value = getattr(cfg, f.name)
        if typing.get_origin(tp) is typing.Literal and value is not None and value not in typing.get_args(tp):
            raise ZhBertError(f"--{f.name.replace('_', '-')}: invalid choice {value!r}"
                              f"{suggest(str(value), map(str, typing.get_args(tp)))}; choose from "
                              f"{', '.join(map(str, typing.get_args(tp)))}")


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of `cls` that are CLI options (declared with `option`)."""
    return [f for f in dataclasses.fields(cls) if f.init and "cli" in f.metadata]


def add_options(parser: argparse.ArgumentParser, cls: type) -> argparse.ArgumentParser:
    """Add one argparse option per `option` field of dataclass `cls`; returns `parser`."""
    hints = typing.get_type_hints(cls)
    for f in cli_fields(cls):
        md = f.metadata["cli"]
        tp = _unwrap_optional(hints[f.name])
        # a literal % either way ("30% slower" in a recipe key's help, "1%% of" written for argparse)
        kw: dict[str, Any] = {"dest": f.name, "help": md["help"].replace("%%", "%").replace("%", "%%") or None}
        if md["metavar"]:
            kw["metavar"] = md["metavar"]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        origin = typing.get_origin(tp)
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction if default else "store_true"
        elif origin is typing.Literal:
            kw["type"] = Choice(typing.get_args(tp))
            kw.setdefault("metavar", "{" + ",".join(map(str, typing.get_args(tp))) + "}")
        elif origin in (list, tuple):
            inner = _unwrap_optional((typing.get_args(tp) or (str,))[0])
            kw["type"] = inner if inner in (int, float) else str
            if typing.get_origin(inner) is typing.Literal:
                kw["type"] = Choice(typing.get_args(inner))
            kw["nargs"] = "+" if md["positional"] and not has_default else ("*" if md["positional"] else "+")
        elif tp in (int, float, str):
            kw["type"] = tp
        kw.update(md["kw"])
        if kw.get("action") == "append":
            kw.pop("nargs", None)
            default = []
        if has_default and default not in (None, False, [], ""):
            kw["help"] = f"{kw['help'] or ''} (default: {default})".lstrip()
        if md["positional"]:
            kw.pop("dest")
            if has_default:
                kw.setdefault("nargs", "?")
                kw["default"] = default
            parser.add_argument(f.name, **kw)
            continue
        flags = list(md["flags"])
        if not any(fl.startswith("--") for fl in flags):
            flags.append("--" + f.name.replace("_", "-"))
        if has_default:
            kw["default"] = default
        else:
            kw["required"] = True
        parser.add_argument(*flags, **kw)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a ZhBertError: the CLI then prints it as the one line
    `zh-bert CMD: error: ...` like every other mistake, instead of a usage block plus an error line."""

    def error(self, message: str):
        raise ZhBertError(f"{message} (see {self.prog} --help)")


def build_parser(prog: str, description: str, *classes: type, epilog: str | None = None,
                 subcommands: Mapping[str, tuple[str, tuple[type, ...]]] | None = None) -> argparse.ArgumentParser:
    """An argparse parser whose options are the `option` fields of `classes`; `subcommands` maps a name to
    (help, classes) for commands like `zh-bert eval mlm|cloze` (the chosen name lands in `.command`)."""
    p = _Parser(prog=prog, description=description, epilog=epilog,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    for cls in classes:
        add_options(p, cls)
    if subcommands:
        sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(subcommands) + "}")
        for name, (help_, sub_classes) in subcommands.items():
            sp = sub.add_parser(name, help=help_, description=help_)
            for cls in sub_classes:
                add_options(sp, cls)
    return p


def config_from_args(cls: type[T], args: argparse.Namespace) -> T:
    """Instantiate `cls` from the parsed options that belong to it (its `__post_init__` validates); no float
    option may be nan or inf (argparse's `float` reads both)."""
    values = vars(args)
    cfg = cls(**{f.name: values[f.name] for f in cli_fields(cls) if f.name in values})
    check_finite(cfg)   # after the dataclass's own checks, so that their messages come first
    return cfg


def parse_config(cls: type[T], argv: list[str], prog: str, description: str, epilog: str | None = None) -> T:
    """Parse `argv` with the parser derived from `cls` and return the validated config."""
    return config_from_args(cls, build_parser(prog, description, cls, epilog=epilog).parse_args(argv))
