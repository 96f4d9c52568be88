"""`zh-bert finetune STUDENT --task T --teacher FINETUNED`: task-specific distillation on the classify and tag heads
(soft labels at T beside the gold ones), and `--save DIR`, which writes the stock folder a teacher is; on real
ChnSentiCorp reviews and Resume NER sentences (corpora/tasks)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import REPO

from zh_bert import cli

CHNSENTI = REPO / "corpora" / "tasks" / "chnsenticorp"
RESUME = REPO / "corpora" / "tasks" / "resume_ner"
FAST = ["--seq-len", "32", "--batch-size", "16", "--lr", "1e-3", "--epochs", "1", "--no-record"]


def _rows(split: str, n: int) -> list[str]:
    return [x for x in (CHNSENTI / f"{split}.tsv").read_text(encoding="utf-8").split("\n")[1:] if x.strip()][:n]


@pytest.fixture(scope="module")
def reviews(tmp_path_factory) -> str:
    """`tsv:TRAIN,DEV,TEST` of the first ChnSentiCorp reviews (label<TAB>text)."""
    folder = tmp_path_factory.mktemp("chnsenti")
    paths = []
    for split, n in (("train", 600), ("dev", 200), ("test", 300)):
        (folder / f"{split}.tsv").write_text("\n".join(_rows(split, n)) + "\n", encoding="utf-8")
        paths.append(str(folder / f"{split}.tsv"))
    return "tsv:" + ",".join(paths)


@pytest.fixture(scope="module")
def stock_folders(tmp_path_factory, tiny_model_dir, google_tokdir):
    """Stock folders made by transformers from the tiny model: a 2-label classifier of ChnSentiCorp's labels, a
    3-label one, a token classifier, and a 2-label classifier with another vocabulary (Google's first 3,000)."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, BertTokenizer

    root = tmp_path_factory.mktemp("teachers")
    made = {}
    for name, cls, labels in (("two", AutoModelForSequenceClassification, ["0", "1"]),
                              ("three", AutoModelForSequenceClassification, ["0", "1", "2"]),
                              ("tagger", AutoModelForTokenClassification, ["O", "B-NAME", "E-NAME"]),
                              ("other_vocab", AutoModelForSequenceClassification, ["0", "1"])):
        id2label = dict(enumerate(labels))
        model = cls.from_pretrained(str(tiny_model_dir), num_labels=len(labels), id2label=id2label,
                                    label2id={v: k for k, v in id2label.items()})
        model.save_pretrained(str(root / name))
        for f in google_tokdir.iterdir():
            shutil.copy(f, root / name / f.name)
        made[name] = root / name
    vocab = (google_tokdir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:3000]
    (root / "small_vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (made["other_vocab"] / f).unlink(missing_ok=True)
    BertTokenizer(vocab=str(root / "small_vocab.txt")).save_pretrained(str(made["other_vocab"]))
    shutil.copy(root / "small_vocab.txt", made["other_vocab"] / "vocab.txt")
    return made


@pytest.mark.parametrize("case", ["masked_lm", "labels", "vocab", "temperature", "alpha", "span_head",
                                  "tag_set", "save_foreign"])
def test_each_bad_teacher_is_one_line_before_training(case, tiny_model_dir, stock_folders, reviews, tmp_path,
                                                      capsys):
    """A teacher that is no fine-tuned classifier of the task (a masked LM, other labels, another tag set), reads
    another vocabulary, T <= 0, alpha outside [0, 1], a head that cannot learn from soft labels, a --save folder of
    someone else's: one line, exit 2, nothing trained."""
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine", encoding="utf-8")
    args, said = {
        "masked_lm": (["--task", reviews, "--teacher", str(tiny_model_dir)], "not a fine-tuned *ForSequenceClassification"),
        "labels": (["--task", reviews, "--teacher", str(stock_folders["three"])], "its 3 labels are not the 2 of task"),
        "vocab": (["--task", reviews, "--teacher", str(stock_folders["other_vocab"])], "vocab mismatch"),
        "temperature": (["--task", reviews, "--teacher", str(stock_folders["two"]), "--kd-temperature", "0"],
                        "--kd-temperature must be > 0"),
        "alpha": (["--task", reviews, "--teacher", str(stock_folders["two"]), "--kd-alpha", "1.5"],
                  "--kd-alpha is the soft term's weight in [0, 1]"),
        "span_head": (["--task", "cmrc2018", "--teacher", str(stock_folders["two"])],
                      "has a span head, which cannot learn from a teacher's soft labels; the heads that can: classify, "
                      "tag"),
        "tag_set": (["--task", "resume_ner", "--teacher", str(stock_folders["tagger"])], "labels are not the"),
        "save_foreign": (["--task", reviews, "--save", str(foreign)], "--save"),
    }[case]
    capsys.readouterr()
    rc = cli.main(["finetune", str(tiny_model_dir), *args, *FAST])
    out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and said in err, err
    assert err.startswith("zh-bert finetune: error: ") and "seed" not in out and "Traceback" not in err
    assert (foreign / "notes.txt").read_text(encoding="utf-8") == "mine" and sorted(foreign.iterdir()) == [
        foreign / "notes.txt"]


def test_alpha_zero_loss_and_gradient_are_the_hard_labels_bit_for_bit():
    """`--kd-alpha 0` with a teacher: the loss and the student's gradient are exactly the gold labels' (the soft
    term is weighed by 0.0, the hard one by 1.0); with alpha 1 the gold labels play no part."""
    import torch

    from zh_bert.evaluation.heads.distill import HARD_LABELS, Distilled

    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g) * 4
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    grads = []
    for objective in (HARD_LABELS, Distilled(None, {}, 8.0, 0.0, [0, 1, 2])):
        x = student.clone().requires_grad_(True)
        loss = objective.loss_sum(x, labels, lambda model: teacher)
        loss.backward()
        grads.append((loss.detach(), x.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    soft = Distilled(None, {}, 2.0, 1.0, [2, 1, 0])
    a = soft.loss_sum(student, labels, lambda model: teacher)
    assert torch.equal(a, soft.loss_sum(student, labels.flip(0), lambda model: teacher))   # no gold term
    expected = 4 * torch.nn.functional.kl_div(torch.log_softmax(student / 2, -1),
                                              torch.log_softmax(teacher[:, [2, 1, 0]] / 2, -1), reduction="sum",
                                              log_target=True)
    assert torch.allclose(a, expected)


def _finetune(capsys, *args) -> dict:
    capsys.readouterr()
    assert cli.main(["finetune", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out.strip().split("\n")[-1])


@pytest.mark.slow
def test_alpha_zero_reproduces_the_figures_of_no_teacher(tiny_model_dir, stock_folders, reviews, capsys):
    """Same seed, same digits: a teacher weighed 0 trains exactly as none (it runs, draws no random numbers)."""
    plain = _finetune(capsys, tiny_model_dir, "--task", reviews, "--max-train", "96", "--seed", "3", *FAST)
    zero = _finetune(capsys, tiny_model_dir, "--task", reviews, "--max-train", "96", "--seed", "3", *FAST,
                     "--teacher", stock_folders["two"], "--kd-alpha", "0")
    assert zero["kd_alpha"] == 0 and zero["teacher"] == str(stock_folders["two"].resolve())
    keys = ("dev_acc", "dev_macro_f1", "test_acc", "test_macro_f1")
    assert [zero[k] for k in keys] == [plain[k] for k in keys]
    assert zero["per_seed"] == plain["per_seed"] or [
        {k: v for k, v in r.items() if k != "train_s"} for r in zero["per_seed"]] == [
        {k: v for k, v in r.items() if k != "train_s"} for r in plain["per_seed"]]


@pytest.mark.slow
def test_a_distilled_student_agrees_with_its_teacher_more_than_one_trained_alone(tiny_model_dir, reviews, tmp_path):
    """`--save` writes the dev-chosen teacher as a stock folder (its sha256 recorded with the student's figures);
    students of three seeds that learn its soft labels (alpha 0.9, T 8) agree with its test predictions more than
    the same students trained on the gold labels alone (measured: 0.779 against 0.710 of 300 test reviews)."""
    import torch

    from zh_bert.evaluation.heads.classify import CLASSIFY_HEAD, run_classifier, tokenizer_for
    from zh_bert.evaluation.heads.distill import TaskDistillOptions, claim_save, save_finetuned, teacher_for
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.tasks.classification import load_task
    from zh_bert.train.objectives.teacher import folder_sha256

    torch.set_num_threads(1)
    task, tok, quiet = load_task(reviews), tokenizer_for(tiny_model_dir), (lambda m: None)
    cfg = FinetuneConfig(epochs=3, lr=2e-3, seq_len=48, batch_size=16, pooling="cls")   # a stock folder's pooling
    out = claim_save(TaskDistillOptions(save=str(tmp_path / "teacher")), tiny_model_dir)
    teacher = run_classifier(tiny_model_dir, task, cfg, [1], log=quiet, tok=tok,
                             keep=lambda m: save_finetuned(m, tok, tiny_model_dir, out, log=quiet))
    said = np.array(teacher.predictions)
    cfg = FinetuneConfig(epochs=3, lr=1e-3, seq_len=48, batch_size=16, pooling="cls")
    objective = teacher_for(TaskDistillOptions(teacher=str(out), kd_alpha=0.9), CLASSIFY_HEAD.teacher_class,
                            task.labels, tok, "t")
    alone = [run_classifier(tiny_model_dir, task, cfg, [s], log=quiet, tok=tok) for s in (11, 12, 13)]
    taught = [run_classifier(tiny_model_dir, task, cfg, [s], log=quiet, tok=tok, objective=objective)
              for s in (11, 12, 13)]
    agree = [[float((np.array(r.predictions) == said).mean()) for r in runs] for runs in (alone, taught)]
    assert np.mean(agree[1]) > np.mean(agree[0]) + 0.03 and all(b > a for a, b in zip(*agree)), agree
    taught = taught[0].summary()
    assert taught["teacher_sha256"] == folder_sha256(out) and taught["kd_temperature"] == 8.0


@pytest.mark.slow
def test_the_tag_head_learns_from_a_teacher_on_resume(tiny_model_dir, tmp_path, capsys):
    """A Resume NER tagger saved by `finetune --task ner --save` teaches a student on the same files (soft labels
    on the labelled first sub-tokens); the student's test entity F1 is reported beside the teacher's facts."""
    files = []
    for split, n in (("train", 120), ("dev", 40), ("test", 40)):
        text = (RESUME / f"{split}.char.bmes").read_text(encoding="utf-8").strip().split("\n\n")[:n]
        (tmp_path / f"{split}.char.bmes").write_text("\n\n".join(text) + "\n", encoding="utf-8")
        files += [f"--{split}", tmp_path / f"{split}.char.bmes"]
    ner = ["--task", "ner", *files, "--seq-len", "64", "--batch-size", "16", "--lr", "2e-3", "--no-record"]
    teacher = _finetune(capsys, tiny_model_dir, *ner, "--epochs", "2", "--save", tmp_path / "teacher")
    student = _finetune(capsys, tiny_model_dir, *ner, "--epochs", "1", "--seed", "4", "--teacher",
                        tmp_path / "teacher")
    assert 0 <= student["test_f1"] <= 1 and "test_f1" in teacher     # fractions
    assert student["teacher"] == str((tmp_path / "teacher").resolve()) and student["kd_alpha"] == 0.5
