"""`zh-bert eval contamination CORPUS... --suite SUITE|all`: how much of each benchmark test set a
pretraining corpus already holds, so that a figure on it can say whether the model may have read its test text.

The corpus is streamed document by document (zh_bert/corpus/contamination.py decides which test examples a
document holds and keeps only the test sets' hashes), read by clean's own readers as `zh-bert clean` reads or
writes it: raw text (one document per line), JSONL (clean's OUT.jsonl included), wikiextractor..., and a clean
OUTDIR as its parts, so what is measured on raw text is what `clean --decontaminate` would drop. The report says
what matched, so a figure can be checked: for each contaminated example the document (file:line), the share of
its text found there and that text.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zh_bert.core.config import config_from_args, option, option_of
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.benchmark_text import suite_tasks
from zh_bert.corpus.clean.readers import ReadOptions, expand_inputs, read_input
from zh_bert.corpus.clean.source import Problems
from zh_bert.corpus.clean.wikitext import wikitext_to_text
from zh_bert.corpus.contamination import OverlapOptions, check_ngram, check_share, overlap_index, scan
from zh_bert.corpus.corpus_io import CLEAN_REPORT, JOB_MARKER, corpus_files
from zh_bert.corpus.task_registry import suite_names
from zh_bert.evaluation.suite.protocol import SuiteArgs


@dataclass
class ContaminationArgs:
    """What `eval contamination` scans for what."""
    corpus: list[str] = option(positional=True, metavar="CORPUS", help="pretraining corpus: files or directories "
                               "as `zh-bert clean` reads them (text, JSONL, ...) or writes them (OUT.jsonl, OUTDIR)")
    suite: str = option_of(SuiteArgs, "suite", default="all", help="benchmark suite whose reported splits are "
                           f"looked for: {', '.join(suite_names())} (every suite)")
    overlap_ngram: int = option_of(OverlapOptions, "overlap_ngram")
    overlap_share: float = option_of(OverlapOptions, "overlap_share")
    show_ids: int = option(5, metavar="K", help="contaminated examples printed per task, each with the document, "
                           "the share found and the matched text (all are in the JSON)")

    def __post_init__(self):
        suite_tasks(self.suite)
        check_ngram(self.overlap_ngram)
        check_share(self.overlap_share)
        if not self.corpus:
            raise ZhBertError("eval contamination: give at least one CORPUS file or directory")
        for p in self.corpus:
            if not Path(p).exists():
                raise ZhBertError(f"{p}: no such file or directory (CORPUS of eval contamination)")
        if self.show_ids < 0:
            raise ZhBertError(f"--show-ids must be >= 0, got {self.show_ids}")


def corpus_files_of(paths: list[str]) -> list[Path]:
    """The files behind CORPUS: a clean OUTDIR is its parts (an unfinished one is refused), anything else what
    clean would read (directories walked, its reports skipped)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir() and ((path / CLEAN_REPORT).is_file() or (path / JOB_MARKER).is_file()):
            files += corpus_files([path])
        else:
            files += expand_inputs([name])[0]
    if not files:
        raise ZhBertError(f"{', '.join(paths)}: no corpus files to scan (an empty directory?)")
    return files


def corpus_texts(files: list[Path], problems: Problems) -> Iterator[tuple[str, str]]:
    """The documents of `files` as (file:line, text), one at a time, read by clean's readers (unreadable lines
    go to `problems`)."""
    read = ReadOptions()
    for f in files:
        for d in read_input(f, read, problems):
            yield d.source, wikitext_to_text(d.text) if d.markup == "wikitext" else d.text


def contamination(args: ContaminationArgs) -> dict:
    """The JSON result: `scan` of the corpus against the suite's test examples, plus the corpus files."""
    files, problems = corpus_files_of(args.corpus), Problems()
    res = scan(corpus_texts(files, problems), overlap_index(args.suite, args.overlap_ngram, args.overlap_share),
               where=", ".join(args.corpus))
    return {"corpus": [str(p) for p in args.corpus], "files": len(files), "unreadable": problems.counts, **res}


def contamination_lines(res: dict, show: int) -> list[str]:
    """The table (one row per test set) and the first `show` contaminated examples of each: where, how much of
    it, and the matched text."""
    rows = [f"{'task':<18} {'examples':>8} {'contaminated':>12} {'share':>7} {'too short':>9} {'common':>6}   "
            f"n = {res['ngram']}, share >= {res['overlap_share']:g}"]
    for task, t in res["tasks"].items():
        rows.append(f"{task:<18} {t['examples']:>8,} {t['contaminated']:>12,} {t['share']:>7.2%} "
                    f"{t['too_short']:>9,} {t['common']:>6,}")
    rows.append(f"corpus: {res['documents']:,} documents, {res['characters']:,} characters, "
                f"{res['documents_with_test_text']:,} with test text ({res['seconds']:.1f} s)")
    for task, t in res["tasks"].items():
        for f in t["found"][:show]:
            rows.append(f"{task} {f['split']} {f['id']}: {f['share']:.0%} in {f['document']}: {f['text']}")
        if len(t["found"]) > show > 0:
            rows.append(f"{task}: ... ({len(t['found']) - show:,} more)")
    return rows


def main_contamination(args: argparse.Namespace) -> dict:
    """`eval contamination` from parsed arguments: prints the table and returns the JSON result."""
    opts = config_from_args(ContaminationArgs, args)
    res = contamination(opts)
    print("\n".join(contamination_lines(res, opts.show_ids)), flush=True)
    return res
