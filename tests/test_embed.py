"""The embed head: sentence vectors from any checkpoint, trained by SimCSE, CoSENT or MNRL on the one loop, scored as
mteb scores C-MTEB's STS sets, saved as a sentence-transformers folder that `SentenceTransformer` loads as it is;
`zh-bert embed` and its bad inputs. Real tiny models made here, real slices of the bundled STS sets
(corpora/tasks/sts, SOURCE.md), real text from the bundled sample corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from _embed_helpers import TINY, pairs_file, stsb_rows
from zh_bert import cli
from zh_bert.core.errors import ZhBertError

REPO = Path(__file__).resolve().parent.parent
STS = REPO / "corpora" / "tasks" / "sts"
SAMPLE = REPO / "corpora" / "sample" / "zhwiki_sampled.txt"


def sts_slice(root: Path, per_file: int = 48) -> Path:
    """A ZH_BERT_TASK_DATA folder holding the first `per_file` pairs of every bundled STS file (every 3rd line of
    the label-sorted ones, so both labels appear)."""
    out = root / "sts"
    out.mkdir(parents=True)
    for f in STS.glob("*.data"):
        lines = [x for x in f.read_text(encoding="utf-8").split("\n") if x.strip()]
        (out / f.name).write_text("\n".join(lines[::3][:per_file]) + "\n", encoding="utf-8")
    return root


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# --------------------------------------------------------------------------- heads as objects

def test_every_head_kind_comes_from_the_one_registry():
    """Each declared task's head kind is an object of the registry; `finetune --task` specs map to a kind by asking
    the kinds (their prefixes), the user-files names and the declarations; every kind declares its options."""
    from zh_bert.corpus.task_registry import tasks
    from zh_bert.evaluation.heads import HEAD_KINDS, head_kind, kind_for, option_classes
    from zh_bert.evaluation.heads.base import HeadKind

    assert set(HEAD_KINDS) == {"classify", "choice", "span", "tag", "embed"}
    assert all(isinstance(k, HeadKind) and k.name == n for n, k in HEAD_KINDS.items())
    assert {head_kind(t).name for t in tasks()} == set(HEAD_KINDS)
    for spec, kind in {"tsv:a,b": "classify", "pairs:a,b": "embed", "simcse:x.txt": "embed", "ner": "tag",
                       "chnsenticorp": "classify", "resume_ner": "tag", "cmrc2018": "span", "stsb": "embed",
                       "lcqmc": "embed"}.items():
        assert kind_for(spec).name == kind, spec
    with pytest.raises(ZhBertError, match="eprstmt: EPRSTMT has no train/dev/test files"):
        kind_for("eprstmt")
    assert len(option_classes("finetune")) == len(set(option_classes("finetune"))) >= 4


def test_an_option_of_another_head_is_one_line(tmp_path, capsys):
    """`--loss` on a classification task, `--crf` on an embedder: refused before any file or model is read."""
    rc, _, err = run(capsys, "finetune", str(tmp_path / "none"), "--task", "chnsenticorp", "--loss", "cosent")
    assert rc == 2 and "--loss: an option of the embed head; task chnsenticorp has a classify head" in err
    rc, _, err = run(capsys, "finetune", str(tmp_path / "none"), "--task", "stsb", "--crf")
    assert rc == 2 and "--crf: an option of the tag head; task stsb has an embed head" in err


# --------------------------------------------------------------------------- losses

def _head(ckpt: Path, data, loss: str, dropout=None):
    from zh_bert.corpus.tokenizer_files import load_tokenizer
    from zh_bert.evaluation.heads.embed.head import EmbedHead
    from zh_bert.evaluation.heads.embed.losses import LOSSES
    from zh_bert.evaluation.heads.embed.pooling import pooling_named
    from zh_bert.evaluation.loop import FinetuneConfig

    cfg = FinetuneConfig(seq_len=32, batch_size=8, lr=2e-3)
    return EmbedHead(ckpt, data, cfg, load_tokenizer(ckpt), pooling_named("mean"), LOSSES[loss], 20.0, dropout), cfg


@pytest.mark.parametrize("loss", ["simcse", "cosent", "mnrl"])
def test_each_loss_lowers_itself_on_tiny_data(tiny_model_dir, loss):
    """Twenty steps on one batch of real sentences (SimCSE: STS-B sentences at dropout 0.1; CoSENT: graded STS-B
    pairs; MNRL: LCQMC's positive pairs with a hard negative each) lower the loss the head computes."""
    import torch

    from zh_bert.corpus.pair_files import Pair
    from zh_bert.evaluation.step import optimizer_step, stepping
    from zh_bert.evaluation.tasks.pairs import PairTask, SentenceTask

    rows = [r.split("\t") for r in stsb_rows("train", 16)]
    if loss == "simcse":
        data = SentenceTask("s", [a for a, _, _ in rows])
    elif loss == "cosent":
        data = PairTask("p", [Pair(a, b, float(y)) for a, b, y in rows], None, None, "grades")
    else:
        data = PairTask("p", [Pair(a, b, None, negative=rows[(i + 5) % 16][1]) for i, (a, b, _) in enumerate(rows)],
                        None, None, "triplets")
    torch.manual_seed(0)
    head, cfg = _head(tiny_model_dir, data, loss, dropout=0.1 if loss == "simcse" else None)
    head.draw(np.random.default_rng(0))
    model = head.model()
    idx = np.arange(min(8, head.train_size))
    opt, scaler, sched, _ = stepping(model, cfg, 20)
    first = head.loss(model, idx).item()
    for _ in range(20):
        optimizer_step(head.loss(model, idx), model, opt, scaler, sched)
    assert head.loss(model, idx).item() < first * 0.8, (loss, first)


def test_a_repeated_text_is_never_its_own_negative():
    """The same sentence twice in a batch: its second copy is masked out of the first one's negatives (MNRL and
    SimCSE), so the loss of identical vectors is the loss of a batch without the repeat."""
    import torch

    from zh_bert.evaluation.heads.embed.losses import LOSSES

    v = torch.nn.functional.normalize(torch.randn(4, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    batch = {"a": np.array([0, 1, 2, 0]), "b": np.array([5, 6, 7, 5])}   # pair 3 repeats pair 0
    masked = LOSSES["mnrl"].loss([v[[0, 1, 2, 0]], v[[0, 1, 2, 0]]], batch, 20.0)
    unmasked = torch.nn.functional.cross_entropy(20.0 * v[[0, 1, 2, 0]] @ v[[0, 1, 2, 0]].T, torch.arange(4))
    assert masked < unmasked   # without the mask, the copy competes with the positive
    simcse = LOSSES["simcse"].loss([v[[0, 1, 0]], v[[0, 1, 0]]], {"a": np.array([3, 4, 3])}, 20.0)
    assert torch.isfinite(simcse)


# --------------------------------------------------------------------------- the folder and the vectors

def test_the_saved_folder_loads_in_sentence_transformers_and_gives_zh_berts_vectors(embedder, tmp_path, capsys):
    """`SentenceTransformer(DIR)` as it is: its vectors equal `zh-bert embed`'s within 1e-5 (fp32), and the card
    carries the model-index in MTEB's convention."""
    from sentence_transformers import SentenceTransformer

    texts = [r.split("\t")[0] for r in stsb_rows("test", 40)]
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    rc, out, _ = run(capsys, "embed", str(embedder), str(src), "-o", str(tmp_path / "v.npy"), "--precision", "fp32")
    ours = np.load(tmp_path / "v.npy")
    theirs = SentenceTransformer(str(embedder), device="cpu").encode(texts, batch_size=7)
    assert rc == 0 and ours.shape == (40, 128) and np.abs(ours - theirs).max() < 1e-5
    assert json.loads((embedder / "modules.json").read_text())[1]["path"] == "1_Pooling"
    card = (embedder / "README.md").read_text(encoding="utf-8")
    assert "library_name: sentence-transformers" in card and "type: cosine_spearman" in card


def test_the_sts_score_is_scipys_spearman_of_the_cosines(embedder, tmp_path, monkeypatch, capsys):
    """`eval suite --suite sts` on a slice: its Spearman equals scipy's on the same vectors, and
    sentence-transformers' own STS scorer (EmbeddingSimilarityEvaluator) on the same pairs; TF-IDF and random
    init beside."""
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    monkeypatch.setenv("ZH_BERT_TASK_DATA", str(sts_slice(tmp_path / "tasks")))
    rc, out, _ = run(capsys, "eval", "suite", str(embedder), "--suite", "sts", "--only", "stsb", "--no-record",
                     "--precision", "fp32")
    res = json.loads(out.strip().split("\n")[-1])["pretrained"]["stsb"]
    rows = [r.split("\t") for r in (tmp_path / "tasks" / "sts" / "STS-B.test.data").read_text().split("\n") if r]
    model = SentenceTransformer(str(embedder), device="cpu")
    a, b = model.encode([r[0] for r in rows]), model.encode([r[1] for r in rows])
    direct = spearmanr([float(r[2]) for r in rows], (a * b).sum(1)).statistic
    theirs = EmbeddingSimilarityEvaluator([r[0] for r in rows], [r[1] for r in rows], [float(r[2]) / 5 for r in rows],
                                          main_similarity="cosine")(model)
    assert rc == 0 and res["test_spearman"] == pytest.approx(direct, abs=1e-6)
    assert theirs[next(k for k in theirs if k.endswith("spearman_cosine"))] == pytest.approx(direct, abs=1e-6)
    assert {"tfidf_spearman", "random_init_spearman"} <= set(res) and "character TF-IDF" in out


def test_embed_on_two_local_tasks_equals_one_process_in_input_order(embedder, tmp_path, capsys):
    """`--executor local --tasks 2`: the parts, in order, are the one-process vectors row for row."""
    lines = [x for x in SAMPLE.read_text(encoding="utf-8").split("\n") if x.strip()][:60]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert run(capsys, "embed", str(embedder), str(src), "-o", str(tmp_path / "one.npy"), "--precision", "fp32")[0] == 0
    rc, out, err = run(capsys, "embed", str(embedder), str(src), "-o", str(tmp_path / "parts"), "--executor", "local",
                       "--tasks", "2", "--precision", "fp32")
    assert rc == 0, err
    meta = json.loads((tmp_path / "parts" / "embed.json").read_text())
    parts = np.concatenate([np.load(tmp_path / "parts" / p["file"]) for p in meta["parts"]])
    assert [p["rows"] for p in meta["parts"]] != [60, 0] and meta["rows"] == 60
    assert np.abs(parts - np.load(tmp_path / "one.npy")).max() < 1e-6


def test_search_finds_the_nearest_lines(embedder, tmp_path, capsys):
    src = tmp_path / "lines.txt"
    src.write_text("护照怎么办理？\n\n今天的天气怎么样\n去哪里申请护照\n", encoding="utf-8")
    rc, out, _ = run(capsys, "embed", str(embedder), "--search", str(src), "--query", "护照怎么办理？", "-k", "2")
    assert rc == 0 and re.search(r"1\.0000  1: 护照怎么办理？", out) and len(out.strip().split("\n")) == 3


# --------------------------------------------------------------------------- bad input: one line each

BAD_PAIRS = {
    "two columns": (["今天天气很好\t天气不错"], "2 tab-separated fields"),
    "four columns": (["今天天气很好\t天气不错\t4\t多一列"], "4 tab-separated fields"),
    "a label that is not a number": (["今天天气很好\t天气不错\t高"], "label '高' is not a number"),
    "an empty file": ([], "empty file"),
}


@pytest.mark.parametrize("how", list(BAD_PAIRS))
def test_a_bad_pair_file_is_one_line_before_any_model(how, tmp_path, capsys):
    rows, message = BAD_PAIRS[how]
    train = pairs_file(tmp_path / "train.tsv", rows)
    dev = pairs_file(tmp_path / "dev.tsv", stsb_rows("valid", 8))
    rc, _, err = run(capsys, "finetune", str(tmp_path / "no-model"), "--task", f"pairs:{train},{dev}", "--loss",
                     "cosent", "--save", str(tmp_path / "out"))
    assert rc == 2 and message in err and len(err.strip().split("\n")) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, line, message", [
    ("STS-B.train.data", "今天天气很好\t天气不错\t7", "grade 7 outside this task's range 0-5"),
    ("LCQMC.valid.data", "今天天气很好\t天气不错\t0.5", "this task's labels are 1/0"),
])
def test_a_declared_tasks_labels_are_checked(name, line, message, tmp_path, monkeypatch, capsys):
    root = sts_slice(tmp_path / "tasks")
    with open(root / "sts" / name, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    monkeypatch.setenv("ZH_BERT_TASK_DATA", str(root))
    task = "stsb" if name.startswith("STS") else "lcqmc"
    rc, _, err = run(capsys, "finetune", str(tmp_path / "no-model"), "--task", task)
    assert rc == 2 and message in err and len(err.strip().split("\n")) == 1, err


def test_mnrl_trains_on_the_positive_pairs_of_a_binary_file(tmp_path, capsys):
    """Under --loss mnrl a 1/0 file's label-1 pairs are the positives; a file without two of them is one line."""
    rows = [r.rsplit("\t", 1)[0] + "\t0" for r in stsb_rows("train", 8)] + [stsb_rows("train", 9)[8].rsplit("\t", 1)[0] + "\t1"]
    train = pairs_file(tmp_path / "train.tsv", rows)
    dev = pairs_file(tmp_path / "dev.tsv", [r.rsplit("\t", 1)[0] + "\t1" for r in stsb_rows("valid", 4)])
    rc, _, err = run(capsys, "finetune", str(tmp_path / "no-model"), "--task", f"pairs:{train},{dev}")
    assert rc == 2 and "1 positive (label 1) train pairs, fewer than one batch needs (2" in err, err


def test_too_few_simcse_sentences_and_blank_files_are_one_line(tmp_path, capsys):
    few = tmp_path / "few.txt"
    few.write_text("今天天气很好，我们去公园散步吧。明天会下雨吗？\n", encoding="utf-8")
    rc, _, err = run(capsys, "finetune", str(tmp_path / "no-model"), "--task", f"simcse:{few}", "--batch-size", "8")
    assert rc == 2 and "2 sentences, fewer than one batch needs (8" in err, err
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    rc, _, err = run(capsys, "embed", str(tmp_path / "no-model"), "--search", str(blank), "--query", "x")
    assert rc == 2 and len(err.strip().split("\n")) == 1, err


def test_search_needs_an_embedder_and_long_texts_are_cut_and_said_once(tiny_model_dir, tmp_path, capsys):
    src = tmp_path / "lines.txt"
    src.write_text("短句。\n" + "很长的句子" * 40 + "\n" + "又一个很长的句子" * 40 + "\n", encoding="utf-8")
    rc, _, err = run(capsys, "embed", str(tiny_model_dir), "--search", str(src), "--query", "x")
    assert rc == 2 and "is not a sentence embedder (no modules.json)" in err
    rc, out, err = run(capsys, "embed", str(tiny_model_dir), str(src), "-o", str(tmp_path / "v.npy"), "--seq-len",
                       "32")
    assert rc == 0 and out.count("2 texts cut at 32 tokens") == 1 and "not a trained sentence embedder" in err


def test_a_modernbert_checkpoint_becomes_an_embedder_sentence_transformers_loads(tiny_modernbert_dir, tmp_path,
                                                                                 capsys):
    """ModernBERT too: trained, saved, loaded by `SentenceTransformer` as it is, the same vectors."""
    from sentence_transformers import SentenceTransformer

    train = pairs_file(tmp_path / "train.tsv", stsb_rows("train", 32))
    dev = pairs_file(tmp_path / "dev.tsv", stsb_rows("valid", 16))
    out = tmp_path / "model"
    rc, _, err = run(capsys, "finetune", str(tiny_modernbert_dir), "--task", f"pairs:{train},{dev}", "--epochs", "1",
                     "--lr", "1e-3", "--save", str(out), *TINY)
    assert rc == 0, err
    texts = [r.split("\t")[1] for r in stsb_rows("test", 12)]
    from zh_bert.evaluation.heads.embed.vectors import Encoder

    ours = Encoder(str(out), None, 32, "fp32").encode(texts)
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts)
    assert np.abs(ours - theirs).max() < 1e-5


def test_a_folder_sentence_transformers_saves_encodes_at_its_own_max_length(tiny_model_dir, tmp_path):
    """A folder written by sentence-transformers itself (6.x keeps the max length in the tokenizer's config, 5.x in
    sentence_bert_config.json): zh-bert cuts where it cuts, and gives its vectors (L2-normalised, as zh-bert's always
    are; this folder has no Normalize module)."""
    from sentence_transformers import SentenceTransformer, models

    from zh_bert.evaluation.heads.embed.vectors import Encoder

    word = models.Transformer(str(tiny_model_dir), max_seq_length=24)
    SentenceTransformer(modules=[word, models.Pooling(word.get_embedding_dimension(), "mean")],
                        device="cpu").save(str(tmp_path / "st"))
    texts = ["很长的句子" * 20, "短句。"] + [r.split("\t")[0] for r in stsb_rows("test", 6)]
    enc = Encoder(str(tmp_path / "st"), None, 512, "fp32")
    theirs = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts, normalize_embeddings=True)
    assert enc.seq_len == 24 and np.abs(enc.encode(texts) - theirs).max() < 1e-5


@pytest.mark.slow
def test_the_saved_folder_loads_in_sentence_transformers_on_transformers_4(embedder, tmp_path):
    """The same folder in the transformers 4.x venv of .ci/run with the newest sentence-transformers that runs there
    (5.x; 6.x needs transformers 5): the same vectors as zh-bert's within 1e-5."""
    import os
    import subprocess

    python = os.environ.get("ZH_BERT_TF4_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("ZH_BERT_TF4_PYTHON is not set: .ci/run must create the transformers 4.x venv")
        pytest.skip("no transformers 4.x python (set ZH_BERT_TF4_PYTHON; .ci/run does)")
    texts = [r.split("\t")[0] for r in stsb_rows("test", 24)]
    probe = ("import json, sys, numpy, transformers, sentence_transformers as st\n"
             "texts = json.loads(sys.stdin.read())\n"
             "v = st.SentenceTransformer(sys.argv[1], device='cpu').encode(texts)\n"
             "print(json.dumps({'v': v.tolist(), 'versions': [transformers.__version__, st.__version__]}))\n")
    proc = subprocess.run([python, "-c", probe, str(embedder)], input=json.dumps(texts), capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().split("\n")[-1])
    from zh_bert.evaluation.heads.embed.vectors import Encoder

    ours = Encoder(str(embedder), None, 32, "fp32").encode(texts)
    assert got["versions"][0].startswith("4.") and np.abs(np.array(got["v"]) - ours).max() < 1e-5, got["versions"]


def test_zero_shot_sts_entries_fill_the_board_columns_and_trained_ones_do_not():
    """`eval suite --suite sts` entries (protocol sts-v1, method zero-shot, Spearman x100, MTEB's dataset names)
    take the board's STS columns; a `finetune --task stsb` entry (finetune-v1) is a note, never that column."""
    from zh_bert.evaluation.eval_results import checked_entries
    from zh_bert.evaluation.suite.report import suite_entries
    from zh_bert.leaderboard.record import sort_entries

    res = {"zh_bert_version": "9.9", "method": "finetune", "protocols": {"sts": "sts-v1"}, "figures": "fraction",
           "pretrained": {"stsb": {"seeds": [42], "data_sha256": "ab" * 32, "test_spearman": 0.5123}}}
    (e,) = checked_entries(suite_entries(res), "res")
    assert (e["dataset_type"], e["metric_type"], e["metric_value"], e["method"], e["split"]) == (
        "C-MTEB/STSB", "cosine_spearman", 51.23, "zero-shot", "test")
    trained = dict(e, protocol="finetune-v1", method="finetune")
    scores, notes = sort_entries([e, trained], "x")
    assert scores == {"stsb-spearman": 51.23} and "protocol finetune-v1" in notes[0]["reason"]
