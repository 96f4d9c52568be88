"""Talking to the Hugging Face Hub (or a mirror): endpoint choice, one-line errors and retries, in one place.

`publish`, `download` and `models --community` all go through here, so a 401, a gated repo or a dead network
reads the same whichever command met it, and never echoes the token. huggingface_hub and the HTTP clients are
imported inside the functions: `zh-bert models --help` must not pay for them.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import name_problem, scratch_dir, shown_name  # noqa: F401  (scratch_dir re-exported: download and publish stage in it)

T = TypeVar("T")

DEFAULT_HOST = "huggingface.co"
TRANSIENT_STATUS = (429, 500, 502, 503, 504)
_MIRROR_HINT = "network down? try --endpoint or HF_ENDPOINT for a mirror"

#: (huggingface_hub.errors class, message); checked in order, so a subclass comes before its base
_KNOWN_ERRORS = (
    ("GatedRepoError", "gated repository on {where}: accept its terms on the website, then log in "
                       "(HF_TOKEN or `hf auth login`)"),
    ("RepositoryNotFoundError", "repository not found on {where} (wrong id, or private and your token "
                                "cannot see it)"),
    ("RevisionNotFoundError", "revision not found on {where}"),
    ("OfflineModeIsEnabled", "HF_HUB_OFFLINE=1 is set and the files are not in the local cache; unset it "
                             "or download once while online"),
    ("LocalEntryNotFoundError", "cannot reach {where} and the files are not in the local cache ({hint})"),
)
_HTTP_STATUS = {
    401: "{where} rejected the token (HTTP 401): set a valid HF_TOKEN or run `hf auth login`",
    403: "permission denied by {where} (HTTP 403): the token has no write access to this repo or namespace",
}


_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def check_repo_id(repo_id: str, what: str) -> str:
    """`repo_id` if it reads ORG/NAME (letters, digits, '-', '_', '.'; no '..' anywhere), else one line."""
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith("."):
        raise ZhBertError(f"{what} '{repo_id}': expected ORG/NAME (letters, digits, '-', '_', '.')")
    return repo_id


def remote_name(name: object, where: str) -> str:
    """A file name from a remote listing, checked by the reading layer before it becomes a local path
    (`entry_name`). Every name a server sends is untrusted: one bad name means the listing is refused as a whole."""
    bad = name_problem(name)
    if bad:
        raise ZhBertError(f"{where}: the file listing has {bad} ({shown_name(name)}); refusing to download "
                          f"from it (a broken or hostile server)")
    return name


def check_listing(names: Iterable[object], where: str) -> list[str]:
    """Every name of a remote listing through `remote_name` (so nothing is fetched from a bad listing)."""
    return [remote_name(n, where) for n in names]


def local_path(root: Path, name: str, where: str) -> Path:
    """`root / name` for a remote file name, refused unless it stays inside `root` once resolved."""
    path = root / remote_name(name, where)
    if not path.resolve().is_relative_to(root.resolve()):
        raise ZhBertError(f"{where}: file {name!r} would be written outside {root}; refused")
    return path


def quiet_progress_bars() -> None:
    """Turn huggingface_hub's tqdm bars off unless stderr is a terminal: in a log, a pipe or CI they are
    lines of noise, and before a failure they turn the one error line into several."""
    if not sys.stderr.isatty():
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def endpoint_and_host(endpoint: str | None) -> tuple[str | None, str]:
    """(endpoint to pass to huggingface_hub, name to show in messages). `--endpoint` wins over HF_ENDPOINT;
    it is passed explicitly because huggingface_hub fixes its URL templates at import."""
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    return endpoint, endpoint or DEFAULT_HOST


def transport_errors() -> tuple[type, ...]:
    """Connection-level exception types of whichever HTTP client this huggingface_hub uses."""
    types: list[type] = [ConnectionError, TimeoutError]
    for mod in ("httpx2", "httpx", "requests"):
        try:
            m = __import__(mod)
        except ImportError:
            continue
        exc = getattr(m, "TransportError", None) or getattr(getattr(m, "exceptions", None), "ConnectionError", None)
        if exc is not None:
            types.append(exc)
    return tuple(types)


def status(e: BaseException) -> int | None:
    """The HTTP status of an exception that carries a response, else None."""
    return getattr(getattr(e, "response", None), "status_code", None)


def describe(e: BaseException, where: str) -> str | None:
    """A one-line explanation of a Hub / network exception, or None when it is not one (a bug keeps its trace)."""
    from huggingface_hub import errors as E

    for name, message in _KNOWN_ERRORS:
        if isinstance(e, getattr(E, name)):
            return message.format(where=where, hint=_MIRROR_HINT)
    if isinstance(e, E.HfHubHTTPError):
        code = status(e)
        if code in _HTTP_STATUS:
            return _HTTP_STATUS[code].format(where=where)
        first_line = str(e).strip().split("\n")[0]
        return f"{where} answered HTTP {code}: {first_line}"
    if isinstance(e, transport_errors()):
        return f"cannot reach {where} ({type(e).__name__}): {_MIRROR_HINT}"
    return None


@contextlib.contextmanager
def hub_errors(where: str, repo_id: str | None = None):
    """Turn huggingface_hub / network exceptions raised inside into one-line ZhBertErrors."""
    try:
        yield
    except ZhBertError:
        raise
    except Exception as e:
        message = describe(e, where)
        if message is None:
            raise
        raise ZhBertError(f"{repo_id}: {message}" if repo_id else message) from None


def is_transient(e: BaseException) -> bool:
    """Worth retrying: connection trouble or a 5xx/429 answer (not offline mode, which a retry cannot fix)."""
    from huggingface_hub import errors as E

    if isinstance(e, E.OfflineModeIsEnabled):
        return False
    if isinstance(e, transport_errors()):
        return True
    return isinstance(e, E.HfHubHTTPError) and (status(e) or 0) in TRANSIENT_STATUS


def with_retries(call: Callable[[], T], *, attempts: int, backoff_s: float, log: Callable[[str], None]) -> T:
    """`call()`, retried on transient errors with exponential backoff (backoff_s, 2 * backoff_s, ...)."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as e:
            if attempt + 1 >= attempts or not is_transient(e):
                raise
            wait = backoff_s * 2 ** attempt
            log(f"transient error ({type(e).__name__}), retrying in {wait} s")
            time.sleep(wait)
    raise ValueError(f"attempts must be >= 1, got {attempts}")
