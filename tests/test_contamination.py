"""Benchmark decontamination: `zh-bert eval contamination` and `zh-bert clean --decontaminate`.

Real text with planted overlaps: the 600 sample documents (which share no 13-gram with FewCLUE's test sets) get
pieces of real FewCLUE test examples planted into five of them, whole and partial, re-spaced and in full-width
forms; the scan must find exactly those five examples, and clean must drop exactly those five documents, in the
in-process path and the datatrove path, counting them in its report.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from conftest import TASKS

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.benchmark_text import (
    iter_test_examples,
    record_segments,
    suite_tasks,
)
from zh_bert.corpus.clean import main as clean_main
from zh_bert.corpus.clean import report_path
from zh_bert.corpus.contamination import (
    DEFAULT_NGRAM,
    contains_test_text,
    ngram_keys,
    overlap_index,
    overlap_text,
    scan,
)
from zh_bert.evaluation.evaluate import main as eval_main


def _row(task: str, line: int) -> dict:
    return json.loads((TASKS / "fewclue" / task / "test_public.json").read_text(encoding="utf-8").split("\n")[line])


def _full_width(text: str) -> str:
    """ASCII letters, digits and punctuation as their full-width forms (U+FF01...)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _spaced(text: str, every: int = 5, gap: str = "  ") -> str:
    return gap.join(text[i:i + every] for i in range(0, len(text), every))


def _plants() -> list[tuple[int, str, str, str]]:
    """(document index, task, example id, text planted): whole and partial pieces of real test examples."""
    eprstmt, csl, ocnli, chid, tnews = (_row("eprstmt", 2), _row("csl", 0), _row("ocnli", 5), _row("chid", 3),
                                        _row("tnews", 7))
    return [
        (5, "fewclue/eprstmt", "35", _spaced(eprstmt["sentence"])),                        # whole, re-spaced
        (50, "fewclue/csl", "1429", _full_width(csl["abst"][20:45])),                       # 25 chars, full-width
        (120, "fewclue/ocnli", "5", _spaced(_full_width(ocnli["sentence1"]), 7, "\u3000")),  # ideographic spaces
        (400, "fewclue/chid", "14", _full_width(chid["content"].split("#idiom#,")[1][:24])),  # after the blank
        (500, "fewclue/tnews", "304", tnews["sentence"]),                                   # whole title
    ]


SHORT_PLANT = 300   # a 12-character piece of a test example: shorter than n = 13, so no overlap


@pytest.fixture(scope="module")
def planted(sample_docs) -> list[str]:
    docs = list(sample_docs)
    for i, _, _, piece in _plants():
        cut = docs[i].find("。") + 1 or len(docs[i]) // 2
        docs[i] = docs[i][:cut] + piece + docs[i][cut:]
    docs[SHORT_PLANT] += _row("csldcp", 0)["content"][:12]
    return docs


@pytest.fixture(scope="module")
def planted_txt(planted, tmp_path_factory):
    path = tmp_path_factory.mktemp("planted") / "planted.txt"
    path.write_text("\n".join(planted) + "\n", encoding="utf-8")
    return path


def _expected() -> dict[str, list[str]]:
    """The planted examples' ids; CSL pairs each abstract with several keyword sets, so every record with the
    planted abstract holds the planted text (3 records, file order)."""
    out = {t: [] for t in suite_tasks("fewclue")}
    for _, task, ident, _ in _plants():
        out[task].append(ident)
    rows = [json.loads(line) for line in (TASKS / "fewclue" / "csl" / "test_public.json").read_text(
        encoding="utf-8").splitlines() if line.strip()]
    out["fewclue/csl"] = [str(r["id"]) for r in rows if r["abst"] == rows[0]["abst"]]
    assert len(out["fewclue/csl"]) == 3
    return out


# --- the pieces ------------------------------------------------------------------------------------------
def test_normalisation_and_hashes():
    assert overlap_text("ＨＪＴ 电池，\u3000很好\n") == "hjt电池,很好"
    a = ngram_keys(overlap_text("今天天气很好我们去公园散步吧"), 13)
    b = ngram_keys(overlap_text("今天 天气很好，我们去公园散步吧"), 13)
    assert len(a) == 2 and len(set(a.tolist()) | set(b.tolist())) == 2 + len(b)   # the comma breaks every window
    assert ngram_keys("短句", 13).size == 0


def test_test_text_rule():
    """String values except id/label-like keys, ChID's blank a break, CMRC = context + question per question."""
    row = _row("ocnli", 5)
    assert list(record_segments(row)) == [row["sentence1"], row["sentence2"]]
    chid = _row("chid", 3)
    segments = list(record_segments(chid))
    assert segments[:7] == chid["candidates"] and "#idiom#" not in "".join(segments)
    examples = list(iter_test_examples("cmrc2018"))
    assert len(examples) == 3219 and examples[0].id == "DEV_0_QUERY_0"
    assert examples[0].text.endswith("\n《战国无双3》是由哪两个公司合作开发的？")
    counts = {t: 0 for t in suite_tasks("fewclue")}
    for ex in iter_test_examples("fewclue"):
        counts[ex.task] += 1
    assert counts["fewclue/csldcp"] == 1784 and counts["fewclue/csl"] == 2838   # every record, repeated ids too


def test_scan_finds_exactly_the_planted_examples(planted):
    index = overlap_index("fewclue", DEFAULT_NGRAM)
    res = scan(iter(planted), index)
    assert {t: r["ids"] for t, r in res["tasks"].items()} == _expected()
    assert res["documents"] == 600 and res["documents_with_test_text"] == 5
    where = {p[0] for p in _plants()}
    assert [i for i, doc in enumerate(planted) if contains_test_text(doc, "fewclue")] == sorted(where)


def test_scan_memory_is_flat(sample_docs):
    """A generator corpus 10x longer peaks at the same memory: the scan keeps no document."""
    index = overlap_index("fewclue", DEFAULT_NGRAM)

    def peak(n_docs: int) -> int:
        docs = (sample_docs[i % 600][:100] for i in range(n_docs))
        tracemalloc.start()
        res = scan(docs, index)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert res["documents"] == n_docs
        return top

    small, large = peak(300), peak(3000)
    assert large < small * 1.5 + 100_000, (small, large)


# --- the commands ----------------------------------------------------------------------------------------
def test_eval_contamination_cli(planted_txt, capsys):
    assert eval_main(["contamination", str(planted_txt), "--suite", "fewclue", "--show-ids", "1"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    res = json.loads(out[-1])
    assert {t: r["ids"] for t, r in res["tasks"].items()} == _expected()
    assert res["ngram"] == 13 and res["tasks"]["fewclue/csl"]["share"] == 3 / 2838
    assert any(line.startswith("fewclue/csl ") and " 2,838 " in line for line in out)
    assert "fewclue/tnews: 304" in out and "fewclue/csl: 1429 ... (2 more)" in out


def test_clean_decontaminate_drops_exactly_the_planted_docs(planted_txt, tmp_path):
    keep, drop = tmp_path / "keep.jsonl", tmp_path / "drop.jsonl"
    assert clean_main([str(planted_txt), "-o", str(keep), "--workers", "1", "-q"]) == 0
    assert clean_main([str(planted_txt), "-o", str(drop), "--workers", "1", "-q", "--decontaminate", "fewclue"]) == 0
    report = json.loads(report_path(drop).read_text(encoding="utf-8"))
    assert report["filtered"]["contaminated"] == 5 and report["options"]["decontaminate"] == "fewclue"
    kept, dropped = (set(keep.read_text(encoding="utf-8").splitlines()),
                     set(drop.read_text(encoding="utf-8").splitlines()))
    gone = kept - dropped
    assert dropped < kept and len(gone) == 5
    assert all(contains_test_text(json.loads(line)["text"], "fewclue") for line in gone)
    # what clean kept is what the scan finds nothing in
    assert eval_main(["contamination", str(drop), "--suite", "fewclue"]) == 0


def test_clean_decontaminate_on_executor(planted_txt, tmp_path, capsys):
    """The datatrove path drops the same documents and counts them in OUTDIR/report.json."""
    out = tmp_path / "parts"
    assert clean_main([str(planted_txt), "-o", str(out), "--executor", "local", "--tasks", "2", "--workers", "2",
                       "-q", "--decontaminate", "fewclue"]) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["filtered"]["contaminated"] == 5
    local = tmp_path / "local.jsonl"
    assert clean_main([str(planted_txt), "-o", str(local), "--workers", "1", "-q", "--decontaminate", "fewclue"]) == 0
    parts = "".join(p.read_text(encoding="utf-8") for p in sorted(out.glob("part-*.jsonl")))
    assert parts == local.read_text(encoding="utf-8")
    capsys.readouterr()
    assert eval_main(["contamination", str(out), "--suite", "fewclue"]) == 0
    res = json.loads(capsys.readouterr().out.strip().split("\n")[-1])
    assert res["documents"] == report["docs_out"] and not any(r["ids"] for r in res["tasks"].values())


# --- bad input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["eval", "contamination", "{txt}", "--suite", "fewclu"], "did you mean 'fewclue'"),
    (["eval", "contamination", "{missing}"], "no such file or directory"),
    (["eval", "contamination", "{txt}", "--overlap-ngram", "5"], "--overlap-ngram 5: an n-gram must have 8"),
    (["clean", "{txt}", "-o", "{out}", "--decontaminate", "fewclu"], "unknown benchmark suite (did you mean 'fewclue'"),
    (["clean", "{txt}", "-o", "{out}", "--decontaminate", "all", "--overlap-ngram", "4"], "--overlap-ngram 4"),
])
def test_bad_input_is_one_line(argv, says, planted_txt, tmp_path):
    argv = [a.format(txt=planted_txt, missing=tmp_path / "nope.txt", out=tmp_path / "o.jsonl") for a in argv]
    with pytest.raises(ZhBertError) as e:
        {"eval": eval_main, "clean": clean_main}[argv[0]](argv[1:])
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "o.jsonl").exists()
