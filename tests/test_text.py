"""zh_bert.text: CJK detection and Chinese sentence splitting, on real sentences."""

from conftest import SAMPLE, read_lines

from zh_bert.text import cjk_ratio, count_cjk, is_cjk, split_sentences


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
