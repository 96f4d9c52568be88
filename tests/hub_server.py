"""A small Hugging Face Hub-compatible server for tests (FastAPI + uvicorn on 127.0.0.1).

It implements just the endpoints `huggingface_hub` uses to upload (whoami-v2, repos/create, validate-yaml,
preupload, commit with base64 "regular" files, branch) and to download (model info / revision, tree, resolve
with HEAD), plus `GET /api/models` with the real Hub's filters (filter, pipeline_tag, language, author, search,
sort, limit) for `zh-bert models --community` and `--hub`. Repos live in memory as commits of {path: bytes},
with the listing's counters (downloads, likes, extra tags, pipeline_tag) settable per repo, and any field of a
repo's answer replaceable (`Repo.answer`: a `lastModified` that is no time, `siblings` that is no list). Setting
`maintenance` to a path fragment ("" for all) answers those requests as a mirror in maintenance does: status
200, a page of HTML. Every request is logged, so tests can assert what was (not) uploaded.
`export_git` writes a repo as a real git repository, which is how `olah` serves it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import contextlib
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import uvicorn
import yaml
from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

#: what a mirror (or a captive portal) in maintenance answers every request with
MAINTENANCE_PAGE = "<html>maintenance</html>"


def git_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(cmd: list[str], ready_url: str, log_path, timeout: float, **popen):
    """Run a server subprocess, wait until `ready_url` answers 200, yield the process, always stop it.
    If it exits or the time runs out first, fail with the tail of its log."""
    import subprocess
    import time

    import httpx

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, **popen)
        try:
            deadline = time.time() + timeout
            while True:
                try:
                    if httpx.get(ready_url, timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    tail = open(log_path, encoding="utf-8", errors="replace").read()[-3000:]
                    raise RuntimeError(f"{ready_url} did not come up: {tail}")
                time.sleep(0.2)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class Repo:
    owner: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict] = field(default_factory=dict)  # sha -> {"files": {path: bytes}, "parent", "message"}
    downloads: int = 0
    likes: int = 0
    tags: list[str] = field(default_factory=list)   # besides the card's tags and languages
    pipeline_tag: str | None = None                 # else the card's
    last_modified: float = 0.0                      # epoch seconds; set by each commit
    answer: dict = field(default_factory=dict)      # fields replaced in its listing row and model info

    def last_modified_iso(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(self.last_modified))

    def resolve(self, rev: str) -> str | None:
        if rev in self.branches:
            return self.branches[rev]
        return rev if rev in self.commits else None

    def files(self, rev: str) -> dict[str, bytes] | None:
        sha = self.resolve(rev)
        return None if sha is None else self.commits[sha]["files"]

    def commit(self, branch: str, files: dict[str, bytes], message: str) -> str:
        parent = self.branches.get(branch)
        sha = hashlib.sha1(f"{parent}{message}{time.time_ns()}{sorted(files)}".encode()).hexdigest()
        self.commits[sha] = {"files": files, "parent": parent, "message": message}
        self.branches[branch] = sha
        self.last_modified = time.time()
        return sha


def _rank(value, kind: type) -> tuple:
    """A listing's sort key: a value of the field's type in its order, any other (a replaced field) last."""
    good = isinstance(value, kind) and not isinstance(value, bool)
    return (good, value if good else kind())


def _err(status: int, msg: str, **headers) -> JSONResponse:
    return JSONResponse({"error": msg}, status_code=status, headers={"X-Error-Message": msg, **headers})


class HubServer:
    """`with HubServer(tokens={"tok": ("alice", ["zh-org"])}) as hub: hub.url ...`"""

    def __init__(self, tokens: dict[str, tuple[str, list[str]]] | None = None, port: int | None = None):
        self.tokens = tokens or {}
        self.repos: dict[str, Repo] = {}
        self.log: list[tuple[str, str]] = []
        self.fail_next: list[int] = []  # status codes to answer the next write requests with (transient errors)
        self.maintenance: str | None = None  # requests whose path holds it are answered with MAINTENANCE_PAGE
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = self._build()
        self._server = None
        self._thread = None

    # --- helpers -----------------------------------------------------------------------------------------
    def user(self, request: Request) -> tuple[str, list[str]] | None:
        auth = request.headers.get("authorization", "")
        return self.tokens.get(auth[7:]) if auth.startswith("Bearer ") else None

    def can_write(self, request: Request, repo_id: str) -> bool:
        u = self.user(request)
        return u is not None and repo_id.split("/")[0] in [u[0], *u[1]]

    def readable(self, request: Request, repo_id: str) -> Repo | None:
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and not self.can_write(request, repo_id)):
            return None
        return repo

    def uploaded_paths(self, repo_id: str) -> set[str]:
        """Every path ever committed to the repo, on any branch."""
        return {p for c in self.repos[repo_id].commits.values() for p in c["files"]}

    def export_git(self, repo_id: str, dest: Path, revision: str = "main") -> Path:
        """Write the repo at `revision` as a git repository (branch main) under dest."""
        dest.mkdir(parents=True, exist_ok=True)
        for path, data in self.repos[repo_id].files(revision).items():
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_bytes(data)
        env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "export"]):
            subprocess.run(cmd, cwd=dest, check=True, env=env, capture_output=True)
        return dest

    def write_guard(self, request: Request, repo_id: str, forbidden: str = "You don't have write access to this repo"):
        """The error response for a write to `repo_id` (missing repo, no rights, injected failure), or None."""
        if repo_id not in self.repos:
            return _err(404, "Repository not found", **{"X-Error-Code": "RepoNotFound"})
        if not self.can_write(request, repo_id):
            return _err(403, forbidden)
        return self._maybe_fail()

    def _maybe_fail(self):
        if self.fail_next:
            return _err(self.fail_next.pop(0), "injected transient failure")
        return None

    # --- app ---------------------------------------------------------------------------------------------
    def _build(self) -> FastAPI:
        app = FastAPI()
        hub = self

        @app.middleware("http")
        async def log(request: Request, call_next):
            hub.log.append((request.method, request.url.path))
            if hub.maintenance is not None and hub.maintenance in request.url.path:
                return HTMLResponse(MAINTENANCE_PAGE)
            return await call_next(request)

        @app.get("/api/whoami-v2")
        def whoami(request: Request):
            u = hub.user(request)
            if u is None:
                return _err(401, "Invalid credentials in Authorization header")
            return {"type": "user", "name": u[0], "orgs": [{"name": o, "type": "org"} for o in u[1]],
                    "auth": {"type": "access_token", "accessToken": {"role": "write"}}}

        @app.post("/api/validate-yaml")
        async def validate_yaml(request: Request):
            return {"errors": [], "warnings": []}

        @app.post("/api/repos/create")
        async def create(request: Request):
            body = await request.json()
            u = hub.user(request)
            if u is None:
                return _err(401, "Invalid credentials")
            repo_id = f"{body.get('organization') or u[0]}/{body['name']}"
            if (f := hub._maybe_fail()) is not None:
                return f
            if repo_id in hub.repos:
                return JSONResponse({"error": "You already created this model repo", "url": f"{hub.url}/{repo_id}"},
                                    status_code=409)
            if not hub.can_write(request, repo_id):
                return _err(403, f"You don't have the rights to create a model under the namespace "
                                 f"\"{repo_id.split('/')[0]}\"")
            repo = Repo(owner=u[0], private=body.get("visibility") == "private" or bool(body.get("private")))
            repo.commit("main", {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
                        "initial commit")
            hub.repos[repo_id] = repo
            return {"url": f"{hub.url}/{repo_id}", "name": repo_id}

        @app.post("/api/models/{ns}/{name}/branch/{branch:path}")
        async def branch(ns: str, name: str, branch: str, request: Request):
            repo_id = f"{ns}/{name}"
            if (f := hub.write_guard(request, repo_id, "forbidden")) is not None:
                return f
            repo = hub.repos[repo_id]
            if branch in repo.branches:
                return _err(409, "Reference already exists")
            body = await request.json() if await request.body() else {}
            start = repo.resolve(body.get("startingPoint", "main"))
            repo.branches[branch] = start
            return {}

        @app.post("/api/models/{ns}/{name}/preupload/{rev:path}")
        async def preupload(ns: str, name: str, rev: str, request: Request):
            repo_id = f"{ns}/{name}"
            if (f := hub.write_guard(request, repo_id)) is not None:
                return f
            body = await request.json()
            have = hub.repos[repo_id].files(rev) or {}
            return {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                               "oid": git_hash(have[f["path"]]) if f["path"] in have else None}
                              for f in body["files"]]}

        @app.post("/api/models/{ns}/{name}/commit/{rev:path}")
        async def commit(ns: str, name: str, rev: str, request: Request):
            repo_id = f"{ns}/{name}"
            if (f := hub.write_guard(request, repo_id)) is not None:
                return f
            repo = hub.repos[repo_id]
            if rev not in repo.branches:
                return _err(404, f"Invalid rev id: {rev}", **{"X-Error-Code": "RevisionNotFound"})
            files = dict(repo.files(rev))
            header = {}
            for line in (await request.body()).splitlines():
                item = json.loads(line)
                if item["key"] == "header":
                    header = item["value"]
                elif item["key"] == "file":
                    files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                elif item["key"] == "deletedFile":
                    files.pop(item["value"]["path"], None)
                else:
                    return _err(400, f"unsupported commit operation {item['key']}")
            sha = repo.commit(rev, files, header.get("summary", ""))
            return {"commitUrl": f"{hub.url}/{repo_id}/commit/{sha}", "commitOid": sha, "success": True}

        def info(request: Request, repo_id: str, rev: str, blobs: bool = False):
            repo = hub.readable(request, repo_id)
            if repo is None:
                return _err(401 if repo_id in hub.repos else 404, "Repository not found",
                            **{"X-Error-Code": "RepoNotFound"})
            sha = repo.resolve(rev)
            if sha is None:
                return _err(404, f"Invalid rev id: {rev}", **{"X-Error-Code": "RevisionNotFound"})
            files = repo.commits[sha]["files"]
            siblings = [{"rfilename": p, **({"size": len(d), "blobId": git_hash(d)} if blobs else {})}
                        for p, d in sorted(files.items())]   # sizes only with ?blobs=true, as the Hub does
            return {**hub.listed(repo_id, repo), "sha": sha, "private": repo.private, "siblings": siblings,
                    **repo.answer}

        @app.get("/api/models/{ns}/{name}/revision/{rev:path}")
        def repo_info_rev(ns: str, name: str, rev: str, request: Request, blobs: bool = False):
            return info(request, f"{ns}/{name}", rev, blobs)

        @app.get("/api/models/{ns}/{name}")
        def repo_info(ns: str, name: str, request: Request, blobs: bool = False):
            return info(request, f"{ns}/{name}", "main", blobs)

        @app.get("/api/models/{ns}/{name}/tree/{rev:path}")
        def tree(ns: str, name: str, rev: str, request: Request):
            repo = hub.readable(request, f"{ns}/{name}")
            if repo is None:
                return _err(404, "Repository not found", **{"X-Error-Code": "RepoNotFound"})
            rev = rev.split("/")[0]
            files = repo.files(rev)
            if files is None:
                return _err(404, "Revision not found", **{"X-Error-Code": "RevisionNotFound"})
            return [{"type": "file", "oid": git_hash(d), "size": len(d), "path": p} for p, d in sorted(files.items())]

        @app.api_route("/{ns}/{name}/resolve/{rev}/{path:path}", methods=["GET", "HEAD"])
        def resolve(ns: str, name: str, rev: str, path: str, request: Request):
            repo = hub.readable(request, f"{ns}/{name}")
            if repo is None:
                return _err(404, "Repository not found", **{"X-Error-Code": "RepoNotFound"})
            sha = repo.resolve(rev)
            files = repo.commits[sha]["files"] if sha else None
            if files is None or path not in files:
                return _err(404, "Entry not found", **{"X-Error-Code": "EntryNotFound"})
            data = files[path]
            headers = {"X-Repo-Commit": sha, "ETag": f'"{git_hash(data)}"', "Content-Length": str(len(data))}
            if request.method == "HEAD":
                return Response(status_code=200, headers=headers)
            return Response(content=data, headers=headers, media_type="application/octet-stream")

        @app.get("/api/models")
        def list_models(filter: Annotated[list[str] | None, Query()] = None, pipeline_tag: str | None = None,
                        language: str | None = None, author: str | None = None, search: str | None = None,
                        sort: str | None = None, limit: int | None = None):
            """Every filter must hold (a `filter` value is a tag, a language or the pipeline tag); sorted
            descending like the Hub; `search` is a case-insensitive substring of the id."""
            out = []
            for repo_id, repo in sorted(hub.repos.items()):
                if repo.private:
                    continue
                row = hub.listed(repo_id, repo)
                tags = set(row["tags"]) | {row["pipeline_tag"]}
                if (all(f in tags for f in (filter or []) + ([language] if language else []))
                        and pipeline_tag in (None, row["pipeline_tag"])
                        and author in (None, repo_id.split("/")[0])
                        and (search is None or search.lower() in repo_id.lower())):
                    out.append(row)
            if sort in ("downloads", "likes", "lastModified"):
                out.sort(key=lambda r: _rank(r.get(sort), str if sort == "lastModified" else int), reverse=True)
            return out[:limit] if limit is not None else out

        return app

    def listed(self, repo_id: str, repo: Repo) -> dict:
        """The fields of a repo that the Hub's listing returns (huggingface_hub's ModelInfo reads them)."""
        card = self.card(repo.files("main") or {})
        languages = card.get("language") or []
        languages = [languages] if isinstance(languages, str) else list(languages)
        tags = [*self.tags(repo.files("main") or {}), *map(str, languages), *repo.tags]
        return {"id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0], "tags": tags,
                "pipeline_tag": repo.pipeline_tag or card.get("pipeline_tag"), "downloads": repo.downloads,
                "likes": repo.likes, "lastModified": repo.last_modified_iso(), "private": repo.private,
                **repo.answer}

    @staticmethod
    def card(files: dict[str, bytes]) -> dict:
        """The README's metadata, {} when it has none or it is not a mapping (a hostile card is served as is)."""
        if "README.md" not in files:
            return {}
        from huggingface_hub import ModelCard

        try:
            return ModelCard(files["README.md"].decode("utf-8", "replace")).data.to_dict()
        except (ValueError, yaml.YAMLError):
            return {}

    @classmethod
    def tags(cls, files: dict[str, bytes]) -> list[str]:
        tags = cls.card(files).get("tags") or []
        return [str(t) for t in tags] if isinstance(tags, list) else [str(tags)]

    # --- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> "HubServer":
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.time() + 15
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError("hub test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@contextlib.contextmanager
def modelscope_server(files: dict[str, bytes], listing: list | None = None, asked: list[str] | None = None):
    """A fake of ModelScope's HTTP API on 127.0.0.1 serving `files`; `listing` (default: their names) is
    what the file list answers, so a test can list names a hostile server would. Any FilePath asked for
    is answered, as a hostile server would, and appended to `asked`."""
    from fastapi import FastAPI, Response

    app = FastAPI()
    names = list(files) if listing is None else listing
    asked = [] if asked is None else asked

    @app.get("/api/v1/models/{ns}/{name}/repo/files")
    def list_files(ns: str, name: str, Revision: str = "master"):
        return {"Code": 200, "Data": {"Files": [{"Path": k, "Name": k, "Type": "blob",
                                                 "Size": len(files.get(k, b""))} for k in names]}}

    @app.get("/api/v1/models/{ns}/{name}/repo")
    def get(ns: str, name: str, FilePath: str, Revision: str = "master"):
        asked.append(FilePath)
        return Response(files.get(FilePath, b"EVIL"))

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(5)
