"""`zh-bert leaderboard serve` and BOARD/index.html: the server hands out the board's own files and nothing
beside them; the page, opened in a real headless Chromium, renders every row, sorts by a clicked column, opens a
row's details with its demo link, and shows a model named `<script>...` as text (no script of the data runs)."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from _board_helpers import BAD_LICENCE, SCRIPT_NAME, planted_board
from zh_bert.cli import main
from zh_bert.leaderboard.html import render_html
from zh_bert.leaderboard.serve import PAGE_POLICY, board_file, serve_board

DEMO_URL = "http://127.0.0.1:7860/"


EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "example_board"


def test_the_example_board_is_a_board_and_its_page_is_rendered_from_it():
    """docs/example_board (rebuilt by `python tests/board_example.py`): the main command's checkpoint with its
    random-init row, and planted rows that say they are planted; the page is exactly what render_html makes."""
    board = json.loads((EXAMPLE / "board.json").read_text(encoding="utf-8"))
    assert board["schema"] == "zh-bert-board/1"
    names = [r["model"] for r in board["rows"]]
    assert names[:2] == ["tiny-cpu", "tiny-cpu (random init)"]
    assert all("planted" in n or "published" in n for n in names[2:]) and len(names) >= 5
    assert (EXAMPLE / "index.html").read_text(encoding="utf-8") == render_html(board)
    statuses = {s["status"] for r in board["rows"] for s in r["scores"].values()}
    assert statuses == {"verified", "self-reported", "mismatch"}
    assert {r["load_safety"] for r in board["rows"]} == {"stock", "needs trust_remote_code"}


def write_board(folder: Path, board: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "board.json").write_text(json.dumps(board, ensure_ascii=False), encoding="utf-8")
    (folder / "index.html").write_text(render_html(board), encoding="utf-8")
    (folder / "board.md").write_text("# board\n", encoding="utf-8")
    return folder


@pytest.fixture
def served(tmp_path):
    """A planted board served by `serve` on a free port of 127.0.0.1 (a secret file beside BOARD/ and a link
    out of it, which must never be served); yields (base URL, board dir)."""
    board_dir = write_board(tmp_path / "board", planted_board())
    (tmp_path / "secret.txt").write_text("not the board's")
    (board_dir / ".hidden").write_text("hidden")
    os.symlink(tmp_path / "secret.txt", board_dir / "link.txt")
    started = threading.Event()
    holder = {}

    def ready(server):
        holder["server"] = server
        started.set()

    t = threading.Thread(target=serve_board, args=(board_dir,), kwargs={"port": 0, "demo_url": DEMO_URL, "ready": ready},
                         daemon=True)
    t.start()
    assert started.wait(10)
    host, port = holder["server"].server_address[:2]
    yield f"http://{host}:{port}", board_dir
    holder["server"].shutdown()
    t.join(10)


def get(url: str) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), b""


def test_the_server_hands_out_the_boards_files_and_nothing_beside_them(served):
    base, board_dir = served
    status, headers, body = get(base + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert headers["Content-Security-Policy"] == PAGE_POLICY and b"zh-bert leaderboard" in body
    assert DEMO_URL.encode() in body          # --demo-url: the page is rendered again with the link
    status, _, body = get(base + "/board.json")
    assert status == 200 and json.loads(body)["schema"] == "zh-bert-board/1"
    for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/.hidden", "/link.txt", "/missing.html", "/sub/",
                 "/..%2fsecret.txt"):
        assert get(base + path)[0] == 404, path
    assert board_file(board_dir, "/") == (board_dir / "index.html").resolve()


def test_every_string_of_the_data_is_escaped_in_the_page():
    page = render_html(planted_board(), demo_url=DEMO_URL)
    assert SCRIPT_NAME not in page and BAD_LICENCE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    island = page.split('id="board-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in island and json.loads(island)["rows"][3]["model"] == SCRIPT_NAME
    assert render_html(planted_board(), demo_url="javascript:alert(1)").count("javascript:") == 0


@pytest.mark.parametrize("argv, message", [
    (["BOARD_MISSING"], "no board.json"),
    (["NOT_A_BOARD"], "not a leaderboard"),
    (["GOOD", "--demo-url", "javascript:alert(1)"], "expected an http(s) address"),
])
def test_serve_refuses_bad_input_in_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "NOT_A_BOARD").mkdir()
    (tmp_path / "NOT_A_BOARD" / "board.json").write_text('{"schema": "something-else"}')
    write_board(tmp_path / "GOOD", planted_board())
    argv = [str(tmp_path / a) if a.isupper() and "_" in a or a == "GOOD" else a for a in argv]
    assert main(["leaderboard", "serve", *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def column_values(page, key: str) -> list[str]:
    i = page.locator("#board thead th").evaluate_all(
        f"(ths) => ths.findIndex((th) => th.dataset.key === {json.dumps(key)})")
    return page.locator(f"#board tbody tr td:nth-child({i + 1})").all_inner_texts()


@pytest.mark.slow
@pytest.mark.browser
def test_the_board_in_a_browser_renders_sorts_and_opens_details(browser, served, output_dir):
    base, _ = served
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs, errors = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(base + "/", wait_until="load")
    names = page.locator("#board tbody button.name").all_inner_texts()
    assert names == ["tiny-cpu", "bert-base-chinese", "macbert-mini", SCRIPT_NAME]   # the markup as text
    assert page.locator("#board tbody tr td", has_text=BAD_LICENCE).count() == 1
    assert page.locator("#scatter circle.dot").count() == 3                             # rows with a compute

    head = page.locator('#board thead th[data-key="fewclue"]')
    head.click()                                                     # numbers: highest first
    assert column_values(page, "model") == ["bert-base-chinese", "tiny-cpu", "macbert-mini", SCRIPT_NAME]
    assert head.get_attribute("aria-sort") == "descending"
    assert column_values(page, "fewclue")[0] == "52.10 (self)"
    assert column_values(page, "fewclue")[2] == "41.20 ≠ 38.10"
    head.click()                                                     # again: reversed
    assert column_values(page, "model") == [SCRIPT_NAME, "macbert-mini", "tiny-cpu", "bert-base-chinese"]
    page.locator('#board thead th[data-key="model"]').click()      # text: A to Z
    assert column_values(page, "model")[0] == SCRIPT_NAME            # "<" sorts before letters
    page.screenshot(path=str(output_dir / "leaderboard.png"), full_page=True)

    page.set_viewport_size({"width": 520, "height": 1000})           # the wide board scrolls sideways ...
    wrap, first = page.locator(".wrap"), page.locator("#board tbody tr").first.locator("td").first
    left = wrap.bounding_box()["x"]
    last = page.locator("#board tbody tr").first.locator("td").last
    wrap.evaluate("w => { w.scrollLeft = w.scrollWidth; }")
    assert wrap.evaluate("w => w.scrollLeft") > 0 and last.bounding_box()["x"] < 520
    assert abs(first.bounding_box()["x"] - left) < 1 and first.is_visible()   # ... and the model column stays
    assert page.evaluate("([x, y]) => document.elementFromPoint(x, y).closest('td') === null ? '' : "
                         "document.elementFromPoint(x, y).closest('td').cellIndex", [left + 5,
                         first.bounding_box()["y"] + 5]) == 0                     # drawn over the scrolled cells
    page.screenshot(path=str(output_dir / "leaderboard_scrolled.png"), full_page=False)
    wrap.evaluate("w => { w.scrollLeft = 0; }")
    page.set_viewport_size({"width": 1400, "height": 1000})

    page.locator("#board tbody button.name", has_text="tiny-cpu").click()
    detail = page.locator("#detail-0")
    assert detail.is_visible() and "zh-bert demo runs/tiny-cpu" in detail.inner_text()
    assert detail.locator("a.demo").get_attribute("href") == DEMO_URL
    assert json.loads(detail.locator("pre.raw").inner_text())["scores"]["fewclue"]["status"] == "verified"
    page.locator("#board tbody button.name", has_text="alert").click()
    assert page.locator("#detail-3").is_visible() and not detail.is_visible()
    assert SCRIPT_NAME in page.locator("#detail-3 h3").inner_text()
    page.screenshot(path=str(output_dir / "leaderboard_details.png"), full_page=True)
    assert dialogs == [] and errors == []
    page.close()
