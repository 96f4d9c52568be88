"""`zh-bert clean INPUT... -o OUT.jsonl`: raw Chinese text → cleaned, deduplicated documents.

Pipeline: the main process reads documents in input order (readers.py) and sends batches to worker
processes, which normalise (normalize.py), filter (filters.py) and hash (dedup.py) them; results come back
in submission order and the main process deduplicates and writes them, so the output is the same for any
`--workers`. At most 2 batches per worker are in flight: memory stays flat on any corpus size.

Output: OUT.jsonl (one `{"text", "source"}` per line, paragraphs joined by "\\n") and OUT.report.json,
both written under temporary names and renamed only when complete.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from zh_bert.clean.dedup import DEDUP_MODES, Deduplicator, MinHashConfig, MinHasher, exact_key
from zh_bert.clean.filters import FilterConfig, quality_reason, remove_boilerplate
from zh_bert.clean.normalize import CONVERSIONS, PII_MODES, NormalizeConfig, Normalizer
from zh_bert.clean.readers import DOC_SEPS, FORMATS, Problems, RawDoc, expand_inputs, read_input
from zh_bert.clean.report import Tally, report_path
from zh_bert.errors import ZhBertError
from zh_bert.fileio import atomic_write, write_json

__all__ = ["main", "clean", "report_path", "CleanConfig", "ReadOptions", "DocCleaner"]

BATCH_CHARS = 1 << 18   # ~0.75 MB of Chinese per batch: large enough to amortise pickling
BATCH_DOCS = 2048


@dataclass
class CleanConfig:
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    dedup: str = "exact"
    minhash: MinHashConfig = field(default_factory=MinHashConfig)


@dataclass
class BatchResult:
    kept: list            # (JSON line, characters, exact key, minhash signature or None); JSON encoded
                          # in the worker, so the main process only deduplicates and writes
    docs_in: int = 0
    chars_in: int = 0
    bytes_in: int = 0
    rejected: collections.Counter = field(default_factory=collections.Counter)
    pii: collections.Counter = field(default_factory=collections.Counter)
    boilerplate_lines: int = 0


class DocCleaner:
    """Normalise → remove boilerplate lines → quality filters → hashes, for one batch of documents."""

    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg
        self.normalize = Normalizer(cfg.normalize)
        self.minhasher = MinHasher(cfg.minhash) if cfg.dedup == "minhash" else None

    def __call__(self, batch: list[RawDoc]) -> BatchResult:
        res = BatchResult(kept=[])
        for doc in batch:
            text = doc.text
            res.docs_in += 1
            res.chars_in += len(text)
            res.bytes_in += len(text.encode("utf-8"))
            if doc.markup == "wikitext":
                from zh_bert.clean.wikitext import wikitext_to_text

                text = wikitext_to_text(text)
            text = self.normalize(text, res.pii)
            if self.cfg.filters.boilerplate:
                text, n = remove_boilerplate(text)
                res.boilerplate_lines += n
                if n and not text:
                    res.rejected["boilerplate"] += 1
                    continue
            reason = quality_reason(text, self.cfg.filters)
            if reason:
                res.rejected[reason] += 1
                continue
            key = exact_key(text) if self.cfg.dedup != "none" else b""
            sig = self.minhasher.signature(text) if self.minhasher else None
            line = json.dumps({"text": text, "source": doc.source}, ensure_ascii=False)
            res.kept.append((line, len(text), key, sig))
        return res


# --- worker processes ----------------------------------------------------------------------------
_worker_cleaner: DocCleaner | None = None  # one per worker process, built by the pool initializer


def _init_worker(cfg: CleanConfig) -> None:
    global _worker_cleaner
    _worker_cleaner = DocCleaner(cfg)


def _clean_in_worker(batch: list[RawDoc]) -> BatchResult:
    return _worker_cleaner(batch)


def _start_method() -> str:
    """fork when this process runs no other Python thread (fast: no re-import, ~1 s saved per run on a
    busy 2-core machine); otherwise forkserver, because forking while another thread holds a lock (logging,
    imports; `zh-bert pretrain` may call clean with TensorBoard or tqdm threads alive) can deadlock the child."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _map_ordered(cfg: CleanConfig, batches: Iterable[list[RawDoc]], workers: int) -> Iterator[BatchResult]:
    """Results in input order, with a bounded number of batches in flight (streaming, flat memory)."""
    if workers <= 1:
        cleaner = DocCleaner(cfg)
        for b in batches:
            yield cleaner(b)
        return
    ctx = mp.get_context(_start_method())
    with ctx.Pool(workers, initializer=_init_worker, initargs=(cfg,)) as pool:
        pending: collections.deque = collections.deque()
        for b in batches:
            pending.append(pool.apply_async(_clean_in_worker, (b,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _batched(docs: Iterable[RawDoc]) -> Iterator[list[RawDoc]]:
    batch, chars = [], 0
    for d in docs:
        batch.append(d)
        chars += len(d.text)
        if chars >= BATCH_CHARS or len(batch) >= BATCH_DOCS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


# --- outputs -------------------------------------------------------------------------------------
def _remove_stale_temps(path: Path) -> None:
    """Delete temp files that a killed earlier run left beside `path` (their pid is gone)."""
    prefix = f".{path.name}.tmp-"
    if not path.parent.is_dir():
        return
    for f in path.parent.iterdir():
        if f.name.startswith(prefix):
            try:
                pid = int(f.name[len(prefix):])
                os.kill(pid, 0)
            except ProcessLookupError:
                f.unlink(missing_ok=True)
            except (ValueError, PermissionError):
                pass


class _Progress:
    """tqdm bar in MB with docs/s, only when stderr is a terminal."""

    def __init__(self, total_bytes: int, quiet: bool):
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1_000_000,
                            desc="clean", dynamic_ncols=True)
        self.t0, self.docs = time.time(), 0

    def update(self, res: BatchResult) -> None:
        if self.bar is not None:
            self.docs += res.docs_in
            self.bar.update(res.bytes_in)
            self.bar.set_postfix_str(f"{self.docs / max(1e-9, time.time() - self.t0):,.0f} docs/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class ReadOptions:
    fmt: str = "auto"              # --format
    doc_sep: str = "line"          # --doc-sep
    field_name: str | None = None  # --field (None: "text", or a known CLUE text field)
    encoding: str = "auto"         # --encoding


def clean(inputs: list[str], out: str | os.PathLike, cfg: CleanConfig, read: ReadOptions | None = None, *,
          workers: int | None = None, quiet: bool = False) -> dict:
    """Clean `inputs` into `out` (+ its report); returns the report dict."""
    t0 = time.time()
    read = read or ReadOptions()
    out = Path(out)
    if out.is_dir():
        raise ZhBertError(f"-o {out}: is a directory; give a file name such as {out}/docs.jsonl")
    files, skipped = expand_inputs(inputs)
    if not files:
        raise ZhBertError(f"no input files found in {', '.join(inputs)}")
    if not workers:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    rpath = report_path(out)
    for p in (out, rpath):
        _remove_stale_temps(p)

    problems = Problems()
    per_file: dict[str, int] = {}

    def docs() -> Iterator[RawDoc]:
        for f in files:
            n = 0
            for d in read_input(f, read.fmt, read.doc_sep, read.field_name or "text", read.field_name is not None,
                                read.encoding, problems):
                n += 1
                yield d
            per_file[str(f)] = n

    tally = Tally()
    dedup = Deduplicator(cfg.dedup, cfg.minhash)
    progress = _Progress(sum(f.stat().st_size for f in files), quiet)
    try:
        with atomic_write(out) as fout:
            for res in _map_ordered(cfg, _batched(docs()), workers):
                progress.update(res)
                tally.add_batch(res)
                lines = []
                for line, nchars, key, sig in res.kept:
                    dup = dedup.check(key, sig)
                    if dup:
                        tally.duplicates[dup] += 1
                        continue
                    tally.docs_out += 1
                    tally.chars_out += nchars
                    lines.append(line)
                if lines:
                    fout.write("\n".join(lines) + "\n")
            if tally.docs_out == 0:
                raise ZhBertError(
                    f"no documents left after cleaning {tally.docs_in} read from {len(files)} file(s) "
                    f"(filtered: {dict(tally.filtered) or 'none'}; unreadable lines: {problems.counts or 'none'}); "
                    f"nothing written")
            default_enc = read.encoding if read.encoding != "auto" else "utf-8"
            report = tally.to_report(
                seconds=time.time() - t0, problems=problems, skipped=skipped, workers=workers, output=str(out),
                inputs=[{"path": str(f), "docs": per_file.get(str(f), 0),
                         "encoding": problems.encodings.get(str(f), default_enc)} for f in files],
                options={"format": read.fmt, "doc_sep": read.doc_sep, "field": read.field_name or "text",
                         "encoding": read.encoding, **asdict(cfg)})
            write_json(rpath, report)  # before OUT.jsonl is renamed: a complete OUT implies its report
    finally:
        progress.close()
    return report


# --- CLI -----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zh-bert clean",
        description="Clean raw Chinese text into deduplicated documents: OUT.jsonl ({\"text\", \"source\"} "
                    "per line) + OUT.report.json. Streaming and multi-process; output order does not "
                    "depend on --workers.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="files or directories (recursive); .gz/.bz2 are decompressed on the fly")
    p.add_argument("-o", "--output", required=True, metavar="OUT.jsonl", help="output JSONL file")
    g = p.add_argument_group("reading")
    g.add_argument("--format", default="auto", choices=FORMATS,
                   help="input format (default: by extension/content: .jsonl, .json, .xml → mediawiki, "
                        "<doc ...> → wikiextractor, else text)")
    g.add_argument("--doc-sep", default="line", choices=DOC_SEPS,
                   help="text files: one document per line, blank-line separated, or one per file "
                        "(THUCNews) (default: line)")
    g.add_argument("--field", default=None, help="JSON field with the text (default: text; CLUE files' "
                   "content/answer/context/sentence are found automatically when --field is not given)")
    g.add_argument("--encoding", default="auto",
                   help="input encoding (default: auto = UTF-8, or GB18030/GBK/Big5 when detected)")
    g = p.add_argument_group("normalisation (each on by default)")
    g.add_argument("--convert", default="t2s", choices=CONVERSIONS,
                   help="OpenCC traditional→simplified conversion (default: t2s)")
    g.add_argument("--pii", default="mask", choices=PII_MODES,
                   help="URLs, e-mails, mainland mobile numbers, resident ID numbers: replace by <URL> "
                        "<EMAIL> <PHONE> <ID>, delete, or keep (default: mask)")
    g.add_argument("--no-fullwidth", action="store_true", help="keep full-width ASCII letters/digits/space")
    g.add_argument("--no-control", action="store_true", help="keep control and zero-width characters")
    g.add_argument("--no-html", action="store_true", help="keep HTML tags and entities")
    g.add_argument("--no-whitespace", action="store_true",
                   help="keep whitespace as is (no collapsing, spaces between CJK characters kept)")
    g = p.add_argument_group("filters")
    g.add_argument("--min-chars", type=int, default=FilterConfig.min_chars,
                   help="drop shorter documents, counted after cleaning (default: %(default)s)")
    g.add_argument("--max-chars", type=int, default=FilterConfig.max_chars,
                   help="drop longer documents (default: %(default)s)")
    g.add_argument("--min-cjk-ratio", type=float, default=FilterConfig.min_cjk_ratio,
                   help="drop documents with a smaller share of Han characters among non-space "
                        "characters (default: %(default)s)")
    g.add_argument("--no-repetition", action="store_true", help="turn off the Gopher repetition filters")
    g.add_argument("--no-boilerplate", action="store_true", help="keep boilerplate lines")
    g = p.add_argument_group("deduplication")
    g.add_argument("--dedup", default="exact", choices=DEDUP_MODES,
                   help="exact: hash of the normalised text; minhash: exact + near duplicates "
                        "(MinHash LSH over character n-grams) (default: exact)")
    g.add_argument("--minhash-threshold", type=float, default=MinHashConfig.threshold,
                   help="estimated Jaccard similarity of character n-gram sets above which a document is a "
                        "near duplicate of an earlier one (default: %(default)s)")
    g.add_argument("--minhash-ngram", type=int, default=MinHashConfig.ngram,
                   help="shingle size in characters (default: %(default)s)")
    g.add_argument("--minhash-perm", type=int, default=MinHashConfig.num_perm,
                   help="signature length (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: number of cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise ZhBertError(f"--workers must be at least 1, got {args.workers}")
    if not 0 < args.minhash_threshold < 1:
        raise ZhBertError(f"--minhash-threshold must be between 0 and 1, got {args.minhash_threshold}")
    if args.minhash_ngram < 1 or args.minhash_perm < 1:
        raise ZhBertError(f"--minhash-ngram and --minhash-perm must be at least 1, "
                          f"got {args.minhash_ngram} and {args.minhash_perm}")
    if not 0 <= args.min_cjk_ratio <= 1:
        raise ZhBertError(f"--min-cjk-ratio must be between 0 and 1, got {args.min_cjk_ratio}")
    if args.min_chars < 0 or args.max_chars < max(1, args.min_chars):
        raise ZhBertError(f"--min-chars/--max-chars: need 0 <= min <= max, got {args.min_chars}/{args.max_chars}")
    filters = FilterConfig(min_chars=args.min_chars, max_chars=args.max_chars,
                           min_cjk_ratio=args.min_cjk_ratio, boilerplate=not args.no_boilerplate)
    if args.no_repetition:
        filters.max_dup_line_frac = filters.max_dup_line_char_frac = 1.0
        filters.top_ngram, filters.dup_ngram = {}, {}
    cfg = CleanConfig(
        normalize=NormalizeConfig(convert=args.convert, fullwidth=not args.no_fullwidth,
                                  invisible=not args.no_control, html=not args.no_html,
                                  whitespace=not args.no_whitespace, pii=args.pii),
        filters=filters, dedup=args.dedup,
        minhash=MinHashConfig(num_perm=args.minhash_perm, ngram=args.minhash_ngram,
                              threshold=args.minhash_threshold))
    read = ReadOptions(fmt=args.format, doc_sep=args.doc_sep, field_name=args.field, encoding=args.encoding)
    report = clean(args.inputs, args.output, cfg, read, workers=args.workers, quiet=args.quiet)
    if not args.quiet and sys.stderr.isatty():
        print(f"zh-bert clean: {report['docs_out']:,} of {report['docs_in']:,} documents kept "
              f"({report['bytes_in'] / 1e6:.1f} MB in {report['seconds']:.1f} s, {report['mb_per_s']} MB/s) "
              f"→ {args.output}; report: {report_path(args.output)}", file=sys.stderr)
    return 0
