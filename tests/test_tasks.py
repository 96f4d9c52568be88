"""Tasks as declarations, heads on one loop: a task the code has never seen, declared once from a folder of files,
runs through `finetune`, `eval suite` (with its prediction file), `eval contamination` and `leaderboard build`;
every head trains through the same loop function; there is one TNEWS; and the registry refuses what would make two
tasks one."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, TASKS
from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.task_files import Fields, RecordText, text_field
from zh_bert.corpus.task_registry import declare, declare_suite, forget, suites, task_named, tasks, tasks_of
from zh_bert.corpus.task_spec import Column, Metric, Splits, Suite, Task

PKG = REPO / "zh_bert"


def _write_split(folder: Path, name: str, rows: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps({"id": i, "text": t, "label": lab}, ensure_ascii=False) + "\n"
                                       for i, (lab, t) in enumerate(rows)), encoding="utf-8")


@pytest.fixture
def toy(tmp_path):
    """A review-sentiment task the code has never seen, from a folder of three JSON-lines files (real
    ChnSentiCorp reviews, relabelled 好评/差评), declared once with a suite of its own; forgotten afterwards."""
    lines = (TASKS / "chnsenticorp" / "train.tsv").read_text(encoding="utf-8").split("\n")[1:]
    rows = [("好评" if lab == "1" else "差评", text) for lab, text in (l.split("\t", 1) for l in lines if l.strip())]
    pos, neg = [r for r in rows if r[0] == "好评"], [r for r in rows if r[0] == "差评"]
    folder = tmp_path / "toy_reviews"
    for name, a, b in (("train.json", 0, 16), ("dev.json", 16, 24), ("test.json", 24, 32)):
        _write_split(folder, name, pos[a:b] + neg[a:b])
    suite = declare_suite(Suite("toy", "Toy", "toy-v1", "trained on train, chosen on dev, reported on test"))
    task = declare(Task(
        name="toyreviews", title="ToyReviews", head="classify", reader=Fields(text_field("text")),
        folder=str(folder), splits=Splits("train.json", "dev.json", "test.json"), suites=("toy",),
        metrics=(Metric("test_acc", "accuracy", "fraction", "share of test reviews labelled right"),),
        protocol="toy-v1", columns=(Column("toyreviews", "ToyReviews", "test"),), test_text=RecordText()))
    yield task, suite, folder
    forget(task.name)
    forget(suite.name)


def _run_dir(tmp_path, tiny_model_dir) -> Path:
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "final")
    (run / "run.json").write_text(json.dumps({"status": "done", "steps": 1}), encoding="utf-8")
    return run


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().split("\n")[-1])


def test_a_task_declared_once_runs_through_finetune_suite_contamination_and_board(toy, tmp_path, tiny_model_dir,
                                                                                  capsys):
    import torch

    torch.set_num_threads(1)
    task, suite, folder = toy
    run = _run_dir(tmp_path, tiny_model_dir)
    small = ["--epochs", "1", "--seq-len", "24", "--batch-size", "16", "--lr", "1e-3"]
    assert cli.main(["finetune", str(run), "--task", "toyreviews", *small]) == 0
    res = _json(capsys)
    assert res["task"] == "toyreviews" and res["n_train"] == 32 and res["splits"]["reports"] == str(folder / "test.json")
    preds = tmp_path / "preds"
    assert cli.main(["eval", "suite", str(run), "--suite", "toy", *small, "--predictions", str(preds)]) == 0
    res = _json(capsys)
    r = res["pretrained"]["toyreviews"]
    assert res["protocols"] == {"toy": "toy-v1"} and r["pairs"] == 1 and r["majority_test_acc"] == 0.5
    lines = (preds / "toy" / "toyreviews_predict.json").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["id"] for x in lines] == list(range(16)) and {json.loads(x)["label"] for x in lines} <= \
        {"好评", "差评"}
    recorded = json.loads((run / "eval_results.json").read_text(encoding="utf-8"))
    assert {(e["dataset_type"], e["protocol"], e["split"]) for e in recorded} >= {("toyreviews", "toy-v1", "test")}
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("这是一句无关的话，与任何评论都不一样。\n" + _text(folder / "test.json", 3) + "\n", encoding="utf-8")
    assert cli.main(["eval", "contamination", str(corpus), "--suite", "toy"]) == 0
    found = _json(capsys)["tasks"]
    assert list(found) == ["toyreviews"] and found["toyreviews"]["contaminated"] == 1
    board = tmp_path / "board"
    assert cli.main(["leaderboard", "build", str(run), "-o", str(board)]) == 0
    data = json.loads((board / "board.json").read_text(encoding="utf-8"))
    assert "toyreviews" in [c["key"] for c in data["columns"]]
    cell = data["rows"][0]["scores"]["toyreviews"]
    assert cell["split"] == "test" and cell["value"] == round(r["test_acc"] * 100, 2)
    capsys.readouterr()


def _text(path: Path, n: int) -> str:
    return json.loads(path.read_text(encoding="utf-8").splitlines()[n])["text"]


def test_every_head_trains_through_the_one_loop_function(tiny_model_dir, monkeypatch):
    """The classifier, PET (multiple choice through the masked LM), the span head and the tag head (NER) each reach
    `loop.fit_head`
    itself (stopped there: the call is what is checked), and no module but the loop steps an optimizer."""
    from zh_bert.corpus.squad_files import load_squad
    from zh_bert.evaluation import loop
    from zh_bert.evaluation.heads import choice as prompts
    from zh_bert.evaluation.heads.classify import train_one
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.heads.span import QAConfig, run_cmrc
    from zh_bert.evaluation.heads.tag.head import TaggingConfig, train_tagger
    from zh_bert.evaluation.heads.tag.kind import load_declared
    from zh_bert.evaluation.tasks.classification import load_pair

    ner = load_declared(task_named("resume_ner"))
    reached = []

    class Reached(Exception):
        pass

    def spy(head, *a, **k):
        reached.append(type(head).__name__)
        raise Reached

    monkeypatch.setattr(loop, "fit_head", spy)
    cfg = FinetuneConfig(epochs=1, seq_len=32, batch_size=8, max_train=8)
    wide = FinetuneConfig(epochs=1, seq_len=64, batch_size=8)
    eprstmt = task_named("eprstmt")
    runs = [lambda: train_one(tiny_model_dir, load_pair(eprstmt, 0), cfg, 0, log=lambda m: None),
            lambda: prompts.run_prompt_task(tiny_model_dir, task_named("chid"), 0, "pet", cfg, [0], log=lambda m: 0),
            lambda: run_cmrc(tiny_model_dir, *(load_squad(TASKS / "cmrc2018" / f"cmrc2018_{s}.json")[:2]
                                               for s in ("trial", "dev")), wide, QAConfig(doc_stride=8), [0]),
            lambda: train_tagger(tiny_model_dir, ner, cfg, TaggingConfig(window_stride=4), 0, log=lambda m: None)]
    for run in runs:
        with pytest.raises(Reached):
            run()
    assert reached == ["ClassifyHead", "ChoiceHead", "SpanHead", "TagHead"]
    steppers = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            calls = {getattr(c.func, "id", getattr(c.func, "attr", None)) for c in ast.walk(fn) if isinstance(c, ast.Call)}
            if calls & {"optimizer_step", "stepping"}:
                steppers.append(f"{path.relative_to(PKG).as_posix()}:{fn.name}")
    assert steppers == ["evaluation/loop.py:fit_head"], steppers


def test_one_tnews():
    """One task, one folder, one test file, one board column: `finetune --task tnews` trains on FewCLUE's unions
    and reports on the same test_public the suite does."""
    tnews = [t for t in tasks() if "tnews" in t.name]
    assert [t.name for t in tnews] == ["tnews"] and tnews[0].splits.report == tnews[0].pairs.report
    assert not (TASKS / "tnews").exists()
    assert sorted(p.relative_to(TASKS).as_posix() for p in TASKS.rglob("test_public.json") if "tnews" in str(p)) == \
        ["fewclue/tnews/test_public.json"]
    from zh_bert.leaderboard.record import columns

    assert [c.key for c in columns() if "TNEWS" in c.label.upper()] == ["fewclue-tnews"]


def test_the_registry_refuses_a_second_declaration_and_names_the_tasks():
    with pytest.raises(ZhBertError, match="task tnews: already registered"):
        declare(task_named("tnews"))
    with pytest.raises(ZhBertError, match="task nofiles: declares no files"):
        declare(Task("nofiles", "No files", "classify", None, "x"))
    with pytest.raises(ZhBertError, match=r"--task cmrc: unknown task \(did you mean 'cmrc2018'\?\)"):
        task_named("cmrc")
    assert [s.name for s in suites()][:2] == ["fewclue", "cmrc2018"]
    assert {t.name for t in tasks_of("all")} == {t.name for s in suites() for t in tasks_of(s)}


def test_the_cards_model_index_names_each_task_as_declared_and_the_board_places_it_back():
    """`publish`'s model-index takes dataset type, name and split from the declarations; a board reading the card
    puts each figure in its task's column (TNEWS's FewCLUE figure in the one TNEWS column, CMRC 2018's dev EM)."""
    from huggingface_hub import EvalResult, ModelCardData

    from zh_bert.evaluation.suite.report import suite_entries
    from zh_bert.leaderboard.cards import model_index_entries
    from zh_bert.leaderboard.record import sort_entries
    from zh_bert.release.card import model_index_fields

    res = {"zh_bert_version": "9.9", "method": "finetune", "protocols": {"fewclue": "fewclue-v3"},
           "pretrained": {"tnews": {"seeds": [42], "data_sha256": "ab" * 32, "pairs": 5, "test_acc": 0.31},
                          "cmrc2018": {"seeds": [42], "data_sha256": "cd" * 32, "trained_on": "trial", "em": 1.2,
                                       "f1": 11.1}}}
    index = [EvalResult(**model_index_fields(e)) for e in suite_entries(res)]
    meta = ModelCardData(model_name="m", eval_results=index).to_dict()
    assert {r["dataset"]["split"] for r in meta["model-index"][0]["results"]} == {"test_public", "dev"}
    claims, notes = model_index_entries(meta, "README.md")
    scores, unplaced = sort_entries(claims, "README.md")
    assert scores == {"fewclue-tnews": 31.0, "cmrc2018-em": 1.2, "cmrc2018-f1": 11.1} and not notes + unplaced
