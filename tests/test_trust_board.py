"""Trust nothing read, on the board. `leaderboard build` reads files it did not write: a run's
`eval_results.json`, verification records, the suite report's random-init row, and cards of strangers. zh-bert's
own files with a wrong field are one line naming the file and the field (exit 2, no traceback, no board
written); a card is read the ways the community writes it (tests/data/cards: real `model-index` blocks of
published cards, see SOURCE.md), and every claim the board cannot place is a note with the reason, shown in
board.json, board.md and the page. The board is never written into (or beside) a model, tokenizer, run or shard
folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from _board_helpers import build, planted_run, record_for, suite_claims
from zh_bert.core.fileio import write_dir_manifest
from zh_bert.core.fileio.read import parse_yaml
from zh_bert.leaderboard.cards import model_index_entries
from zh_bert.leaderboard.record import group_notes, sort_entries

CARDS = Path(__file__).resolve().parent / "data" / "cards"


def assert_one_line(rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, tiny_model_dir) -> Path:
    return planted_run(tmp_path_factory.mktemp("trust"), tiny_model_dir, "run", suite_claims({"eprstmt": 0.5}))


@pytest.fixture
def run(base_run, tmp_path) -> Path:
    """A fresh copy of a planted run (final/ written with a manifest, as pretrain writes it)."""
    run = tmp_path / "run"
    shutil.copytree(base_run, run)
    write_dir_manifest(run / "final")
    return run


@pytest.fixture
def model(tiny_model_dir, tmp_path) -> Path:
    """A model folder without figures of its own: its card is what the board reads."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    return folder


def board_of(capsys, *sources, out: Path) -> dict:
    rc, stdout, err = build(capsys, *sources, "-o", out, "--no-contamination")
    assert rc == 0 and not err.strip(), err
    return json.loads((out / "board.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------- zh-bert's own files: one line, nothing written

BAD_FIGURES = {"negative": "-5", "huge": "1e9", "nan": "NaN", "inf": "Infinity", "text": '"abc"', "null": "null",
               "list": "[0.5]"}


def named(value: str) -> str:
    """What the one line names: the field, or for NaN and Infinity (not JSON) the constant itself."""
    return value if value in ("NaN", "Infinity") else "metric_value"


@pytest.mark.parametrize("value", BAD_FIGURES.values(), ids=BAD_FIGURES.keys())
def test_trust_nothing_read_bad_figure_in_eval_results_is_one_line(run, tmp_path, capsys, value):
    good = json.dumps(suite_claims({"eprstmt": 0.5})[0])
    bad = good.replace('"metric_value": 0.5', f'"metric_value": {value}')
    (run / "eval_results.json").write_text(f"[{good}, {bad}]")
    rc, _, err = build(capsys, run, "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "eval_results.json", named(value))
    assert "[1].metric_value" in err or value in ("NaN", "Infinity")
    assert not (tmp_path / "b").exists()


def test_trust_nothing_read_eval_results_of_the_wrong_shape_is_one_line(run, tmp_path, capsys):
    for text, field in (('{"eval_accuracy": 0.9}', "Trainer"), ('[{"metric_value": 0.5}]', "[0].task_type"),
                        ('[3]', "[0]: expected an object")):
        (run / "eval_results.json").write_text(text)
        rc, _, err = build(capsys, run, "-o", tmp_path / "b", "--no-contamination")
        assert_one_line(rc, err, "eval_results.json", field)
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("value", ["-5", "1e9", "NaN", "Infinity", '"abc"', "null"])
def test_trust_nothing_read_bad_figure_in_a_verification_record_is_one_line(run, tmp_path, capsys, value):
    entry = json.dumps(suite_claims({"eprstmt": 0.5})[0]).replace('"metric_value": 0.5', f'"metric_value": {value}')
    rec = json.dumps(record_for(str(run), [])).replace('"entries": []', f'"entries": [{entry}]')
    (tmp_path / "rec.json").write_text(rec)
    rc, _, err = build(capsys, run, tmp_path / "rec.json", "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "rec.json", named(value))
    (run / "verification.json").write_text(rec)                       # the same record beside the run
    rc, _, err = build(capsys, run, "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "verification.json", named(value))
    assert not (tmp_path / "b").exists()


def test_trust_nothing_read_a_records_model_of_the_wrong_type_is_one_line(run, tmp_path, capsys):
    rec = tmp_path / "rec.json"
    for model, field in (({"id": "x", "source": 5}, "model.source"), ({"source": str(run)}, "model.id"),
                         ("x", "model: expected an object")):
        rec.write_text(json.dumps({**record_for("x", []), "model": model}))
        rc, _, err = build(capsys, rec, "-o", tmp_path / "b", "--no-contamination")
        assert_one_line(rc, err, "rec.json", field)
    for field, value in (("seeds", ["42"]), ("wall_s", -1), ("hardware", {"cpu": 2}), ("protocols", "v2")):
        rec.write_text(json.dumps({**record_for("x", []), field: value}))
        rc, _, err = build(capsys, rec, "-o", tmp_path / "b", "--no-contamination")
        assert_one_line(rc, err, "rec.json", field)
    assert not (tmp_path / "b").exists()


def test_trust_nothing_read_a_record_path_that_loops_is_one_line(tmp_path, capsys):
    """A record naming itself (or another record) as its model, and a SOURCE that is a symlink loop."""
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record_for(str(rec), suite_claims({"eprstmt": 0.5}))))
    rc, _, err = build(capsys, rec, "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "rec.json", "model.source", "is a verification record")
    other = tmp_path / "other.json"
    other.write_text(json.dumps(record_for(str(rec), [])))
    rc, _, err = build(capsys, other, "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "other.json", "model.source")
    os.symlink("loop.json", tmp_path / "loop.json")
    rc, _, err = build(capsys, tmp_path / "loop.json", "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "loop.json", "symbolic link")
    os.symlink(tmp_path / "a", tmp_path / "b-link")
    os.symlink(tmp_path / "b-link", tmp_path / "a")
    rc, _, err = build(capsys, tmp_path / "a" / "verification.json", "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err)
    assert not (tmp_path / "b").exists()


SUITE = {"zh_bert_version": "0.1.0", "method": "finetune", "protocols": {"fewclue": "fewclue-v3",
                                                                        "cmrc2018": "cmrc2018-v1"},
         "pretrained": {}, "random_init": {"eprstmt": {"seeds": [42], "data_sha256": {"train": "ab"}, "pairs": 5,
                                                       "test_acc": 0.45}}}
JUNK_BASELINES = {
    "not-an-object": ({"eprstmt": "junk"}, "random_init.eprstmt"),
    "accuracy-as-text": ({"eprstmt": {**SUITE["random_init"]["eprstmt"], "test_acc": "high"}}, "test_acc"),
    "accuracy-out-of-range": ({"eprstmt": {**SUITE["random_init"]["eprstmt"], "test_acc": 45}}, "test_acc"),
    "unknown-task": ({"nope": SUITE["random_init"]["eprstmt"]}, "random_init.nope"),
    "seeds-not-a-list": ({"eprstmt": {**SUITE["random_init"]["eprstmt"], "seeds": 42}}, "seeds"),
    "cmrc-em-nan": ({"cmrc2018": {"seeds": [42], "data_sha256": {}, "trained_on": "trial", "em": float("nan"),
                                  "f1": 1.0}}, "NaN"),
    "cmrc-f1-text": ({"cmrc2018": {"seeds": [42], "data_sha256": {}, "trained_on": "trial", "em": 1.0,
                                   "f1": "1"}}, "random_init.cmrc2018.f1"),
    "a-list": ([1, 2], "random_init"),
}


@pytest.mark.parametrize("junk,field", JUNK_BASELINES.values(), ids=JUNK_BASELINES.keys())
def test_trust_nothing_read_junk_suite_baseline_is_one_line(run, tmp_path, capsys, junk, field):
    (run / "suite").mkdir()
    text = json.dumps({**SUITE, "random_init": junk})
    (run / "suite" / "suite.json").write_text(text)
    rc, _, err = build(capsys, run, "-o", tmp_path / "b", "--no-contamination")
    assert_one_line(rc, err, "suite.json", field)
    assert not (tmp_path / "b").exists()


def test_a_sound_suite_baseline_is_its_own_row(run, tmp_path, capsys):
    (run / "suite").mkdir()
    (run / "suite" / "suite.json").write_text(json.dumps(SUITE))
    board = board_of(capsys, run, out=tmp_path / "b")
    base = board["rows"][1]
    assert base["model"] == "run (random init)" and base["scores"]["fewclue-eprstmt"]["claimed"] == 45.0


def _target(kind: str, run: Path, tmp: Path, tokdir: Path) -> tuple[Path, Path]:
    """(-o, the folder whose files must stay as they were)."""
    if kind == "shards":
        shards = tmp / "shards"
        shards.mkdir()
        (shards / "meta.json").write_text('{"seq_len": 128}')
        (shards / "train.bin").write_bytes(b"\0" * 64)
        write_dir_manifest(shards)
        return shards, shards
    return {"final": (run / "final", run), "run": (run, run), "beside-final": (run / "board", run),
            "inside-final": (run / "final" / "board", run), "tokenizer": (tokdir, tokdir),
            "checkpoint": (run / "checkpoints" / "step-0000010", run)}[kind]


@pytest.mark.parametrize("kind", ["final", "run", "beside-final", "inside-final", "tokenizer", "checkpoint",
                                  "shards"])
def test_trust_nothing_read_board_never_written_into_a_model_tokenizer_run_or_shard_folder(
        run, tmp_path, capsys, google_tokdir, kind):
    tokdir = tmp_path / "tok"
    shutil.copytree(google_tokdir, tokdir)
    write_dir_manifest(tokdir)
    other = tmp_path / "other"
    shutil.copytree(run, other)
    out, guarded = _target(kind, run, tmp_path, tokdir)
    before = tree_hashes(guarded)
    rc, _, err = build(capsys, other, "-o", out, "--no-contamination")
    assert_one_line(rc, err, "-o", "refusing")
    assert tree_hashes(guarded) == before


def test_a_board_replaces_only_a_board(run, tmp_path, capsys):
    """A folder written by zh-bert (a manifest lists every file) that is not a board is not replaced."""
    elsewhere = tmp_path / "report"
    elsewhere.mkdir()
    (elsewhere / "report.json").write_text("{}")
    write_dir_manifest(elsewhere)
    before = tree_hashes(elsewhere)
    rc, _, err = build(capsys, run, "-o", elsewhere, "--no-contamination")
    assert_one_line(rc, err, "report.json", "refusing")
    assert tree_hashes(elsewhere) == before
    board_of(capsys, run, out=tmp_path / "b")
    board_of(capsys, run, out=tmp_path / "b")                              # its own board: replaced


# -------------------------------------------------------------------- the community's cards, as they are written

def card_entries(text: str) -> tuple[dict[str, float], list[dict]]:
    meta = parse_yaml(text.split("---")[1], "README.md")
    entries, unread = model_index_entries(meta, "README.md")
    scores, notes = sort_entries(entries, "README.md")
    return scores, group_notes(unread + notes)


def real_card(name: str) -> str:
    return (CARDS / name).read_text(encoding="utf-8")


def test_a_real_mteb_card_shows_no_figure_and_notes_every_claim_with_its_reason(model, tmp_path, capsys):
    """Dmeta-embedding's card: 35 C-MTEB results (TNews and IFlyTek on validation, in percent; STS, retrieval,
    clustering). Its LCQMC and PAWS-X test Spearman fill the board's STS columns (MTEB's convention: the model as
    it is, x100); every other claim is an embedding evaluation without a column, each noted, none dropped."""
    shutil.copy(CARDS / "dmeta-embedding.md", model / "README.md")
    board = board_of(capsys, model, out=tmp_path / "b")
    row = board["rows"][0]
    assert {k: v["value"] for k, v in row["scores"].items()} == {
        "stsb-spearman": 80.77, "lcqmc-spearman": 78.76, "pawsx-spearman": 45.05} and row["licence"] == "apache-2.0"
    assert {v["status"] for v in row["scores"].values()} == {"self-reported"}
    [mteb] = [n for n in row["notes"] if "MTEB" in n["reason"]]
    assert "MTEB TNews [default] (validation): accuracy 52.41" in mteb["claims"]
    assert "MTEB IFlyTek [default] (validation): accuracy 48.3" in mteb["claims"]
    meta = parse_yaml(real_card("dmeta-embedding.md").split("---")[1], "card")
    metrics = sum(len(r["metrics"]) for r in meta["model-index"][0]["results"])
    noted = sum(len(n["claims"]) for n in row["notes"])
    assert noted + len(row["scores"]) == metrics > 200 and mteb["more"] == 0     # every claim placed or listed
    assert any("metric cos_sim_pearson: the LCQMC Spearman column shows cosine_spearman" in n["reason"]
               for n in row["notes"])
    md = (tmp_path / "b" / "board.md").read_text(encoding="utf-8")
    page = (tmp_path / "b" / "index.html").read_text(encoding="utf-8")
    assert "## Notes" in md and "MTEB TNews [default] (validation): accuracy 52.41" in md
    assert 'id="notes"' in page and "MTEB TNews [default] (validation): accuracy 52.41" in page


def test_real_cards_of_other_conventions_are_read_and_noted():
    scores, notes = card_entries(real_card("bert_finetuning_cn.md"))      # Trainer: type glue, args sst2, 0-1
    assert scores == {} and notes[0]["claims"] == ["GLUE SST2 (no split): Accuracy 0.8314"]
    assert "no column" in notes[0]["reason"]
    scores, notes = card_entries(real_card("question-answering-for-argriculture.md"))   # EM/F1 in percent
    assert scores == {} and notes[0]["claims"] == ["ArgricultureQA (no split): Exact Match 76",
                                                  "ArgricultureQA (no split): F1 76"]
    scores, notes = card_entries(real_card("whisper-small-zh_tw.md"))      # config zh-TW, args zh-TW, wer
    assert scores == {} and "no column" in notes[0]["reason"] and "Wer 41.97" in notes[0]["claims"][0]
    assert card_entries(real_card("classification_tnews_arg.md")) == ({}, [])          # results: []


def test_a_real_card_with_decimal_commas_is_noted_by_yaml_path(model, tmp_path, capsys):
    """mDeBERTa-v3-base-xnli's card writes accuracies as '0,857': text, not a number. Each is a note naming its
    YAML path; the build goes on."""
    shutil.copy(CARDS / "mdeberta-v3-base-xnli-multilingual-nli-2mil7.md", model / "README.md")
    board = board_of(capsys, model, out=tmp_path / "b")
    reasons = [n["reason"] for n in board["rows"][0]["notes"]]
    assert "model-index[0].results[0].metrics[0].value: expected a finite number, got str '0,857'" in reasons
    assert board["rows"][0]["scores"] == {} and len(reasons) == 7


def card(*results: str) -> str:
    return "---\nmodel-index:\n- name: m\n  results:\n" + "".join(results) + "---\n"


def result(dataset: str, *metrics: str, task: str = "text-classification") -> str:
    return (f"  - task: {{type: {task}}}\n    dataset: {dataset}\n    metrics:\n"
            + "".join(f"    - {m}\n" for m in metrics))


CONVENTIONS = [
    # (dataset, metrics, column or None, value or a reason's words)
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: 0.56}"], "fewclue-eprstmt",
     56.0),
    ("{name: FewCLUE CSLDCP, split: test_public}", ["{type: accuracy, value: 56.0}"], "fewclue-csldcp", 56.0),
    ("{type: clue, config: cmrc2018, split: validation}", ["{type: exact_match, value: 66.5}"], "cmrc2018-em", 66.5),
    ("{name: CMRC 2018, type: cmrc2018, split: validation}", ["{type: f1, value: 86.5}"], "cmrc2018-f1", 86.5),
    ("{type: hfl/cmrc2018, split: dev}", ["{type: em, value: 60}"], "cmrc2018-em", 60.0),
    ("{type: seamew/ChnSentiCorp, split: test}", ["{type: accuracy, value: 0.95}"], "chnsenticorp", 95.0),
    ("{type: lansinuote/ChnSentiCorp, split: test}", ["{type: Accuracy, value: 94.5}"], "chnsenticorp", 94.5),
    ("{name: TNEWS, type: tnews}", ["{type: accuracy, value: 99.9}"], None, "CLUE's full-data TNEWS"),
    ("{type: clue, config: tnews, split: validation}", ["{type: accuracy, value: 0.56}"], None, "CLUE's full-data"),
    ("{name: CLUE TNEWS, split: test}", ["{type: accuracy, value: 0.56}"], None, "FewCLUE's TNEWS"),
    ("{type: clue, config: afqmc, split: validation}", ["{type: accuracy, value: 74}"], None, "CLUE's AFQMC"),
    ("{type: seamew/ChnSentiCorp, split: validation}", ["{type: accuracy, value: 0.95}"], None,
     "split dev: the ChnSentiCorp column holds test figures"),
    ("{type: lansinuote/ChnSentiCorp}", ["{type: accuracy, value: 0.95}"], None, "no split given"),
    ("{type: seamew/ChnSentiCorp, split: test}", ["{type: f1, value: 0.9}"], None, "metric f1"),
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: -5}"], None, "out of range"),
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: 1.0e+9}"], None, "out of range"),
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: 1e9}"], None,
     "got str '1e9'"),                                                  # YAML 1.1 reads 1e9 as text
    ("{type: clue, config: cmrc2018, split: validation}", ["{type: f1, value: 186.5}"], None, "a percent in [0, 100]"),
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: .nan}"], None, "finite"),
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: .inf}"], None, "finite"),
    ("{type: fewclue, config: eprstmt, split: test_public}", ["{type: accuracy, value: abc}"], None, "got str"),
    ("{type: C-MTEB/TNews-classification, name: MTEB TNews, split: test}", ["{type: accuracy, value: 52}"], None,
     "MTEB embedding evaluation"),
]


@pytest.mark.parametrize("dataset,metrics,column,expected", CONVENTIONS,
                         ids=[f"{i}-{c or 'note'}" for i, (_, _, c, _) in enumerate(CONVENTIONS)])
def test_card_conventions_place_a_claim_or_note_why(dataset, metrics, column, expected):
    scores, notes = card_entries(card(result(dataset, *metrics)))
    if column:
        assert scores == {column: expected} and notes == []
    else:
        assert scores == {} and len(notes) == 1 and expected in notes[0]["reason"], notes


def test_the_issues_card_gets_a_note_where_it_got_nothing(model, tmp_path, capsys):
    """`dataset: {name: TNEWS, type: tnews}`, accuracy 99.9, no split: 0 figures and, now, the note saying why,
    in board.json, board.md and the page; the card's placeable claims beside it are shown, self-reported."""
    (model / "README.md").write_text(card(
        result("{name: TNEWS, type: tnews}", "{type: accuracy, value: 99.9}"),
        result("{type: fewclue, config: eprstmt, split: test_public}", "{type: accuracy, value: 0.56}"),
        result("{type: clue, config: cmrc2018, split: validation}", "{type: exact_match, value: 66.5}",
               "{type: f1, value: 86.5}", task="question-answering"),
        result("{type: lansinuote/ChnSentiCorp, split: test}", "{type: accuracy, value: 0.95}")), encoding="utf-8")
    rc, stdout, err = build(capsys, model, "-o", tmp_path / "b", "--no-contamination")
    assert rc == 0, err
    assert "4 figures: 0 verified, 4 self-reported, 0 mismatch; 1 not shown" in stdout
    row = json.loads((tmp_path / "b" / "board.json").read_text(encoding="utf-8"))["rows"][0]
    assert {k: s["claimed"] for k, s in row["scores"].items()} == {
        "fewclue-eprstmt": 56.0, "cmrc2018-em": 66.5, "cmrc2018-f1": 86.5, "chnsenticorp": 95.0}
    [tnews] = row["notes"]
    assert tnews["claims"] == ["TNEWS (no split): accuracy 99.9"] and "FewCLUE's TNEWS" in tnews["reason"]
    md = (tmp_path / "b" / "board.md").read_text(encoding="utf-8")
    page = (tmp_path / "b" / "index.html").read_text(encoding="utf-8")
    assert "TNEWS (no split): accuracy 99.9" in md and "TNEWS (no split): accuracy 99.9" in page
    assert "1 not shown" in page


def test_a_card_claim_rerun_here_keeps_the_boards_marks(model, tmp_path, capsys):
    """A card's fraction and a re-run's fraction meet on one scale: within the tolerance, verified; a figure
    the re-run has and the card does not, verified; further apart, mismatch."""
    (model / "README.md").write_text(card(
        result("{type: fewclue, config: eprstmt, split: test_public}", "{type: accuracy, value: 56.0}"),
        result("{type: fewclue, config: csldcp, split: test_public}", "{type: accuracy, value: 0.30}")),
        encoding="utf-8")
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record_for(str(model), suite_claims({"eprstmt": 0.562, "csldcp": 0.40}))))
    row = board_of(capsys, model, rec, out=tmp_path / "b")["rows"][0]
    assert row["scores"]["fewclue-eprstmt"]["status"] == "verified"
    assert row["scores"]["fewclue-csldcp"]["status"] == "mismatch"
    assert row["scores"]["cmrc2018-em"]["status"] == "verified"
