"""Pinned numerics of every head and protocol: fine-tuning a classifier (`finetune`, [CLS] and mean pooling,
random init, BERT and ModernBERT, TNEWS), FewCLUE through `eval suite` (a classifier with a two-rate grid chosen
on dev_k, PET on a classification task, CHID's PET, zero-shot) and CMRC 2018's span head, each on slices of the
bundled data, give the figures and predictions stored in tests/data/numerics_tasks.json to every digit. They
were recorded from the code before tasks became declarations and the heads shared one loop; a change to data
order, batching, choosing, early stopping or prediction moves them.

CPU kernels round differently by instruction set, so the file holds one reference per kind of CPU that torch
reports (`torch.backends.cpu.get_cpu_capability()`: AVX512, AVX2). Every figure a reference holds must come out to
the digit; a key it does not hold is not pinned there (the AVX512 reference predates the rows every result now
carries, `per_seed` and macro-F1 under the suite: its figures were carried over into today's format, fractions
and all, not re-run). A CPU without a reference skips.

Regenerate this CPU's reference (only when a change of numerics is intended, and say why in the commit):
    NUMERICS_WRITE=1 python -m pytest --slow tests/test_numerics_tasks.py
"""

from __future__ import annotations

import io
import json
import os
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

REF = Path(__file__).resolve().parent / "data" / "numerics_tasks.json"
TASKS = Path(__file__).resolve().parent.parent / "corpora" / "tasks"
#: what a figure does not depend on: timings, paths, versions, the wording of notes
UNPINNED = {"train_s", "predict_s", "wall_s", "wall_s_by_init", "checkpoint", "zh_bert_version", "notes",
            "warnings", "splits", "config", "qa_config", "train_file", "recorded"}


def _lines(path: Path, n: int, every: int = 1) -> str:
    """Every `every`-th line of a JSON-lines file, the first `n` of them (TNEWS's files are sorted by label)."""
    lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    return "".join(line + "\n" for line in lines[::every][:n])


def _squad_slice(path: Path, questions: int) -> dict:
    """The first `questions` questions of a SQuAD file, whole paragraphs' contexts kept."""
    doc, out, left = json.loads(path.read_text(encoding="utf-8")), [], questions
    for article in doc["data"]:
        paras = []
        for para in article["paragraphs"]:
            if left <= 0:
                break
            qas = para["qas"][:left]
            left -= len(qas)
            paras.append({**para, "qas": qas})
        if paras:
            out.append({**article, "paragraphs": paras})
    return {**doc, "data": out}


def task_slices(root: Path) -> Path:
    """A ZH_BERT_TASK_DATA folder of small slices of the bundled tasks (TNEWS's unions beside its pairs; the figures
    were recorded when they sat in a `tnews/` folder of their own, with the same bytes)."""
    for task, sizes in {"eprstmt": (32, 32, 40), "chid": (12, 12, 16)}.items():
        out = root / "fewclue" / task
        out.mkdir(parents=True)
        for name, n in zip(("train_0", "dev_0", "test_public"), sizes):
            (out / f"{name}.json").write_text(_lines(TASKS / "fewclue" / task / f"{name}.json", n), encoding="utf-8")
    folder = root / "fewclue" / "tnews"
    folder.mkdir(parents=True)
    for name, every in (("train_few_all", 10), ("dev_few_all", 20), ("test_public", 40)):
        (folder / f"{name}.json").write_text(_lines(TASKS / "fewclue" / "tnews" / f"{name}.json", 200, every),
                                             encoding="utf-8")
    (root / "cmrc2018").mkdir()
    for name, n in (("cmrc2018_trial.json", 24), ("cmrc2018_dev.json", 16)):
        (root / "cmrc2018" / name).write_text(json.dumps(_squad_slice(TASKS / "cmrc2018" / name, n),
                                                         ensure_ascii=False), encoding="utf-8")
    return root


def chnsenti_tsv(root: Path) -> str:
    """`tsv:TRAIN,DEV,TEST` of balanced ChnSentiCorp slices (96 / 32 / 32 reviews)."""
    rows = {s: [l.split("\t", 1) for l in (TASKS / "chnsenticorp" / f"{s}.tsv").read_text(encoding="utf-8")
                .split("\n")[1:] if l.strip()] for s in ("train", "dev", "test")}
    paths = []
    for split, n in (("train", 96), ("dev", 32), ("test", 32)):
        picked = [r for r in rows[split] if r[0] == "0"][:n // 2] + [r for r in rows[split] if r[0] == "1"][:n // 2]
        path = root / f"{split}.tsv"
        path.write_text("".join(f"{label}\t{text}\n" for label, text in picked), encoding="utf-8")
        paths.append(str(path))
    return "tsv:" + ",".join(paths)


def pinned(value):
    """The figures of a result, without what they do not depend on (`UNPINNED`)."""
    if isinstance(value, dict):
        return {k: pinned(v) for k, v in value.items() if k not in UNPINNED}
    if isinstance(value, list):
        return [pinned(v) for v in value]
    return value


def _last_json(text: str) -> dict:
    return json.loads(text.strip().split("\n")[-1])


def _predictions(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*.json"))}


#: the losses the log prints (4 decimals): at every dev evaluation, and per epoch where nothing is chosen
LOSS = re.compile(r"\bloss (\d+\.\d+)")
COMMON = ["--seq-len", "32", "--batch-size", "8", "--no-record"]


def runs(model: Path, modern: Path, tsv: str) -> dict[str, list[str]]:
    """name -> the command line of each pinned run (all fp32, one thread; the pooling and patience the figures were
    pinned under are given, so a change of the commands' defaults does not move them)."""
    m = str(model)
    return {
        "finetune-cls": ["finetune", m, "--task", tsv, "--seeds", "2", "--seed", "1", "--epochs", "6", "--lr", "5e-3",
                         "--patience", "3", "--pooling", "cls", *COMMON],
        "finetune-mean-random": ["finetune", m, "--task", tsv, "--seed", "3", "--epochs", "4", "--lr", "5e-3",
                                 "--pooling", "mean", "--random-init", "--eval-every", "2", "--patience", "1", *COMMON],
        "finetune-modernbert": ["finetune", str(modern), "--task", tsv, "--seed", "1", "--epochs", "3", "--lr", "5e-3",
                                "--pooling", "cls", *COMMON],
        "finetune-tnews": ["finetune", m, "--task", "tnews", "--seed", "2", "--epochs", "3", "--lr", "5e-3",
                           "--max-train", "96", "--pooling", "cls", *COMMON],
        "suite-eprstmt": ["eval", "suite", m, "--only", "eprstmt", "--splits", "1", "--lrs", "5e-3", "--lrs", "2e-4",
                          "--epochs", "4", "--patience", "2", "--pooling", "cls", "--baselines", *COMMON],
        "suite-pet": ["eval", "suite", m, "--method", "pet", "--only", "eprstmt", "--only", "chid", "--splits", "1",
                      "--lr", "2e-3", "--epochs", "2", "--patience", "2", *COMMON],
        "suite-zero-shot": ["eval", "suite", m, "--method", "zero-shot", "--only", "chid", "--only", "eprstmt",
                            *COMMON],
        "suite-cmrc": ["eval", "suite", m, "--suite", "cmrc2018", "--cmrc-epochs", "2", "--cmrc-seq-len", "96",
                       "--doc-stride", "40", "--cmrc-lr", "2e-3", "--batch-size", "8", "--baselines", "--no-record"],
    }


def measure(tmp: Path, model: Path, modern: Path, monkeypatch) -> dict:
    """Every pinned run in `tmp` on the task slices; name -> its figures (and prediction files)."""
    import torch

    from zh_bert import cli

    torch.set_num_threads(1)
    monkeypatch.setenv("ZH_BERT_TASK_DATA", str(task_slices(tmp / "tasks")))
    out, only = {}, os.environ.get("NUMERICS_ONLY", "").split(",")   # NUMERICS_ONLY=a,b: those runs only
    for name, argv in runs(model, modern, chnsenti_tsv(tmp)).items():
        if only != [""] and name not in only:
            continue
        preds = tmp / "preds" / name
        extra = ["--predictions", str(preds), "--report", str(tmp / "report" / name)] if argv[0] == "eval" else []
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert cli.main(argv + extra) == 0, name
        out[name] = {"result": pinned(_last_json(buf.getvalue())), "losses": LOSS.findall(buf.getvalue())}
        if extra:
            out[name]["predictions"] = _predictions(preds)
    return out


def moved(got, ref, path: str = "") -> list[str]:
    """Where `got` differs from what `ref` pins: every key of `ref` (recursively) with its value; lists whole."""
    if isinstance(ref, dict) and isinstance(got, dict):
        return [m for k, v in ref.items() for m in (moved(got[k], v, f"{path}/{k}") if k in got else [f"{path}/{k}: gone"])]
    return [] if got == ref else [f"{path}: now {json.dumps(got)[:300]}, pinned {json.dumps(ref)[:300]}"]


@pytest.mark.slow
def test_every_head_gives_the_pinned_figures(tmp_path, tiny_model_dir, tiny_modernbert_dir, monkeypatch):
    import torch

    cpu = torch.backends.cpu.get_cpu_capability()
    refs = json.loads(REF.read_text(encoding="utf-8"))
    if cpu not in refs and not os.environ.get("NUMERICS_WRITE"):
        pytest.skip(f"no pinned figures for a {cpu} CPU (references: {', '.join(refs)}); NUMERICS_WRITE=1 records them")
    got = measure(tmp_path, tiny_model_dir, tiny_modernbert_dir, monkeypatch)
    if os.environ.get("NUMERICS_WRITE"):
        refs[cpu] = got
        REF.write_text(json.dumps(refs, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    ref = refs[cpu]
    assert set(got) == set(ref) or os.environ.get("NUMERICS_ONLY")
    for name in got:
        assert not moved(got[name], ref[name]), f"{name} moved ({cpu}): {moved(got[name], ref[name])[:10]}"
