"""`zh-bert clean --executor local --tasks N` keeps exactly the documents the in-process path keeps, in the same
order, with the same report counts, for every N in 1..8: one near-duplicate rule (clean/dedup.py `LSHIndex`: a
document is a near duplicate iff it shares a band with an earlier *kept* document and their signatures agree on
at least the threshold), and one big file cut across tasks at line boundaries (first occurrence wins by file
order and offset).

The corpora are small real Chinese text (sample_docs) so that 8 executor runs per corpus stay fast."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from zh_bert import cli
from zh_bert.corpus.corpus_io import corpus_files, read_jsonl

REPORT_COUNTS = ("docs_in", "docs_out", "chars_in", "chars_out", "bytes_in", "filtered", "duplicates", "pii",
                 "lines_removed", "unreadable")
TASKS = range(1, 9)


def _shingles(text: str, n: int = 5) -> set[str]:
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def _jaccard(a: str, b: str) -> float:
    sa, sb = _shingles(a), _shingles(b)
    return len(sa & sb) / len(sa | sb)


def _mutate(text: str, rng: random.Random, target: float) -> str:
    """`text` with characters replaced one at a time until its 5-gram Jaccard with `text` is <= target."""
    chars = list(text)
    while _jaccard(text, "".join(chars)) > target:
        chars[rng.randrange(len(chars))] = chr(rng.randrange(0x4E00, 0x9FA5))
    return "".join(chars)


def _long_docs(sample_docs: list[str], n: int, size: int = 500) -> list[str]:
    """`n` distinct one-line documents of about `size` characters of real text (sample lines joined)."""
    docs, buf = [], ""
    for line in sample_docs:
        buf += line.replace("\n", "")
        if len(buf) >= size:
            docs.append(buf[:size])
            buf = ""
            if len(docs) == n:
                break
    return docs


def _corpus_aax(sample_docs):
    a = _long_docs(sample_docs, 1)[0]
    x = a[:250] + ("甲" if a[250] != "甲" else "乙") + a[251:]
    return [a, a, x]


def _corpus_chains(sample_docs):
    """Chains of near copies, each made from the previous one (so the ends of a chain are far apart), with
    exact copies of chain members sprinkled in: an exact copy links a later near copy to the first occurrence
    (datatrove's bucket stage chains A-A'-X; the executor once let A' cut X off from A). The old executor
    kept 18 documents more than the in-process path here."""
    rng, lines = random.Random(0), []
    for base in _long_docs(sample_docs, 6, 300):
        cur, chain = base, []
        for _ in range(6):
            chain.append(cur)
            lines.append(cur)
            if rng.random() < 0.5:
                lines.append(rng.choice(chain))
            cur = _mutate(cur, rng, rng.uniform(0.82, 0.92))
    return lines


def _corpus_near_only(sample_docs):
    """No exact copies: 6 near copies of each of 8 documents (not the documents themselves), shuffled, so
    that copies agree with each other around the threshold, some without sharing a band, some sharing a
    bucket with two kept ones. Measured: the old executor removed 3 documents the rule keeps; the old
    in-process index (first document per bucket only) kept 1 the rule removes."""
    rng, lines = random.Random(0), []
    for original in _long_docs(sample_docs, 8, 200):
        lines += [_mutate(original, rng, rng.uniform(0.88, 0.95)) for _ in range(6)]
    rng.shuffle(lines)
    assert len(set(lines)) == len(lines)
    return lines


def _corpus_big_file(sample_docs):
    """One file of many documents (real lines) with exact and near copies planted later in it."""
    rng = random.Random(3)
    lines = [d for d in sample_docs if len(d) >= 60][:240]
    for k in range(40):
        src = lines[rng.randrange(len(lines) // 2)]
        lines.insert(rng.randrange(len(lines) // 2, len(lines)), src if k % 2 else _mutate(src, rng, 0.85))
    return lines


CORPORA = {"a-a-x": _corpus_aax, "chains": _corpus_chains, "near-only": _corpus_near_only,
           "big-file": _corpus_big_file}


def _run(*argv) -> None:
    assert cli.main(["clean", *map(str, argv), "-q", "--dedup", "minhash", "--workers", "1"]) == 0


def _docs(out: Path) -> list[tuple[str, str]]:
    return [(obj["text"], obj["source"]) for f in corpus_files([out]) for _, obj in read_jsonl(f)]


def _report(out: Path) -> dict:
    path = out / "report.json" if out.is_dir() else out.with_name(out.name.replace(".jsonl", ".report.json"))
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=sorted(CORPORA))
def reference(request, tmp_path_factory, sample_docs):
    """(input file, in-process output) for one corpus: the in-process path is the reference."""
    d = tmp_path_factory.mktemp(request.param)
    src = d / "corpus.txt"
    src.write_text("\n".join(CORPORA[request.param](sample_docs)) + "\n", encoding="utf-8")
    out = d / "inproc.jsonl"
    _run(src, "-o", out)
    return request.param, src, out


# one representative task count per corpus in the fast suite; every count with --slow
@pytest.mark.parametrize("tasks", [t if t == 3 else pytest.param(t, marks=pytest.mark.slow) for t in TASKS])
def test_minhash_executor_keeps_the_in_process_documents(reference, tasks, tmp_path):
    name, src, ref = reference
    out = tmp_path / "out"
    _run(src, "-o", out, "--executor", "local", "--tasks", str(tasks))
    assert _docs(out) == _docs(ref)
    ours, theirs = _report(out), _report(ref)
    assert {k: ours[k] for k in REPORT_COUNTS} == {k: theirs[k] for k in REPORT_COUNTS}
    if name == "a-a-x":
        assert ours["docs_out"] == 1 and ours["duplicates"] == {"exact": 1, "near": 1}
    if name == "near-only":
        assert ours["duplicates"]["exact"] == 0 and ours["duplicates"]["near"] > 0
    if name == "big-file" and tasks > 1:   # one file, cleaned by several tasks
        assert ours["inputs"][0]["tasks"] > 1, ours["inputs"]


def test_near_duplicate_rule_checks_every_kept_document_in_a_bucket():
    """A bucket holding two kept documents: a later one that agrees with the second (not the first) is a near
    duplicate, by the rule (an earlier kept document shares a band and agrees), not only the bucket's first."""
    import numpy as np

    from zh_bert.corpus.clean.dedup import LSHIndex, MinHashConfig

    cfg = MinHashConfig()
    index = LSHIndex(cfg)
    rows, n = index.rows, cfg.num_perm
    rng = np.random.default_rng(0)
    first = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    second = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    second[:rows] = first[:rows]                   # shares band 0 with `first`, agrees on little else
    later = second.copy()
    later[-int(n * 0.1):] ^= np.uint32(1)          # agrees with `second` on 90%, shares band 0 with both
    assert not index.add_or_match(first) and not index.add_or_match(second)
    assert index.add_or_match(later)
