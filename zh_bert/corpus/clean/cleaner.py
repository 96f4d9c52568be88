"""One batch of raw documents -> cleaned lines with their dedup keys: the work both `clean` paths (the
process pool in `zh_bert.corpus.clean`, the datatrove tasks in `zh_bert.corpus.clean.on_executor`) run on every document,
so both keep the very same text."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from zh_bert.corpus.benchmark_text import suite_tasks
from zh_bert.corpus.contamination import OverlapOptions, check_ngram, check_share, overlap_index
from zh_bert.corpus.clean.dedup import DEDUP_MODES, DedupMode, MinHashConfig, MinHasher, exact_key
from zh_bert.corpus.clean.filters import FilterConfig, quality_reason, remove_boilerplate
from zh_bert.corpus.clean.normalize import NormalizeConfig, Normalizer
from zh_bert.corpus.clean.source import RawDoc
from zh_bert.corpus.clean.wikitext import wikitext_to_text
from zh_bert.core.config import option, option_of
from zh_bert.core.errors import ZhBertError

BATCH_CHARS = 1 << 18   # ~0.75 MB of Chinese per batch: large enough to amortise pickling
BATCH_DOCS = 2048


@dataclass
class CleanConfig:
    """What happens to each document (sent to every worker process)."""
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    dedup: DedupMode = option("exact", help="exact: hash of the normalised text; minhash: exact + near duplicates "
                              "(MinHash LSH over character n-grams)")
    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    decontaminate: str = option("none", metavar="SUITE", help="drop documents that hold a test example of "
                                "benchmark suite fewclue, cmrc2018 or all: most of its n-grams, or a short one "
                                "whole (→ contaminated, listed in the report; what `zh-bert eval contamination` "
                                "counts)")
    overlap_ngram: int = option_of(OverlapOptions, "overlap_ngram", help="characters per n-gram of --decontaminate "
                                   "(after NFKC, case folding, no whitespace)")
    overlap_share: float = option_of(OverlapOptions, "overlap_share")

    def __post_init__(self):
        if self.dedup not in DEDUP_MODES:
            raise ZhBertError(f"--dedup must be one of {', '.join(DEDUP_MODES)}, got '{self.dedup}'")
        if self.decontaminate != "none":
            suite_tasks(self.decontaminate, "--decontaminate")
        check_ngram(self.overlap_ngram)
        check_share(self.overlap_share)


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
    contaminated: list = field(default_factory=list)   # what matched, per dropped document (`OverlapIndex.entry`)


class DocCleaner:
    """Normalise → remove boilerplate lines → quality filters → benchmark test text → hashes, for one batch
    of documents."""

    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg
        self.normalize = Normalizer(cfg.normalize)
        self.minhasher = MinHasher(cfg.minhash) if cfg.dedup == "minhash" else None
        self.test_text = (overlap_index(cfg.decontaminate, cfg.overlap_ngram, cfg.overlap_share)
                          if cfg.decontaminate != "none" else None)

    def __call__(self, batch: list[RawDoc]) -> BatchResult:
        res = BatchResult(kept=[])
        for doc in batch:
            text = doc.text
            res.docs_in += 1
            res.chars_in += len(text)
            res.bytes_in += len(text.encode("utf-8"))
            if doc.markup == "wikitext":
                text = wikitext_to_text(text)
            text = self.normalize(text, res.pii)
            if self.cfg.filters.boilerplate:
                text, n = remove_boilerplate(text)
                res.boilerplate_lines += n
                if n and not text:
                    res.rejected["boilerplate"] += 1
                    continue
            reason = quality_reason(text, self.cfg.filters)
            found = self.test_text.matches(text) if reason is None and self.test_text is not None else None
            if found:   # after the quality filters: their counts do not depend on it
                reason = "contaminated"
                res.contaminated.append(self.test_text.entry(doc.source, found))
            if reason:
                res.rejected[reason] += 1
                continue
            key = exact_key(text) if self.cfg.dedup != "none" else b""
            sig = self.minhasher.signature(text) if self.minhasher else None
            line = json.dumps({"text": text, "source": doc.source}, ensure_ascii=False)
            res.kept.append((line, len(text), key, sig))
        return res


def batched(docs: Iterable[RawDoc]) -> Iterator[list[RawDoc]]:
    """Documents in batches of about BATCH_CHARS characters (at most BATCH_DOCS): one unit of work."""
    batch, chars = [], 0
    for d in docs:
        batch.append(d)
        chars += len(d.text)
        if chars >= BATCH_CHARS or len(batch) >= BATCH_DOCS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch
