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
from zh_bert.core.fileio import atomic_dir, claim_dir, read_text, write_json, write_text
from zh_bert.evaluation.contamination_report import ContaminationArgs, contamination
from zh_bert.evaluation.suite import PROTOCOLS
from zh_bert.leaderboard.html import render_html
from zh_bert.leaderboard.record import COLUMNS, TOLERANCE, cell, scores_of
from zh_bert.leaderboard.sources import Model, gather
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
    per token at the run's sequence length and mask rate), device-hours."""
    run = m.run
    if not run or not isinstance(run.get("tokens_seen"), (int, float)):
        return None
    hw, batch, masking = run.get("hardware") or {}, run.get("batch") or {}, run.get("masking") or {}
    flops = None
    if m.folder is not None and (m.folder / "config.json").is_file() and m.facts.get("load_safety") == "stock":
        from transformers import AutoConfig

        try:
            cfg = AutoConfig.from_pretrained(str(m.folder), trust_remote_code=False)
            per_token = of_config(cfg).flops_per_token(cfg, int(batch.get("seq_len") or 128),
                                                       float(masking.get("mask_rate") or 0.15))
            flops = float(f"{per_token * run['tokens_seen']:.3g}")
        except (ZhBertError, ValueError, KeyError, OSError):
            flops = None
    seconds = run.get("train_seconds") or run.get("wall_clock_s")
    hours = round(seconds * int(hw.get("processes") or 1) / 3600, 3) if isinstance(seconds, (int, float)) else None
    return {"tokens": int(run["tokens_seen"]), "flops": flops, "device_hours": hours,
            "device": hw.get("device_name") or hw.get("device")}


def contamination_of(m: Model) -> dict | None:
    """Share of each suite's test examples whose text is in the run's pretraining corpus, when it is here."""
    corpus = ((m.run or {}).get("vocab") or {}).get("meta", {}).get("corpus") or []
    files = [c for c in corpus if Path(c).is_file()]
    if not files:
        return None
    res = contamination(ContaminationArgs(corpus=files, suite="all"))
    out = {}
    for suite in PROTOCOLS:
        tasks = [t for name, t in res["tasks"].items() if name.split("/")[0] == suite]
        total = sum(t["examples"] for t in tasks)
        out[suite] = round(sum(t["contaminated"] for t in tasks) / total, 5) if total else None
    return out


def _verification(records: list[tuple[str, dict]]) -> dict | None:
    if not records:
        return None
    where, rec = records[-1]
    return {"record": where, **{k: rec.get(k) for k in ("zh_bert_version", "protocols", "seeds", "hardware",
                                                         "wall_s", "date", "command")}}


def row_of(m: Model, text: str, tolerance: float, with_contamination: bool = True) -> dict:
    claimed = scores_of(m.claims)
    verified: dict[str, float] = {}
    for _, rec in m.records:                 # the newest record of a column wins
        verified.update(scores_of(rec["entries"]))
    scores = {c.key: cell(claimed.get(c.key), verified.get(c.key), c.split, tolerance) for c in COLUMNS
              if c.key in claimed or c.key in verified}
    f = m.facts
    safety = f.get("load_safety") or "stock"
    return {"model": m.name, "source": m.source, "kind": m.kind, "architecture": f.get("architecture"),
            "params": f.get("params"), "layers": f.get("layers"), "hidden": f.get("hidden"),
            "vocab": {"kind": f.get("vocab_kind"), "size": f.get("vocab_size")},
            "chars_per_token": chars_per_token(m.folder, safety, text), "compute": compute_of(m),
            "contamination": contamination_of(m) if with_contamination else None,
            "licence": f.get("licence"), "load_safety": safety, "scores": scores,
            "verification": _verification(m.records), "try": f"zh-bert demo {m.source.removeprefix('hub:')}"}


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
    return {"schema": SCHEMA, "generated_by": "zh-bert " + version("zh-bert"), "protocols": dict(PROTOCOLS),
            "tolerance": tolerance, "reference_text": ref,
            "columns": [{"key": c.key, "label": c.label, "split": c.split, "unit": "%"} for c in COLUMNS],
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
    return "\n".join(lines) + "\n"


def claim_board(out: str | Path, sources: list[str]) -> None:
    """Before any work: BOARD/ is replaced as a whole, so it must be new, empty or a board zh-bert wrote, and
    none of the sources."""
    claim_dir(out, inputs=[s for s in sources if Path(s).exists()], flag="-o",
              what="a board zh-bert leaderboard build wrote")


def write_board(board: dict, out: str | Path) -> Path:
    with atomic_dir(out, overwrite=True) as tmp:
        write_json(tmp / "board.json", board)
        write_text(tmp / "board.md", board_markdown(board))
        write_text(tmp / "index.html", render_html(board))
    return Path(out)
