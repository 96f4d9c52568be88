"""BOARD/index.html: the board as one self-contained static page (a sortable table, each row's details and
a score-vs-compute scatter), rendered from the same dict as board.json.

The page loads nothing from elsewhere (inline CSS, JS and SVG; system fonts), so it opens offline, from a
file or from any static host. Every string of the data is a model's or a user's: all of it is escaped, the
only links are the http(s) links the data itself holds, and the copy of the data the script reads is a JSON
island whose `<`, `>` and `&` are escaped, so a model named `</script>...` cannot end it early.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any, Callable

#: status -> (the mark after the figure, what the legend says it means)
STATUS_MARKS = {
    "verified": ("✓", "re-run here under the same protocol, within the tolerance"),
    "self-reported": ("(self)", "the model's own card or results, not re-run here"),
    "mismatch": ("≠", "re-run here and off by more than the tolerance: claimed ≠ re-run, both shown"),
}

BOARD_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", "Noto Sans CJK SC", "WenQuanYi Micro Hei", sans-serif;
       margin: 1.5rem; color: #1d1d1f; background: #fff; }
h1 { margin: 0 0 .3rem; font-size: 1.6rem; }
.meta { color: #555; margin: .2rem 0 1rem; }
.legend span { margin-right: 1.2rem; }
.wrap { overflow-x: auto; }
table.board { border-collapse: collapse; font-size: .9rem; }
table.board th, table.board td { border-bottom: 1px solid #e3e3e3; padding: .35rem .55rem; text-align: left;
                                 white-space: nowrap; vertical-align: top; }
table.board th { cursor: pointer; user-select: none; background: #f5f5f7; position: sticky; top: 0; }
table.board th:first-child, table.board td:first-child { position: sticky; left: 0; z-index: 1;
                                                         box-shadow: inset -1px 0 0 #d0d0d0; }
table.board td:first-child { background: #fff; }
table.board th:first-child { z-index: 2; }   /* the model column stays in view when the wide table scrolls */
table.board th[aria-sort="ascending"]::after { content: " ▲"; }
table.board th[aria-sort="descending"]::after { content: " ▼"; }
table.board td.num { text-align: right; font-variant-numeric: tabular-nums; }
button.name { font: inherit; font-weight: 600; background: none; border: 0; padding: 0; color: #0b57d0;
              cursor: pointer; text-align: left; }
.verified { color: #137333; }
.self-reported { color: #5f6368; font-style: italic; }
.mismatch { color: #b3261e; font-weight: 600; }
.na { color: #aaa; }
.unsafe { color: #b3261e; }
.detail { border: 1px solid #d0d0d0; border-radius: 6px; padding: .6rem 1rem; margin: 1rem 0; max-width: 60rem; }
.detail h3 { margin: .2rem 0 .5rem; }
.detail table td { padding: .1rem .8rem .1rem 0; vertical-align: top; }
.detail td:first-child { color: #555; }
code.try { background: #f1f3f4; padding: .15rem .4rem; border-radius: 4px; }
pre.raw { background: #f8f8f8; padding: .5rem; max-height: 20rem; overflow: auto; font-size: .8rem; }
svg.scatter { max-width: 100%; height: auto; font-size: 12px; }
svg.scatter .axis { stroke: #444; }
svg.scatter .grid { stroke: #e6e6e6; }
svg.scatter circle.dot { fill: #0b57d0; cursor: pointer; }
svg.scatter circle.dot.verified { fill: #137333; }
svg.scatter circle.dot.self-reported { fill: #9aa0a6; }
svg.scatter circle.dot.mismatch { fill: #b3261e; }
.unplotted { color: #555; }
.notes li { margin: .2rem 0; }
.notes .why { color: #555; }
td.noted { color: #8a5a00; }
"""

BOARD_JS = """
(function () {
  var board = JSON.parse(document.getElementById('board-data').textContent);
  var table = document.getElementById('board');
  var body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function key(tr, i, num) {
    var td = tr.cells[i];
    if (num) {
      var s = td.getAttribute('data-sort');
      return s === null || s === '' ? null : Number(s);
    }
    var t = td.textContent.trim();
    return td.classList.contains('na') || t === '' ? null : t.toLowerCase();
  }
  heads.forEach(function (th, i) {
    th.addEventListener('click', function () {
      var num = th.getAttribute('data-type') === 'num';
      var was = Number(th.getAttribute('data-dir') || 0);
      var dir = was ? -was : (num ? -1 : 1);   /* numbers: highest first; text: A to Z */
      heads.forEach(function (o) { o.removeAttribute('data-dir'); o.removeAttribute('aria-sort'); });
      th.setAttribute('data-dir', String(dir));
      th.setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, i, num), y = key(b, i, num);
        if (x === null || y === null) { return (x === null) - (y === null); }   /* missing: last */
        return dir * (num ? x - y : x.localeCompare(y, 'zh'));
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  function toggle(i) {
    var d = document.getElementById('detail-' + i);
    var show = d.hidden;
    document.querySelectorAll('.detail').forEach(function (o) { o.hidden = true; });
    d.hidden = !show;
    if (show) {
      d.querySelector('pre.raw').textContent = JSON.stringify(board.rows[i], null, 2);
      d.scrollIntoView({block: 'nearest'});
    }
  }
  document.querySelectorAll('[data-row]').forEach(function (el) {
    el.addEventListener('click', function () { toggle(Number(el.getAttribute('data-row'))); });
  });
})();
"""


def esc(value: Any) -> str:
    """Text or attribute value, escaped (quotes too); None is an empty string."""
    return "" if value is None else html.escape(str(value), quote=True)


def json_island(obj: Any) -> str:
    """JSON for a <script type="application/json">: `<`, `>` and `&` as \\u escapes, so no `</script>` or
    `<!--` in the data can end or change the element; JSON.parse reads the same strings back."""
    text = json.dumps(obj, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def safe_href(url: Any) -> str | None:
    """`url` escaped for an href when it is an http(s) address (never javascript: or data:), else None."""
    if isinstance(url, str) and url.split(":", 1)[0].lower() in ("http", "https") and "://" in url:
        return esc(url)
    return None


def link_or_text(value: Any) -> str:
    href = safe_href(value)
    return f'<a href="{href}">{href}</a>' if href else esc(value)


def human_count(n: Any) -> str:
    """1511360 -> '1.5M', 102_000_000 -> '102M' (a parameter count as people say it)."""
    if not isinstance(n, (int, float)):
        return "—"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            v = n / size
            return (f"{v:.1f}".removesuffix(".0") if v < 10 else f"{v:.0f}") + unit
    return str(n)


def sci(x: Any) -> str:
    """9.1e13 rather than 9.1e+13 or 91000000000000.0."""
    if not isinstance(x, (int, float)):
        return "—"
    mantissa, exp = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exp)}"


def fixed(x: Any, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "—"


def _num(x: Any) -> str:
    """A data-sort value: the number, or empty where it is missing (sorted last)."""
    return repr(float(x)) if isinstance(x, (int, float)) and math.isfinite(x) else ""


def _td(text: str, sort: Any = None, cls: str = "", title: str = "", numeric: bool = False) -> str:
    """A cell; `text` is already HTML. A numeric column's cells carry data-sort (a number or empty)."""
    classes = " ".join(c for c in (cls, "num" if numeric else "", "na" if text == "—" else "") if c)
    attrs = f' class="{classes}"' if classes else ""
    attrs += f' data-sort="{_num(sort)}"' if numeric else ""
    attrs += f' title="{esc(title)}"' if title else ""
    return f"<td{attrs}>{text}</td>"


def score_cell(score: dict | None) -> str:
    """'40.93 ✓' verified, '40.93 (self)' self-reported, '41.20 ≠ 38.10' (claimed ≠ re-run) mismatch."""
    if not score:
        return _td("—", numeric=True)
    status = score.get("status")
    value = score.get("value")
    if status == "mismatch":
        text = f"{fixed(score.get('claimed'))} ≠ {fixed(score.get('verified'))}"
        title = f"claimed {fixed(score.get('claimed'))}, re-run here {fixed(score.get('verified'))}"
    elif status in STATUS_MARKS:
        text, title = f"{fixed(value)} {STATUS_MARKS[status][0]}", STATUS_MARKS[status][1]
    else:
        text, title = fixed(value), f"status: {status}"
    cls = status if status in STATUS_MARKS else ""
    return _td(esc(text), value, cls=cls, title=f"{title} ({score.get('split', '')})", numeric=True)


def _vocab(row: dict) -> tuple[str, Any]:
    v = row.get("vocab") or {}
    if not v.get("kind") and v.get("size") is None:
        return "—", None
    return esc(f"{v.get('kind') or '?'} {v['size']:,}" if v.get("size") is not None else v.get("kind")), v.get("size")


def _compute(row: dict) -> tuple[str, Any]:
    c = row.get("compute") or {}
    if c.get("flops") is None and c.get("device_hours") is None:
        return "—", None
    hours = f" · {fixed(c.get('device_hours'))} h" if c.get("device_hours") is not None else ""
    device = f" {c['device']}" if c.get("device") else ""
    return esc(f"{sci(c.get('flops'))} FLOPs{hours}{device}"), c.get("flops")


def _contamination(row: dict) -> tuple[str, Any]:
    c = row.get("contamination") or {}
    shares = {k: v for k, v in c.items() if isinstance(v, (int, float))}
    if not shares:
        return "—", None
    return esc(" · ".join(f"{k} {v * 100:.2f}%" for k, v in shares.items())), max(shares.values())


def note_count(row: dict) -> int:
    """How many claims (or unread parts) the row's notes are about."""
    return sum(len(n.get("claims") or []) + (n.get("more") or 0) or 1 for n in row.get("notes") or [])


def _notes_cell(row: dict, i: int) -> str:
    n = note_count(row)
    if not n:
        return _td("—", numeric=True)
    first = (row.get("notes") or [{}])[0].get("reason", "")
    return _td(f'<button class="name" type="button" data-row="{i}">{n} not shown</button>', n, cls="noted",
               title=f"first: {first}", numeric=True)


def render_notes(row: dict) -> str:
    """A row's notes as a list: where each came from, why it is not on the board, and what it claimed."""
    items = []
    for n in row.get("notes") or []:
        claims = list(n.get("claims") or []) + ([f"and {n['more']} more"] if n.get("more") else [])
        items.append(f'<li><b>{esc(n.get("source"))}</b>: <span class="why">{esc(n.get("reason"))}</span>'
                     + (f"<br>{esc('; '.join(map(str, claims)))}" if claims else "") + "</li>")
    return f'<ul class="notes">{"".join(items)}</ul>' if items else ""


def render_all_notes(board: dict) -> str:
    """Every row's notes under the table, so nothing the models claim is hidden behind a click."""
    parts = [f"<h3>{esc(r.get('model'))}</h3>{render_notes(r)}" for r in board.get("rows", []) if r.get("notes")]
    if not parts:
        return ""
    return ('<section id="notes"><h2>Notes: what no column shows, and why</h2>' + "".join(parts) + "</section>")


#: one table column: (data-key, header text, numeric?, cell(row, index) -> <td> HTML)
Column = tuple[str, str, bool, Callable[[dict, int], str]]


def table_columns(board: dict) -> list[Column]:
    """The fixed columns around one column per board["columns"] score (its label and split in the header)."""
    def num(fn):
        return lambda r, i: _td(*fn(r), numeric=True)

    def text(field, cls=None):
        return lambda r, i: _td(esc(r.get(field)) or "—", cls=(cls(r.get(field)) if cls else ""))

    def model(r, i):
        return f'<td><button class="name" type="button" data-row="{i}">{esc(r.get("model"))}</button></td>'

    scores = [(c["key"], f"{c.get('label', c['key'])} ({c.get('split', '')})", True,
               (lambda key: lambda r, i: score_cell((r.get("scores") or {}).get(key)))(c["key"]))
              for c in board.get("columns", [])]
    return [("model", "Model", False, model),
            ("architecture", "Architecture", False, text("architecture")),
            ("params", "Params", True, lambda r, i: _td(human_count(r.get("params")), r.get("params"),
                                                         numeric=True, title=f"{r.get('params')} parameters")),
            ("vocab", "Vocab", True, num(_vocab)),
            ("chars_per_token", "Chars/token", True,
             lambda r, i: _td(fixed(r.get("chars_per_token")), r.get("chars_per_token"), numeric=True)),
            ("compute", "Compute", True, num(_compute)),
            *scores,
            ("contamination", "Contamination", True, num(_contamination)),
            ("licence", "Licence", False, text("licence")),
            ("load_safety", "Load safety", False,
             text("load_safety", lambda v: "unsafe" if v and v != "stock" else "")),
            ("notes", "Notes", True, _notes_cell)]


def render_table(board: dict) -> str:
    cols = table_columns(board)
    head = "".join(f'<th data-key="{esc(k)}" data-type="{"num" if n else "text"}" title="click to sort">'
                   f"{esc(label)}</th>" for k, label, n, _ in cols)
    rows = "\n".join(f'<tr data-model="{esc(r.get("model"))}">' + "".join(cell(r, i) for *_, cell in cols)
                     + "</tr>" for i, r in enumerate(board.get("rows", [])))
    return (f'<div class="wrap"><table class="board" id="board"><thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{rows}\n</tbody></table></div>")


def flat_fields(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested data as (dotted.key, text) rows, every leaf shown: compute.flops, scores.fewclue.claimed, ..."""
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in flat_fields(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list):
        return [(prefix, ", ".join(map(str, value)))]
    return [(prefix, "—" if value is None else str(value))]


def _field_rows(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"<tr><td>{esc(k)}</td><td>{link_or_text(v)}</td></tr>" for k, v in pairs)


def render_details(row: dict, i: int, demo_url: str | None) -> str:
    """The hidden panel a click on the row's name opens: the try command, the verification record, every field."""
    href = safe_href(demo_url)
    link = f' — <a class="demo" href="{href}">open the cloze demo</a>' if href else ""
    try_line = (f'<p>Try in the cloze demo: <code class="try">{esc(row.get("try"))}</code>{link}</p>'
                if row.get("try") else "<p>No cloze demo command for this row.</p>")
    v = row.get("verification")
    if v:
        wall = v.get("wall_s")
        ver = _field_rows([("record", v.get("record")), ("zh-bert version", v.get("zh_bert_version")),
                           ("protocol", json.dumps(v.get("protocol"), ensure_ascii=False)),
                           ("seeds", ", ".join(map(str, v.get("seeds") or [])) or "—"),
                           ("hardware", v.get("hardware")),
                           ("wall time", f"{wall:.0f} s" if isinstance(wall, (int, float)) else "—"),
                           ("date", v.get("date"))])
        verification = f"<table>{ver}</table>"
    else:
        verification = "<p>Not re-run here: the figures are the model's own.</p>"
    fields = _field_rows(flat_fields({k: x for k, x in row.items()
                                      if k not in ("model", "verification", "try", "notes")}))
    notes = render_notes(row)
    verification += f"<h4>Notes</h4>{notes}" if notes else ""
    return (f'<article class="detail" id="detail-{i}" data-model="{esc(row.get("model"))}" hidden>'
            f'<h3>{esc(row.get("model"))}</h3>{try_line}'
            f"<h4>Verification</h4>{verification}<h4>Fields</h4><table>{fields}</table>"
            f'<h4>As in board.json</h4><pre class="raw"></pre></article>')


def _ticks(lo: float, hi: float) -> list[float]:
    span = hi - lo
    step = 10 if span >= 40 else 5 if span >= 20 else 2
    return [float(t) for t in range(int(lo), int(hi) + 1, step)]


def _scatter_key(board: dict) -> dict | None:
    cols = board.get("columns") or []
    return cols[0] if cols else None     # the board's first column: the first suite's score (FewCLUE's)


def render_scatter(board: dict) -> str:
    """Inline SVG: x the training FLOPs (log scale), y the FewCLUE score, one labelled dot per row that has
    both; the rows left out are named under the plot with the reason."""
    col = _scatter_key(board)
    if col is None:
        return "<p>No score column to plot.</p>"
    label = f"{col.get('label', col['key'])} ({col.get('split', '')})"
    points, no_compute, no_score = [], [], []
    for i, r in enumerate(board.get("rows", [])):
        flops = (r.get("compute") or {}).get("flops")
        score = (r.get("scores") or {}).get(col["key"]) or {}
        if not (isinstance(flops, (int, float)) and flops > 0):
            no_compute.append(r.get("model"))
        elif not isinstance(score.get("value"), (int, float)):
            no_score.append(r.get("model"))
        else:
            points.append((i, r, math.log10(flops), float(score["value"]), score.get("status")))
    notes = "".join(f'<p class="unplotted">not plotted: {why}: {esc(", ".join(map(str, names)))}</p>'
                    for why, names in (("no compute known", no_compute), (f"no {label} score", no_score)) if names)
    if not points:
        return f"<p>No row has both a training compute and a {esc(label)} score.</p>{notes}"
    return _svg(points, label) + notes


def _svg(points: list[tuple], label: str) -> str:
    w, h, left, right, top, bottom = 760, 420, 64, 150, 20, 56
    xlo, xhi = math.floor(min(p[2] for p in points)), math.ceil(max(p[2] for p in points))
    xhi += xhi == xlo
    ylo = max(0.0, math.floor(min(p[3] for p in points) / 10) * 10)
    yhi = min(100.0, math.ceil(max(p[3] for p in points) / 10) * 10)
    yhi += 10 * (yhi <= ylo)

    def x(v):
        return left + (v - xlo) / (xhi - xlo) * (w - left - right)

    def y(v):
        return h - bottom - (v - ylo) / (yhi - ylo) * (h - top - bottom)

    step = max(1, math.ceil((xhi - xlo) / 8))
    parts = [f'<line class="axis" x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}"/>',
             f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}"/>']
    for d in range(xlo, xhi + 1, step):
        parts.append(f'<line class="grid" x1="{x(d):.1f}" y1="{top}" x2="{x(d):.1f}" y2="{h - bottom}"/>'
                     f'<text class="tick" x="{x(d):.1f}" y="{h - bottom + 16}" text-anchor="middle">1e{d}</text>')
    for t in _ticks(ylo, yhi):
        parts.append(f'<line class="grid" x1="{left}" y1="{y(t):.1f}" x2="{w - right}" y2="{y(t):.1f}"/>'
                     f'<text class="tick" x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    parts.append(f'<text x="{(left + w - right) / 2:.0f}" y="{h - 14}" text-anchor="middle">'
                 f"training compute (FLOPs, log scale)</text>"
                 f'<text transform="translate(16 {(top + h - bottom) / 2:.0f}) rotate(-90)" text-anchor="middle">'
                 f"{esc(label)}</text>")
    for i, r, lx, v, status in points:
        cls = f"dot {status}" if status in STATUS_MARKS else "dot"
        name = esc(r.get("model"))
        parts.append(f'<circle class="{cls}" data-row="{i}" data-model="{name}" cx="{x(lx):.1f}" cy="{y(v):.1f}" '
                     f'r="5"><title>{name}: {v:.2f} at {sci(10 ** lx)} FLOPs</title></circle>'
                     f'<text class="label" x="{x(lx) + 8:.1f}" y="{y(v) - 7:.1f}">{name}</text>')
    return (f'<svg class="scatter" id="scatter" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'aria-label="{esc(label)} against training compute">{"".join(parts)}</svg>')


def render_header(board: dict) -> str:
    """The title, the protocols, the tolerance and the reference text chars/token is measured on, the legend."""
    protocols = ", ".join(f"{k} {v}" for k, v in (board.get("protocols") or {}).items()) or "—"
    ref = board.get("reference_text") or {}
    chars = ref.get("chars")
    name = str(ref.get("name", "—"))
    ref_text = f"{name} ({chars:,} characters)" if isinstance(chars, int) and "characters" not in name else name
    tol = board.get("tolerance")
    legend = "".join(f'<span class="{cls}">{esc(mark)} {esc(cls)}: {esc(meaning)}</span>'
                     for cls, (mark, meaning) in STATUS_MARKS.items())
    return (f"<h1>zh-bert leaderboard</h1>"
            f'<p class="meta">Protocols: {esc(protocols)} · tolerance ±{esc(tol)} points · chars/token measured on '
            f"{esc(ref_text)} · {esc(board.get('generated_by'))}</p>"
            f'<p class="legend">{legend}</p>')


def render_html(board: dict, *, demo_url: str | None = None) -> str:
    """The whole page for `board` (a board.json dict); `demo_url`: where the cloze demo runs, linked from
    each row's details."""
    details = "\n".join(render_details(r, i, demo_url) for i, r in enumerate(board.get("rows", [])))
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>zh-bert leaderboard</title><style>{BOARD_CSS}</style></head>\n<body>\n"
            f"{render_header(board)}\n{render_table(board)}\n"
            f'<p class="hint">Click a column to sort (again to reverse); click a model for its details.</p>\n'
            f"{render_all_notes(board)}\n"
            f'<section id="details">\n{details}\n</section>\n'
            f'<h2>Score against training compute</h2>\n{render_scatter(board)}\n'
            f'<script type="application/json" id="board-data">{json_island(board)}</script>\n'
            f"<script>{BOARD_JS}</script>\n</body></html>\n")
