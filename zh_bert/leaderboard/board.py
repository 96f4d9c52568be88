"""`zh-bert leaderboard build SOURCES... -o BOARD/`: one row per model, each score cell verified, self-reported
or mismatch, beside what a score alone hides: size, tokenizer fairness, pretraining compute, contamination,
licence and whether loading it would run the repo's code.

Written as BOARD/board.json (the data, schema-versioned), board.md and index.html (rendered from that data).
"""

from __future__ import annotations

from importlib.metadata import version
import hashlib
import math
from pathlib import Path

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import MANIFEST, RUN_RECIPE, RUN_SUMMARY, Record, atomic_dir, claim_dir, read_text, write_json, write_text
from zh_bert.corpus.benchmark_text import suite_tasks
from zh_bert.corpus.task_registry import suites
from zh_bert.evaluation.commands.contamination import ContaminationArgs, contamination
from zh_bert.leaderboard.html import render_html
from zh_bert.leaderboard.record import TOLERANCE, cell, columns, group_notes, sort_entries
from zh_bert.leaderboard.sources import Model, gather, note
from zh_bert.train.arch import of_config

SCHEMA = "zh-bert-board/1"
BOARD_FILES = ("board.json", "board.md", "index.html")
#: tokenizer fairness: characters per token on one fixed real text (a model whose tokenizer splits Chinese
#: finer pays more tokens, and attention cost, for the same text)
REFERENCE_TEXT = Path(__file__).resolve().parents[2] / "corpora" / "sample" / "zhwiki_sampled.txt"
REFERENCE_CHARS = 20_000


def reference_text() -> tuple[str, dict]:
    text = read_text(REFERENCE_TEXT)[:REFERENCE_CHARS]
    return text, {"name": f"corpora/sample/{REFERENCE_TEXT.name} (first {REFERENCE_CHARS:,} characters)",
                  "sha256": hashlib.sha256(text.encode()).hexdigest(), "chars": len(text)}


def chars_per_token(folder: Path | None, safety: str, text: str) -> float | None:
    """Characters of `text` per token of the model's own tokenizer (no special tokens); None when there is no
    tokenizer, or it is custom code (never run)."""
    if folder is None or safety != "stock" or not any((folder / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
        return None
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()   # "longer than the maximum length" is expected: nothing runs the model
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    n = sum(len(ids) for ids in tok(lines, add_special_tokens=False)["input_ids"])
    return round(sum(map(len, lines)) / n, 3) if n else None


def compute_of(m: Model) -> dict | None:
    """Pretraining compute from a zh-bert run.json: tokens seen, training FLOPs (the architecture's own count
    per token at the run's sequence length and mask rate), device-hours. A local run.json is zh-bert's own
    file (a wrong field is one line); a Hub repo's is a stranger's (a wrong field is a note, compute blank)."""
    if not m.run:
        return None
    try:
        return _compute_of_run(Record(m.run, m.run_where), m)
    except ZhBertError as e:
        if m.kind != "hub":
            raise
        m.notes.append(note(RUN_SUMMARY, f"compute not shown: {str(e).removeprefix(m.run_where + ': ')}"))
        return None


def _compute_of_run(run: Record, m: Model) -> dict | None:
    tokens = run.integer("tokens_seen", None, lo=0, hi=10**18)
    if tokens is None:
        return None
    hw, batch, masking = run.raw("hardware"), run.record("batch", None), run.record("masking", None)
    hw = run.record("hardware") if isinstance(hw, dict) else None
    seq_len = batch.integer("seq_len", None, lo=1, hi=1 << 20) if batch is not None else None
    mask_rate = masking.number("mask_rate", None, lo=0, hi=1) if masking is not None else None
    processes = hw.integer("processes", None, lo=1, hi=1 << 20) if hw is not None else None
    device = (hw.text("device_name", None, 200) or hw.text("device", None, 200)) if hw is not None else \
        run.text("hardware", None, 200)
    seconds = run.number("train_seconds", None, lo=0)
    seconds = run.number("wall_clock_s", None, lo=0) if seconds is None else seconds
    flops = None
    if m.folder is not None and (m.folder / "config.json").is_file() and m.facts.get("load_safety") == "stock":
        from transformers import AutoConfig

        try:
            cfg = AutoConfig.from_pretrained(str(m.folder), trust_remote_code=False)
            per_token = of_config(cfg).flops_per_token(cfg, seq_len or 128, mask_rate or 0.15)
            flops = float(f"{per_token * tokens:.3g}")
        except (ZhBertError, ValueError, KeyError, OSError, TypeError):
            flops = None
    hours = round(seconds * (processes or 1) / 3600, 3) if seconds is not None else None
    return {"tokens": tokens, "flops": flops, "device_hours": hours, "device": device}


def contamination_of(m: Model) -> dict | None:
    """Share of each suite's test examples whose text is in the run's pretraining corpus, when it is here: a
    local run's own corpus only (a Hub repo's run.json names paths of another machine)."""
    if m.kind != "run" or not m.run:
        return None
    vocab = Record(m.run, m.run_where).record("vocab", None)
    meta = vocab.record("meta", None) if vocab is not None else None
    corpus = meta.texts("corpus", None) if meta is not None else None
    files = [c for c in corpus or [] if Path(c).is_file()]
    if not files:
        return None
    res = contamination(ContaminationArgs(corpus=files, suite="all"))
    out = {}
    for suite in suites():
        tasks = [res["tasks"][key] for key in suite_tasks(suite.name) if key in res["tasks"]]
        total = sum(t["examples"] for t in tasks)
        out[suite.name] = round(sum(t["contaminated"] for t in tasks) / total, 5) if total else None
    return out


def _verification(records: list[tuple[str, dict]]) -> dict | None:
    if not records:
        return None
    where, rec = records[-1]
    return {"record": where, **{k: rec.get(k) for k in ("zh_bert_version", "protocols", "seeds", "hardware",
                                                         "wall_s", "date", "command")}}


def scores_and_notes(m: Model, tolerance: float) -> tuple[dict, list[dict]]:
    """The row's cells (claims against re-runs) and its notes: every claim or re-run figure not placed in a
    column, and every part of the model's files that could not be read, each with the reason."""
    claimed, notes = sort_entries(m.claims, m.claims_from)
    verified: dict[str, float] = {}
    for where, rec in m.records:             # the newest record of a column wins
        figures, unplaced = sort_entries(rec["entries"], f"verification record {Path(where).name}")
        verified.update(figures)
        notes += unplaced
    scores = {c.key: cell(claimed.get(c.key), verified.get(c.key), c.split, tolerance) for c in columns()
              if c.key in claimed or c.key in verified}
    return scores, notes


def row_of(m: Model, text: str, tolerance: float, with_contamination: bool = True) -> dict:
    scores, notes = scores_and_notes(m, tolerance)
    f = m.facts
    safety = f.get("load_safety") or "stock"
    compute = compute_of(m)
    return {"model": m.name, "source": m.source, "kind": m.kind, "architecture": f.get("architecture"),
            "params": f.get("params"), "layers": f.get("layers"), "hidden": f.get("hidden"),
            "vocab": {"kind": f.get("vocab_kind"), "size": f.get("vocab_size")},
            "chars_per_token": chars_per_token(m.folder, safety, text), "compute": compute,
            "contamination": contamination_of(m) if with_contamination else None,
            "licence": f.get("licence"), "load_safety": safety, "scores": scores,
            "verification": _verification(m.records), "notes": group_notes(m.notes + notes),
            "try": f"zh-bert demo {m.source.removeprefix('hub:')}"}


def build_board(sources: list[str], endpoint: str | None = None, tolerance: float = TOLERANCE,
                with_contamination: bool = True, log=print) -> dict:
    if not sources:
        raise ZhBertError("leaderboard build: give at least one SOURCE (a run, a model folder, a verification "
                          "record, a catalog alias or a Hub id)")
    if not (0 <= tolerance < 100) or math.isnan(tolerance):
        raise ZhBertError(f"--tolerance must be in [0, 100) points, got {tolerance}")
    text, ref = reference_text()
    with gather(sources, endpoint, log) as models:
        rows = [row_of(m, text, tolerance, with_contamination) for m in models]
    return {"schema": SCHEMA, "generated_by": "zh-bert " + version("zh-bert"), "protocols": {s.name: s.protocol for s in suites()},
            "tolerance": tolerance, "reference_text": ref,
            "columns": [{"key": c.key, "label": c.label, "split": c.split, "unit": "%"} for c in columns()],
            "rows": rows}


# --------------------------------------------------------------------------------------- board.md

MARK = {"verified": "✓", "self-reported": "(self)", "mismatch": "≠"}


def _md_cell(s: dict | None) -> str:
    if not s:
        return ""
    if s["status"] == "mismatch":
        return f"{s['claimed']:.2f} ≠ {s['verified']:.2f}"
    return f"{s['value']:.2f} {MARK[s['status']]}"


def _md_escape(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _human(n) -> str:
    if not isinstance(n, (int, float)):
        return ""
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def board_markdown(board: dict) -> str:
    shown = [c for c in board["columns"] if any(c["key"] in r["scores"] for r in board["rows"])]
    head = ["model", "arch", "params", "vocab", "chars/token", "train FLOPs", "load"] + \
        [f"{c['label']} ({c['split']})" for c in shown] + ["licence"]
    lines = [f"# Chinese encoder board ({board['generated_by']})", "",
             f"Protocols: {', '.join(f'{k} {v}' for k, v in board['protocols'].items())}; a claim is verified when "
             f"a re-run here is within {board['tolerance']} points. ✓ verified, (self) self-reported, "
             f"≠ mismatch (claimed ≠ re-run). Characters per token on {board['reference_text']['name']}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in board["rows"]:
        comp = r["compute"] or {}
        vocab = " ".join(str(v) for v in (r["vocab"].get("kind"), r["vocab"].get("size")) if v is not None)
        cells = [r["model"], r["architecture"], _human(r["params"]), vocab, r["chars_per_token"],
                 f"{comp['flops']:.2g}" if comp.get("flops") else "", r["load_safety"]]
        cells += [_md_cell(r["scores"].get(c["key"])) for c in shown] + [r["licence"]]
        lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    return "\n".join(lines + notes_markdown(board)) + "\n"


def notes_markdown(board: dict) -> list[str]:
    """## Notes: per model, each claim or file part the board did not show, with the reason."""
    lines = []
    for r in board["rows"]:
        for n in r.get("notes") or []:
            claims = "; ".join(n["claims"]) + (f"; and {n['more']} more" if n.get("more") else "")
            lines.append(f"- **{_md_escape(r['model'])}** ({_md_escape(n['source'])}): {_md_escape(n['reason'])}"
                         + (f" — {_md_escape(claims)}" if claims else ""))
    return ["", "## Notes", "", "What the models claim or hold that no column shows, and why.", ""] + lines \
        if lines else []


#: a file that makes its folder something a board must never be written into, nor beside (a new -o inside it
#: would be an entry the folder's own writer does not know, and `--force` of that writer would refuse it)
FOLDER_MARKS = ((RUN_SUMMARY, "a run dir"), (RUN_RECIPE, "a run dir"), ("config.json", "a model folder"),
                ("trainer_state.json", "a checkpoint"), ("zh_bert_vocab.json", "a tokenizer folder"),
                ("vocab.txt", "a tokenizer folder"), ("tokenizer.json", "a tokenizer folder"),
                ("tokenizer_config.json", "a tokenizer folder"), ("spiece.model", "a tokenizer folder"),
                ("meta.json", "a shard dir"), (".zh-bert-download.json", "a downloaded model"),
                (".zh-bert/job.json", "a clean output folder"))


def folder_kind(path: Path) -> str | None:
    """'a model folder (config.json)' when `path` is a folder some zh-bert stage writes (or reads as an
    input), else None."""
    if not path.is_dir():
        return None
    return next((f"{what} ({name})" for name, what in FOLDER_MARKS if (path / name).exists()), None)


def claim_board(out: str | Path, sources: list[str]) -> None:
    """Before any work: BOARD/ is replaced as a whole, so it must be new, empty or a board zh-bert wrote (its
    three files and nothing else), none of the sources, and neither a model, tokenizer, run, checkpoint or
    shard folder nor inside one."""
    out = Path(out)
    real = out.resolve()
    kind = folder_kind(real)
    if kind:
        raise ZhBertError(f"-o {out}: is {kind}, not a board; refusing to write a board into it (give a new "
                          f"folder for the board)")
    for above in real.parents:      # at any depth: `-o MODEL/a/b` makes a/b inside the model folder too
        parent_kind = folder_kind(above)
        if parent_kind:
            raise ZhBertError(f"-o {out}: inside {above}, which is {parent_kind}; refusing to add a board to it "
                              f"(give a folder outside it)")
    if real.is_dir() and not out.is_symlink():
        other = sorted(p.name for p in real.iterdir() if p.name not in (*BOARD_FILES, MANIFEST) or not p.is_file())
        if other:
            raise ZhBertError(f"-o {out}: exists and is not a board zh-bert leaderboard build wrote (it holds "
                              f"{', '.join(other[:3])}{' and more' if len(other) > 3 else ''}); refusing to "
                              f"overwrite it")
    claim_dir(out, inputs=[s for s in sources if Path(s).exists()], flag="-o",
              what="a board zh-bert leaderboard build wrote")


def write_board(board: dict, out: str | Path) -> Path:
    with atomic_dir(out, overwrite=True) as tmp:
        write_json(tmp / "board.json", board)
        write_text(tmp / "board.md", board_markdown(board))
        write_text(tmp / "index.html", render_html(board))
    return Path(out)
