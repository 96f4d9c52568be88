"""`zh-bert eval suite`: the grid is chosen on dev_k only, the outputs travel (eval_results details, the official
prediction formats, suite.md + suite.png), MODEL may be a catalog alias, and bad requests are one line before
any training."""

from __future__ import annotations

import json
import re

import pytest

from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.squad_files import load_squad
from zh_bert.corpus.task_registry import task_named
from zh_bert.evaluation import loop
from zh_bert.evaluation.heads import choice, classify
from zh_bert.evaluation.suite import protocol as suite
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.evaluation.heads import head_kind
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.suite.protocol import LR_GRID, SuiteArgs, run_pair, run_suite
from zh_bert.evaluation.suite.report import suite_entries
from zh_bert.evaluation.tasks.classification import public_records


def official_predictions(name: str, predicted: list) -> list[dict]:
    task = task_named(name)
    return head_kind(task).official(task, predicted)


def _fake_run(dev_by_lr: dict, test_by_lr: dict, calls: list):
    """A stand-in for the classifier's runs: dev and test accuracy per learning rate, as if trained."""
    def run(ckpt, task, cfg, seeds, log=print, say_pooling=True):
        calls.append(cfg.lr)
        runs = [{"seed": s, "dev_acc": dev_by_lr[cfg.lr], "test_acc": test_by_lr[cfg.lr]} for s in seeds]
        return Result(task.name, cfg.random_init, seeds, runs, predictions=[task.test[0].label] * len(task.test))
    return run


def _fake_prompt(figure: float, seen: list):
    def prompt(ckpt, task, k, method, cfg, seeds, log=print):
        seen.append((task.name, k, method))
        return Result(task.name, cfg.random_init, seeds[:1], [{"seed": seeds[0], "dev_acc": figure,
                                                               "test_acc": figure}], facts={"method": method})
    return prompt


def test_the_grid_is_chosen_on_dev_k_whatever_test_public_says(monkeypatch):
    """The rate with the best dev_k accuracy is kept even when another has a far better test_public figure;
    changing every test figure changes nothing about the choice."""
    dev = dict(zip(LR_GRID, (0.50, 0.70, 0.60)))
    for test in (dict(zip(LR_GRID, (0.9, 0.1, 0.8))), dict(zip(LR_GRID, (0.1, 0.2, 0.3)))):
        calls = []
        monkeypatch.setattr(classify, "run_classifier", _fake_run(dev, test, calls))
        r, lr = run_pair("unused", task_named("eprstmt"), 0, SuiteArgs(only=["eprstmt"]), FinetuneConfig(),
                         log=lambda m: None)
        assert calls == list(LR_GRID) and lr == LR_GRID[1] and r.mean("test_acc") == test[LR_GRID[1]]


def test_each_task_gets_a_progress_bar_on_a_terminal_and_none_elsewhere(monkeypatch, capsys):
    """On a terminal, a bar per task counts its runs (pairs x rates x seeds) with the last dev figure, and the
    log lines still arrive; in CI or a pipe nothing is drawn."""
    dev = dict(zip(LR_GRID, (0.50, 0.70, 0.60)))
    monkeypatch.setattr(classify, "run_classifier", _fake_run(dev, dev, []))
    args = SuiteArgs(only=["eprstmt", "bustm"], splits=2, seeds=2)
    for terminal in (True, False):
        monkeypatch.setattr(loop, "bars_shown", lambda terminal=terminal: terminal)
        lines = []
        suite.run_suite("unused", args, FinetuneConfig(), log=lines.append)
        err = capsys.readouterr().err
        assert lines[0].startswith("eprstmt (pretrained, finetune): 2 pairs x 2 seed(s) x 3 learning rate(s)")
        if terminal:
            for name in ("eprstmt", "bustm"):
                assert re.search(rf"{name} \(pretrained\): 100%.*\b12/12 .*run.*pair 1 dev 0\.700", err), err
        else:
            assert err == ""


def test_zero_shot_trains_nothing_and_runs_once(monkeypatch):
    seen = []
    monkeypatch.setattr(classify, "run_prompt_task", _fake_prompt(0.5, seen))
    monkeypatch.setattr(choice, "run_prompt_task", _fake_prompt(0.5, seen))
    res = run_suite("unused", SuiteArgs(only=["eprstmt", "chid"], method="zero-shot"), FinetuneConfig(),
                    log=lambda m: None)
    assert seen == [("eprstmt", 0, "zero-shot"), ("chid", 0, "zero-shot")]
    assert res["pretrained"]["chid"]["chance"] == "1 in 7" and res["pretrained_score"] is None


def test_chid_is_pet_under_finetune(monkeypatch):
    seen = []
    monkeypatch.setattr(choice, "run_prompt_task", _fake_prompt(0.2, seen))
    run_pair("unused", task_named("chid"), 0, SuiteArgs(only=["chid"], lrs=[1e-3]), FinetuneConfig(),
             log=lambda m: None)
    assert [m for _, _, m in seen] == ["pet"]


def test_official_prediction_formats_round_trip():
    """FewCLUE submissions hold the official label field (TNEWS: the code, not the name); gold in, gold out."""
    for name, field in (("tnews", "label_desc"), ("cluewsc", "label"), ("eprstmt", "label")):
        rows, key = public_records(task_named(name))
        lines = official_predictions(name, [r[field] for r in rows])
        assert [x["label"] for x in lines] == [r["label"] for r in rows]
        assert [x["id"] for x in lines] == [r[key] for r in rows] and key == ("idx" if name == "cluewsc" else "id")
    with pytest.raises(ZhBertError, match="FewCLUE eprstmt: 3 predictions for 610 reported records"):
        official_predictions("eprstmt", ["Positive"] * 3)


def test_suite_end_to_end_writes_report_predictions_and_entries(tiny_model_dir, tmp_path, capsys):
    preds, report = tmp_path / "preds", tmp_path / "report"
    rc = cli.main(["eval", "suite", str(tiny_model_dir), "--only", "eprstmt", "--only", "cluewsc", "--splits", "2",
                   "--lr", "1e-3", "--epochs", "1", "--seq-len", "32", "--baselines", "--no-record",
                   "--predictions", str(preds), "--report", str(report)])
    out = capsys.readouterr().out
    res = json.loads(out.strip().split("\n")[-1])
    assert rc == 0 and res["reported_split"]["fewclue"] == "test_public" and res["grid"] == [1e-3]
    for key in ("pretrained", "random_init"):
        assert set(res[key]) == {"eprstmt", "cluewsc"}
        for r in res[key].values():
            assert r["runs"] == 2 and [p["lr"] for p in r["per_pair"]] == [1e-3, 1e-3] and 0 <= r["test_acc"] <= 1
    assert res["pretrained"]["eprstmt"]["majority_test_acc"] == 0.5 and res["pretrained_score"] is None
    assert "reported on test_public" in out and "published" in out
    for k in (0, 1):
        lines = (preds / "fewclue" / f"pair_{k}" / "eprstmt_predict.json").read_text().splitlines()
        assert len(lines) == 610 and set(json.loads(lines[0])) == {"id", "label"}
    assert (report / "suite.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "test_public" in (report / "suite.md").read_text()
    # a second run replaces what the first wrote (its manifests prove it), without --force
    assert cli.main(["eval", "suite", str(tiny_model_dir), "--only", "eprstmt", "--splits", "1", "--lr", "1e-3",
                     "--epochs", "1", "--seq-len", "32", "--no-record", "--predictions", str(preds)]) == 0


def test_entries_name_split_protocol_seeds_sha_and_version():
    res = {"zh_bert_version": "9.9", "method": "finetune", "protocols": {"fewclue": "fewclue-v3"},
           "pretrained": {"eprstmt": {"seeds": [42], "data_sha256": "ab" * 32, "pairs": 5, "test_acc": 0.61}}}
    (e,) = suite_entries(res)
    assert e["split"] == "test_public" and e["protocol"] == "fewclue-v3" and e["seeds"] == [42]
    assert e["data_sha256"] == "ab" * 32 and e["zh_bert_version"] == "9.9" and e["metric_value"] == 0.61
    assert "test_public accuracy" == e["metric_name"]


def test_outputs_are_refused_before_any_training(tiny_model_dir, tmp_path, capsys, monkeypatch):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("the user's")
    monkeypatch.setattr(classify, "run_classifier", lambda *a, **k: pytest.fail("trained before refusing"))
    assert cli.main(["eval", "suite", str(tiny_model_dir), "--only", "eprstmt", "--predictions", str(user)]) == 2
    assert "--predictions" in capsys.readouterr().err and (user / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize("argv, message", [
    (["--suite", "fewclu"], "--suite"),
    (["--method", "pett"], "--method"),
    (["--only", "tnew"], "--only tnew: not a task of --suite fewclue"),
    (["--suite", "cmrc2018", "--only", "eprstmt"], "--only eprstmt: not a task of --suite cmrc2018"),
    (["--splits", "6"], "--splits must be in 1..5"),
    (["--suite", "cmrc2018", "--cmrc-train", "/nonexistent/cmrc"], "--span-train /nonexistent/cmrc: no such file or folder"),
    (["--cmrc-train", "/nonexistent/cmrc"], "--span-train: no span task among eprstmt"),
    (["--suite", "fewclue", "--cmrc-lr", "1e-4"], "--span-lr: no span task among eprstmt"),
    (["--lrs", "3"], "a learning rate must be in (0, 1)"),
    (["--suite", "all", "--cmrc-train", "README.md"], "README.md:1: not valid JSON"),
])
def test_bad_requests_are_one_line(tiny_model_dir, capsys, argv, message, monkeypatch):
    monkeypatch.setattr(classify, "run_classifier", lambda *a, **k: pytest.fail("trained before refusing"))
    assert cli.main(["eval", "suite", str(tiny_model_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) <= 3, err


def test_model_may_be_an_alias_or_is_a_mistyped_path(tmp_path, monkeypatch):
    """A missing folder whose parent exists is a typo (one line, no network); an alias is downloaded once and
    the folder download wrote is reused."""
    from zh_bert.hub import download

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "tiny-cpu").mkdir(parents=True)
    with pytest.raises(ZhBertError, match="MODEL runs/tiny-cpuu: no such folder.*did you mean 'tiny-cpu'"):
        download.local_model("runs/tiny-cpuu")
    fetched = []

    def fake(cfg):
        out = download.default_out(cfg.name)
        out.mkdir(parents=True)
        (out / download.MARKER).write_text("{}")
        fetched.append(cfg.name)
        return out

    monkeypatch.setattr(download, "download", fake)
    first = download.local_model("bert-base-chinese", log=lambda m: None)
    assert download.local_model("bert-base-chinese", log=lambda m: None) == first and fetched == ["bert-base-chinese"]


def _small_squad(src, dst, paragraphs: int):
    doc = json.loads(src.read_text(encoding="utf-8"))
    doc["data"] = [{**doc["data"][0], "paragraphs": doc["data"][0]["paragraphs"][:paragraphs]}]
    dst.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")


def test_cmrc2018_in_the_suite_trains_on_trial_and_says_so(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Without the official train file the suite trains on trial, says so, scores dev with the official
    definitions and writes {question id: answer} predictions for every dev question."""
    from zh_bert.corpus.task_files import task_data_dir

    real = task_data_dir("cmrc2018")
    (tmp_path / "cmrc2018").mkdir()
    for name, n in (("cmrc2018_trial.json", 4), ("cmrc2018_dev.json", 3)):
        _small_squad(real / name, tmp_path / "cmrc2018" / name, n)
    monkeypatch.setenv("ZH_BERT_TASK_DATA", str(tmp_path))
    preds = tmp_path / "preds"
    rc = cli.main(["eval", "suite", str(tiny_model_dir), "--suite", "cmrc2018", "--cmrc-epochs", "1", "--cmrc-seq-len", "128",
                   "--doc-stride", "64", "--baselines", "--no-record", "--predictions", str(preds)])
    out = capsys.readouterr().out
    res = json.loads(out.strip().split("\n")[-1])
    r = res["pretrained"]["cmrc2018"]
    assert rc == 0 and r["trained_on"] == "trial" and r["reported_split"] == "dev" and 0 <= r["f1"] <= 1
    assert "training on the trial set" in out and "RoBERTa-wwm-ext" in out and "random init" in out
    answers = json.loads((preds / "cmrc2018_predict.json").read_text(encoding="utf-8"))
    dev = load_squad(tmp_path / "cmrc2018" / "cmrc2018_dev.json")
    assert set(answers) == {e.id for e in dev} and all(isinstance(a, str) for a in answers.values())
    # the official train file, when the user has it, is what it trains on
    train = tmp_path / "mine" / "cmrc2018_train.json"
    train.parent.mkdir()
    _small_squad(real / "cmrc2018_trial.json", train, 2)
    cmrc = task_named("cmrc2018")
    assert head_kind(cmrc).train_file(cmrc, str(train.parent)) == train


def test_ablate_takes_suite_tasks_as_downstream_columns(monkeypatch):
    """`finetune: suite:TASK` in an ablation spec runs that FewCLUE task under the suite's protocol (five pairs,
    the spec's rate as the grid, its seeds) and fills the table's dev/test columns."""
    from types import SimpleNamespace

    from zh_bert.evaluation.ablation import results as ablation_results

    seen = {}

    def fake_task(model_dir, task, args, cfg, opts=None, log=print):
        seen.update(name=task.name, splits=args.splits, lrs=args.lrs, seeds=args.seed_list(), random_init=cfg.random_init)
        return {"dev_acc": 0.6, "test_acc": 0.55, "test_acc_std": 0.02}

    monkeypatch.setattr(suite, "run_task", fake_task)
    spec = SimpleNamespace(finetune=SimpleNamespace(config=FinetuneConfig(lr=2e-3), seed_list=lambda: [1, 2]))
    s = ablation_results._finetune(spec, "suite:bustm", "model", random_init=True)
    assert seen == {"name": "bustm", "splits": 5, "lrs": [2e-3], "seeds": [1, 2], "random_init": True}
    assert s["test_acc"] == 0.55 and s["protocol"] == "fewclue-v3"
    with pytest.raises(ZhBertError, match="suite:bustn: not a task of a suite that chooses.*did you mean 'bustm'"):
        ablation_results._finetune(spec, "suite:bustn", "model")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eprstmt", "csldcp", "tnews", "iflytek", "ocnli", "bustm", "csl", "cluewsc", "chid"])
def test_every_fewclue_task_trains_and_scores_on_its_real_files(tiny_model_dir, name):
    """Each of the nine tasks goes through the suite's protocol on its bundled files (one pair, one epoch, a
    64-example train subset): a test_public figure, the dev figure that chose it, and predictions in the
    official format for every test record."""
    cfg = FinetuneConfig(epochs=1, seq_len=32, batch_size=32, max_train=64, lr=1e-3)
    r = suite.run_task(tiny_model_dir, task_named(name), SuiteArgs(only=[name], splits=1, lrs=[1e-3]), cfg,
                       log=lambda m: None)
    assert 0 <= r["test_acc"] <= 1 and 0 <= r["dev_acc"] <= 1 and r["runs"] == 1
    preds = r["per_pair"][0]["test_predictions"]
    assert len(official_predictions(name, preds)) == len(public_records(task_named(name))[0])


def test_a_few_shot_pair_trains_longer_than_a_full_training_set_by_default():
    """`eval suite`'s defaults are the protocol's: 20 epochs, patience 5 on a few-shot task's pairs (3 epochs are a
    handful of steps on 32 examples per class), finetune's 3 and 2 on a full training set; given ones are kept."""
    from zh_bert.evaluation.suite.protocol import FEW_SHOT_EPOCHS, FEW_SHOT_PATIENCE, SuiteConfig, task_config

    cfg = SuiteConfig()
    assert cfg.epochs is None and cfg.patience is None and cfg.pooling is None
    few = task_config(task_named("eprstmt"), cfg)
    full = task_config(task_named("resume_ner"), cfg)
    assert (few.epochs, few.patience) == (FEW_SHOT_EPOCHS, FEW_SHOT_PATIENCE) == (20, 5)
    assert (full.epochs, full.patience) == (FinetuneConfig.epochs, FinetuneConfig.patience)
    given = task_config(task_named("eprstmt"), SuiteConfig(epochs=3, patience=1))
    assert (given.epochs, given.patience) == (3, 1)
    with pytest.raises(ZhBertError, match="--epochs must be >= 1"):
        SuiteConfig(epochs=0)
