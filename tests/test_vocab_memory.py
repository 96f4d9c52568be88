"""`zh-bert vocab` in flat memory (issue 22, defect 11): documents are streamed once and only counts (or, for
sentencepiece, a bounded sample of sentences) are kept, so peak RSS does not grow with the corpus, and the
vocabulary is byte-identical to the one the list-holding builder made whenever the whole corpus fits."""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zh_bert.corpus.vocab import counts as vc
from zh_bert.corpus.vocab.build import VocabOptions, build_tokenizer
from zh_bert.corpus.vocab.counts import count_corpus
from zh_bert.corpus.vocab.spm import _sentences_with_spaces, sample_sentences

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _vocab_corpus import write_corpus  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
KINDS = ("char", "wordpiece", "sentencepiece", "word")
# sha256[:16] of vocab.txt (spiece.model for sentencepiece) and tokenizer.json built from the 600 sample_docs
# by the builder that held every document in a list (commit 539ece6, before streaming).
BEFORE = {
    "char": ("d51a6ce264b1a970", "f8c9d97bfd125d60", []),
    "wordpiece": ("47dd6ad019ab406d", "528ed01aa80d7d8c", ["--size", "5000"]),
    "word": ("fd243b341ebe3cde", "bbdae75a0d708b6e", []),
    "sentencepiece": ("7a24130ebf204688", "95c993a35058d4ef", ["--size", "5000", "--model-type", "bpe"]),
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@pytest.fixture(scope="module")
def docs_txt(tmp_path_factory, sample_docs) -> Path:
    p = tmp_path_factory.mktemp("vocab_mem") / "docs.txt"
    p.write_text("\n".join(sample_docs) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize("kind", KINDS)
def test_streaming_vocab_is_byte_identical_to_the_in_memory_builder(tmp_path, docs_txt, kind):
    from zh_bert.cli import main

    model_sha, json_sha, extra = BEFORE[kind]
    out = tmp_path / "tok"
    assert main(["vocab", str(docs_txt), "-o", str(out), "--kind", kind, "-q", *extra]) == 0
    assert _sha(out / ("spiece.model" if kind == "sentencepiece" else "vocab.txt")) == model_sha
    assert _sha(out / "tokenizer.json") == json_sha


class _OnePass:
    """Documents that can be read once only, as from a pipe: a builder that keeps or re-reads them fails."""

    def __init__(self, docs):
        self.docs, self.used = docs, False

    def __iter__(self):
        assert not self.used, "the corpus was read twice"
        self.used = True
        return iter(self.docs)


@pytest.mark.parametrize("kind", KINDS)
def test_vocab_builders_read_the_corpus_once_as_a_stream(sample_docs, kind):
    o = VocabOptions(kind=kind, size=5000 if kind in ("wordpiece", "sentencepiece") else None, model_type="bpe")
    streamed = build_tokenizer(_OnePass(sample_docs[:300]), o)[1]
    assert streamed == build_tokenizer(list(sample_docs[:300]), o)[1]


def test_word_count_table_is_bounded_and_exact_below_its_cap(sample_docs, monkeypatch):
    exact = count_corpus(sample_docs, "jieba")
    assert exact.pruned_below == 0 and len(exact.words) < vc.COUNT_CAP["jieba"]  # the sample: counted exactly
    cap = len(exact.words) // 4
    monkeypatch.setitem(vc.COUNT_CAP, "jieba", cap)
    sizes = []
    counts = vc.CorpusCounts("jieba")
    for d in sample_docs:
        counts.add(d)
        sizes.append(len(counts.words))
    assert max(sizes) <= cap and counts.pruned_below >= 1
    counts.finish()
    top = [w for w, _ in exact.words.most_common(200)]   # the frequent words survive with their counts
    assert all(counts.words[w] >= exact.words[w] - counts.pruned_below * 10 for w in top)
    assert sum(w in counts.words for w in top) >= 195


def test_sentencepiece_sample_is_bounded_reproducible_and_whole_when_it_fits(sample_docs):
    sentences = [s for d in sample_docs for s in _sentences_with_spaces(d)]
    total = sum(len(s.encode("utf-8")) for s in sentences)
    assert sample_sentences(iter(sentences), total) == (sentences, len(sentences))   # fits: all, in order
    part, seen = sample_sentences(iter(sentences), total // 5)
    assert seen == len(sentences) and sum(len(s.encode("utf-8")) for s in part) <= total // 5
    assert total // 5 - 2000 < sum(len(s.encode("utf-8")) for s in part)
    assert part == sample_sentences(iter(sentences), total // 5)[0]                  # same corpus, same sample
    it, where = iter(enumerate(sentences)), []
    for s in part:                                                                    # a subsequence: in order
        where.append(next(i for i, t in it if t == s))
    halves = collections.Counter(i < len(sentences) // 2 for i in where)
    assert abs(halves[True] - halves[False]) < 0.15 * len(part)                       # spread, not a prefix


# ---------------------------------------------------------------------------------------------- peak RSS
_PEAK = ("import resource, sys\nfrom zh_bert.cli import main\nrc = main(sys.argv[1:])\n"
         "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(rc)\n")


def _peak_rss_mb(*argv) -> float:
    """Peak RSS of `zh-bert ARGV` in a fresh process (its own ru_maxrss: nothing else in it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _PEAK, *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stderr.rsplit("PEAK_KB", 1)[1].split()[0]) / 1024


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[int, Path]:
    """25 MB and 200 MB of text from the bundled real documents, relabelled copy by copy so that new words
    keep appearing (see tests/_vocab_corpus.py)."""
    d = tmp_path_factory.mktemp("vocab_rss")
    out = {}
    for mb in (25, 200):
        out[mb] = d / f"corpus_{mb}mb.txt"
        write_corpus(out[mb], mb)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_vocab_peak_rss_is_flat_from_25_to_200_mb(tmp_path, corpora, kind):
    # sentencepiece: a 10 MB sample (below both corpora), so both sizes train on the bound; bpe for time.
    extra = ["--sample-mb", "10", "--model-type", "bpe"] if kind == "sentencepiece" else []
    peak = {mb: _peak_rss_mb("vocab", path, "-o", tmp_path / f"tok{mb}", "--kind", kind, "-q", *extra)
            for mb, path in corpora.items()}
    assert peak[200] <= 1.2 * peak[25], peak
