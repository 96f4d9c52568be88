"""FewCLUE in `zh-bert eval suite`, as its declarations in the task registry give it: every bundled task loads as
(train_k, dev_k, test_public), the score is the published table's formula, the checkpoint is chosen on dev_k only,
and bad requests are one line."""

from __future__ import annotations

import pytest

from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import Record
from zh_bert.corpus.task_files import marked_spans
from zh_bert.corpus.task_registry import scored, suite_named, task_named, tasks_of
from zh_bert.evaluation.suite.protocol import only_tasks
from zh_bert.evaluation.tasks.classification import load_pair

# test_public sizes of the bundled files (corpora/tasks/fewclue/SOURCE.md)
TEST_SIZES = {"eprstmt": 610, "csldcp": 1784, "tnews": 2010, "iflytek": 1749, "ocnli": 2520, "bustm": 1772,
              "csl": 2838, "cluewsc": 976}
FEWCLUE = suite_named("fewclue")


@pytest.mark.parametrize("name", list(TEST_SIZES))
def test_every_task_loads_its_five_pairs_and_test_public(name):
    task = task_named(name)
    sizes = []
    for k in range(task.pairs.count):
        data = load_pair(task, k)
        assert len(data.test) == TEST_SIZES[name] and data.dev is not data.test
        assert {e.label for e in data.train} <= set(data.labels)
        sizes.append((len(data.train), len(data.dev)))
        assert data.pair == (task.reader.text_b is not None)
    assert all(t > 0 and d > 0 for t, d in sizes)
    assert load_pair(task, 0).labels == load_pair(task, 4).labels   # one head size for every pair


def test_the_suite_is_nine_tasks_eight_in_the_score():
    assert [t.name for t in tasks_of(FEWCLUE)] == [*TEST_SIZES, "chid"]
    assert {t.name for t in scored(FEWCLUE)} == set(TEST_SIZES)
    assert all(t.report_name == "test_public" and t.protocol == FEWCLUE.protocol for t in tasks_of(FEWCLUE))


def test_the_score_is_the_published_formula():
    """The mean of the eight tasks other than CHID reproduces each published score from its (rounded) row:
    46.3625 for FineTuning's 46.37, 54.3375 for PET's 54.34, 40.07875 for zero-shot's 40.07. The human row's
    82.49 is the mean of all nine tasks, CHID included (81.91 without it): the source's table is not uniform."""
    for ref in FEWCLUE.score.published:
        rows = {t.name: next(r for r in t.published if r.row == ref.row).figures["accuracy"] for t in tasks_of(FEWCLUE)}
        eight = sum(rows[t.name] for t in scored(FEWCLUE)) / len(scored(FEWCLUE))
        nine = sum(rows.values()) / len(rows)
        assert (nine if ref.row == "Human" else eight) == pytest.approx(ref.figures["score"], abs=0.01), ref.row


def test_cluewsc_marks_both_spans():
    row = {"text": "小明对小红说他饿了。", "target": {"span1_index": 0, "span1_text": "小明", "span2_index": 6,
                                                   "span2_text": "他"}}
    assert marked_spans(Record.of(row, "wsc.json:1")) == "_小明_对小红说[他]饿了。"
    with pytest.raises(ZhBertError, match=r"wsc.json:1: target.span2_index: span '他' is not at index 5"):
        marked_spans(Record.of({**row, "target": {**row["target"], "span2_index": 5}}, "wsc.json:1"))


def test_bad_task_names_are_one_line():
    with pytest.raises(ZhBertError, match="--only eprstm: not a task of --suite fewclue.*did you mean 'eprstmt'"):
        only_tasks(["eprstm"], "fewclue")
    assert only_tasks(["chid", "chid"], "fewclue") == ["chid"]
    assert len(only_tasks([], "fewclue")) == 9
    with pytest.raises(ZhBertError, match="the pairs are 0..4"):
        load_pair(task_named("bustm"), 5)


def test_the_checkpoint_is_chosen_on_dev_k_and_only_reported_on_test_public(tiny_model_dir, monkeypatch):
    """Every evaluation that picks the best step sees dev_k; test_public is scored once, after the choice."""
    from zh_bert.evaluation.heads import classify
    from zh_bert.evaluation.loop import FinetuneConfig

    task = load_pair(task_named("eprstmt"), 0)
    seen, real = [], classify.scores

    def spy(model, data, cfg, pad_id, **kw):
        seen.append("dev" if len(data["labels"]) == len(task.dev) else "test")
        return real(model, data, cfg, pad_id, **kw)

    monkeypatch.setattr(classify, "scores", spy)
    cfg = FinetuneConfig(epochs=3, seq_len=32, batch_size=16)
    classify.train_one(tiny_model_dir, task, cfg, seed=0, log=lambda m: None)
    assert seen[-1] == "test" and seen.count("test") == 1 and set(seen[:-1]) == {"dev"}, seen


def test_eval_suite_refuses_before_any_work(tiny_model_dir, capsys):
    assert cli.main(["eval", "suite", str(tiny_model_dir), "--only", "tnew"]) == 2
    assert "--only tnew: not a task of --suite fewclue" in capsys.readouterr().err
    assert cli.main(["eval", "suite", str(tiny_model_dir), "--splits", "6"]) == 2
    assert "--splits must be in 1..5" in capsys.readouterr().err
