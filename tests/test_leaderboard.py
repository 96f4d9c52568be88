"""`zh-bert leaderboard build|verify` and `publish --with-verification`: planted figures marked verified,
self-reported or mismatch; a re-run that reproduces a model's own figures bit for bit; remote code never run;
Hub cards through the local Hub server; one line for every bad input."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from _board_helpers import SCORED, TASKS, build, planted_run, record_for, suite_claims
from _hub_helpers import TOKEN, make_run_dir
from zh_bert.cli import main

SMALL_SUITE = ["--only", "eprstmt", "--splits", "1", "--epochs", "1", "--lr", "2e-3", "--seq-len", "64"]


ACC = {t: 0.40 + i / 100 for i, t in enumerate(TASKS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("board")
    agree = planted_run(root, tiny_model_dir, "agree", suite_claims(ACC))
    claims_only = planted_run(root, tiny_model_dir, "claims-only", suite_claims(ACC))
    differ = planted_run(root, tiny_model_dir, "differ", suite_claims(ACC))
    rerun = suite_claims({t: a + 0.002 for t, a in ACC.items()}, em_f1=(10.3, 20.0))   # within 0.5 points
    (agree / "verification.json").write_text(json.dumps(record_for(str(agree), rerun)))
    off = suite_claims({**ACC, "eprstmt": 0.20})                                        # 20 points lower
    (root / "differ.json").write_text(json.dumps(record_for("elsewhere", off, weights=None) | {
        "model": {"id": str(differ), "source": str(differ), "weights_sha256": None}}))
    return {"agree": agree, "claims-only": claims_only, "differ": differ, "differ-record": root / "differ.json",
            "root": root}


def test_build_marks_verified_self_reported_and_mismatch(runs, tmp_path, capsys):
    out = tmp_path / "board"
    rc, stdout, err = build(capsys, runs["agree"], runs["claims-only"], runs["differ"], runs["differ-record"],
                            "-o", out, "--no-contamination")
    assert rc == 0, err
    board = json.loads((out / "board.json").read_text())
    assert board["schema"] == "zh-bert-board/1" and {p.name for p in out.iterdir()} >= {
        "board.json", "board.md", "index.html"}
    rows = {r["model"]: r for r in board["rows"]}
    assert list(rows) == ["agree", "claims-only", "differ"]          # the record joined its model's row

    agree = rows["agree"]["scores"]
    assert agree["fewclue-eprstmt"] == {"status": "verified", "value": 40.2, "claimed": 40.0, "verified": 40.2,
                                        "split": "test_public"}
    assert agree["cmrc2018-em"]["status"] == "verified" and agree["cmrc2018-em"]["verified"] == 10.3
    score = round(sum(ACC[t] * 100 for t in SCORED) / 8, 2)
    assert agree["fewclue"]["claimed"] == score and agree["fewclue"]["status"] == "verified"
    assert "fewclue-chid" in agree and "fewclue" in agree

    assert {s["status"] for s in rows["claims-only"]["scores"].values()} == {"self-reported"}
    assert rows["claims-only"]["scores"]["fewclue-eprstmt"]["verified"] is None

    differ = rows["differ"]["scores"]
    assert differ["fewclue-eprstmt"] == {"status": "mismatch", "value": 20.0, "claimed": 40.0, "verified": 20.0,
                                         "split": "test_public"}
    assert differ["fewclue"]["status"] == "mismatch"                  # the score moves with its task
    assert differ["fewclue-csldcp"]["status"] == "verified"
    assert rows["differ"]["verification"]["record"] == str(runs["differ-record"])

    r = rows["agree"]
    assert r["architecture"] == "bert" and r["load_safety"] == "stock" and r["params"] > 0
    assert r["vocab"]["size"] == 21128 and 1.0 <= r["chars_per_token"] <= 2.0
    assert r["compute"]["tokens"] == 40960 and r["compute"]["flops"] > 0 and r["compute"]["device"] == "cpu"
    assert "mismatch" in stdout and "3 models" in stdout
    md = (out / "board.md").read_text()
    assert "40.00 ≠ 20.00" in md and "40.20 ✓" in md and "(self)" in md


@pytest.mark.slow
def test_build_scans_the_runs_corpus_for_test_text(runs, tiny_model_dir, tmp_path, capsys):
    """Contamination where the corpus is known: a corpus holding one CLUEWSC test sentence counts it."""
    from zh_bert.corpus.benchmark_text import benchmark_file

    run = planted_run(tmp_path, tiny_model_dir, "dirty", suite_claims(ACC))
    test = [json.loads(line) for line in benchmark_file("fewclue/cluewsc").read_text().splitlines()[:1]]
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"text": test[0]["text"] + "。" + "北京是中国的首都。" * 20},
                                 ensure_ascii=False) + "\n")
    meta = json.loads((run / "run.json").read_text())
    meta["vocab"]["meta"] = {"corpus": [str(corpus)]}
    (run / "run.json").write_text(json.dumps(meta))
    rc, _, err = build(capsys, run, "-o", tmp_path / "b")
    assert rc == 0, err
    row = json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]
    assert 0 < row["contamination"]["fewclue"] < 0.01 and row["contamination"]["cmrc2018"] == 0


def test_build_refuses_bad_input_in_one_line(runs, tmp_path, capsys):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("my notes")
    rc, _, err = build(capsys, runs["agree"], "-o", user)
    assert rc == 2 and "notes.txt" in err and "refusing" in err and len(err.strip().splitlines()) == 1
    assert (user / "notes.txt").read_text() == "my notes"

    rc, _, err = build(capsys, tmp_path / "no-such-run", "-o", tmp_path / "b")
    assert rc == 2 and "no such file or folder" in err and len(err.strip().splitlines()) == 1
    rc, _, err = build(capsys, "bert-base-chinesee", "-o", tmp_path / "b")
    assert rc == 2 and "not a catalog alias" in err
    rc, _, err = build(capsys, runs["agree"], "-o", runs["agree"])
    assert rc == 2 and len(err.strip().splitlines()) == 1             # never into an input
    bad = tmp_path / "bad-record.json"
    bad.write_text(json.dumps({"schema": "zh-bert-verification/1", "entries": "nope"}))
    rc, _, err = build(capsys, bad, "-o", tmp_path / "b")
    assert rc == 2 and "bad-record.json" in err and "entries" in err
    assert not (tmp_path / "b").exists()

    # a board zh-bert wrote is replaced
    assert build(capsys, runs["claims-only"], "-o", tmp_path / "ok", "--no-contamination")[0] == 0
    assert build(capsys, runs["agree"], "-o", tmp_path / "ok", "--no-contamination")[0] == 0
    assert json.loads((tmp_path / "ok" / "board.json").read_text())["rows"][0]["model"] == "agree"


def test_a_malformed_model_index_value_is_a_note_naming_its_yaml_path(tiny_model_dir, tmp_path, capsys):
    """A card is a stranger's: a value that is not a number is noted on the row with its YAML path, and the
    card's other claims are still read (a local eval_results.json with such a value is refused instead:
    tests/test_trust_board.py)."""
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "README.md").write_text(
        "---\nlicense: mit\nmodel-index:\n- name: m\n  results:\n  - task: {type: text-classification}\n"
        "    dataset: {type: fewclue-eprstmt, name: e, split: test_public}\n"
        "    metrics:\n    - {type: accuracy, value: 0.5}\n    - {type: accuracy, value: n/a}\n---\n# m\n")
    rc, _, err = build(capsys, folder, "-o", tmp_path / "b", "--no-contamination")
    assert rc == 0, err
    row = json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]
    assert row["scores"]["fewclue-eprstmt"]["claimed"] == 50.0 and row["licence"] == "mit"
    assert [n["reason"] for n in row["notes"]] == [
        "model-index[0].results[0].metrics[1].value: expected a finite number, got str 'n/a'"]
    assert row["notes"][0]["source"] == "README.md" and row["notes"][0]["claims"] == ["e (test_public): accuracy n/a"]


# ------------------------------------------------------------------------------------------------ verify

def test_verify_reproduces_the_models_own_figures_bit_for_bit(tiny_model_dir, tmp_path, capsys):
    run = make_run_dir(tmp_path, tiny_model_dir)
    (run / "eval_results.json").unlink()
    assert main(["eval", "suite", str(run), *SMALL_SUITE, "--report", str(tmp_path / "rep")]) == 0
    claimed = json.loads((run / "eval_results.json").read_text())
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(run), *SMALL_SUITE]) == 0
    out = capsys.readouterr().out
    rec = json.loads((run / "verification.json").read_text())
    assert [e["metric_value"] for e in rec["entries"]] == [e["metric_value"] for e in claimed]
    assert rec["comparison"] == [{"column": "fewclue-eprstmt", "status": "verified",
                                  "value": rec["comparison"][0]["claimed"], "claimed": rec["comparison"][0]["verified"],
                                  "verified": rec["comparison"][0]["verified"], "split": "test_public"}]
    for key in ("zh_bert_version", "protocols", "seeds", "data_sha256", "hardware", "wall_s", "suite_args"):
        assert rec[key], key
    assert rec["model"]["weights_sha256"] and "verification record" in out

    rc, _, err = build(capsys, run, "-o", tmp_path / "b", "--no-contamination")
    assert rc == 0, err
    cell = json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]["scores"]["fewclue-eprstmt"]
    assert cell["status"] == "verified" and cell["claimed"] == cell["verified"]

    # publish --with-verification takes the record along, and refuses one about other weights
    rc = main(["publish", str(run), "--repo-id", "zh-org/v", "--dry-run", "-o", str(tmp_path / "staged"),
               "--with-verification"])
    assert rc == 0 and (tmp_path / "staged" / "verification.json").is_file()
    rec["model"]["weights_sha256"] = "0" * 64
    (run / "verification.json").write_text(json.dumps(rec))
    capsys.readouterr()
    rc = main(["publish", str(run), "--repo-id", "zh-org/v", "--dry-run", "--with-verification"])
    assert rc == 2 and "verified other weights" in capsys.readouterr().err


def test_verify_never_runs_a_repos_code(tiny_model_dir, tmp_path, capsys):
    folder = tmp_path / "remote"
    shutil.copytree(tiny_model_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForMaskedLM": "modeling_evil.EvilForMaskedLM"}
    (folder / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "EXECUTED"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    rc = main(["leaderboard", "verify", str(folder), *SMALL_SUITE, "-o", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "trust_remote_code" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists() and "modeling_evil" not in sys.modules and not (tmp_path / "r.json").exists()
    rc, _, err = build(capsys, folder, "-o", tmp_path / "b", "--no-contamination")   # listed, never loaded
    assert rc == 0, err
    row = json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]
    assert row["load_safety"] == "needs trust_remote_code" and row["chars_per_token"] is None
    assert not marker.exists() and "modeling_evil" not in sys.modules


def test_verify_refuses_bad_input_in_one_line(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "mine.json").write_text("{\"my\": \"file\"}")
    rc = main(["leaderboard", "verify", str(tiny_model_dir), *SMALL_SUITE, "-o", str(tmp_path / "mine.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "refusing to overwrite" in err and (tmp_path / "mine.json").read_text() == "{\"my\": \"file\"}"
    rc = main(["leaderboard", "verify", str(tiny_model_dir), "--tolerance", "-1"])
    assert rc == 2 and "--tolerance" in capsys.readouterr().err
    rc = main(["leaderboard", "verify", str(tiny_model_dir), "--only", "eprstmtt"])
    assert rc == 2 and "did you mean" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the Hub

@pytest.fixture
def published_claims(runs, hub, online, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main(["publish", str(runs["claims-only"]), "--repo-id", "zh-org/claims", "--endpoint", hub.url]) == 0
    return "zh-org/claims"


def test_build_reads_a_hub_cards_model_index(published_claims, hub, tmp_path, capsys):
    rc, _, err = build(capsys, f"hub:{published_claims}", "-o", tmp_path / "b", "--endpoint", hub.url)
    assert rc == 0, err
    row = json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]
    assert row["model"] == "zh-org/claims" and row["kind"] == "hub"
    assert row["scores"]["fewclue-eprstmt"] == {"status": "self-reported", "value": 40.0, "claimed": 40.0,
                                                "verified": None, "split": "test_public"}
    assert row["scores"]["cmrc2018-f1"]["claimed"] == 20.0 and row["licence"] == "apache-2.0"
    assert row["compute"]["tokens"] == 40960 and row["chars_per_token"] > 1
    assert not any(p.endswith(".safetensors") and "resolve" in p for p in hub.log_paths()) \
        if hasattr(hub, "log_paths") else True


def test_an_unreachable_endpoint_is_one_line(tmp_path, capsys, online):
    from hub_server import free_port

    rc, _, err = build(capsys, "hub:zh-org/x", "-o", tmp_path / "b", "--endpoint", f"http://127.0.0.1:{free_port()}")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "127.0.0.1" in err
    assert not (tmp_path / "b").exists()


def test_publish_carries_the_suites_figures_into_the_model_index(runs, tmp_path, capsys):
    """The suite's eval_results entries become the card's model-index, and the board reads them back."""
    from huggingface_hub import ModelCard

    assert main(["publish", str(runs["claims-only"]), "--repo-id", "zh-org/c", "--dry-run", "-o",
                 str(tmp_path / "s")]) == 0
    card = ModelCard.load(tmp_path / "s" / "README.md")
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got[("fewclue-eprstmt", "test_public accuracy")] == 0.4
    assert got[("fewclue-chid", "test_public accuracy")] == pytest.approx(ACC["chid"])
    assert got[("cmrc2018", "dev f1")] == 20.0 and len(got) == len(TASKS) + 2
    rc, _, err = build(capsys, tmp_path / "s", "-o", tmp_path / "b", "--no-contamination")
    assert rc == 0, err
    scores = json.loads((tmp_path / "b" / "board.json").read_text())["rows"][0]["scores"]
    assert scores["fewclue-eprstmt"]["claimed"] == 40.0 and scores["cmrc2018-f1"]["claimed"] == 20.0
