"""CMRC 2018 loading and scoring: hand-computed EM/F1 cases against the official script's rules, the bundled
trial/dev files (counts, perfect and empty predictions), and one-line errors for broken SQuAD files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.squad_files import SpanExample, load_squad, quirk_counts
from zh_bert.evaluation.metrics.cmrc import (calc_em_score, calc_f1_score, evaluate_cmrc, find_lcs, mixed_segmentation,
                                     remove_punctuation)

DATA = Path(__file__).resolve().parent.parent / "corpora" / "tasks" / "cmrc2018"


# --------------------------------------------------------------------------- segmentation and punctuation

def test_segmentation_splits_chinese_characters_and_keeps_words_and_numbers():
    assert mixed_segmentation("iPhone 12手机") == ["iphone", "12", "手", "机"]
    assert mixed_segmentation("  1998年NBA总决赛 ") == ["1998", "年", "nba", "总", "决", "赛"]
    assert mixed_segmentation("北京。") == ["北", "京", "。"]


def test_ascii_punctuation_inside_a_run_stays_attached():
    """Our one departure from the official script: nltk.word_tokenize would give '(', 'kaji', 'dha', ')'."""
    assert mixed_segmentation("卡基达(Kaji Dha)") == ["卡", "基", "达", "(kaji", "dha)"]


def test_removed_punctuation_does_not_end_a_word():
    """Official quirk: with rm_punc the mark is skipped before the run is cut, so 'a-b' becomes 'ab'."""
    assert mixed_segmentation("a-b", rm_punc=False) == ["a", "-", "b"]
    assert mixed_segmentation("a-b", rm_punc=True) == ["ab"]
    assert mixed_segmentation("《红楼梦》", rm_punc=True) == ["红", "楼", "梦"]


def test_remove_punctuation_uses_the_official_list():
    assert remove_punctuation(" 《红楼梦》： ") == "红楼梦"
    assert remove_punctuation("NBA-2K") == "nba2k"
    assert remove_punctuation("好……") == "好……"        # '……' is listed as one two-character item: never matched


def test_find_lcs_is_the_longest_contiguous_run():
    # the longest common subsequence would be a,b,c (3); the contiguous run is b,c
    assert find_lcs(list("abcd"), list("axbc")) == (["b", "c"], 2)
    assert find_lcs([], list("ab")) == ([], 0)


# --------------------------------------------------------------------------- EM / F1

def test_punctuation_does_not_count():
    assert calc_em_score(["北京"], "北京。") == 1
    assert calc_f1_score(["北京"], "北京。") == 1.0
    assert calc_em_score(["NBA"], "nba") == 1


def test_mixed_chinese_english_partial():
    # reference [iphone, 12, 手, 机], prediction [iphone, 12]: LCS 2, P = 2/2, R = 2/4, F1 = 2/3
    assert calc_em_score(["iPhone 12手机"], "iPhone 12") == 0
    assert calc_f1_score(["iPhone 12手机"], "iPhone 12") == pytest.approx(2 / 3)
    assert calc_f1_score(["iPhone 12手机"], "iPhone 12 手机") == 1.0


def test_partial_overlap_lcs_by_hand():
    # reference [1998, 年, 在, 北, 京, 举, 行] (7 tokens), prediction [在, 北, 京, 举, 行, 的, 会, 议] (8):
    # LCS 在北京举行 = 5, P = 5/8, R = 5/7, F1 = 2PR/(P+R) = (50/56)/(75/56) = 2/3
    assert find_lcs(mixed_segmentation("1998年在北京举行"), mixed_segmentation("在北京举行的会议"))[1] == 5
    assert calc_f1_score(["1998年在北京举行"], "在北京举行的会议") == pytest.approx(2 / 3)
    assert calc_em_score(["1998年在北京举行"], "在北京举行的会议") == 0


def test_several_references_take_the_max():
    # 北京市: LCS 2, P 1, R 2/3, F1 0.8;  中国北京: LCS 2, P 1, R 1/2, F1 2/3;  上海: 0
    assert calc_f1_score(["上海", "北京市", "中国北京"], "北京") == pytest.approx(0.8)
    assert calc_em_score(["上海", "北京市", "中国北京"], "北京") == 0
    assert calc_em_score(["上海", "北京市", "北京"], "北京") == 1


def test_empty_prediction_scores_zero():
    assert calc_f1_score(["北京"], "") == 0
    assert calc_em_score(["北京"], "") == 0
    assert calc_f1_score(["。"], "。") == 0                # nothing left after punctuation: F1 0, as official
    assert calc_em_score(["。"], "。") == 1                # ... but EM compares the two empty strings


def test_evaluate_counts_unanswered_as_zero():
    ex = [SpanExample("Q1", "北京举行", "哪里", [("北京", 0)]),
          SpanExample("Q2", "iPhone 12手机", "什么", [("iPhone 12手机", 0)]),
          SpanExample("Q3", "上海", "哪里", [("上海", 0)])]
    out = evaluate_cmrc(ex, {"Q1": "北京。", "Q2": "iPhone 12", "UNKNOWN": "x"})
    assert out["total"] == 3 and out["skipped"] == 1
    assert out["em"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    with pytest.raises(ZhBertError, match="no questions"):
        evaluate_cmrc([], {})


# --------------------------------------------------------------------------- bundled data

def test_bundled_trial_file():
    ex = load_squad(DATA / "cmrc2018_trial.json")
    assert len(ex) == 1002 and len({e.context for e in ex}) == 256
    assert quirk_counts(ex) == {"answers": 1002, "unplaced": 0, "misplaced": 5, "empty_questions": 2}
    assert ex[0].question == "生命数耗完即算为什么？" and ex[0].answers == [("踢爆", 127)]
    assert ex[0].spans == [("踢爆", 127)]
    assert [e.id for e in ex if not e.spans] == [f"TRIAL_210_QUERY_{i}" for i in range(5)]   # shifted by 1


def test_bundled_dev_file_and_perfect_and_empty_predictions():
    ex = load_squad(DATA / "cmrc2018_dev.json")
    assert len(ex) == 3219 and len({e.context for e in ex}) == 848
    assert all(len(e.answers) == 3 for e in ex)
    assert quirk_counts(ex) == {"answers": 9657, "unplaced": 193, "misplaced": 7, "empty_questions": 0}
    # the misplaced answers are whole paragraphs shifted by 1-2 characters: 3 questions are left without a span
    assert [e.id for e in ex if not e.spans] == ["DEV_101_QUERY_3", "DEV_110_QUERY_2", "DEV_110_QUERY_3"]
    perfect = evaluate_cmrc(ex, {e.id: e.answers[0][0] for e in ex})
    assert perfect == {"em": 100.0, "f1": 100.0, "total": 3219, "skipped": 0}
    assert evaluate_cmrc(ex, {}) == {"em": 0.0, "f1": 0.0, "total": 3219, "skipped": 3219}
    assert evaluate_cmrc(ex, {e.id: "" for e in ex})["f1"] == 0.0


# --------------------------------------------------------------------------- broken files

def _qa(qid="Q1", question="哪里？", answers=None):
    return {"id": qid, "question": question,
            "answers": [{"text": "北京", "answer_start": 0}] if answers is None else answers}


def _file(tmp_path: Path, doc) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def _doc(*qas, context="北京举行"):
    """Two articles: the first with two good paragraphs, the second whose paragraph (3rd in the file) holds `qas`."""
    good = [{"context": "上海", "qas": [_qa("G1", answers=[{"text": "上海", "answer_start": 0}])]},
            {"context": "广州", "qas": [_qa("G2", answers=[{"text": "广州", "answer_start": 0}])]}]
    return {"version": "v1.0", "data": [{"paragraphs": good}, {"paragraphs": [{"context": context, "qas": list(qas)}]}]}


Q = r"data\[1\]\.paragraphs\[0\]\.qas"        # the paragraph that `_doc` fills, 3rd in the file
BAD = [
    ("{not json", r"bad\.json:1: not valid JSON"),
    ([1, 2], r"bad\.json: expected a SQuAD-style object with a 'data' list, got a list"),
    ({"version": "v1.0"}, r"bad\.json: data: missing \(expected a list\)"),
    ({"data": [{"title": "x"}]}, r"bad\.json: data\[0\]\.paragraphs: missing"),
    ({"data": [{"paragraphs": [{"qas": []}]}]}, r"bad\.json: data\[0\]\.paragraphs\[0\]\.context: missing"),
    ({"data": ["x"]}, r"bad\.json: data: \[0\]: expected an object, got text"),
    (_doc(_qa(), context="  "), r"bad\.json: data\[1\]\.paragraphs\[0\]\.context: empty context"),
    (_doc(_qa(), context=7), r"data\[1\]\.paragraphs\[0\]\.context: expected text, got a number 7"),
    (_doc({"question": "哪里", "answers": []}), rf"bad\.json: {Q}\[0\]\.id: missing"),
    (_doc({"id": 12, "question": "哪里", "answers": []}), rf"{Q}\[0\]\.id: expected text, got a number 12"),
    (_doc(_qa(), {"id": "Q2", "answers": []}), rf"bad\.json: {Q}\[1\]\.question: missing"),
    (_doc({"id": "Q1", "question": "哪里"}), rf"{Q}\[0\]\.answers: missing"),
    (_doc(_qa(answers=[])), rf"{Q}\[0\]\.answers: no answers"),
    (_doc(_qa(answers=[{"text": "北京", "answer_start": 4}])),
     rf"{Q}\[0\]\.answers\[0\]\.answer_start: 4 beyond the context \(4 characters\)"),
    (_doc(_qa(answers=[{"text": "北京", "answer_start": -2}])),
     r"answers\[0\]\.answer_start: expected an integer ≥ -1, got -2"),
    (_doc(_qa(answers=[{"text": "北京", "answer_start": "0"}])),
     r"answers\[0\]\.answer_start: expected an integer ≥ -1, got text '0'"),
    (_doc(_qa(answers=[{"text": "北京", "answer_start": 1.5}])), r"answer_start: expected an integer ≥ -1, got a number"),
    (_doc(_qa(answers=[{"answer_start": 0}])), r"answers\[0\]\.text: missing"),
    (_doc(_qa(answers=[{"text": " ", "answer_start": 0}])), r"answers\[0\]\.text: empty answer text"),
    (_doc(_qa("G1")), rf"{Q}\[0\]\.id: 'G1' repeated from data\[0\]\.paragraphs\[0\]\.qas\[0\]"),
]

@pytest.mark.parametrize("doc, message", BAD, ids=[m for _, m in BAD])
def test_bad_files_give_one_line(tmp_path, doc, message):
    with pytest.raises(ZhBertError, match=message) as err:
        load_squad(_file(tmp_path, doc))
    assert "\n" not in str(err.value) and "bad.json" in str(err.value)


def test_misplaced_and_unplaced_answers_are_kept_and_counted(tmp_path):
    answers = [{"text": "北京", "answer_start": 1}, {"text": "首都", "answer_start": -1},
               {"text": "北京", "answer_start": 0}]
    ex = load_squad(_file(tmp_path, _doc(_qa(answers=answers), _qa("Q2", question=""))))
    assert [e.id for e in ex] == ["G1", "G2", "Q1", "Q2"]
    assert ex[2].answers == [("北京", 1), ("首都", -1), ("北京", 0)] and ex[2].spans == [("北京", 0)]
    assert quirk_counts(ex) == {"answers": 6, "unplaced": 1, "misplaced": 1, "empty_questions": 1}
