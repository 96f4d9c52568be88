"""Talking to the Hugging Face Hub (or a mirror): endpoint choice, one-line errors and retries, in one place.

`publish`, `download` and `models --community` all go through here, so a 401, a gated repo or a dead network
reads the same whichever command met it, and never echoes the token. What the Hub answers about repos (a model
info, a listing) is read here through the reading layer, never parsed by `HfApi`: a mirror in maintenance
answering a page of HTML is one line, "ENDPOINT answered text/html, not the Hub API", and a field of the wrong
type (a `lastModified` that is no time, `siblings` that is no list) is named, as that repo's problem, instead of
ending a listing in a traceback. huggingface_hub and the HTTP clients are imported inside the functions:
`zh-bert models --help` must not pay for them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
import traceback
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record, api_answer, name_problem, scratch_dir, shown_name  # noqa: F401  (scratch_dir re-exported: download and publish stage in it)

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
#: the most bytes of one API answer read: a model info with every file is KiB, a page of 1,000 repos a few MiB
MAX_ANSWER = 32 << 20
#: the most repos one listing reads, over all its pages (`--limit` is at most 1,000)
MAX_ROWS = 1000
#: the most pages of one listing followed (the Hub sends up to 1,000 repos a page)
MAX_PAGES = 20
#: the most files of one repo a model info may list
MAX_FILES = 100_000
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
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

    if isinstance(e, json.JSONDecodeError) and _raised_by_client(e):   # HfApi's own `r.json()` of a non-JSON page
        return not_the_api(e.doc, where)
    if isinstance(e, E.LocalEntryNotFoundError) and "X-Repo-Commit" in str(e):   # a file answered by a non-Hub
        return not_the_api(None, where)
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


def _raised_by_client(e: BaseException) -> bool:
    """Whether huggingface_hub is on the exception's way up: its JSON error is an answer, not a bug of ours."""
    return any("huggingface_hub" in frame.f_code.co_filename for frame, _ in traceback.walk_tb(e.__traceback__))


def _probe(where: str) -> tuple[str | None, bytes]:
    """(content type, first KiB) of the endpoint's answer to a cheap API request: what a JSON error raised inside
    huggingface_hub does not carry. (None, b"") when even that request fails."""
    base = where if "://" in where else f"https://{where}"
    try:
        with urllib.request.urlopen(f"{base.rstrip('/')}/api/models?limit=1", timeout=10) as r:
            return r.headers.get("Content-Type"), r.read(1024)
    except (OSError, ValueError):
        return None, b""


def not_the_api(text: str | None, where: str) -> str:
    """The line for an answer that huggingface_hub could not read as the Hub API: `text` is what it got (None
    for a file request answered without the Hub's headers); its content type is asked of the endpoint once."""
    kind, body = _probe(where)
    try:
        api_answer(body if text is None else text, kind, where)
    except ZhBertError as e:
        return str(e)
    return f"{where} answered a file request without the Hub's X-Repo-Commit header, not the Hub API"


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


# ------------------------------------------------------------------------------- what the Hub says of repos

@dataclasses.dataclass(frozen=True)
class HubRepo:
    """One repo as a model info or a listing row describes it, every field checked: `files` maps each listed
    file to its size (None when the answer lists no files, as a listing row does); a field of the wrong type is
    left None and named in `problem`, so a listing shows that row's problem and goes on."""
    id: str
    sha: str | None = None
    files: dict[str, int | None] | None = None
    downloads: int | None = None
    likes: int | None = None
    last_modified: datetime | None = None
    problem: str | None = None


def _files(rec: Record) -> dict[str, int | None] | None:
    siblings = rec.list("siblings", None)
    if siblings is None:
        return None
    if len(siblings) > MAX_FILES:
        raise rec.error("siblings", f"more than {MAX_FILES:,} files")
    return {s.text("rfilename", max_len=1000): s.integer("size", None, lo=0) for s in rec.records("siblings")}


def _time(rec: Record, key: str) -> datetime | None:
    text = rec.text(key, None, max_len=40)
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise rec.error(key, f"expected an ISO 8601 date and time, got {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _sha(rec: Record) -> str | None:
    sha = rec.text("sha", None, max_len=64)
    if sha is not None and not _SHA.fullmatch(sha):
        raise rec.error("sha", f"expected a commit hash, got {sha[:64]!r}")
    return sha


_FIELDS: dict[str, Callable[[Record], Any]] = {
    "sha": _sha, "files": _files, "last_modified": lambda r: _time(r, "lastModified"),
    "downloads": lambda r: r.integer("downloads", None, lo=0), "likes": lambda r: r.integer("likes", None, lo=0),
}


def hub_repo(data: object, where: str) -> HubRepo:
    """A `HubRepo` from one repo object of an answer; only a missing id (or one that is not text) is an error,
    any other bad field is the repo's `problem`."""
    rec = Record.of(data, where, "a repo object")
    repo_id = rec.text("id", None, max_len=400) or rec.text("modelId", max_len=400)
    fields, problems = {}, []
    for name, read in _FIELDS.items():
        try:
            fields[name] = read(rec)
        except ZhBertError as e:
            problems.append(str(e))
    return HubRepo(repo_id, **fields, problem=problems[0] if problems else None)


def api_get(endpoint: str | None, path: str, where: str, params: dict | None = None) -> tuple[Any, str | None]:
    """(JSON data, next page's URL or None) of an API request, read through the reading layer: an HTTP error is
    huggingface_hub's own (so `describe` words it as for `HfApi`), a page of HTML or other text is one line
    (`api_answer`), and nothing beyond MAX_ANSWER bytes is read."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = path if "://" in path else f"{(endpoint or constants.ENDPOINT).rstrip('/')}{path}"
    with get_session().stream("GET", url, params=params, headers=build_hf_headers()) as r:
        if r.status_code >= 400:
            r.read()
            hf_raise_for_status(r)
        body = bytearray()
        for chunk in r.iter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER:
                raise ZhBertError(f"{where} answered more than {MAX_ANSWER >> 20} MiB to {url}, more than the "
                                  f"Hub API sends; not read")
        data = api_answer(bytes(body), r.headers.get("content-type"), where)
        return data, r.links.get("next", {}).get("url")


def repo_info(endpoint: str | None, repo_id: str, where: str, revision: str | None = None,
              files: bool = False) -> HubRepo:
    """The model info of `repo_id` (with file sizes when `files`): what `HfApi.model_info` asks, read by
    `hub_repo`, under the id asked for (never one the answer names). An explicit revision asks /revision/REV, the
    only form olah (a mirror) serves."""
    path = f"/api/models/{repo_id}" + (f"/revision/{urllib.parse.quote(revision, safe='')}" if revision else "")
    data, _ = api_get(endpoint, path, where, {"blobs": "true"} if files else None)
    return dataclasses.replace(hub_repo(data, f"{where}'s model info of {repo_id}"), id=repo_id)


def list_repos(endpoint: str | None, where: str, params: dict, limit: int) -> tuple[list[HubRepo], list[str]]:
    """(repos, notes) of `/api/models` with the Hub's query `params`, the first `limit` over at most MAX_PAGES
    pages, each next page on the same endpoint (the token goes nowhere else); a row that is not a repo object with
    an id is left out with a note, a row with another bad field keeps its `problem`."""
    from huggingface_hub import constants

    base = (endpoint or constants.ENDPOINT).rstrip("/") + "/"
    repos, notes = [], []
    url: str | None = "/api/models"
    for _ in range(MAX_PAGES):
        page, url = api_get(endpoint, url, where, {**params, "limit": limit} if url == "/api/models" else None)
        if not isinstance(page, list):
            raise ZhBertError(f"{where} answered a listing that is not a list, not the Hub API")
        for i, row in enumerate(page[:limit - len(repos) - len(notes)]):
            try:
                repos.append(hub_repo(row, f"{where}'s listing, repo {i}"))
            except ZhBertError as e:
                notes.append(str(e))
        if not url or not url.startswith(base) or len(repos) + len(notes) >= min(limit, MAX_ROWS):
            break
    return repos, notes
