"""`zh-bert clean`: every reader, normaliser, filter reason and dedup mode, on real Chinese text
(corpora/sample, corpora/tasks, tests/data/clean); bad inputs; an interrupted run."""

from __future__ import annotations

import bz2
import gzip
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import DATA, GOOGLE_VOCAB, SAMPLE, TASKS, read_lines

from zh_bert.corpus.clean import CleanConfig, DocCleaner, main, report_path
from zh_bert.corpus.clean.dedup import MinHashConfig, MinHasher, lsh_params
from zh_bert.corpus.clean.filters import FilterConfig, quality_reason, remove_boilerplate
from zh_bert.corpus.clean.normalize import (PII_TOKENS, NormalizeConfig, Normalizer, collapse_whitespace,
                                     fullwidth_to_halfwidth, mask_pii, remove_invisible, strip_html)
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import read_vocab_txt

CLEAN = DATA / "clean"
WIKI00 = SAMPLE / "zhwiki_wikiextractor" / "AA" / "wiki_00"
XML = CLEAN / "zhwiki-20230101-pages-articles-sample.xml"
DRCD = DATA / "drcd_zh_tw" / "DRCD_dev.json"


def run(inputs, out: Path, *args) -> tuple[list[dict], dict]:
    """zh_bert.corpus.clean.main in-process (as the pretrain pipeline calls it); returns (docs, report)."""
    assert main([*map(str, inputs), "-o", str(out), "--workers", "1", *args]) == 0
    docs = [json.loads(l) for l in out.read_text(encoding="utf-8").split("\n") if l]
    return docs, json.loads(report_path(out).read_text(encoding="utf-8"))


def texts(docs):
    return [d["text"] for d in docs]


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zh_bert", "clean", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def traditional_only(text: str) -> int:
    """Characters that OpenCC t2s would change (= have a different simplified form)."""
    import opencc

    cc = opencc.OpenCC("t2s")
    return sum(1 for a, b in zip(text, cc.convert(text)) if a != b)


@pytest.fixture(scope="module")
def clue_lines():
    return read_lines(SAMPLE / "CLUECorpusSmall_sampled.txt", 400)


@pytest.fixture(scope="module")
def wiki_lines():
    return read_lines(SAMPLE / "zhwiki_sampled.txt", 400)


# --- readers -----------------------------------------------------------------------------------------
def test_text_one_doc_per_line_output_contract(tmp_path, wiki_lines):
    src = tmp_path / "wiki.txt"
    src.write_text("\n".join(wiki_lines[:200]) + "\n", encoding="utf-8")
    docs, report = run([src], tmp_path / "docs.jsonl")
    assert report_path(tmp_path / "docs.jsonl") == tmp_path / "docs.report.json"
    assert all(set(d) == {"text", "source"} and d["text"] for d in docs)
    assert docs[0]["source"] == f"{src}:3"  # lines 1-2 are title-only stubs ('1988 CX2'): too_short
    assert report["docs_in"] == 200 and report["docs_out"] == len(docs)
    assert report["docs_out"] + sum(report["filtered"].values()) + sum(report["duplicates"].values()) == 200
    assert report["filtered"]["too_short"] > 0
    for key in ("chars_in", "chars_out", "bytes_in", "seconds", "mb_per_s", "inputs", "options", "pii",
                "unreadable", "lines_removed"):
        assert key in report
    assert report["options"]["normalize"]["convert"] == "t2s" and report["options"]["dedup"] == "exact"


def test_text_blank_line_separated(tmp_path):
    lines = (SAMPLE / "CLUECorpusSmall_5000_lines_bert.txt").read_text(encoding="utf-8").split("\n")[:400]
    src = tmp_path / "bert.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    groups = [g for g in "\n".join(lines).split("\n\n") if g.strip()]
    docs, report = run([src], tmp_path / "o.jsonl", "--doc-sep", "blank", "--dedup", "none")
    assert report["docs_in"] == len(groups) > 30
    assert any(d["text"].count("\n") >= 3 for d in docs)  # paragraphs kept, joined by \n
    assert docs[0]["text"].split("\n")[0] == lines[0].strip()


def test_thucnews_style_folder_one_doc_per_file(tmp_path, clue_lines):
    news = [l for l in clue_lines if "原标题" not in l and len(l) > 300][:6]
    for i, body in enumerate(news):
        d = tmp_path / "THUCNews" / ("体育" if i % 2 else "财经")
        d.mkdir(parents=True, exist_ok=True)
        title, rest = body[:15], body[15:]
        paras = [rest[j:j + 120] for j in range(0, len(rest), 120)]
        (d / f"{i}.txt").write_text(title + "\n" + "\n".join("\u3000\u3000" + p for p in paras) + "\n",
                                    encoding="utf-8")
    (tmp_path / "THUCNews" / "README.md").write_text("# not a corpus file\n", encoding="utf-8")
    docs, report = run([tmp_path / "THUCNews"], tmp_path / "o.jsonl", "--doc-sep", "file")
    assert len(docs) == 6 and report["skipped_files"] == [str(tmp_path / "THUCNews" / "README.md")]
    assert [d["source"].split("/")[-2] for d in docs] == ["体育"] * 3 + ["财经"] * 3  # sorted walk
    for d in docs:
        assert "\u3000" not in d["text"] and d["text"].count("\n") >= 2


def test_jsonl_field(tmp_path, sample_jsonl):
    docs, report = run([sample_jsonl], tmp_path / "o.jsonl")
    assert report["docs_in"] == 600 and len(docs) > 300
    src = tmp_path / "c.jsonl"
    rows = [json.loads(l) for l in sample_jsonl.read_text(encoding="utf-8").split("\n")[:50] if l]
    src.write_text("\n".join(json.dumps({"id": i, "content": r["text"]}, ensure_ascii=False)
                             for i, r in enumerate(rows)) + "\n", encoding="utf-8")
    docs2, _ = run([src], tmp_path / "o2.jsonl", "--field", "content")
    docs3, _ = run([src], tmp_path / "o3.jsonl")  # no --field: 'content' is found automatically
    assert texts(docs2) == texts(docs3) and len(docs2) > 20
    with pytest.raises(ZhBertError, match="no documents"):
        run([src], tmp_path / "o4.jsonl", "--field", "body")  # a field that no record has


def test_clue_style_json_and_squad_json(tmp_path):
    docs, report = run([TASKS / "fewclue" / "tnews" / "train_few_all.json"], tmp_path / "t.jsonl", "--min-chars", "8")
    assert report["docs_in"] > 200 and len(docs) > 150  # CLUE task file: JSON lines with 'sentence'
    docs, report = run([DRCD], tmp_path / "d.jsonl")
    articles = json.loads(DRCD.read_text(encoding="utf-8"))["data"]
    assert report["docs_in"] == len(articles)
    assert docs[0]["text"].count("\n") == len(articles[0]["paragraphs"]) - 1


def test_drcd_traditional_converted(tmp_path):
    """Done-means: DRCD (zh-TW) paragraphs leave under 0.5% traditional-only characters."""
    before = "".join(p["context"] for a in json.loads(DRCD.read_text(encoding="utf-8"))["data"]
                     for p in a["paragraphs"])
    docs, _ = run([DRCD.parent], tmp_path / "d.jsonl")   # the directory, as the issue says
    after = "".join(texts(docs))
    assert traditional_only(before) / len(before) > 0.15
    assert traditional_only(after) / len(after) < 0.005
    assert traditional_only(after) / len(after) < 0.001


def test_wikiextractor_one_doc_per_article(tmp_path):
    docs, report = run([WIKI00], tmp_path / "w.jsonl", "--min-chars", "1")
    n_articles = WIKI00.read_text(encoding="utf-8").count("<doc ")
    assert report["docs_in"] == n_articles == 64
    assert all("<doc" not in d["text"] and "</doc>" not in d["text"] for d in docs)
    math = docs[0]
    assert math["source"].endswith("#13") and math["text"].startswith("数学是利用符号语言研究数量")
    assert math["text"].count("\n") > 10  # the whole article, paragraph by paragraph
    assert traditional_only("".join(texts(docs))) / sum(map(len, texts(docs))) < 0.005


def test_mediawiki_xml_dump_and_bz2(tmp_path):
    docs, report = run([XML], tmp_path / "x.jsonl")
    assert [d["source"].rsplit("#", 1)[1] for d in docs] == ["13", "18"]  # redirect and Talk: skipped
    assert report["docs_in"] == 2
    for d in docs:
        for junk in ("[[", "]]", "{{", "}}", "'''", "<ref", "Category", "thumb", "==", "-{", "wikitable", "http"):
            assert junk not in d["text"], junk
    assert docs[0]["text"].startswith("数学是利用符号语言研究数量、结构")
    assert "计算机科学与数学密切相关" in docs[0]["text"]  # -{zh-hans:..;zh-hant:..}- → simplified variant
    bz = tmp_path / "zhwiki-20230101-pages-articles-sample.xml.bz2"
    bz.write_bytes(bz2.compress(XML.read_bytes()))
    docs_bz, _ = run([bz], tmp_path / "xb.jsonl")
    assert texts(docs_bz) == texts(docs)


def test_directory_recursive_and_gzip(tmp_path, wiki_lines, clue_lines):
    root = tmp_path / "corpus"
    (root / "b" / "c").mkdir(parents=True)
    (root / "a.txt").write_text("\n".join(wiki_lines[:100]) + "\n", encoding="utf-8")
    with gzip.open(root / "b" / "c" / "d.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(clue_lines[:100]) + "\n")
    (root / "b" / "SOURCE.md").write_text("source notes", encoding="utf-8")
    docs, report = run([root], tmp_path / "o.jsonl")
    assert [i["path"] for i in report["inputs"]] == [str(root / "a.txt"), str(root / "b" / "c" / "d.txt.gz")]
    assert [i["docs"] for i in report["inputs"]] == [100, 100]
    assert report["skipped_files"] == [str(root / "b" / "SOURCE.md")]
    assert any(d["source"].startswith(str(root / "b" / "c" / "d.txt.gz")) for d in docs)


# --- encodings and broken input ------------------------------------------------------------------------
def test_broken_or_foreign_xml(tmp_path):
    cut = tmp_path / "zhwiki-cut-pages-articles.xml"
    cut.write_bytes(XML.read_bytes()[:3000])  # a dump cut short mid-page
    other = tmp_path / "other.xml"
    other.write_text("<root><p>数学是利用符号语言研究数量的学科。</p></root>\n", encoding="utf-8")
    for src, msg in ((cut, "not a complete MediaWiki XML dump"), (other, "root element is not <mediawiki>")):
        r = cli(src, "-o", tmp_path / "o.jsonl")
        assert r.returncode == 2 and str(src) in r.stderr and msg in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "o.jsonl").exists()


def test_gbk_and_big5_detected(tmp_path):
    gbk_lines = (CLEAN / "clue_gbk.txt").read_bytes().decode("gbk").split("\n")
    docs, report = run([CLEAN / "clue_gbk.txt"], tmp_path / "g.jsonl", "--min-chars", "1")
    assert report["inputs"][0]["encoding"] == "gb18030" and report["docs_in"] == 40
    assert texts(docs)[0] == collapse_whitespace(fullwidth_to_halfwidth(gbk_lines[0]))
    docs, report = run([CLEAN / "drcd_big5.txt"], tmp_path / "b.jsonl")
    assert report["inputs"][0]["encoding"] == "big5" and report["docs_in"] == 30
    assert traditional_only("".join(texts(docs))) == 0
    docs2, _ = run([CLEAN / "clue_gbk.txt"], tmp_path / "g2.jsonl", "--min-chars", "1", "--encoding", "gbk")
    assert len(docs2) == 40


def test_undetectable_encoding_rejected(tmp_path):
    src = tmp_path / "random.bin"
    src.write_bytes(bytes(range(128, 256)) * 300)
    out = tmp_path / "o.jsonl"
    r = cli(src, "-o", out)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert str(src) in r.stderr and "--encoding" in r.stderr
    assert not out.exists() and not report_path(out).exists()
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".o.jsonl")]


def test_utf8_sample_cut_mid_character_is_utf8(tmp_path, clue_lines):
    """One real Chinese line longer than the 64 KiB encoding sample: the sample ends inside a character,
    which is not a reason to call the file something other than UTF-8."""
    from zh_bert.corpus.clean.readers import SNIFF_BYTES, detect_encoding

    line = ""
    for l in clue_lines:
        line += l.strip()
        if len(line.encode("utf-8")) > SNIFF_BYTES + 1000:
            break
    data = line.encode("utf-8")
    cont = lambda byte: 0x80 <= byte < 0xC0  # noqa: E731 (a UTF-8 continuation byte)
    start = next(i for i in range(len(data)) if not cont(data[i]) and cont(data[i + SNIFF_BYTES]))
    src = tmp_path / "long.txt"
    src.write_bytes(data[start:] + b"\n")                 # its first 64 KiB end inside a character
    assert detect_encoding(src, src.read_bytes()[:SNIFF_BYTES]) == "utf-8"
    docs, report = run([src], tmp_path / "o.jsonl", "--max-chars", "1000000")
    assert len(docs) == 1 and report["inputs"][0]["encoding"] == "utf-8"


def test_invalid_bytes_in_the_middle(tmp_path, clue_lines):
    raw = [l.encode("utf-8") for l in clue_lines[:20]]
    raw[9] = raw[9][:30] + b"\xff\xfe\xc3" + raw[9][30:]  # line 10: broken bytes mid-line
    src = tmp_path / "broken.txt"
    src.write_bytes(b"\n".join(raw) + b"\n")
    docs, report = run([src], tmp_path / "o.jsonl", "--min-chars", "1")
    assert report["unreadable"]["counts"] == {"undecodable": 1}
    assert report["unreadable"]["where"]["undecodable"][0].startswith(f"{src}:10:")
    assert report["docs_in"] == 19 and f"{src}:11" in [d["source"] for d in docs]


def test_broken_json_line(tmp_path, clue_lines):
    rows = [json.dumps({"text": t}, ensure_ascii=False) for t in clue_lines[:10]]
    rows[2] = rows[2][:-5]  # truncated line 3
    src = tmp_path / "b.jsonl"
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    docs, report = run([src], tmp_path / "o.jsonl", "--min-chars", "1")
    assert report["unreadable"]["counts"] == {"bad_json": 1}
    assert report["unreadable"]["where"]["bad_json"][0].startswith(f"{src}:3")
    assert report["docs_in"] == 9


def test_empty_file(tmp_path, clue_lines):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = tmp_path / "o.jsonl"
    r = cli(empty, "-o", out)
    assert r.returncode == 2 and "no documents" in r.stderr and not out.exists()
    good = tmp_path / "good.txt"
    good.write_text("\n".join(clue_lines[:20]) + "\n", encoding="utf-8")
    docs, report = run([empty, good], out)
    assert [i["docs"] for i in report["inputs"]] == [0, 20] and docs


def test_missing_file_clear_error_nothing_written(tmp_path, clue_lines):
    good = tmp_path / "good.txt"
    good.write_text("\n".join(clue_lines[:20]) + "\n", encoding="utf-8")
    out = tmp_path / "out" / "o.jsonl"
    r = cli(good, tmp_path / "nope.txt", "-o", out)
    assert r.returncode == 2
    assert r.stderr.strip() == f"zh-bert clean: error: {tmp_path / 'nope.txt'}: no such file or directory"
    assert "Traceback" not in r.stderr and not out.parent.exists()


def test_interrupted_run_leaves_no_complete_looking_output(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "w", encoding="utf-8") as f:
        for i in range(6):  # ~25 MB, distinct per copy so that nothing is deduplicated
            for line in read_lines(SAMPLE / "zhwiki_sampled.txt") + read_lines(SAMPLE / "CLUECorpusSmall_sampled.txt"):
                f.write(f"{line}（第{i}份）\n")
    out = tmp_path / "o.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "zh_bert", "clean", str(big), "-o", str(out), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = tmp_path / f".o.jsonl.tmp-{proc.pid}"
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp.exists() and tmp.stat().st_size > 0):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert tmp.exists(), "the run should have been writing its temp file"
    assert not out.exists() and not report_path(out).exists()
    # A later run cleans the dead run's temp file up and completes.
    small = tmp_path / "small.txt"
    small.write_text("\n".join(read_lines(SAMPLE / "zhwiki_sampled.txt", 50)) + "\n", encoding="utf-8")
    docs, _ = run([small], out)
    assert docs and not tmp.exists()


# --- normalisers ---------------------------------------------------------------------------------------
def test_opencc_conversions():
    para = json.loads(DRCD.read_text(encoding="utf-8"))["data"][0]["paragraphs"][0]["context"]
    for conv in ("t2s", "tw2s", "hk2s"):
        out = Normalizer(NormalizeConfig(convert=conv))(para)
        assert traditional_only(out) == 0 and out.startswith("在欧洲，梵语的学术研究")
    assert Normalizer(NormalizeConfig(convert="none"))(para).startswith("在歐洲，梵語的學術研究")
    assert Normalizer(NormalizeConfig(convert="tw2s"))("滑鼠和軟體") == "滑鼠和软体"


def test_fullwidth_invisible_html_whitespace(clue_lines):
    assert fullwidth_to_halfwidth("ＵＣＬＡ陶哲轩手下读博是什么感受？２０１５年，　很好！") == \
        "UCLA陶哲轩手下读博是什么感受？2015年， 很好！"
    assert remove_invisible("在UCLA\u200b陶哲轩\ufeff手下\u200d读博\x07是什么\t感受") == "在UCLA陶哲轩手下读博是什么 感受"
    html = ("<div class='post'><p>地方比较干净，环境也还不错，菜味道可以。</p><p>三文鱼刺身49元&#26020;，"
            "分量也算够足&amp;&nbsp;烤生蚝味道也不错</p><script>var x = '<p>广告</p>';</script><!-- x --></div>")
    out = Normalizer(NormalizeConfig())(html)
    assert out == "地方比较干净，环境也还不错，菜味道可以。\n三文鱼刺身49元斤，分量也算够足& 烤生蚝味道也不错"
    assert strip_html("a < b 和 c > d") == "a < b 和 c > d"  # not tags
    assert collapse_whitespace("  致粉丝的一封信：初冬来了 秋却依依不舍 留下礼物  ——雨\n\n\n Hello   world ") == \
        "致粉丝的一封信：初冬来了秋却依依不舍留下礼物——雨\nHello world"


def test_normalising_twice_changes_nothing(wiki_lines, clue_lines):
    """Cleaned text can be cleaned again (a pipeline re-run): placeholders survive the HTML step.
    (OpenCC t2s itself is not idempotent on a few characters, so it is off here.)"""
    norm = Normalizer(NormalizeConfig(convert="none"))
    extra = ["<p>联系 13812345678，访问 https://zh.wikipedia.org/wiki/Main 或 <b>邮件</b> zhang@example.cn</p>"]
    for doc in wiki_lines[:200] + clue_lines[:200] + extra:
        once = norm(doc)
        assert norm(once) == once


def test_each_normaliser_can_be_turned_off(tmp_path, clue_lines):
    raw = ("<p>ＵＣＬＡ的\u200b陶哲轩 手下 读博是什么感受？</p>數學，联系 13812345678 " + clue_lines[2])
    src = tmp_path / "x.txt"
    src.write_text(raw + "\n", encoding="utf-8")
    on = texts(run([src], tmp_path / "on.jsonl")[0])[0]
    assert on.startswith("UCLA的陶哲轩手下读博是什么感受？\n数学，联系 <PHONE>")
    off = texts(run([src], tmp_path / "off.jsonl", "--no-html", "--no-fullwidth", "--no-control",
                    "--no-whitespace", "--convert", "none", "--pii", "keep")[0])[0]
    assert off == raw


def test_pii_mask_drop_keep():
    text = ("如有问题请致电13812345678或138-1234-5678，发邮件到zhang.san@example.com.cn，访问"
            "https://zh.wikipedia.org/wiki/Main 了解。身份证号11010519491231002X。订单号110105194912310021。")
    counts = Counter()
    masked = mask_pii(text, "mask", counts)
    assert masked == ("如有问题请致电<PHONE>或<PHONE>，发邮件到<EMAIL>，访问<URL> 了解。身份证号<ID>。"
                      "订单号110105194912310021。")  # wrong check digit: not an ID number
    assert counts == {"phone": 2, "email": 1, "url": 1, "idcard": 1}
    assert mask_pii(text, "drop") == "如有问题请致电或，发邮件到，访问 了解。身份证号。订单号110105194912310021。"
    assert mask_pii(text, "keep") == text
    assert mask_pii("2015年5月20日起开行，票价138元，共13812人次", "mask") == "2015年5月20日起开行，票价138元，共13812人次"
    # Placeholders tokenise into known BERT pieces ('<', 'url', '>'), never [UNK].
    vocab = set(read_vocab_txt(GOOGLE_VOCAB))
    for tok in PII_TOKENS.values():
        assert {"<", ">", tok[1:-1].lower()} <= vocab, tok


# --- filters -------------------------------------------------------------------------------------------
def test_every_filter_reason(wiki_lines, clue_lines):
    cfg = FilterConfig()
    long_doc = next(l for l in clue_lines if len(l) > 400)
    sentence = "地方比较干净，环境也还不错，菜味道可以。"
    assert quality_reason(long_doc, cfg) is None
    assert quality_reason("", cfg) == "empty"
    assert quality_reason("1988 CX2", cfg) == "too_short"
    assert quality_reason(long_doc, FilterConfig(max_chars=300)) == "too_long"
    english = "Origin: GitHub Tencent/TencentPretrain, path corpora/zhwiki_sampled.txt, added in commit 66d32cf"
    assert quality_reason(english + " 中文", cfg) == "low_cjk"
    paras = [l[:80] for l in clue_lines[:6]]
    assert quality_reason("\n".join(paras + [paras[0]] * 4), cfg) == "dup_lines"
    short = [l[:40] for l in clue_lines[:8]]
    assert quality_reason("\n".join(short + [long_doc[:300]] * 2), cfg) == "dup_line_chars"
    assert quality_reason("哈哈哈哈哈哈哈哈哈哈" * 12 + long_doc[:100], cfg) == "top_ngram"
    assert quality_reason(long_doc[:150] + sentence * 4 + long_doc[:150], cfg) == "dup_ngram"
    assert remove_boilerplate("点击关注我们\n" + long_doc + "\n版权所有 © 2019 南宁微生活") == (long_doc, 2)


def test_filter_reasons_in_report(tmp_path, clue_lines):
    long_doc = next(l for l in clue_lines if len(l) > 400)
    src = tmp_path / "mixed.txt"
    docs = ["1988 CX2", "Origin: GitHub Tencent/TencentPretrain, path corpora/zhwiki_sampled.txt 中文",
            "哈哈哈哈哈哈哈哈哈哈" * 12 + long_doc[:100], "扫描二维码关注我们", long_doc]
    src.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    out, report = run([src], tmp_path / "o.jsonl", "--doc-sep", "blank")
    assert report["filtered"] == {"too_short": 1, "low_cjk": 1, "top_ngram": 1, "boilerplate": 1}
    assert report["lines_removed"]["boilerplate"] == 1 and len(out) == 1
    out2, report2 = run([src], tmp_path / "o2.jsonl", "--doc-sep", "blank", "--no-repetition",
                        "--no-boilerplate", "--min-chars", "1", "--min-cjk-ratio", "0")
    assert len(out2) == 5 and report2["filtered"] == {}


# --- deduplication -------------------------------------------------------------------------------------
def test_exact_dedup_file_twice(tmp_path, clue_lines):
    src = tmp_path / "a.txt"
    src.write_text("\n".join(clue_lines[:150]) + "\n", encoding="utf-8")
    copy = tmp_path / "sub" / "a_copy.txt"
    copy.parent.mkdir()
    shutil.copy(src, copy)
    once, _ = run([src], tmp_path / "once.jsonl")
    twice, report = run([src, copy], tmp_path / "twice.jsonl")
    assert texts(twice) == texts(once)
    assert report["duplicates"]["exact"] == len(once)
    nodedup, _ = run([src, copy], tmp_path / "none.jsonl", "--dedup", "none")
    assert len(nodedup) == 2 * len(once)


def _near_copies(docs):
    """Each document with 3 characters changed and a short tail added: 5-gram Jaccard ~0.9."""
    out = []
    for d in docs:
        n = len(d)
        s = list(d)
        for k in (n // 4, n // 2, 3 * n // 4):
            s[k] = "的" if s[k] != "的" else "了"
        out.append("".join(s) + "（转载）")
    return out


def test_minhash_near_duplicates_collapse(tmp_path, wiki_lines, clue_lines):
    norm, cfg = Normalizer(NormalizeConfig()), FilterConfig()
    base = [l for l in wiki_lines + clue_lines if len(l) >= 300 and quality_reason(norm(l), cfg) is None][:40]
    src = tmp_path / "near.txt"
    src.write_text("\n".join(base + _near_copies(base)) + "\n", encoding="utf-8")
    exact, _ = run([src], tmp_path / "e.jsonl")
    near, report = run([src], tmp_path / "m.jsonl", "--dedup", "minhash")
    assert len(exact) == 80
    assert texts(near) == texts(exact)[:40]  # the first occurrence is kept
    assert report["duplicates"] == {"exact": 0, "near": 40}


def test_minhash_signature_estimates_jaccard(wiki_lines):
    mh = MinHasher(MinHashConfig(num_perm=256))
    a = next(l for l in wiki_lines if len(l) > 500)
    b = _near_copies([a])[0]
    sh_a, sh_b = set(mh.shingles(a).tolist()), set(mh.shingles(b).tolist())
    jac = len(sh_a & sh_b) / len(sh_a | sh_b)
    est = float((mh.signature(a) == mh.signature(b)).mean())
    assert abs(est - jac) < 0.08
    assert lsh_params(0.8, 128) == (12, 10)
    assert lsh_params(0.8, 128, fn_weight=0.5) == (9, 13)  # datasketch's default choice


def test_output_independent_of_workers(tmp_path, wiki_lines, clue_lines):
    src = tmp_path / "x.txt"
    src.write_text("\n".join(wiki_lines + clue_lines) + "\n", encoding="utf-8")
    args = [str(src), "--dedup", "minhash", "-q"]
    assert main([*args, "-o", str(tmp_path / "w1.jsonl"), "--workers", "1"]) == 0
    assert main([*args, "-o", str(tmp_path / "w2.jsonl"), "--workers", "2"]) == 0
    assert (tmp_path / "w1.jsonl").read_bytes() == (tmp_path / "w2.jsonl").read_bytes()


def test_forkserver_when_threads_run(tmp_path, clue_lines):
    """With another thread alive, workers start by forkserver (fork could deadlock); same output. fsspec's
    event-loop thread (datatrove starts it) does not count: fsspec resets it in a forked child."""
    import threading

    from zh_bert.corpus.executors import start_method as _start_method

    src = tmp_path / "x.txt"
    src.write_text("\n".join(clue_lines[:200]) + "\n", encoding="utf-8")
    assert main([str(src), "-o", str(tmp_path / "a.jsonl"), "--workers", "2", "-q"]) == 0
    before = _start_method()  # "fork" when run alone; other tests may have left threads alive
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert _start_method() == "forkserver"
        assert main([str(src), "-o", str(tmp_path / "b.jsonl"), "--workers", "2", "-q"]) == 0
    finally:
        stop.set()
        t.join()
    assert _start_method() == before
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_doc_cleaner_is_picklable_config():
    """Workers get the config by pickling; DocCleaner itself runs anywhere."""
    import pickle

    cfg = pickle.loads(pickle.dumps(CleanConfig(dedup="minhash")))
    res = DocCleaner(cfg)([])
    assert res.docs_in == 0 and res.kept == []


def test_bad_flags(tmp_path, clue_lines):
    src = tmp_path / "a.txt"
    src.write_text("\n".join(clue_lines[:5]) + "\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    for args, msg in ((["--workers", "0"], "--workers"), (["--minhash-threshold", "1.5"], "--minhash-threshold"),
                      (["--encoding", "klingon"], "klingon"), (["--minhash-ngram", "0"], "--minhash-ngram"),
                      (["--min-chars", "50", "--max-chars", "10"], "--max-chars"), ([], "is a directory")):
        with pytest.raises(ZhBertError, match=msg):
            main([str(src), "-o", str(tmp_path if not args else out), *args])
    assert not out.exists() and not report_path(out).exists()
    r = cli(src, "-o", out, "--workers", "0")  # the CLI: one line, exit code 2, no traceback
    assert r.returncode == 2 and r.stderr == "zh-bert clean: error: --workers must be at least 1, got 0\n"


def test_report_lookup_finds_exactly_the_file_clean_writes(tmp_path, clue_lines):
    """`report_path`/`read_report` (used by shard and the pipeline) name the one file clean writes."""
    from zh_bert.corpus.clean.report import read_report

    src = tmp_path / "src" / "a.txt"
    src.parent.mkdir()
    src.write_text("\n".join(clue_lines[:20]) + "\n", encoding="utf-8")
    for name in ("docs.jsonl", "docs.txt", "docs"):
        out_dir = tmp_path / name.replace(".", "_")
        out = out_dir / name
        assert read_report(out) is None  # nothing written yet: no guess at other names
        main([str(src), "-o", str(out), "--workers", "1", "-q"])
        reports = [p for p in out_dir.iterdir() if p != out]
        assert reports == [report_path(out)], name
        assert read_report(out) == json.loads(reports[0].read_text(encoding="utf-8"))
        assert read_report(out)["output"] == str(out)


def test_python_api_validates_like_the_cli(tmp_path, clue_lines):
    from zh_bert.corpus.clean import CleanJob, clean
    from zh_bert.corpus.clean.readers import ReadOptions

    for make, msg in ((lambda: CleanJob(inputs=["x"], output="o.jsonl", workers=0), "--workers must be at least 1"),
                      (lambda: MinHashConfig(threshold=1.5), "--minhash-threshold"),
                      (lambda: FilterConfig(min_chars=50, max_chars=10), "--max-chars"),
                      (lambda: ReadOptions(encoding="klingon"), "klingon"),
                      (lambda: NormalizeConfig(pii="hide"), "--pii"),
                      (lambda: CleanConfig(dedup="fuzzy"), "--dedup")):
        with pytest.raises(ZhBertError, match=msg):
            make()
    src = tmp_path / "a.txt"
    src.write_text("\n".join(clue_lines[:30]) + "\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    report = clean(CleanJob(inputs=[str(src)], output=str(out), workers=1,
                            config=CleanConfig(filters=FilterConfig(min_chars=1, repetition=False))))
    main([str(src), "-o", str(tmp_path / "cli.jsonl"), "--workers", "1", "--min-chars", "1", "--no-repetition"])
    assert out.read_text(encoding="utf-8") == (tmp_path / "cli.jsonl").read_text(encoding="utf-8")
    assert report["docs_out"] > 0 and report["options"]["filters"]["repetition"] is False


def test_fsspec_io_thread_does_not_force_forkserver():
    import threading

    from zh_bert.corpus.executors import start_method

    before = start_method()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="fsspecIO", daemon=True)
    t.start()
    try:
        assert start_method() == before
    finally:
        stop.set()
        t.join()
