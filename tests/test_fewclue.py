"""FewCLUE in `zh-bert eval suite`: every bundled task loads as (train_k, dev_k, test_public), the score is the
published table's formula, the checkpoint is chosen on dev_k only, and bad requests are one line."""

from __future__ import annotations

import pytest

from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record
from zh_bert.evaluation.fewclue import (FEWCLUE_TASKS, PUBLISHED, SCORE_TASKS, PAIRS, _wsc_text, check_task_names,
                                        fewclue_score, load_fewclue)

# test_public sizes and label counts of the bundled files (corpora/tasks/fewclue/SOURCE.md)
TEST_SIZES = {"eprstmt": 610, "csldcp": 1784, "tnews": 2010, "iflytek": 1749, "ocnli": 2520, "bustm": 1772,
              "csl": 2838, "cluewsc": 976}


@pytest.mark.parametrize("name", list(FEWCLUE_TASKS))
def test_every_task_loads_its_five_pairs_and_test_public(name):
    sizes = []
    for k in range(PAIRS):
        task = load_fewclue(name, k)
        assert len(task.test) == TEST_SIZES[name] and task.dev is not task.test
        assert {e.label for e in task.train} <= set(task.labels)
        sizes.append((len(task.train), len(task.dev)))
        assert (task.pair if FEWCLUE_TASKS[name].text_b else not task.pair)
    assert all(t > 0 and d > 0 for t, d in sizes)
    assert load_fewclue(name, 0).labels == load_fewclue(name, 4).labels   # one head size for every pair


def test_the_score_is_the_published_formula():
    """The mean of the eight tasks other than CHID reproduces each published score from its (rounded) row:
    46.3625 for FineTuning's 46.37, 54.3375 for PET's 54.34, 40.07875 for zero-shot's 40.07. The human row's
    82.49 is the mean of all nine tasks, CHID included (81.91 without it): the source's table is not uniform."""
    for method in ("FineTuning", "PET", "Zero-shot"):
        row = PUBLISHED[method]
        assert fewclue_score(row) == pytest.approx(row["score"], abs=0.01), method
    human = PUBLISHED["Human"]
    assert sum(human[t] for t in (*SCORE_TASKS, "chid")) / 9 == pytest.approx(human["score"], abs=0.01)
    with pytest.raises(ZhBertError, match="missing csl"):
        fewclue_score({t: 50.0 for t in SCORE_TASKS if t != "csl"})


def test_cluewsc_marks_both_spans():
    row = {"text": "小明对小红说他饿了。", "target": {"span1_index": 0, "span1_text": "小明", "span2_index": 6,
                                                   "span2_text": "他"}}
    assert _wsc_text(Record.of(row, "wsc.json:1")) == "_小明_对小红说[他]饿了。"
    with pytest.raises(ZhBertError, match=r"wsc.json:1: target.span2_index: span '他' is not at index 5"):
        _wsc_text(Record.of({**row, "target": {**row["target"], "span2_index": 5}}, "wsc.json:1"))


def test_bad_task_names_are_one_line():
    with pytest.raises(ZhBertError, match="unknown FewCLUE task 'eprstm'.*did you mean 'eprstmt'"):
        check_task_names(["eprstm"])
    assert check_task_names(["chid", "chid"]) == ["chid"]
    assert len(check_task_names([])) == 9
    with pytest.raises(ZhBertError, match="chid is multiple choice"):
        load_fewclue("chid", 0)
    with pytest.raises(ZhBertError, match="the pairs are 0..4"):
        load_fewclue("bustm", 5)


def test_the_checkpoint_is_chosen_on_dev_k_and_only_reported_on_test_public(tiny_model_dir, monkeypatch):
    """Every evaluation that picks the best step sees dev_k; test_public is scored once, after the choice."""
    from zh_bert.evaluation import finetune

    task = load_fewclue("eprstmt", 0)
    seen, real = [], finetune.scores

    def spy(model, data, cfg, pad_id, **kw):
        seen.append("dev" if len(data["labels"]) == len(task.dev) else "test")
        return real(model, data, cfg, pad_id, **kw)

    monkeypatch.setattr(finetune, "scores", spy)
    cfg = finetune.FinetuneConfig(epochs=3, seq_len=32, batch_size=16)
    finetune.train_one(tiny_model_dir, task, cfg, seed=0, log=lambda m: None)
    assert seen[-1] == "test" and seen.count("test") == 1 and set(seen[:-1]) == {"dev"}, seen


def test_eval_suite_refuses_before_any_work(tiny_model_dir, capsys):
    assert cli.main(["eval", "suite", str(tiny_model_dir), "--only", "tnew"]) == 2
    assert "unknown FewCLUE task 'tnew'" in capsys.readouterr().err
    assert cli.main(["eval", "suite", str(tiny_model_dir), "--splits", "6"]) == 2
    assert "--splits must be in 1..5" in capsys.readouterr().err
