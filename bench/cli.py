"""The command line of a benchmark: an option per `option` field of its `Options` dataclass, parsed by the
parser `zh_bert.core.config` derives (as for every `zh-bert` command), so that each option is written once,
with its type, default and help. A bad command line is one line, `NAME: error: ...`, exit 2."""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

from zh_bert.core.config import build_parser, config_from_args
from zh_bert.core.errors import ZhBertError

T = TypeVar("T")


def parser(cls: type, name: str, doc: str) -> argparse.ArgumentParser:
    """`python -m bench.NAME`'s parser: the module's docstring `doc` as its description, the fields of `cls`
    as its options."""
    return build_parser(f"python -m bench.{name}", doc.strip(), cls)


def parse(cls: type[T], name: str, doc: str, argv: list[str] | None = None) -> T:
    """The validated `cls` of `argv` (default: the command line); a refused option exits 2 with one line."""
    try:
        return config_from_args(cls, parser(cls, name, doc).parse_args(argv))
    except ZhBertError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def comma_floats(text: str) -> list[float]:
    """argparse `type` of an option written `100,300,1000`."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
