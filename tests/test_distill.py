"""`objective: distill` on real Chinese text: every bad input one line before any work; a run whose checkpoints
hold the student (and its learned projections) but never the teacher, whose run.json and card name the teacher
and its sha256, and whose resume refuses a changed teacher; accumulation equal to one big batch; `plan` counting
the frozen teacher. Slow: BERT and ModernBERT students and teachers (attention maps, teacher-layers), kill -9 +
`--resume auto` exact, 2 processes equal 1, and a student distilled from a trained teacher agreeing with its
top-1 on held-out masked positions more than the same student trained from scratch."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from _run_helpers import kill_then_resume, metrics, save_recipe
from conftest import CHAR_SEQ, REPO

pytestmark = pytest.mark.usefixtures("one_thread")

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
STUDENT = {"model_type": "bert", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
           "intermediate_size": 128}


def make_teacher(folder: Path, tokdir: Path, *, family: str = "bert", layers: int = 2, hidden: int = 64,
                 heads: int = 4, seed: int = 0, architectures: list[str] | None = None) -> Path:
    """A real random masked LM with `tokdir`'s tokenizer files (what `zh-bert pretrain` writes into final/)."""
    from transformers import BertConfig, BertForMaskedLM, ModernBertForMaskedLM

    from zh_bert.train.arch.modernbert import build_modernbert_config

    torch.manual_seed(seed)
    if family == "bert":
        model = BertForMaskedLM(BertConfig(vocab_size=len(_tokens(tokdir)), hidden_size=hidden, num_hidden_layers=layers,
                                           num_attention_heads=heads, intermediate_size=4 * hidden))
    else:
        model = ModernBertForMaskedLM(build_modernbert_config("tiny", len(_tokens(tokdir)),
                                                              special_ids={"pad": 0, "cls": 2, "sep": 3}))
    model.save_pretrained(str(folder))
    for f in tokdir.iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    if architectures is not None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    return folder


def _tokens(tokdir: Path) -> list[str]:
    return (tokdir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]


def write_recipe(path: Path, char_shards, teacher_dir: Path, student: dict | None = STUDENT, **over) -> Path:
    """A distillation recipe of `student` (a config.json's keys) from `teacher_dir` on the char shards; `over`
    sets any key (`teacher` too)."""
    tokdir, sharddir = char_shards
    teacher = over.pop("teacher", teacher_dir)
    model = over.pop("model", None)
    if model is None:
        model = path.parent / "student.json"
        model.parent.mkdir(parents=True, exist_ok=True)
        model.write_text(json.dumps(student))
    recipe = {"out_dir": str(path.parent / "run"), "data": str(sharddir), "objective": "distill",
              "teacher": None if teacher is None else str(teacher), "model": str(model), "masking": "wwm", "seq_len": CHAR_SEQ,
              "global_batch": 16, "micro_batch": 8, "lr": 3e-3, "warmup_steps": 2, "max_steps": 4, "log_every": 1,
              "eval_every": 2, "eval_batches": 2, "save_every": 2, "keep_last": 5, "seed": 7, "precision": "fp32",
              "dropout": 0.0}
    return save_recipe(path, {**recipe, **over})


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, char_shards) -> Path:
    """A tiny random BERT teacher (L2/H64/A4) reading the char shards' tokenizer."""
    return make_teacher(tmp_path_factory.mktemp("teacher") / "t", char_shards[0])


# ------------------------------------------------------------------------------------------------ bad input

def _bad_teachers(root: Path, char_shards, google_tokdir) -> dict[str, Path]:
    return {"electra": make_teacher(root / "electra", char_shards[0], architectures=["ElectraForPreTraining"]),
            "classifier": make_teacher(root / "cls", char_shards[0], architectures=["BertForSequenceClassification"]),
            "google": make_teacher(root / "google", google_tokdir, hidden=32, layers=1)}


BAD = [
    ("no-teacher", {"teacher": None}, "objective distill needs 'teacher'"),
    ("teacher-with-mlm", {"objective": "mlm"}, "'teacher' is a key of objective distill, but objective is mlm"),
    ("no-such-teacher", {"teacher": "{root}/nope"}, "nope"),
    ("electra-discriminator", {"teacher": "{electra}"}, "is not a masked LM zh-bert can run (architectures "
                                                        "ElectraForPreTraining)"),
    ("classifier", {"teacher": "{classifier}"}, "is not a masked LM zh-bert can run"),
    ("vocab-mismatch-tokenizer", {"tokenizer": "{google_tok}"}, "vocab mismatch: tokenizer"),
    ("vocab-mismatch-shards", {"teacher": "{google}"}, "vocab mismatch:"),
    ("projection-cannot-map", {"projection": "none"}, "projection none cannot map the student's hidden size 32"),
    ("layer-map-teacher-out-of-range", {"layer_map": [[0, 0], [1, 7]]}, "teacher layer 7 is out of range: the "
                                                                        "teacher has 2 layers"),
    ("layer-map-student-out-of-range", {"layer_map": [[2, 1]]}, "student layer 2 is out of range"),
    ("layer-map-not-pairs", {"layer_map": [[1]]}, "layer_map[0] must be [student layer, teacher layer]"),
    ("temperature-zero", {"temperature": 0}, "'temperature' must be > 0"),
    ("temperature-negative", {"temperature": -2}, "'temperature' must be > 0"),
    ("weights-all-zero", {"kd_weight": 0, "hidden_weight": 0, "mlm_weight": 0}, "learns nothing"),
    ("negative-weight", {"hidden_weight": -1}, "'hidden_weight' must be >= 0"),
    ("attention-heads-differ", {"attention_weight": 1}, "the student has 2 heads and teacher"),
    ("teacher-layers-widths", {"student_init": "teacher-layers"}, "student_init teacher-layers copies teacher layers"),
]


@pytest.mark.parametrize("case, over, says", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_one_line_before_any_work(case, over, says, tmp_path_factory, char_shards, google_tokdir,
                                               teacher, capsys):
    from zh_bert.cli import main

    root = tmp_path_factory.getbasetemp() / "distill-bad"
    if not root.is_dir():
        root.mkdir()
        _bad_teachers(root, char_shards, google_tokdir)
    names = {"root": root, "electra": root / "electra", "classifier": root / "cls", "google": root / "google",
             "google_tok": google_tokdir}
    over = {k: v.format(**names) if isinstance(v, str) else v for k, v in over.items()}
    work = root / case
    recipe = write_recipe(work / "r.yaml", char_shards, teacher, **over)
    capsys.readouterr()
    assert main(["pretrain", str(recipe)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("zh-bert pretrain: error: ") and says in err[0], err
    assert not (work / "run").exists(), "refused before any work: no out_dir"


# ------------------------------------------------------------------------------------------------ a real run

@pytest.fixture(scope="module")
def distill_run(tmp_path_factory, char_shards, teacher):
    """A 4-step distillation (checkpoints at 2 and 4) of a 1-layer student from the tiny teacher, in process."""
    from zh_bert.train.pretrain import main

    root = tmp_path_factory.mktemp("distill")
    shutil.copytree(teacher, root / "teacher")   # its own copy: a test changes its weights
    assert main([str(write_recipe(root / "r.yaml", char_shards, root / "teacher"))]) == 0
    return root


def test_checkpoints_hold_the_student_and_projections_never_the_teacher(distill_run):
    from safetensors import safe_open
    from transformers import AutoModelForMaskedLM, BertForMaskedLM

    from zh_bert.train.objectives.teacher import folder_sha256

    run, teacher = distill_run / "run", distill_run / "teacher"
    teacher_names = set(safe_open(str(teacher / "model.safetensors"), "pt").keys())
    for ckpt in (run / "checkpoints" / "step-0000002", run / "checkpoints" / "step-0000004", run / "final"):
        files = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file()}
        assert not [f for f in files if "teacher" in f or "/" in f], files   # no subfolder: no second model
        with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert shapes["bert.embeddings.word_embeddings.weight"][1] == 32 and not [
            k for k, s in shapes.items() if 64 in s], "only the student's (H32) weights"
        if ckpt.name != "final":
            with safe_open(str(ckpt / "objective_state.safetensors"), "pt") as f:
                assert sorted(f.keys()) == ["projection.0.bias", "projection.0.weight", "projection.1.bias",
                                            "projection.1.weight"] and not set(f.keys()) & teacher_names
            state = json.loads((ckpt / "trainer_state.json").read_text())["objective"]["teacher"]
            assert state == {"name": str(teacher), "path": str(teacher.resolve()), "sha256": folder_sha256(teacher)}
            listed = json.loads((ckpt / "manifest.json").read_text())["files"]
            assert "objective_state.safetensors" in listed
    assert "objective_state.safetensors" not in {p.name for p in (run / "final").iterdir()}
    student = AutoModelForMaskedLM.from_pretrained(run / "final")
    assert type(student) is BertForMaskedLM and student.config.num_hidden_layers == 1
    summary = json.loads((run / "run.json").read_text())
    assert summary["objective"] == "distill" and summary["teacher"]["sha256"] == folder_sha256(teacher)
    assert summary["distill"]["layer_map"] == [[0, 0], [1, 2]] and summary["distill"]["temperature"] == 1.0
    assert {"mlm_loss", "mlm_acc", "kd_loss", "teacher_agree"} == set(summary["final_validation"])
    rows = [r for r in metrics(run) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["kd_loss"] > 0 and r["hidden_loss"] > 0 and 0 <= r["teacher_agree"] <= 1 for r in rows)


def test_the_card_names_the_teacher_and_the_losses(distill_run):
    from zh_bert.release.card import build_card

    teacher = distill_run / "teacher"
    card = build_card(distill_run / "run" / "final", distill_run / "run", "me/tiny-distilled")
    assert f"| teacher | `{teacher}` (BertForMaskedLM, 2 layers, hidden 64;" in card
    assert "| distillation | temperature 1.0, kd × 1, hidden × 1, mlm × 0.4; layer map (student, teacher) [[0, 0], [1, 2]]" in card


def test_a_resume_refuses_a_changed_teacher(distill_run, char_shards, tmp_path, capsys):
    """The teacher's folder holds other weights when the run resumes: one line before any work, the run's
    checkpoints as they were."""
    from zh_bert.cli import main

    teacher, run = distill_run / "teacher", tmp_path / "run"
    shutil.copytree(distill_run / "run", run)
    recipe = write_recipe(tmp_path / "r.yaml", char_shards, teacher, out_dir=str(run), max_steps=6,
                          model=str(distill_run / "student.json"))
    kept = (teacher / "model.safetensors").read_bytes()
    try:
        make_teacher(tmp_path / "other", char_shards[0], seed=1)
        shutil.copy(tmp_path / "other" / "model.safetensors", teacher / "model.safetensors")
        capsys.readouterr()
        assert main(["pretrain", str(recipe), "--resume", "auto"]) == 2
    finally:
        (teacher / "model.safetensors").write_bytes(kept)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"teacher {teacher} changed since this checkpoint" in err[0], err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]


def test_accumulation_4x8_equals_1x32(char_shards, teacher):
    """A distillation step on 32 sequences as 4 micro-batches of 8 equals one of 32: each term is normalised by
    its count over the global batch (masked tokens: soft targets; real tokens: hidden states)."""
    from test_electra import loader_batches

    from zh_bert.train.arch import BERT
    from zh_bert.train.objectives import DISTILL
    from zh_bert.train.recipe import Recipe
    from zh_bert.train.training import StepStats, lr_lambda, make_accelerator, make_optimizer, train_step

    micro = loader_batches(char_shards, 4, 8)
    whole = {k: torch.cat([m[k] for m in micro]) for k in micro[0]}
    base = Recipe(lr=1e-3, warmup_steps=0, max_steps=10, global_batch=32, micro_batch=8, objective="distill",
                  teacher=str(teacher), mlm_weight=0.5, temperature=2.0, dropout=0.0)
    torch.manual_seed(0)
    nets = DISTILL.build(base, BERT.config(base, 4000), BERT)
    first = DISTILL.module(nets, base)
    acc = make_accelerator("fp32", cpu=True)
    params, sums = {}, {}
    for name, batches, mb in (("4x8", micro, 8), ("1x32", [whole], 32)):
        recipe = copy.copy(base)
        recipe.micro_batch = mb
        model = copy.deepcopy(first)
        opt, _ = make_optimizer(model, recipe)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
        stats = StepStats()
        train_step(model, opt, sched, acc, batches, recipe, stats, step=3)
        params[name] = {k: v.detach().clone() for k, v in model.named_parameters()}
        sums[name] = (float(stats.sums["kd_loss_sum"]), float(stats.sums["hidden_loss_sum"]))
    assert all(abs(a - b) <= 1e-3 * abs(b) for a, b in zip(sums["4x8"], sums["1x32"])), sums
    worst = max((params["4x8"][k] - params["1x32"][k]).abs().max().item() for k in params["4x8"])
    moved = max((params["4x8"][k] - dict(first.named_parameters())[k]).abs().max().item() for k in params["4x8"])
    assert moved > 1e-4 and worst <= 1e-6, (worst, moved)
    assert not any(p.requires_grad for p in nets.frozen["teacher"].parameters())
    assert "teacher" not in dict(first.named_modules()), "the teacher is no submodule of what trains"


def test_plan_counts_the_frozen_teacher(capsys):
    """plan's student + projection parameters, the teacher's weights in memory and its forward in the FLOPs."""
    from zh_bert.cli import main
    from zh_bert.plan.memory_model import model_config
    from zh_bert.train.arch import BERT

    assert main(["plan", "--model", "tiny", "--objective", "distill", "--teacher", "base", "--gpu", "1080ti",
                 "--precision", "fp32", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert main(["plan", "--model", "tiny", "--gpu", "1080ti", "--precision", "fp32", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    student, base = model_config("tiny", 21128), model_config("base", 21128)
    pairs = 3   # uniform: [0, 0], [1, 6], [2, 12]
    assert got["params"] == alone["params"] + pairs * (128 * 768 + 768)
    want = (BERT.flops_per_token(student, 128, 0.15) + BERT.flops_per_token(base, 128, 0.15) / 3
            + 6 * pairs * (128 * 768 + 768))
    assert got["flops_per_token"] == pytest.approx(want)
    assert got["memory_gb"]["weights"] > alone["memory_gb"]["weights"] + 0.35   # the teacher's 110M fp32 weights
    assert "teacher L12/H768/A12 (frozen" in got["model_shape"]


# ------------------------------------------------------------------------------------------------ slow proofs

@pytest.mark.slow
@pytest.mark.parametrize("student_family, teacher_family, over", [
    ("modernbert", "modernbert", {"attention_weight": 1.0, "mlm_weight": 1.0}),
    ("bert", "modernbert", {}),
    ("modernbert", "bert", {"precision": "bf16"}),
    ("modernbert", "modernbert", {"student_init": "teacher-layers", "model": "tiny", "layer_map": [[0, 0], [1, 2], [2, 1]]}),
])
def test_bert_and_modernbert_students_and_teachers(student_family, teacher_family, over, tmp_path, char_shards):
    """Each pairing trains, validates and writes a stock final/ of the student's family; teacher-layers starts
    the student from the layers the map names."""
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM

    from zh_bert.train.pretrain import main

    teacher = make_teacher(tmp_path / "t", char_shards[0], family=teacher_family)
    student = dict(STUDENT, model_type=student_family)
    recipe = write_recipe(tmp_path / "r.yaml", char_shards, teacher, student,
                          architecture=student_family, **{**{"max_steps": 2, "save_every": 0}, **over})
    assert main([str(recipe)]) == 0
    final = AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "final")
    assert final.config.model_type == student_family
    rows = [r for r in metrics(tmp_path / "run") if "loss" in r]
    assert rows and all(r["kd_loss"] > 0 for r in rows)
    assert (rows[-1]["attention_loss"] > 0) == ("attention_weight" in over)
    if "student_init" in over:   # layer 1 of the student is the teacher's layer 2 before training moves it
        from zh_bert.train.objectives import DISTILL
        from zh_bert.train.recipe import load_recipe

        r = load_recipe(recipe)
        nets = DISTILL.build(r, r.arch.config(r, 4000, {"pad": 0, "cls": 2, "sep": 3}), r.arch)
        t = load_file(str(teacher / "model.safetensors"))
        s = nets.hf.state_dict()
        assert torch.equal(s["model.layers.0.attn.Wqkv.weight"], t["model.layers.1.attn.Wqkv.weight"])
        assert torch.equal(s["model.layers.1.mlp.Wo.weight"], t["model.layers.0.mlp.Wo.weight"])
        assert torch.equal(s["model.embeddings.tok_embeddings.weight"], t["model.embeddings.tok_embeddings.weight"])


@pytest.mark.slow
def test_kill9_then_resume_auto_reproduces_the_losses(tmp_path, char_shards, teacher):
    """A real distillation killed with SIGKILL after its first checkpoint; `--resume auto` logs exactly the
    per-step losses of an uninterrupted run (projections and student restored, the teacher reloaded)."""
    from zh_bert.train.pretrain import main

    common = dict(max_steps=12, save_every=4, log_every=1, eval_every=0, keep_last=3, dropout=0.1)
    assert main([str(write_recipe(tmp_path / "ref" / "r.yaml", char_shards, teacher, **common))]) == 0
    key = ("loss", "kd_loss", "hidden_loss", "teacher_agree")
    expected = {r["step"]: tuple(r[k] for k in key) for r in metrics(tmp_path / "ref" / "run") if "loss" in r}
    recipe = write_recipe(tmp_path / "killed" / "r.yaml", char_shards, teacher, **common)
    cmd = [sys.executable, "-m", "zh_bert", "pretrain", str(recipe)]
    rows = kill_then_resume(cmd, tmp_path / "killed" / "run", ONE_THREAD, REPO, last_step=12)
    got = {r["step"]: tuple(r[k] for k in key) for r in rows}
    assert sorted(got) == sorted(expected) == list(range(1, 13))
    worst = max(abs(a - b) for s in expected for a, b in zip(got[s], expected[s]))
    assert worst <= 1e-5, (got, expected)


@pytest.mark.slow
def test_two_processes_equal_one_process_with_double_accumulation(tmp_path, char_shards, teacher):
    """torchrun with 2 gloo processes (micro 4 × accumulation 2 × 2) against 1 (micro 4 × 4), a `tiny` student
    (dropout 0): the same per-step losses and student weights (2e-5, as test_ddp)."""
    from safetensors.numpy import load_file

    from test_ddp import one_and_two

    recipe = write_recipe(tmp_path / "r.yaml", char_shards, teacher, model="tiny", max_steps=4, eval_every=0,
                          save_every=0, micro_batch=4, lr=1e-3, warmup_steps=0, schedule="constant")
    runs = one_and_two(recipe, tmp_path, ONE_THREAD)
    one, two = ({r["step"]: (r["loss"], r["kd_loss"], r["hidden_loss"]) for r in metrics(runs[k]) if "loss" in r}
                for k in ("one", "two"))
    assert sorted(one) == sorted(two) == [1, 2, 3, 4]
    assert max(abs(a - b) for s in one for a, b in zip(one[s], two[s])) <= 1e-5, (one, two)
    p1, p2 = (load_file(str(runs[k] / "final" / "model.safetensors")) for k in ("one", "two"))
    assert p1.keys() == p2.keys() and max(float(abs(p1[k] - p2[k]).max()) for k in p1) <= 2e-5


@pytest.mark.slow
def test_a_hub_teacher_comes_through_download(tmp_path, char_shards, teacher, hub, online, monkeypatch):
    """`teacher: ORG/NAME` is fetched once, as `zh-bert download` fetches it, into models/ORG--NAME (the test Hub on
    127.0.0.1), and the run records where it came from."""
    from _hub_helpers import seed_repo

    from zh_bert.cli import main

    seed_repo(hub, "zh-org/tiny-teacher", teacher)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    recipe = write_recipe(tmp_path / "r.yaml", char_shards, "zh-org/tiny-teacher", max_steps=2, save_every=0,
                          eval_every=0)
    assert main(["pretrain", str(recipe)]) == 0
    fetched = tmp_path / "models" / "zh-org--tiny-teacher"
    assert (fetched / "model.safetensors").read_bytes() == (teacher / "model.safetensors").read_bytes()
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["teacher"]["name"] == "zh-org/tiny-teacher"
    assert summary["teacher"]["path"] == str(fetched.resolve())


@pytest.mark.slow
def test_the_python_api_resolves_a_hub_teacher_without_the_cli(tmp_path, char_shards, teacher, hub):
    """`pretrain.train(recipe)` in a fresh interpreter that never imports zh_bert.cli fetches a Hub-id teacher as
    the CLI does: the hub stage is found through the package's `zh_bert.model_sources` entry point."""
    import subprocess

    from _hub_helpers import seed_repo

    seed_repo(hub, "zh-org/api-teacher", teacher)
    recipe = write_recipe(tmp_path / "r.yaml", char_shards, "zh-org/api-teacher", max_steps=2, save_every=0,
                          eval_every=0)
    code = ("import sys\nfrom zh_bert.train.pretrain import train\nfrom zh_bert.train.recipe import load_recipe\n"
            "train(load_recipe(sys.argv[1], []))\nassert 'zh_bert.cli' not in sys.modules, 'the CLI was imported'\n")
    env = {k: v for k, v in ONE_THREAD.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "cache"), HF_HUB_DISABLE_IMPLICIT_TOKEN="1")
    done = subprocess.run([sys.executable, "-c", code, str(recipe)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    fetched = tmp_path / "models" / "zh-org--api-teacher"
    assert (fetched / "model.safetensors").read_bytes() == (teacher / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["teacher"]["path"] == str(fetched.resolve())


def teacher_agreement(student_dir: Path, teacher_dir: Path, sharddir: Path, batches: int = 8) -> float:
    """Share of the held-out (valid split) masked positions, fixed masks, where the student's top-1 is the
    teacher's."""
    from transformers import AutoModelForMaskedLM

    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig

    models = [AutoModelForMaskedLM.from_pretrained(d).eval() for d in (student_dir, teacher_dir)]
    loader = ShardLoader(ShardDataset(sharddir, "valid"), 16, MaskingConfig(strategy="wwm"), seed=11)
    agree = total = 0
    with torch.no_grad():
        for k, batch in enumerate(loader.one_pass()):
            if k >= batches:
                break
            masked = batch["labels"] != -100
            s, t = (m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[masked].argmax(-1)
                    for m in models)
            agree, total = agree + int((s == t).sum()), total + int(masked.sum())
    return agree / total


@pytest.mark.slow
def test_a_distilled_student_agrees_with_its_teacher_more_than_the_same_student_from_scratch(tmp_path, char_shards):
    """The same 1-layer student for 60 steps by distillation (T = 1) and by the masked-LM loss alone (same data,
    seed, schedule): on held-out masked positions the distilled one picks the teacher's top-1 far more often.
    The teacher is a random `tiny`-like BERT whose head is sharpened (its output LayerNorm ×30), so that its top-1
    is a function of the context of its own, which only distillation can teach: a teacher that CPU minutes can
    train predicts '，' almost everywhere, which the corpus alone teaches as well (part 4's measurement uses
    real teachers)."""
    from safetensors.torch import load_file, save_file

    from zh_bert.train.pretrain import main

    tokdir, sharddir = char_shards
    teacher = make_teacher(tmp_path / "teacher", tokdir)
    weights = load_file(str(teacher / "model.safetensors"))
    for key in ("cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias"):
        weights[key] = weights[key] * 30
    save_file(weights, str(teacher / "model.safetensors"), metadata={"format": "pt"})
    quiet = dict(STUDENT, hidden_dropout_prob=0.0)
    common = dict(max_steps=60, warmup_steps=6, save_every=0, eval_every=0, log_every=20, temperature=1.0)
    assert main([str(write_recipe(tmp_path / "kd" / "r.yaml", char_shards, teacher, quiet, **common))]) == 0
    scratch = write_recipe(tmp_path / "mlm" / "r.yaml", char_shards, None, quiet, objective="mlm",
                           tokenizer=str(tokdir), **common)
    assert main([str(scratch)]) == 0
    distilled = teacher_agreement(tmp_path / "kd" / "run" / "final", teacher, sharddir)
    alone = teacher_agreement(tmp_path / "mlm" / "run" / "final", teacher, sharddir)
    print(f"agreement with the teacher's top-1 on held-out masked positions: distilled {distilled:.3f}, "
          f"from scratch {alone:.3f}")
    assert distilled > alone + 0.1, (distilled, alone)
