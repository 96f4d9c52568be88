"""The linear-chain CRF of the tag head (`zh_bert/evaluation/heads/tag/crf.py`, `--crf`): its log-partition, path score
and Viterbi path equal brute-force enumeration over every tag path of tiny random cases, masked positions change
nothing, the scheme constraint is respected, and crf.safetensors round-trips or is refused in one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import save_safetensors
from zh_bert.evaluation.heads.tag.crf import (
    CRF_FILE,
    LinearChainCRF,
    attach_crf,
    crf_tags,
    gather_labelled,
    load_crf,
    save_crf,
    scheme_constraint,
)
from zh_bert.evaluation.tasks.ner import load_ner
from zh_bert.evaluation.tasks.tag_schemes import OUTSIDE, SCHEMES
from zh_bert.evaluation.heads.tag.tagging import IGNORED, encode, predict_rows, tags_of

RESUME = Path(__file__).resolve().parent.parent / "corpora" / "tasks" / "resume_ner"
VOCAB = Path(__file__).resolve().parent / "data" / "bert_base_chinese_vocab" / "vocab.txt"   # Google's (SOURCE.md)


def random_crf(n_tags: int, seed: int) -> LinearChainCRF:
    g = torch.Generator().manual_seed(seed)
    crf = LinearChainCRF(n_tags).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return crf.requires_grad_(False)


def random_batch(lengths: list[int], n_tags: int, seed: int):
    """Emissions [B, L, C] with junk (large) values at the masked positions, and the left-aligned mask."""
    g = torch.Generator().manual_seed(seed)
    em = torch.randn(len(lengths), max(lengths), n_tags, generator=g, dtype=torch.float64) * 2
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.bool)
    for r, n in enumerate(lengths):
        mask[r, :n] = True
        em[r, n:] = 1e3 * torch.rand(max(lengths) - n, n_tags, generator=g, dtype=torch.float64)
    return em, mask


def brute_score(crf, em_row, path, trans=None, start=None, end=None) -> float:
    trans = crf.transitions if trans is None else trans
    start = crf.start if start is None else start
    end = crf.end if end is None else end
    s = start[path[0]] + end[path[-1]] + sum(em_row[t, y] for t, y in enumerate(path))
    return float(s + sum(trans[a, b] for a, b in zip(path, path[1:])))


CASES = [(3, [4, 1, 3], 0), (4, [3, 2], 1), (2, [5, 5, 2], 2), (5, [1], 3)]


@pytest.mark.parametrize("n_tags,lengths,seed", CASES)
def test_log_partition_path_score_and_viterbi_equal_brute_force(n_tags, lengths, seed):
    """Over every one of the C^n paths of each row: log Σ exp(score) is the forward algorithm's log-partition,
    the gold path's score is `path_score`, NLL is their difference, the best path is Viterbi's."""
    crf = random_crf(n_tags, seed)
    em, mask = random_batch(lengths, n_tags, seed + 100)
    gold = torch.randint(0, n_tags, mask.shape, generator=torch.Generator().manual_seed(seed))
    log_z, gold_score = crf.log_partition(em, mask), crf.path_score(em, gold, mask)
    decoded = crf.decode(em, mask)
    nll = 0.0
    for r, n in enumerate(lengths):
        scores = {p: brute_score(crf, em[r], p) for p in itertools.product(range(n_tags), repeat=n)}
        want_z = float(torch.logsumexp(torch.tensor(list(scores.values())), 0))
        assert float(log_z[r]) == pytest.approx(want_z, abs=1e-5)
        g = tuple(gold[r, :n].tolist())
        assert float(gold_score[r]) == pytest.approx(scores[g], abs=1e-5)
        assert tuple(decoded[r]) == max(scores, key=scores.get)
        nll += want_z - scores[g]
    assert float(crf.nll(em, gold, mask)) == pytest.approx(nll, abs=1e-5)


def test_masked_positions_change_nothing():
    """A row padded with junk emissions and junk gold tags scores, normalises and decodes as the row alone."""
    crf = random_crf(4, 7)
    em, mask = random_batch([5, 2], 4, 8)
    gold = torch.randint(0, 4, mask.shape, generator=torch.Generator().manual_seed(9))
    short = em[1:, :2], mask[1:, :2], gold[1:, :2]
    padded_gold = gold.clone()
    padded_gold[1, 2:] = 3 - gold[1, 2:]
    assert float(crf.log_partition(em, mask)[1]) == pytest.approx(float(crf.log_partition(*short[:2])[0]), abs=1e-9)
    assert float(crf.path_score(em, padded_gold, mask)[1]) == pytest.approx(
        float(crf.path_score(short[0], short[2], short[1])[0]), abs=1e-9)
    assert crf.decode(em, mask)[1] == crf.decode(*short[:2])[0]
    assert len(crf.decode(em, mask)[1]) == 2


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes"])
def test_constrained_decoding_is_the_best_allowed_path(scheme):
    """With the scheme's constraint, Viterbi returns the best path among those the scheme allows (brute force),
    which never starts inside a span, never continues another type's span and (BIOES/BMES) never ends open;
    emissions that favour `O I-X` get a well-formed path instead."""
    sch = SCHEMES[scheme]
    labels = sch.tags(["LOC", "PER"])
    n = len(labels)
    crf = random_crf(n, 11)
    start, trans, end = scheme_constraint(labels, sch)
    crf.constrain((start, trans, end))
    em, mask = random_batch([4, 3], n, 12)
    em[0, 0, labels.index(OUTSIDE)] += 50
    em[0, 1, labels.index(f"{sch.inside}-PER")] += 50          # the unconstrained path takes O I-PER
    free = crf.decode(em, mask, constrained=False)[0]
    assert labels[free[1]] == f"{sch.inside}-PER"
    for r, length in enumerate([4, 3]):
        allowed = [p for p in itertools.product(range(n), repeat=length)
                   if start[p[0]] and end[p[-1]] and all(trans[a, b] for a, b in zip(p, p[1:]))]
        best = max(allowed, key=lambda p: brute_score(crf, em[r], p))
        path = crf.decode(em, mask)[r]
        assert tuple(path) == best
        tags = [labels[i] for i in path]
        assert all(sch.follows(a, b) for a, b in zip([OUTSIDE] + tags, tags + [OUTSIDE]))
    crf.constrain(None)
    assert crf.decode(em, mask)[0] == free


def test_gathered_emissions_are_the_labelled_positions_in_order():
    """Rows of logits with IGNORED between labelled positions become left-aligned chains; a row with no label
    is dropped."""
    logits = torch.arange(3 * 5 * 2, dtype=torch.float32).reshape(3, 5, 2)
    labels = torch.tensor([[IGNORED, 1, IGNORED, 0, IGNORED], [IGNORED] * 5, [0, 1, 1, IGNORED, 1]])
    em, gold, mask = gather_labelled(logits, labels)
    assert mask.tolist() == [[True, True, False, False], [True, True, True, True]]
    assert gold.tolist() == [[1, 0, 0, 0], [0, 1, 1, 1]]
    assert torch.equal(em[0, :2], logits[0, [1, 3]]) and torch.equal(em[1], logits[2, [0, 1, 2, 4]])


def test_saved_crf_round_trips(tmp_path):
    crf = random_crf(5, 3).float()
    save_crf(crf, tmp_path)
    back = load_crf(tmp_path, 5)
    for name, p in crf.named_parameters():
        assert torch.equal(p, getattr(back, name))
    em, mask = random_batch([4, 2], 5, 4)
    assert back.decode(em.float(), mask) == crf.decode(em.float(), mask)


def _bad(folder, **tensors):
    save_safetensors(tensors, folder / CRF_FILE)
    return folder


@pytest.mark.parametrize("case", ["missing", "extra", "shape", "nan", "int", "garbage", "absent"])
def test_a_bad_crf_file_is_one_line(tmp_path, case):
    good = {"start": torch.zeros(3), "transitions": torch.zeros(3, 3), "end": torch.zeros(3)}
    if case == "missing":
        _bad(tmp_path, start=good["start"], end=good["end"])
    elif case == "extra":
        _bad(tmp_path, **good, bias=torch.zeros(3))
    elif case == "shape":
        _bad(tmp_path, **{**good, "transitions": torch.zeros(3, 4)})
    elif case == "nan":
        _bad(tmp_path, **{**good, "end": torch.tensor([0.0, float("nan"), 0.0])})
    elif case == "int":
        _bad(tmp_path, **{**good, "start": torch.zeros(3, dtype=torch.int64)})
    elif case == "garbage":
        (tmp_path / CRF_FILE).write_bytes(b"\xff" * 40)
    with pytest.raises(ZhBertError) as e:
        load_crf(tmp_path, 3)
    msg = str(e.value)
    assert "\n" not in msg and CRF_FILE in msg


def test_sentences_decode_through_their_windows():
    """Real Resume sentences cut into windows (seq-len 16): with zero CRF scores and no constraint Viterbi is the
    argmax, so `crf_tags` (one chain per sentence, each character's emission from its own window) gives exactly
    the stock head's tags; constrained, every sentence's tags follow the scheme."""
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    task = load_ner("resume_ner", None, RESUME / "dev.char.bmes", None)
    sentences = sorted(task.dev, key=lambda s: -len(s.tokens))[:6] + task.dev[:6]
    labels = task.scheme.tags(task.types)
    tok = BertTokenizerFast(vocab=str(VOCAB))
    rows = encode(tok, sentences, None, 16, 4)
    assert rows.windowed >= 6
    torch.manual_seed(0)
    model = BertForTokenClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                                  num_attention_heads=2, intermediate_size=64,
                                                  num_labels=len(labels))).eval()
    crf = attach_crf(model, len(labels))
    stock = tags_of(rows, predict_rows(model, rows, 8, 0, "fp32"), labels)
    assert crf_tags(model, rows, labels, 8, 0, "fp32", constrained=False) == stock
    crf.constrain(scheme_constraint(labels, task.scheme))
    for tags in crf_tags(model, rows, labels, 8, 0, "fp32"):
        assert all(task.scheme.follows(a, b) for a, b in zip([OUTSIDE] + tags, tags + [OUTSIDE]))


def test_crf_figures_never_replace_the_stock_heads():
    """A CRF run's eval_results entries carry `crf: true`, `+crf` on the protocol and a task name of their own: the
    newest-per-identity rule keeps the stock head's figure beside it, and the board's column (which holds the
    task's own protocol) does not take it."""
    from zh_bert.evaluation.eval_results import entry, latest
    from zh_bert.evaluation.heads.tag.head import head_entries

    stock = [entry("token-classification", "Named-entity recognition", "resume_ner", "Resume NER", "f1", "test f1",
                   80.0, protocol="ner-v1", split="test")]
    assert head_entries(stock, {"task": "resume_ner"}) == stock
    crf = head_entries(stock, {"crf": True})
    assert crf[0]["crf"] is True and crf[0]["protocol"] == "ner-v1+crf" and crf[0]["task_name"].endswith("CRF head")
    assert len(latest(stock + crf)) == 2


def test_crf_is_refused_in_one_line_where_no_tag_head_decodes(tmp_path):
    """`--crf` on a classification task or a suite without a NER task, and `--crf` with `--teacher` (soft labels
    per character against a score of whole paths): one line each, before any model is read."""
    from zh_bert.evaluation.commands.finetune import main
    from zh_bert.evaluation.heads.tag.head import TagHead, TaggingConfig
    from zh_bert.evaluation.heads.tag.kind import TagSuiteOptions
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.suite.protocol import SuiteArgs, head_options

    with pytest.raises(ZhBertError, match=r"--crf: an option of the tag head; task chnsenticorp has a classify head"):
        main([str(tmp_path / "no-model"), "--task", "chnsenticorp", "--crf"])
    with pytest.raises(ZhBertError, match=r"--crf: no tag task among"):
        head_options(SuiteArgs(suite="fewclue"), {TagSuiteOptions: TagSuiteOptions(crf=True)})
    assert head_options(SuiteArgs(suite="ner"), {TagSuiteOptions: TagSuiteOptions(crf=True)})[TagSuiteOptions].crf
    task = load_ner("resume_ner", None, RESUME / "dev.char.bmes", None)
    with pytest.raises(ZhBertError, match=r"--crf with --teacher"):
        TagHead(tmp_path, task, FinetuneConfig(), TaggingConfig(crf=True), objective=object())


def rescored(path: Path) -> tuple[float, float, float, list[str]]:
    """seqeval's P/R/F1 of a predictions file (character gold predicted), and its predicted column."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    gold, pred, column = [[]], [[]], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line:
            gold, pred = (gold + [[]], pred + [[]]) if gold[-1] else (gold, pred)
            continue
        _, g, p = line.split(" ")
        gold[-1].append(g)
        pred[-1].append(p)
        column.append(p)
    gold, pred = [g for g in gold if g], [p for p in pred if p]
    return precision_score(gold, pred), recall_score(gold, pred), f1_score(gold, pred), column


@pytest.mark.slow
def test_finetune_crf_runs_end_to_end_and_its_saved_folder_predicts_the_same(tiny_model_dir, tmp_path, capsys):
    """`finetune --task resume_ner --crf --max-train 48 --epochs 1 --save DIR --predictions P`: the predictions
    re-score with seqeval to the printed figures; DIR is a stock token classifier (no CRF tensor in its weights, it
    loads with nothing missing or unexpected) with crf.safetensors beside, and the two together re-predict test
    tag for tag."""
    import json

    from safetensors import safe_open
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from zh_bert.evaluation.commands.finetune import main
    from zh_bert.evaluation.heads.tag.crf import CRF_ATTR

    assert main([str(tiny_model_dir), "--task", "resume_ner", "--crf", "--max-train", "48", "--epochs", "1",
                 "--lr", "1e-3", "--seq-len", "64", "--no-record", "--save", str(tmp_path / "model"),
                 "--predictions", str(tmp_path / "preds")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["crf"] is True
    *prf, column = rescored(tmp_path / "preds" / "resume_ner.conll")
    assert [100 * x for x in prf] == pytest.approx([summary[f"test_{k}"] for k in ("precision", "recall", "f1")],
                                                   abs=1e-9)
    folder = tmp_path / "model"
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert not [k for k in f.keys() if k.startswith(f"{CRF_ATTR}.")]
    model, info = AutoModelForTokenClassification.from_pretrained(str(folder), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    model.add_module(CRF_ATTR, load_crf(folder, len(labels), labels))
    task = load_ner("resume_ner", None, RESUME / "dev.char.bmes", RESUME / "test.char.bmes")
    rows = encode(AutoTokenizer.from_pretrained(str(folder)), task.test, None, 64, 32)
    again = [task.scheme.scoring_tag(t) for tags in crf_tags(model, rows, labels, 64, 0, "fp32") for t in tags]
    assert again == column


@pytest.mark.slow
def test_eval_suite_ner_crf_records_the_crf_beside_its_figures(tiny_model_dir, tmp_path, capsys):
    """`eval suite --suite ner --only resume_ner --crf`: the same choosing protocol, the task's result says
    `crf: true`, its eval_results entries are the CRF head's own, and the predictions re-score with seqeval."""
    import json

    from zh_bert.evaluation.commands.evaluate import main
    from zh_bert.evaluation.suite.report import suite_entries

    assert main(["suite", str(tiny_model_dir), "--suite", "ner", "--only", "resume_ner", "--crf", "--lr", "1e-3",
                 "--epochs", "1", "--max-train", "48", "--seq-len", "64", "--predictions", str(tmp_path / "preds"),
                 "--report", str(tmp_path / "report"), "--no-record"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    r = res["pretrained"]["resume_ner"]
    assert r["crf"] is True
    assert 100 * rescored(tmp_path / "preds" / "ner" / "resume_ner.conll")[2] == pytest.approx(r["test_f1"], abs=1e-9)
    entries = suite_entries(res)
    assert entries and all(e["crf"] is True and e["protocol"].endswith("+crf") for e in entries)
