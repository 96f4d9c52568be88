"""Benchmark decontamination: `zh-bert eval contamination` and `zh-bert clean --decontaminate`.

Contamination that means contamination: on 521 real articles of PRC laws and regulations (tests/data/zh_law_articles,
full of the stock phrases test sets quote: 58 of them share a 13-character run with a FewCLUE test example) nothing
is found and nothing dropped; test examples of every length planted whole into them (40 TNEWS titles of 5 to 51
characters, an example of every FewCLUE task and a CMRC passage, re-spaced and in full-width forms) are all found,
and only they; a piece of an example, a title with one character changed, or a test text that ordinary Chinese holds
(a common phrase) is not. Reports list what matched: document, test example (task, split, id), share, text.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from conftest import DATA, TASKS

from zh_bert.cli import main as cli_main
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.benchmark_text import iter_test_examples, record_segments, suite_tasks
from zh_bert.corpus.clean import main as clean_main
from zh_bert.corpus.clean import report_path
from zh_bert.corpus.contamination import COMMON, DEFAULT_NGRAM, TOO_SHORT, contains_test_text, overlap_index, scan
from zh_bert.corpus.overlap_hash import KeySet, ngram_keys, overlap_text
from zh_bert.evaluation.commands.evaluate import main as eval_main

LAW = DATA / "zh_law_articles" / "articles.jsonl"


def _rows(task: str) -> list[dict]:
    return [json.loads(line) for line in (TASKS / "fewclue" / task / "test_public.json").read_text(
        encoding="utf-8").split("\n") if line.strip()]


def _row(task: str, line: int) -> dict:
    return _rows(task)[line]


def _full_width(text: str) -> str:
    """ASCII letters, digits and punctuation as their full-width forms (U+FF01...)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _spaced(text: str, every: int = 5, gap: str = "  ") -> str:
    return gap.join(text[i:i + every] for i in range(0, len(text), every))


def _write_jsonl(path, docs: list[tuple[str, str]]):
    path.write_text("".join(json.dumps({"text": t, "source": s}, ensure_ascii=False) + "\n" for s, t in docs),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def law_docs() -> list[tuple[str, str]]:
    """(source, text) of the 521 law articles."""
    rows = [json.loads(line) for line in LAW.read_text(encoding="utf-8").splitlines()]
    return [(r["source"], r["text"]) for r in rows]


def _tnews_titles() -> list[tuple[str, str]]:
    """40 TNEWS test titles (id, title): two of each length from 5 to 12 characters, 24 more evenly over the
    longer ones (to 51 characters)."""
    index = overlap_index("all")
    status = {i: s for t, i, s in zip(index.task, index.id, index.status.tolist()) if t == "fewclue/tnews"}
    rows = sorted((r for r in _rows("tnews") if status[str(r["id"])] != TOO_SHORT), key=lambda r: len(r["sentence"]))
    picked = [r for n in range(5, 13) for r in [r for r in rows if len(r["sentence"]) == n][:2]]
    longer = [r for r in rows if len(r["sentence"]) >= 13]
    picked += [longer[round(k * (len(longer) - 1) / 23)] for k in range(24)]
    return [(str(r["id"]), r["sentence"]) for r in picked]


def _whole_examples() -> list[tuple[str, str, str]]:
    """(task, id, text) of one example of every test set, as a copy in a corpus would hold it."""
    ocnli, bustm, chid, cmrc = _row("ocnli", 5), _row("bustm", 3), _row("chid", 3), next(iter_test_examples("cmrc2018"))
    return [
        ("fewclue/eprstmt", "35", _spaced(_row("eprstmt", 2)["sentence"])),                 # re-spaced review
        ("fewclue/eprstmt", "835", _row("eprstmt", 0)["sentence"]),                          # 25 characters
        ("fewclue/csldcp", "0", _full_width(_row("csldcp", 0)["content"])),                  # full-width forms
        ("fewclue/iflytek", "221", _row("iflytek", 0)["sentence"]),
        ("fewclue/ocnli", "5", _spaced(_full_width(ocnli["sentence1"]), 7, "\u3000") + ocnli["sentence2"]),
        ("fewclue/bustm", "121", bustm["sentence1"] + "？" + bustm["sentence2"]),              # two short queries
        ("fewclue/chid", "14", chid["content"].replace("#idiom#", chid["candidates"][chid["answer"]])),  # the idiom filled in
        ("fewclue/csl", "1429", _row("csl", 0)["abst"]),
        ("fewclue/cluewsc", "1180", _row("cluewsc", 0)["text"]),
        ("cmrc2018", cmrc.id, cmrc.text.split("\n")[0]),                                     # the passage alone
    ]


def _near_misses() -> list[str]:
    """Test text that is not a test example in a document: a piece of one, a title with one character changed,
    and a whole short example that ordinary Chinese holds (a common phrase)."""
    csl, title = _row("csl", 0)["abst"], _row("tnews", 7)["sentence"]
    common = next(r["sentence"] for r in _rows("eprstmt") if r["id"] == 1034)
    return [csl[20:45], title[:4] + "她" + title[5:], common]


def _plant(doc: str, piece: str) -> str:
    cut = doc.find("。") + 1 or len(doc) // 2
    return doc[:cut] + piece + doc[cut:]


@pytest.fixture(scope="module")
def planted(law_docs) -> tuple[list[tuple[str, str]], dict[int, tuple[str, str]]]:
    """The law articles with every plant in a document of its own: (documents, {document: (task, id)})."""
    docs, where = list(law_docs), {}
    plants = [("fewclue/tnews", i, t) for i, t in _tnews_titles()] + _whole_examples()
    for k, (task, ident, text) in enumerate(plants):
        at = 3 + 9 * k
        docs[at] = (docs[at][0], _plant(docs[at][1], text))
        where[at] = (task, ident)
    for k, text in enumerate(_near_misses()):
        at = 4 + 9 * k
        docs[at] = (docs[at][0], _plant(docs[at][1], text))
    return docs, where


@pytest.fixture(scope="module")
def planted_jsonl(planted, tmp_path_factory):
    return _write_jsonl(tmp_path_factory.mktemp("planted") / "planted.jsonl", planted[0])


def _shared_runs(docs: list[tuple[str, str]], suite: str) -> int:
    """Documents that share a 13-character run with a test example of `suite`: what the rule before this one
    (any shared n-gram) dropped."""
    keys = KeySet(np.concatenate([ngram_keys(overlap_text(s), DEFAULT_NGRAM) for ex in iter_test_examples(suite)
                                  for s in ex.text.split("\n")]))
    return sum(len(keys.where(ngram_keys(overlap_text(t), DEFAULT_NGRAM))) > 0 for _, t in docs)


# --- the pieces ------------------------------------------------------------------------------------------
def test_normalisation_and_hashes():
    assert overlap_text("ＨＪＴ 电池，\u3000很好\n") == "hjt电池,很好"
    a = ngram_keys(overlap_text("今天天气很好我们去公园散步吧"), 13)
    b = ngram_keys(overlap_text("今天 天气很好，我们去公园散步吧"), 13)
    assert len(a) == 2 and len(set(a.tolist()) | set(b.tolist())) == 2 + len(b)   # the comma breaks every window
    assert ngram_keys("短句", 13).size == 0


def test_test_text_rule():
    """String values except id/label-like keys and TNEWS's tags, ChID's blank a break, CMRC = context + question
    per question, each example with its split."""
    row = _row("ocnli", 5)
    assert list(record_segments(row)) == [row["sentence1"], row["sentence2"]]
    tnews = _row("tnews", 7)
    assert list(record_segments(tnews)) == [tnews["sentence"]]   # its keywords are the site's tags, not read
    chid = _row("chid", 3)
    segments = list(record_segments(chid))
    assert segments[:7] == chid["candidates"] and "#idiom#" not in "".join(segments)
    examples = list(iter_test_examples("cmrc2018"))
    assert len(examples) == 3219 and examples[0].id == "DEV_0_QUERY_0" and examples[0].split == "dev"
    assert examples[0].text.endswith("\n《战国无双3》是由哪两个公司合作开发的？")
    counts = {t: 0 for t in suite_tasks("fewclue")}
    for ex in iter_test_examples("fewclue"):
        counts[ex.task] += 1
        assert ex.split == "test_public"
    assert counts["fewclue/csldcp"] == 1784 and counts["fewclue/csl"] == 2838   # every record, repeated ids too


# --- the class: contamination that means contamination ---------------------------------------------------
def test_decontamination_on_real_law_text_drops_nothing(law_docs, tmp_path):
    """58 of the articles share a stock phrase with a FewCLUE test example (the rule before dropped 129, TNEWS's
    keywords counted), none holds one: the scan finds nothing and clean drops nothing."""
    assert _shared_runs(law_docs, "fewclue") == 58
    res = scan(iter(law_docs), overlap_index("all"))
    assert res["documents"] == 521 and res["documents_with_test_text"] == 0 and res["contaminated_documents"] == []
    assert not any(t["contaminated"] for t in res["tasks"].values())
    plain, decon = tmp_path / "plain.jsonl", tmp_path / "decon.jsonl"
    assert clean_main([str(LAW), "-o", str(plain), "--workers", "1", "-q"]) == 0
    assert clean_main([str(LAW), "-o", str(decon), "--workers", "1", "-q", "--decontaminate", "all"]) == 0
    assert decon.read_bytes() == plain.read_bytes()
    report = json.loads(report_path(decon).read_text(encoding="utf-8"))
    assert "contaminated" not in report["filtered"] and report["contaminated_documents"] == []


def test_planted_test_items_of_every_length_are_found(planted):
    """Every planted example is found, titles under 13 characters included, in its own document and nowhere
    else; a piece of an example, a title with one character changed and a common phrase are not."""
    docs, where = planted
    titles = _tnews_titles()
    assert sum(len(t) < 13 for _, t in titles) == 16 and min(len(t) for _, t in titles) == 5
    index = overlap_index("all")
    found = {i: [(index.task[m.item], index.id[m.item], m.share) for m in index.matches(text)]
             for i, (_, text) in enumerate(docs)}
    assert {i for i, f in found.items() if f} == set(where)
    for i, (task, ident) in where.items():
        assert (task, ident) in {(t, d) for t, d, _ in found[i]}, (task, ident, found[i])
    res = scan(iter(docs), index)
    picked = {i for i, _ in titles}
    assert res["tasks"]["fewclue/tnews"]["ids"] == [str(r["id"]) for r in _rows("tnews") if str(r["id"]) in picked]
    assert all(f["share"] == 1.0 for f in res["tasks"]["fewclue/tnews"]["found"])
    assert res["tasks"]["cmrc2018"]["found"][0]["share"] > 0.9          # the passage without its question
    common = index.id.index("1034", index.task.index("fewclue/eprstmt"))
    assert index.status[common] == COMMON                               # 用着还可以: ordinary Chinese holds it


def test_contamination_report_lists_what_matched(planted, planted_jsonl, tmp_path, capsys):
    """`eval contamination` (table and JSON) and clean's report say, for each contaminated document, which test
    example (task, split, id), the share of it found and the matched text."""
    docs, where = planted
    capsys.readouterr()
    assert eval_main(["contamination", str(planted_jsonl), "--suite", "fewclue", "--show-ids", "1"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    res = json.loads(out[-1])
    listed = res["contaminated_documents"]
    assert [d["document"] for d in listed] == [f"{planted_jsonl}:{i + 1}" for i in sorted(where)
                                               if where[i][0] != "cmrc2018"]
    bustm = next(d for d in listed if d["document"] == f"{planted_jsonl}:{3 + 9 * 45 + 1}")
    assert bustm["matches"] == [{"task": "fewclue/bustm", "split": "test_public", "id": "121", "share": 1.0,
                                 "text": overlap_text(_row("bustm", 3)["sentence1"])}]
    csl = next(d for d in listed if d["document"] == f"{planted_jsonl}:{3 + 9 * 47 + 1}")
    abstract = _row("csl", 0)["abst"]   # CSL pairs an abstract with several keyword sets: 3 records hold it
    assert [m["id"] for m in csl["matches"]] == [str(r["id"]) for r in _rows("csl") if r["abst"] == abstract]
    assert len(csl["matches"]) == 3 and all(m["share"] == 1.0 and m["split"] == "test_public" and "…" in m["text"]
                                            and m["text"].split("…")[0] in overlap_text(abstract)
                                            for m in csl["matches"])
    first = res["tasks"]["fewclue/tnews"]["found"][0]
    assert f"fewclue/tnews test_public {first['id']}: 100% in {first['document']}: {first['text']}" in out
    assert "fewclue/tnews: ... (39 more)" in out and res["overlap_share"] == 0.5
    decon = tmp_path / "decon.jsonl"
    assert clean_main([str(planted_jsonl), "-o", str(decon), "--workers", "1", "-q", "--decontaminate", "fewclue",
                       "--no-repetition"]) == 0   # statutes repeat themselves: every document reaches the check
    report = json.loads(report_path(decon).read_text(encoding="utf-8"))
    assert report["filtered"]["contaminated"] == len(listed) and report["contaminated_documents"] == listed
    capsys.readouterr()
    assert eval_main(["contamination", str(decon), "--suite", "fewclue"]) == 0   # what clean kept holds none
    assert json.loads(capsys.readouterr().out.strip().split("\n")[-1])["documents_with_test_text"] == 0


def test_clean_decontaminate_on_executor(planted_jsonl, tmp_path):
    """The datatrove path drops the same documents and lists the same matches in OUTDIR/report.json."""
    out, local = tmp_path / "parts", tmp_path / "local.jsonl"
    assert clean_main([str(planted_jsonl), "-o", str(out), "--executor", "local", "--tasks", "2", "--workers", "2",
                       "-q", "--decontaminate", "fewclue", "--no-repetition"]) == 0
    assert clean_main([str(planted_jsonl), "-o", str(local), "--workers", "1", "-q", "--decontaminate", "fewclue",
                       "--no-repetition"]) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    mine = json.loads(report_path(local).read_text(encoding="utf-8"))
    assert report["filtered"]["contaminated"] == mine["filtered"]["contaminated"] == 49   # 40 titles, 9 tasks
    assert report["contaminated_documents"] == mine["contaminated_documents"]
    parts = "".join(p.read_text(encoding="utf-8") for p in sorted(out.glob("part-*.jsonl")))
    assert parts == local.read_text(encoding="utf-8")


def test_scan_memory_is_flat(sample_docs):
    """A generator corpus 10x longer peaks at the same memory: the scan keeps no document."""
    index = overlap_index("fewclue", DEFAULT_NGRAM)

    def peak(n_docs: int) -> int:
        docs = ((f"doc {i}", sample_docs[i % 600][:100]) for i in range(n_docs))
        tracemalloc.start()
        res = scan(docs, index)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert res["documents"] == n_docs
        return top

    small, large = peak(300), peak(3000)
    assert large < small * 1.5 + 100_000, (small, large)


def test_contains_test_text_is_what_clean_drops(planted):
    docs, where = planted
    assert [i for i, (_, d) in enumerate(docs) if contains_test_text(d, "fewclue")] == sorted(
        i for i, (task, _) in where.items() if task != "cmrc2018")


# --- bad input -------------------------------------------------------------------------------------------
def test_contamination_of_an_empty_dir_or_file_is_one_line(tmp_path, capsys):
    """An empty directory, an empty file and a file of blank lines: exit 2, one line naming it, no traceback."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "blank.txt").write_text("\n  \n\n", encoding="utf-8")
    for name, says in [("empty", "no corpus files"), ("empty.txt", "no documents"), ("blank.txt", "no documents")]:
        capsys.readouterr()
        assert cli_main(["eval", "contamination", str(tmp_path / name)]) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and err.startswith("zh-bert eval: error: ") and "Traceback" not in err, err
        assert str(tmp_path / name) in err and says in err, err
        assert out == ""


@pytest.mark.parametrize("argv, says", [
    (["eval", "contamination", "{txt}", "--suite", "fewclu"], "did you mean 'fewclue'"),
    (["eval", "contamination", "{missing}"], "no such file or directory"),
    (["eval", "contamination", "{txt}", "--overlap-ngram", "5"], "--overlap-ngram 5: an n-gram must have 8"),
    (["eval", "contamination", "{txt}", "--overlap-share", "0"], "--overlap-share 0.0: a share"),
    (["eval", "contamination", "{txt}", "--overlap-share", "1.5"], "--overlap-share 1.5: a share"),
    (["clean", "{txt}", "-o", "{out}", "--decontaminate", "fewclu"], "unknown benchmark suite (did you mean 'fewclue'"),
    (["clean", "{txt}", "-o", "{out}", "--decontaminate", "all", "--overlap-ngram", "4"], "--overlap-ngram 4"),
    (["clean", "{txt}", "-o", "{out}", "--decontaminate", "all", "--overlap-share", "2"], "--overlap-share 2.0"),
])
def test_bad_input_is_one_line(argv, says, planted_jsonl, tmp_path):
    argv = [a.format(txt=planted_jsonl, missing=tmp_path / "nope.txt", out=tmp_path / "o.jsonl") for a in argv]
    with pytest.raises(ZhBertError) as e:
        {"eval": eval_main, "clean": clean_main}[argv[0]](argv[1:])
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "o.jsonl").exists()
