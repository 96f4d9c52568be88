"""`zh-bert leaderboard serve BOARD`: the board's folder (index.html, board.json, board.md) over HTTP.

The standard library's threading server and nothing else: a file is served only when it resolves to a
regular file inside BOARD/ (no `..`, no hidden files, no symlink out, no directory listing), so pointing it
at a folder cannot expose what lies beside it. With `--demo-url` the page is rendered again from board.json
in memory, so its "try in the cloze demo" entries link to a running demo without rewriting BOARD/.
"""

from __future__ import annotations

import mimetypes
import socket
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import unquote, urlsplit

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json
from zh_bert.core.options import Shared
from zh_bert.leaderboard.html import render_html, safe_href

BOARD_SCHEMA = "zh-bert-board/1"
#: what the served files are; anything else inside BOARD/ goes out as bytes
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json; charset=utf-8",
                 ".md": "text/markdown; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
#: the page needs nothing from elsewhere: a script that slipped in could still not load or send anything
PAGE_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
               "base-uri 'none'; form-action 'none'")


@dataclass
class ServeArgs:
    board: str = option(positional=True, metavar="BOARD",
                        help="the folder `zh-bert leaderboard build -o` wrote (index.html, board.json, board.md)")
    host: str = option_of(Shared, "host")
    port: int = option_of(Shared, "port", default=8765)
    demo_url: Optional[str] = option(None, metavar="URL",
                                     help="address of a running `zh-bert demo`, linked from each row's details")


def load_board(board_dir: Path) -> dict:
    """BOARD/board.json, checked to be a board (one line otherwise) before anything is served."""
    path = Path(board_dir) / "board.json"
    if not path.is_file():
        raise ZhBertError(f"{board_dir}: no board.json; build one with `zh-bert leaderboard build`")
    board = read_json(path)
    if not isinstance(board, dict) or board.get("schema") != BOARD_SCHEMA or not isinstance(board.get("rows"), list):
        found = board.get("schema") if isinstance(board, dict) else type(board).__name__
        raise ZhBertError(f"{path}: not a leaderboard (schema {found!r}, expected {BOARD_SCHEMA!r}); "
                          f"build one with `zh-bert leaderboard build`")
    return board


def board_file(board_dir: Path, url_path: str) -> Path | None:
    """The file under `board_dir` that `url_path` names ('/' is index.html), or None: a `..` or hidden
    segment, a folder, a missing file, or a link that resolves outside the board."""
    parts = [p for p in unquote(urlsplit(url_path).path).split("/") if p]
    if any(p.startswith(".") or "\\" in p or "\0" in p for p in parts):
        return None
    root = Path(board_dir).resolve()
    try:
        path = (root / "/".join(parts or ["index.html"])).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return path if path.is_relative_to(root) and path.is_file() else None


class BoardHandler(BaseHTTPRequestHandler):
    """GET/HEAD of the board's files; everything else is 404 (or 501 for other methods)."""

    server_version = "zh-bert-leaderboard"

    def do_GET(self):
        self._answer(send_body=True)

    def do_HEAD(self):
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        index = self.server.index_page
        path = board_file(self.server.board_dir, self.path)
        if index is not None and urlsplit(self.path).path in ("/", "/index.html"):
            body, ctype = index, CONTENT_TYPES[".html"]
        elif path is None:
            self.send_error(404, "not found")
            return
        else:
            body = path.read_bytes()
            ctype = CONTENT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-cache")
        if ctype.startswith("text/html"):
            self.send_header("Content-Security-Policy", PAGE_POLICY)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format, *args):   # quiet: the terminal shows the address, not every request
        pass


def _bind(host: str, port: int) -> ThreadingHTTPServer:
    try:
        return ThreadingHTTPServer((host, port), BoardHandler)
    except socket.gaierror as e:
        raise ZhBertError(f"--host {host}: cannot resolve it ({e.strerror or e})") from None
    except OSError as e:
        raise ZhBertError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror or e}); is another "
                          f"server using it? Choose another --port") from None


def serve_board(board_dir: Path, host: str = "127.0.0.1", port: int = 8765, demo_url: str | None = None,
          ready: Callable[[ThreadingHTTPServer], None] | None = None) -> None:
    """Serve `board_dir` until the server is shut down (`ready(server)` is called once it listens: the
    caller learns the port, e.g. of port=0, and can call `server.shutdown()` from another thread)."""
    board_dir = Path(board_dir)
    board = load_board(board_dir)
    if demo_url is not None and safe_href(demo_url) is None:
        raise ZhBertError(f"--demo-url {demo_url!r}: expected an http(s) address, e.g. http://127.0.0.1:7860/")
    if not 0 <= port <= 65535:
        raise ZhBertError(f"--port: must be between 0 and 65535, got {port}")
    has_index = (board_dir / "index.html").is_file()
    index = render_html(board, demo_url=demo_url).encode() if demo_url or not has_index else None
    server = _bind(host, port)
    server.board_dir, server.index_page = board_dir, index
    try:
        if ready is not None:
            ready(server)
        server.serve_forever()
    finally:
        server.server_close()


def serve_command(args: ServeArgs) -> int:
    """`zh-bert leaderboard serve`: say where the board is, then serve until Ctrl-C."""
    def announce(server: ThreadingHTTPServer) -> None:
        host, port = server.server_address[:2]
        print(f"serving {args.board} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)

    try:
        serve_board(Path(args.board), args.host, args.port, args.demo_url, ready=announce)
    except KeyboardInterrupt:
        pass
    return 0
