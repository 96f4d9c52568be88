"""User-facing errors.

A `ZhBertError` is a mistake in the user's input (file, flag, recipe key...). The CLI prints its message
as one clear line and exits non-zero, with no traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class ZhBertError(Exception):
    """An error caused by user input; the message must say what is wrong and where."""


def suggest(name: str, valid: Iterable[str]) -> str:
    """' (did you mean X?)' for the one valid name the typed one begins (`cmrc` -> cmrc2018), else the nearest by
    difflib's ratio, or '' when nothing is close."""
    valid = list(valid)
    started = [v for v in valid if name and v.startswith(name)]
    match = started if len(started) == 1 else difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def unknown_key_error(key: str, valid: Iterable[str], where: str,
                      aliases: dict[str, str] | None = None) -> ZhBertError:
    """'recipe.yaml: unknown key 'lerning_rate' (did you mean 'lr'?); valid keys: ...'."""
    valid = sorted(valid)
    aliases = aliases or {}
    match = difflib.get_close_matches(key, valid + list(aliases), n=1, cutoff=0.5)
    hint = f" (did you mean '{aliases.get(match[0], match[0])}'?)" if match else ""
    return ZhBertError(f"{where}: unknown key '{key}'{hint}; valid keys: {', '.join(valid)}")
