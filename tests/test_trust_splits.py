"""Trust nothing read, the splits: a file handed in the wrong role (the reported split as train, a renamed
copy, a copy with new ids, dev the same as test) and a task file the predictions could not be written from are
one line (exit 2) before any model is resolved, loaded or trained; the run dir's eval_results.json and suite/
stay byte for byte, and no predictions folder appears. Real files: corpora/tasks (attribution in each
SOURCE.md)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import TASKS

from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.task_registry import task_named
from zh_bert.evaluation.heads import classify
from zh_bert.evaluation.commands import evaluate
from zh_bert.evaluation.commands import finetune
from zh_bert.evaluation.heads import choice, span
from zh_bert.evaluation.suite import protocol as suite
from zh_bert.evaluation.eval_results import entry, record
from zh_bert.evaluation.heads.choice import load_items
from zh_bert.evaluation.heads.span import SpanOptions
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.evaluation.suite.protocol import SuiteArgs
from zh_bert.evaluation.tasks.classification import load_pair, load_task

CMRC = TASKS / "cmrc2018"


@pytest.fixture
def run_dir(tmp_path, tiny_model_dir) -> Path:
    """A run dir as a finished run leaves it: final/, run.json, an eval_results.json and a suite/ report."""
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "final")
    (run / "run.json").write_text(json.dumps({"status": "done", "steps": 1}), encoding="utf-8")
    record(run, [entry("text-classification", "t", "chnsenticorp", "ChnSentiCorp", "accuracy", "test accuracy", 0.8)])
    (run / "suite").mkdir()
    (run / "suite" / "suite.md").write_text("# an earlier suite report\n", encoding="utf-8")
    return run


@pytest.fixture
def no_model(monkeypatch):
    """Every way to a model fails the test: the checks must come first."""
    def loaded(*a, **k):
        pytest.fail("a model was resolved, loaded or trained before the files were checked")

    for module, name in ((evaluate, "local_model"), (classify, "run_classifier"), (span, "run_cmrc"),
                         (classify, "run_prompt_task"), (choice, "run_prompt_task"), (classify, "load_classifier"),
                         (classify, "tokenizer_for"), (finetune, "tokenizer_for")):
        monkeypatch.setattr(module, name, loaded)


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(argv: list[str], run: Path, capsys) -> str:
    """Run the command; assert exit 2, one stderr line, no traceback, nothing written. Returns the line."""
    before = _hashes(run)
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _hashes(run) == before
    return err.strip()


def _squad(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def _copies(tmp_path: Path) -> dict[str, Path]:
    """The reported split handed in as train, each way a user might: the file, a renamed copy, a copy with new
    ids, a folder holding it as cmrc2018_train.json; and trial with one dev paragraph added."""
    dev = json.loads((CMRC / "cmrc2018_dev.json").read_text(encoding="utf-8"))
    renumbered = json.loads(json.dumps(dev))
    for a in renumbered["data"]:
        for p in a["paragraphs"]:
            for q in p["qas"]:
                q["id"] = q["id"].replace("DEV", "TRAIN")
    halfwidth = json.loads(json.dumps(renumbered).replace("，", ","))   # B9: equal to dev under NFKC
    trial = json.loads((CMRC / "cmrc2018_trial.json").read_text(encoding="utf-8"))
    trial["data"].append({"paragraphs": [dev["data"][0]["paragraphs"][0]]})
    (tmp_path / "folder").mkdir()
    shutil.copy(CMRC / "cmrc2018_dev.json", tmp_path / "folder" / "cmrc2018_train.json")
    return {"the dev file": CMRC / "cmrc2018_dev.json",
            "a renamed copy": shutil.copy(CMRC / "cmrc2018_dev.json", tmp_path / "my_train.json"),
            "a copy with new ids": _squad(tmp_path / "renumbered.json", renumbered),
            "b9: new ids and ， written ,": _squad(tmp_path / "halfwidth.json", halfwidth),
            "a folder": tmp_path / "folder",
            "trial and one dev paragraph": _squad(tmp_path / "trial_plus.json", trial)}


SHARED = {"the dev file": "shares 3,219 of its 3,219 questions (ids) and 848 of its 848 contexts",
          "a renamed copy": "shares 3,219 of its 3,219 questions (ids) and 848 of its 848 contexts",
          "a copy with new ids": "shares 0 of its 3,219 questions (ids) and 848 of its 848 contexts",
          "b9: new ids and ， written ,": "shares 0 of its 3,219 questions (ids) and 848 of its 848 contexts",
          "a folder": "shares 3,219 of its 3,219 questions (ids) and 848 of its 848 contexts",
          "trial and one dev paragraph": "questions (ids) and 1 of its 257 contexts"}


@pytest.mark.parametrize("how", list(SHARED))
def test_trust_nothing_read_cmrc_train_that_holds_the_reported_dev_is_refused_before_any_model(
        run_dir, tmp_path, no_model, capsys, how):
    """`--cmrc-train` holding dev (whole, renamed, renumbered, or a single paragraph of it) would print dev
    EM/F1 of a model trained on dev: refused by ids and context hashes, with the counts and both files."""
    train = _copies(tmp_path)[how]
    preds = tmp_path / "preds"
    err = _refused(["eval", "suite", str(run_dir), "--suite", "cmrc2018", "--cmrc-train", str(train),
                    "--predictions", str(preds)], run_dir, capsys)
    assert SHARED[how] in err and f"--span-train {train}" in err and str(CMRC / "cmrc2018_dev.json") in err, err
    assert "a model trained on its reporting split; give CMRC 2018's train file" in err
    assert not preds.exists()


def test_trust_nothing_read_the_suite_api_checks_the_splits_before_training(no_model, tmp_path):
    """`run_suite` called directly (as `leaderboard verify` calls it) makes the same check first."""
    with pytest.raises(ZhBertError, match="shares 3,219 of its 3,219 questions"):
        suite.run_suite("unused", SuiteArgs(suite="all"), FinetuneConfig(),
                        {SpanOptions: SpanOptions(span_train=str(CMRC / "cmrc2018_dev.json"))})


# --------------------------------------------------------------------------- FewCLUE files

def _fewclue_copy(tmp_path: Path, monkeypatch, task: str) -> Path:
    """A copy of one bundled FewCLUE task where ZH_BERT_TASK_DATA makes the suite read it."""
    folder = tmp_path / "data" / "fewclue" / task
    shutil.copytree(TASKS / "fewclue" / task, folder)
    monkeypatch.setenv("ZH_BERT_TASK_DATA", str(tmp_path / "data"))
    return folder


def _edit_line(path: Path, line: int, change) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[line - 1])
    change(row)
    lines[line - 1] = json.dumps(row, ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


FEWCLUE_BAD = {
    # a test_public record without its id: was a KeyError after all training, when predictions were written
    "eprstmt test id": ("eprstmt", "test_public.json", 17, lambda r: r.pop("id"), [], "test_public.json:17: id: missing"),
    "chid test id": ("chid", "test_public.json", 5, lambda r: r.pop("id"), [], "test_public.json:5: id: missing"),
    "cluewsc test idx": ("cluewsc", "test_public.json", 3, lambda r: r.update(idx=None), [],
                         "test_public.json:3: idx: not a number or text"),
    # TNEWS's prediction file writes the official code: a record without it is refused too
    "tnews test code": ("tnews", "test_public.json", 9, lambda r: r.pop("label"), [], "test_public.json:9: label: missing"),
    "eprstmt train label": ("eprstmt", "train_1.json", 4, lambda r: r.update(label=None), ["--splits", "2"],
                            "train_1.json:4: label: expected text"),
    "cluewsc span index": ("cluewsc", "dev_0.json", 2, lambda r: r["target"].update(span1_index="3"), [],
                           "dev_0.json:2: target.span1_index: expected an integer ≥ 0, got text '3'"),
    "chid answer": ("chid", "train_0.json", 6, lambda r: r.update(answer=9), [], "train_0.json:6: answer: index 9 is out of range for 7 candidates"),
}


@pytest.mark.parametrize("case", list(FEWCLUE_BAD))
def test_trust_nothing_read_fewclue_fields_are_checked_before_any_model(run_dir, tmp_path, monkeypatch, no_model,
                                                                       capsys, case):
    """Every field the training, the scoring and the prediction files need, in every file the run will read,
    is checked first: one line naming `file:line` and the field."""
    task, name, line, change, extra, message = FEWCLUE_BAD[case]
    folder = _fewclue_copy(tmp_path, monkeypatch, task)
    _edit_line(folder / name, line, change)
    preds = tmp_path / "preds"
    err = _refused(["eval", "suite", str(run_dir), "--only", task, "--splits", "1", *extra, "--predictions",
                    str(preds)], run_dir, capsys)
    assert message in err and str(folder) in err, err
    assert not preds.exists()


@pytest.mark.parametrize("task", ["eprstmt", "chid"])
def test_trust_nothing_read_fewclue_dev_or_train_copied_from_the_reported_split_is_refused(
        run_dir, tmp_path, monkeypatch, no_model, capsys, task):
    """dev_0 a copy of test_public: nothing would be left to choose on that is not reported on; train_0 a copy of
    dev_0: nothing left to train on that is not chosen on. Both one line, naming the two files."""
    folder = _fewclue_copy(tmp_path, monkeypatch, task)
    shutil.copy(folder / "test_public.json", folder / "dev_0.json")
    err = _refused(["eval", "suite", str(run_dir), "--only", task, "--splits", "1"], run_dir, capsys)
    assert f"{folder / 'dev_0.json'}: every one of the" in err and f"is also in {folder / 'test_public.json'}" in err
    shutil.copy(TASKS / "fewclue" / task / "dev_0.json", folder / "dev_0.json")
    shutil.copy(folder / "dev_0.json", folder / "train_0.json")
    err = _refused(["eval", "suite", str(run_dir), "--only", task, "--splits", "1", "--method", "pet"], run_dir, capsys)
    assert f"{folder / 'train_0.json'}: the train split of task fewclue-{task} has no examples left" in err, err


def test_trust_nothing_read_fewclue_shared_texts_are_never_chosen_on():
    """The bundled files as published: csl's dev_2 holds 2 of test_public's examples; they are left out of the
    choice (and said so), test_public stays whole. CHID's splits share no passage."""
    task = load_pair(task_named("csl"), 2)
    test = {(e.text_a, e.text_b) for e in task.test}
    assert len(task.dev) == 30 and len(task.test) == 2838 and not any((e.text_a, e.text_b) in test for e in task.dev)
    assert "dev: dropped 2 examples whose text is also in test (30 left)" in task.notes[1]
    assert task.roles["chooses"].endswith("dev_2.json") and task.roles["reports"].endswith("test_public.json")
    assert [len(s) for s in load_items(task_named("chid"), 0)] == [42, 42, 2002]


# --------------------------------------------------------------------------- finetune TSV files

def _tsv(path: Path, rows: list[str]) -> Path:
    path.write_text("label\ttext_a\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _chnsenti(split: str, n: int, skip: int = 0) -> list[str]:
    return (TASKS / "chnsenticorp" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1 + skip:1 + skip + n]


@pytest.mark.parametrize("roles, message", [
    (("train", "dev", "dev"), "{dev}: every one of the 40 dev examples of task"),          # dev chooses and reports
    (("train", "dev", "dev copy"), "{dev}: every one of the 40 dev examples of task"),     # ... from a renamed copy
    (("test", "dev", "test"), "{test}: the train split of task"),                          # trained on the test file
    (("dev", "dev", "test"), "{dev}: the train split of task"),                            # trained on the chooser
])
def test_trust_nothing_read_finetune_files_in_two_roles_are_refused_before_any_model(
        run_dir, tmp_path, no_model, capsys, roles, message):
    files = {"train": _tsv(tmp_path / "train.tsv", _chnsenti("train", 40)),
             "dev": _tsv(tmp_path / "dev.tsv", _chnsenti("dev", 40)),
             "test": _tsv(tmp_path / "test.tsv", _chnsenti("test", 40))}
    files["dev copy"] = shutil.copy(files["dev"], tmp_path / "held_out.tsv")
    err = _refused(["finetune", str(run_dir), "--task", "tsv:" + ",".join(str(files[r]) for r in roles)],
                   run_dir, capsys)
    assert message.format(**{k: files[k] for k in ("dev", "test")}) in err, err
    assert "nothing" in err


def test_trust_nothing_read_finetune_roles_are_explicit(tmp_path):
    """A partial overlap is dropped from the earlier role and counted; the roles are named; without a test file
    the dev figure says it is the split the state was chosen on."""
    train = _tsv(tmp_path / "train.tsv", _chnsenti("train", 30) + _chnsenti("test", 3))
    dev = _tsv(tmp_path / "dev.tsv", _chnsenti("dev", 20) + _chnsenti("test", 2, skip=10))
    test = _tsv(tmp_path / "test.tsv", _chnsenti("test", 20))
    task = load_task(f"tsv:{train},{dev},{test}")
    assert (len(task.train), len(task.dev), len(task.test)) == (30, 20, 20)
    assert task.notes[0].startswith("dev: dropped 2 examples whose text is also in test (20 left)")
    assert task.notes[1] == "train: dropped 0 repeated examples and 3 whose text is also in dev/test (30 left)"
    assert task.roles == {"trains": str(train), "chooses": str(dev), "reports": str(test)}
    two = load_task(f"tsv:{train},{dev}")
    assert two.roles["reports"].startswith(f"{dev} (no test file") and "optimistic" in two.notes[-1]
