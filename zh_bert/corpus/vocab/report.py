"""`zh-bert vocab report`: how a tokenizer dir handles real text, so vocabularies are compared before any
GPU time is spent: vocab size, UNK rate, characters per token, character coverage, the top UNK characters."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_json, read_object
from zh_bert.core.options import Shared
from zh_bert.corpus.corpus_io import read_documents
from zh_bert.corpus.tokenizer_files import load_tokenizer


@dataclass
class ReportConfig:
    """`zh-bert vocab report TOKDIR TEXT... [--compare TOKDIR2]` as one value."""
    tokdir: str = option(positional=True, metavar="TOKDIR",
                         help="tokenizer dir (zh-bert vocab output, or a model dir)")
    text: list[str] = option(positional=True, metavar="TEXT",
                             help=".txt (one document per line) or .jsonl files, or directories of parts")
    compare: list[str] = option(default_factory=list, action="append", metavar="TOKDIR2",
                                help="another tokenizer dir, printed side by side (repeat to compare more)")
    max_docs: Optional[int] = option_of(Shared, "max_docs")
    top_unk: int = option(10, help="how many UNK characters to list")
    json_path: Optional[str] = option(None, flags=("--json",), metavar="PATH",
                                      help="also write the report(s) as JSON")

    def __post_init__(self):
        if self.max_docs is not None and self.max_docs < 1:
            raise ZhBertError(f"--max-docs must be a positive integer, got '{self.max_docs}'")
        if self.top_unk < 0:
            raise ZhBertError(f"--top-unk must be >= 0, got {self.top_unk}")


def _encode_batch(tok, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """(ids, offsets) per text, no specials; through the Rust backend when there is one (fast, and no
    'sequence longer than model_max_length' warnings: documents are longer than one training sequence)."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        return [(e.ids, e.offsets) for e in backend.encode_batch(texts, add_special_tokens=False)]
    enc = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
    return list(zip(enc["input_ids"], enc["offset_mapping"]))


REPORT_FORMAT = "zh-bert vocab report"   # the `written_by` of every report: what `--json` may replace
REPORT_KEYS = frozenset({"tokdir", "kind", "vocab_size", "docs", "chars", "tokens", "unk_tokens", "unk_rate",
                         "chars_per_token", "char_coverage", "distinct_chars", "distinct_chars_unk", "top_unk_chars"})


def vocab_report(tokdir: str | Path, texts: list[str], top_unk: int = 10) -> dict:
    """Statistics of `texts` encoded with the tokenizer in `tokdir` (characters exclude whitespace)."""
    tokdir = Path(tokdir)
    tok = load_tokenizer(tokdir)
    meta_path = tokdir / "zh_bert_vocab.json"
    meta = read_object(meta_path).data if meta_path.is_file() else {}
    unk_id = tok.unk_token_id
    n_tokens = n_unk = n_chars = n_unk_chars = 0
    chars: collections.Counter = collections.Counter()
    unk_chars: collections.Counter = collections.Counter()
    for text, (ids, offsets) in zip(texts, _encode_batch(tok, texts)):
        n_tokens += len(ids)
        chars.update(c for c in text if not c.isspace())
        for i, (s, e) in zip(ids, offsets):
            if i == unk_id:
                n_unk += 1
                span = [c for c in text[s:e] if not c.isspace()]
                unk_chars.update(span)
                n_unk_chars += len(span)
    n_chars = sum(chars.values())
    return {
        "written_by": REPORT_FORMAT,
        "tokdir": str(tokdir),
        "kind": meta.get("kind") or type(tok).__name__,
        "vocab_size": len(tok),
        "docs": len(texts),
        "chars": n_chars,
        "tokens": n_tokens,
        "unk_tokens": n_unk,
        "unk_rate": n_unk / max(n_tokens, 1),
        "chars_per_token": n_chars / max(n_tokens, 1),
        "char_coverage": 1 - n_unk_chars / max(n_chars, 1),
        "distinct_chars": len(chars),
        "distinct_chars_unk": len(unk_chars),
        "top_unk_chars": [[c, n] for c, n in unk_chars.most_common(top_unk)],
    }


def is_vocab_report(path: str | Path) -> bool:
    """Whether `path` is the JSON `vocab report --json` writes (one report, or a list of them): each carries
    `written_by` (or, from before that field, every key a report has), so a user's JSON never passes."""
    obj = read_json(path, default=None)
    items = obj if isinstance(obj, list) else [obj]
    return bool(items) and all(isinstance(r, dict) and (r.get("written_by") == REPORT_FORMAT or
                                                        (REPORT_KEYS <= r.keys() and "written_by" not in r))
                               for r in items)


def format_reports(reports: list[dict]) -> str:
    """One column per tokenizer, so `--compare` reads side by side."""
    rows = [
        ("tokenizer", lambda r: r["tokdir"]),
        ("kind", lambda r: r["kind"]),
        ("vocab size", lambda r: f"{r['vocab_size']:,}"),
        ("tokens", lambda r: f"{r['tokens']:,}"),
        ("UNK rate", lambda r: f"{100 * r['unk_rate']:.3f}%"),
        ("chars/token", lambda r: f"{r['chars_per_token']:.3f}"),
        ("char coverage", lambda r: f"{100 * r['char_coverage']:.3f}%"),
        ("distinct chars UNK", lambda r: f"{r['distinct_chars_unk']:,} of {r['distinct_chars']:,}"),
        ("top UNK chars", lambda r: " ".join(f"{c}×{n}" for c, n in r["top_unk_chars"][:8]) or "-"),
    ]
    cells = [[label] + [fmt(r) for r in reports] for label, fmt in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    first = reports[0]
    head = f"text: {first['docs']:,} documents, {first['chars']:,} characters (whitespace excluded)"
    return "\n".join([head] + ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells])


def vocab_reports(cfg: ReportConfig) -> list[dict]:
    """One report per tokenizer dir (`cfg.tokdir`, then every `cfg.compare`), all on the same documents."""
    texts = read_documents(cfg.text, cfg.max_docs)
    return [vocab_report(d, texts, cfg.top_unk) for d in [cfg.tokdir, *cfg.compare]]
