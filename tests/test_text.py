"""zh_bert.core.text: CJK detection and Chinese sentence splitting, on real sentences."""

from conftest import SAMPLE, read_lines

from zh_bert.core.text import cjk_ratio, count_cjk, is_cjk, split_sentences


def test_is_cjk_and_ratio():
    assert all(is_cjk(c) for c in "中文〇𠀀豈")          # basic, ideographic zero, ext. B, compatibility
    assert not any(is_cjk(c) for c in "。，「」ＡA1 の한")  # punctuation, full-width Latin, kana, hangul
    assert count_cjk("2016年夏季奥运会") == 6
    assert cjk_ratio("NGC 448 是鲸鱼座的一个星系。") == 9 / 16  # spaces do not count
    assert cjk_ratio("") == 0.0 and cjk_ratio(" \n") == 0.0


def test_split_sentences_marks_and_closing_quotes():
    text = "他说：“今天天气很好。”我们去公园吧！真的吗？？好……走吧；嗯"
    assert split_sentences(text) == ["他说：“今天天气很好。”", "我们去公园吧！", "真的吗？？", "好……", "走吧；", "嗯"]
    assert split_sentences("『我知道了。』她说。「好！」") == ["『我知道了。』", "她说。", "「好！」"]
    assert split_sentences("第一段没有句号\n第二段。") == ["第一段没有句号", "第二段。"]
    assert split_sentences("") == [] and split_sentences("\n \n") == []


def test_split_sentences_on_real_documents_loses_nothing():
    docs = read_lines(SAMPLE / "CLUECorpusSmall_sampled.txt", 200)
    n = 0
    for doc in docs:
        sents = split_sentences(doc)
        n += len(sents)
        assert "".join("".join(sents).split()) == "".join(doc.split())  # only edge whitespace goes
        assert all(s and s == s.strip() for s in sents)
    assert n > 2 * len(docs)  # real documents hold several sentences each


def test_bert_cjk_ranges_are_what_the_bert_normalizer_splits():
    """The one table of BERT's CJK ranges (used by vocab and shard) agrees with the tokenizers library."""
    from tokenizers import normalizers

    from zh_bert.core.text import BERT_CJK_RANGES, CJK_RANGES, is_bert_cjk, is_bert_punct

    norm = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False,
                                      lowercase=False)
    probes = [cp for a, b in BERT_CJK_RANGES for cp in (a, b, (a + b) // 2)] + [0x3007, 0x2EBEF, 0x30000, 0x41, 0x3002]
    for cp in probes:
        if 0x2B820 <= cp < 0x2B920:  # tokenizers (Rust) starts this block at 0x2B920, BERT's Python at 0x2B820
            continue
        assert is_bert_cjk(chr(cp)) == (norm.normalize_str(chr(cp)) == f" {chr(cp)} "), hex(cp)
    assert all(is_cjk(chr(a)) and is_cjk(chr(b)) for a, b in BERT_CJK_RANGES)  # every BERT CJK char is Han
    assert len(CJK_RANGES) > 0 and all(is_bert_punct(c) for c in "。，！?「」-") and not is_bert_punct("中")


def test_sentence_end_offsets_are_where_split_sentences_cuts():
    from zh_bert.core.text import sentence_end_offsets

    text = "他说：“今天天气很好。”我们去公园吧！真的吗？？好……走吧\n嗯"
    cuts = [0, *sentence_end_offsets(text), len(text)]
    pieces = [text[a:b].strip() for a, b in zip(cuts, cuts[1:]) if text[a:b].strip()]
    assert pieces == split_sentences(text)


def test_one_corpus_reader_with_path_line_errors(tmp_path):
    """Cleaned JSONL (by name or by content) and plain text read alike; broken input is `path:line: ...`."""
    import pytest

    from zh_bert.corpus.corpus_io import iter_lines, read_documents
    from zh_bert.core.errors import ZhBertError

    (tmp_path / "a.jsonl").write_text('{"text": " 甲 ", "source": "s"}\n\n{"text": "  "}\n{"text": "乙"}\n',
                                      encoding="utf-8")
    (tmp_path / "b.txt").write_text("丙\n\n丁 \n", encoding="utf-8")
    (tmp_path / "c.data").write_text('{"text": "戊"}\n', encoding="utf-8")
    files = [tmp_path / n for n in ("a.jsonl", "b.txt", "c.data")]
    assert read_documents(files) == ["甲", "乙", "丙", "丁", "戊"]
    assert read_documents(files, max_docs=3) == ["甲", "乙", "丙"]
    assert [n for n, _ in iter_lines(tmp_path / "a.jsonl")] == [1, 3, 4]
    bad = tmp_path / "bad.jsonl"
    for content, msg in (('{"text": "好"}\n\n{oops\n', ":3: not JSON"), ('{"text": 3}\n', ':1: no "text" string')):
        bad.write_text(content, encoding="utf-8")
        with pytest.raises(ZhBertError, match=f"{bad}{msg}"):
            read_documents([bad])
    bad.write_bytes('{"text": "好"}\n'.encode() + '{"text": "café"}\n'.encode("latin-1"))
    with pytest.raises(ZhBertError, match=f"{bad}:2: not UTF-8"):
        read_documents([bad])
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ZhBertError, match="empty corpus"):
        read_documents([tmp_path / "empty.txt"])
    with pytest.raises(ZhBertError, match="no such file"):
        read_documents([tmp_path / "missing.txt"])
