"""Board test helpers: runs and verification records planted with chosen figures (`planted_run`, `record_for`,
`suite_claims`), `build` (the CLI, its exit code and output), and a planted board.json dict (schema
zh-bert-board/1) for the page and server tests: one verified row, one self-reported, one mismatch and one whose
name and licence are markup (a script tag, an attribute break-out) that must show as text."""

from __future__ import annotations

import json
from pathlib import Path

from _hub_helpers import make_run_dir
from zh_bert.cli import main
from zh_bert.evaluation.eval_results import entry
from zh_bert.corpus.task_registry import scored, suite_named, tasks_of

SCRIPT_NAME = "<script>alert(1)</script>"
BAD_LICENCE = '"><img src=x onerror=alert(1)>'
RECORD_URL = "https://example.org/records/planted.json"   # a link the data holds (allowed on the page)


def _score(status: str, claimed: float | None, verified: float | None, split: str = "test_public") -> dict:
    value = verified if verified is not None else claimed
    return {"status": status, "value": value, "claimed": claimed, "verified": verified, "split": split}


def _verification(record: str) -> dict:
    return {"record": record, "zh_bert_version": "0.1.0", "protocol": {"fewclue": "fewclue-v3"},
            "seeds": [42, 43], "hardware": "2 CPU cores (AMD EPYC)", "wall_s": 123.4, "date": "2026-12-02"}


def _row(model: str, **kw) -> dict:
    row = {"model": model, "source": f"runs/{model}", "kind": "run", "architecture": "bert", "params": None,
           "layers": None, "hidden": None, "vocab": {"kind": None, "size": None}, "chars_per_token": None,
           "compute": None, "contamination": None, "licence": None, "load_safety": "stock", "scores": {},
           "verification": None, "try": f"zh-bert demo runs/{model}"}
    row.update(kw)
    return row


def planted_board() -> dict:
    """Four rows; FewCLUE values 40.93, 52.10, 38.10, 30.50 (all distinct, so sorting has one answer); rows
    0, 2 and 3 have a training compute (three dots), row 1 has none."""
    columns = [{"key": "fewclue", "label": "FewCLUE score", "split": "test_public", "unit": "%"},
               {"key": "fewclue-eprstmt", "label": "EPRSTMT", "split": "test_public", "unit": "%"},
               {"key": "cmrc2018-em", "label": "CMRC 2018 EM", "split": "dev", "unit": "%"}]
    rows = [
        _row("tiny-cpu", params=1511360, layers=2, hidden=128, vocab={"kind": "char", "size": 8000},
             chars_per_token=1.02, compute={"tokens": 10239552, "flops": 9.1e13, "device_hours": 0.97, "device": "cpu"},
             contamination={"fewclue": 0.0012, "cmrc2018": 0.0}, licence="apache-2.0",
             scores={"fewclue": _score("verified", 40.93, 40.93), "cmrc2018-em": _score("verified", None, 12.5, "dev")},
             verification=_verification("runs/tiny-cpu/eval_results.json")),
        _row("bert-base-chinese", source="hub:google-bert/bert-base-chinese", kind="hub", params=102_267_648,
             layers=12, hidden=768, vocab={"kind": "wordpiece", "size": 21128}, chars_per_token=1.0,
             licence="apache-2.0", scores={"fewclue": _score("self-reported", 52.1, None),
                                           "fewclue-eprstmt": _score("self-reported", 85.0, None)},
             **{"try": "zh-bert demo bert-base-chinese"}),
        _row("macbert-mini", source="hub:org/macbert-mini", kind="hub", architecture="modernbert", params=24_000_000,
             vocab={"kind": "wordpiece", "size": 21128}, chars_per_token=1.01,
             compute={"tokens": 5e9, "flops": 3.2e17, "device_hours": 40.0, "device": "a100"},
             licence="mit", scores={"fewclue": _score("mismatch", 41.2, 38.1)},
             verification=_verification(RECORD_URL)),
        _row(SCRIPT_NAME, source="a folder </script><b>x</b>", kind="folder", architecture=None,
             compute={"tokens": None, "flops": 5e15, "device_hours": None, "device": None},
             licence=BAD_LICENCE, load_safety="needs trust_remote_code",
             scores={"fewclue": _score("self-reported", 30.5, None)}, **{"try": "zh-bert demo './x</script>'"}),
    ]
    return {"schema": "zh-bert-board/1", "generated_by": "zh-bert 0.1.0",
            "protocols": {"fewclue": "fewclue-v3", "cmrc2018": "cmrc2018-v1"}, "tolerance": 0.5,
            "reference_text": {"name": "corpora/sample/zhwiki_sampled.txt", "sha256": "0" * 64, "chars": 20000},
            "columns": columns, "rows": rows}


# ------------------------------------------------------------------------------------ planted runs

TASKS = tuple(t.name for t in tasks_of("fewclue"))
SCORED = tuple(t.name for t in scored(suite_named("fewclue")))   # the eight of the FewCLUE score


def suite_claims(accuracy: dict[str, float], em_f1=(10.0, 20.0)) -> list[dict]:
    """eval_results entries shaped as `eval suite` writes them."""
    details = {"protocol": "fewclue-v3", "split": "test_public", "method": "finetune", "seeds": [42], "pairs": 5}
    out = [entry("text-classification", f"FewCLUE {t} (fewclue-v3, finetune, 5 pairs x 1 seeds)", f"fewclue-{t}",
                 f"FewCLUE {t}", "accuracy", "test_public accuracy", a, **details) for t, a in accuracy.items()]
    cmrc = {"protocol": "cmrc2018-v1", "split": "dev", "seeds": [42], "trained_on": "trial"}
    out += [entry("question-answering", "CMRC 2018", "cmrc2018", "CMRC 2018", m, f"dev {m}", v, **cmrc)
            for m, v in zip(("exact_match", "f1"), em_f1)]
    return out


def record_for(model_id: str, entries: list[dict], weights: str | None = None) -> dict:
    return {"schema": "zh-bert-verification/1", "model": {"id": model_id, "source": model_id,
                                                          "weights_sha256": weights},
            "zh_bert_version": "0.1.0", "protocols": {"fewclue": "fewclue-v3"}, "seeds": [42],
            "hardware": "test machine", "wall_s": 1.0, "date": "2026-12-02", "entries": entries}


def planted_run(root: Path, tiny_model_dir: Path, name: str, claims: list[dict]) -> Path:
    run = make_run_dir(root / f"_{name}", tiny_model_dir).rename(root / name)
    (run / "eval_results.json").write_text(json.dumps(claims))
    (run / ".env").unlink()
    (run / "wandb_key.txt").unlink()
    return run


def build(capsys, *args) -> tuple[int, str, str]:
    rc = main(["leaderboard", "build", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err
