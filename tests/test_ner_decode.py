"""Scheme-constrained decoding of the stock tag head (`--decode constrained`, `ner_crf.scheme_tags`): each
sentence's tags are the best path by the sum of its characters' softmax log-probabilities among the paths the tag
scheme allows (brute force over every path on small real sentences), always well-formed, the argmax itself where
that is well-formed; its figures are recorded under an identity of their own; and the finetune and suite runs
re-score with seqeval."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from zh_bert.core.errors import ZhBertError
from zh_bert.evaluation.heads.tag.crf import scheme_constraint, scheme_tags
from zh_bert.evaluation.tasks.ner import load_ner
from zh_bert.evaluation.tasks.tag_schemes import OUTSIDE, SCHEMES
from zh_bert.evaluation.heads.tag.tagging import encode, predict_rows, tags_of

from test_ner_crf import RESUME, VOCAB, rescored

TYPES = ["LOC", "PER"]


def tiny_tagger(n_labels: int, seed: int, tok):
    """A real (random) one-layer BERT token classifier whose classifier is scaled up, so its per-character argmax
    often writes paths the scheme forbids."""
    from transformers import BertConfig, BertForTokenClassification

    torch.manual_seed(seed)
    model = BertForTokenClassification(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                                  num_attention_heads=2, intermediate_size=64,
                                                  num_labels=n_labels)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(20)
    return model


def follows(scheme, tags: list[str]) -> bool:
    return all(scheme.follows(a, b) for a, b in zip([OUTSIDE] + tags, tags + [OUTSIDE]))


@pytest.fixture(scope="module")
def resume():
    from transformers import BertTokenizerFast

    task = load_ner("resume_ner", None, RESUME / "dev.char.bmes", None)
    return task, BertTokenizerFast(vocab=str(VOCAB))


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes"])
def test_constrained_decoding_is_the_best_allowed_path_by_log_probabilities(scheme, resume):
    """Real Resume characters (the first 4 of each sentence, each its own row here): `scheme_tags` equals the path
    brute force finds, the highest sum of the characters' log-softmax among all paths whose every transition, start
    and end the scheme allows; the random head's argmax breaks the scheme in some of them, the decoding never."""
    task, tok = resume
    sch = SCHEMES[scheme]
    labels = sch.tags(TYPES)
    sentences = [type(s)(s.tokens[:4], None, s.where) for s in task.dev[:8]]
    model = tiny_tagger(len(labels), 3, tok)
    rows = encode(tok, sentences, None, 16, 4)
    decoded = scheme_tags(model, rows, labels, sch, 64, 0, "fp32")
    argmax = tags_of(rows, predict_rows(model, rows, 64, 0, "fp32"), labels)
    start, trans, end = scheme_constraint(labels, sch)
    paths = torch.tensor(list(itertools.product(range(len(labels)), repeat=4)))
    allowed = paths[start[paths[:, 0]] & end[paths[:, -1]] & trans[paths[:, :-1], paths[:, 1:]].all(1)]
    assert all(len(x) == 6 for x in rows.input_ids)              # [CLS], a token per character, [SEP]
    with torch.inference_mode():
        every = model(input_ids=torch.from_numpy(np.stack(rows.input_ids))).logits.float().log_softmax(-1)
    for where, tags in zip(rows.where, decoded):
        assert (where[:, 0] >= 0).all() and len(set(where[:, 0])) == 1
        lp = every[where[0, 0], torch.from_numpy(where[:, 1])].double()
        scores = lp[torch.arange(4), allowed].sum(1)                # every allowed path's sum of log-probabilities
        assert scores.max() - scores.topk(2).values[1] > 1e-6       # one best path, not a tie broken either way
        assert tags == [labels[i] for i in allowed[scores.argmax()]]
        assert follows(sch, tags)
    assert any(not follows(sch, t) for t in argmax)          # the case the constraint exists for is exercised


def test_windowed_sentences_are_well_formed_and_keep_a_well_formed_argmax(resume):
    """Long real sentences cut into windows (seq-len 16): every decoded sentence follows BMES, and a sentence whose
    argmax (each character from its own window) already follows it decodes to exactly that argmax."""
    task, tok = resume
    labels = task.scheme.tags(task.types)
    sentences = sorted(task.dev, key=lambda s: -len(s.tokens))[:6] + task.dev[:10]
    rows = encode(tok, sentences, None, 16, 4)
    assert rows.windowed >= 6
    model = tiny_tagger(len(labels), 5, tok)
    with torch.no_grad():
        model.classifier.bias[labels.index(OUTSIDE)] += 8    # mostly O: some argmax sentences are well-formed
    decoded = scheme_tags(model, rows, labels, task.scheme, 64, 0, "fp32")
    argmax = tags_of(rows, predict_rows(model, rows, 64, 0, "fp32"), labels)
    assert all(follows(task.scheme, t) for t in decoded)
    kept = [(d, a) for d, a in zip(decoded, argmax) if follows(task.scheme, a)]
    assert len(kept) < len(argmax) and any(t != OUTSIDE for d, _ in kept for t in d)
    assert all(d == a for d, a in kept)


def test_constrained_figures_never_replace_the_stock_heads():
    """A `--decode constrained` run's eval_results entries carry `decode: constrained`, `+constrained` on the
    protocol and a task name of their own: the stock argmax figure and the CRF head's stay beside it."""
    from zh_bert.evaluation.eval_results import entry, latest
    from zh_bert.evaluation.heads.tag.head import head_entries

    stock = [entry("token-classification", "Named-entity recognition", "resume_ner", "Resume NER", "f1", "test f1",
                   80.0, protocol="ner-v1", split="test")]
    assert head_entries(stock, {"task": "resume_ner"}) == stock
    dec = head_entries(stock, {"decode": "constrained"})
    assert dec[0]["decode"] == "constrained" and dec[0]["protocol"] == "ner-v1+constrained"
    assert dec[0]["task_name"].endswith("constrained decoding") and "crf" not in dec[0]
    crf = head_entries(stock, {"crf": True})
    assert crf[0]["protocol"] == "ner-v1+crf" and "decode" not in crf[0]
    assert len(latest(stock + dec + crf)) == 3


def test_decode_is_refused_in_one_line_where_it_means_nothing(tmp_path):
    """`--decode` on a classification task or a suite without a NER task, and `--decode argmax --crf` (a CRF has
    no per-character argmax): one line each, before any model is read."""
    from zh_bert.evaluation.commands.finetune import main
    from zh_bert.evaluation.heads.tag.head import TaggingConfig
    from zh_bert.evaluation.heads.tag.kind import TagSuiteOptions
    from zh_bert.evaluation.suite.protocol import SuiteArgs, head_options

    with pytest.raises(ZhBertError, match=r"--decode: an option of the tag head; task chnsenticorp has a classify"):
        main([str(tmp_path / "no-model"), "--task", "chnsenticorp", "--decode", "constrained"])
    with pytest.raises(ZhBertError, match=r"--decode argmax with --crf"):
        main([str(tmp_path / "no-model"), "--task", "resume_ner", "--crf", "--decode", "argmax"])
    with pytest.raises(ZhBertError, match=r"--decode: no tag task among"):
        head_options(SuiteArgs(suite="fewclue"), {TagSuiteOptions: TagSuiteOptions(decode="constrained")})
    with pytest.raises(ZhBertError, match=r"--decode argmax with --crf"):
        TagSuiteOptions(crf=True, decode="argmax")
    assert head_options(SuiteArgs(suite="ner"), {TagSuiteOptions: TagSuiteOptions(decode="constrained")})[
        TagSuiteOptions].decode == "constrained"
    assert TaggingConfig(crf=True, decode="constrained").constrained and TaggingConfig(crf=True).constrained
    assert not TaggingConfig().constrained and TaggingConfig(decode="constrained").constrained


def well_formed_column(path: Path) -> bool:
    """Whether the predicted column of a predictions file (scoring form: BMES's M written as I) follows BIOES,
    sentence by sentence."""
    bioes, sentence, ok = SCHEMES["bioes"], [], True
    for line in path.read_text(encoding="utf-8").split("\n") + [""]:
        if line:
            sentence.append(line.split(" ")[-1])
        elif sentence:
            ok, sentence = ok and follows(bioes, sentence), []
    return ok


@pytest.mark.slow
def test_finetune_decode_constrained_runs_end_to_end(tiny_model_dir, tmp_path, capsys):
    """`finetune --task resume_ner --decode constrained --max-train 48 --epochs 1 --predictions P`: the summary says
    `decode: constrained`, its entries are the constrained identity, the predictions are well-formed and re-score
    with seqeval to the printed figures."""
    import json

    from zh_bert.corpus.task_registry import task_named
    from zh_bert.evaluation.commands.finetune import main
    from zh_bert.evaluation.heads.tag.head import head_entries
    from zh_bert.evaluation.heads.tag.kind import ner_entries

    assert main([str(tiny_model_dir), "--task", "resume_ner", "--decode", "constrained", "--max-train", "48",
                 "--epochs", "1", "--lr", "1e-3", "--seq-len", "64", "--no-record",
                 "--predictions", str(tmp_path / "preds")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["decode"] == "constrained" and "crf" not in summary
    path = tmp_path / "preds" / "resume_ner.conll"
    *prf, _ = rescored(path)
    assert [100 * x for x in prf] == pytest.approx([summary[f"test_{k}"] for k in ("precision", "recall", "f1")],
                                                   abs=1e-9)
    assert well_formed_column(path)
    entries = head_entries(ner_entries(summary, task_named("resume_ner")), summary)
    assert entries and all(e["decode"] == "constrained" and e["protocol"].endswith("+constrained") for e in entries)


@pytest.mark.slow
def test_eval_suite_ner_decode_constrained_records_the_decoding(tiny_model_dir, tmp_path, capsys):
    """`eval suite --suite ner --only resume_ner --decode constrained`: the task's result says `decode:
    constrained`, its entries are the constrained identity, and the predictions re-score with seqeval."""
    import json

    from zh_bert.evaluation.commands.evaluate import main
    from zh_bert.evaluation.suite.report import suite_entries

    assert main(["suite", str(tiny_model_dir), "--suite", "ner", "--only", "resume_ner", "--decode", "constrained",
                 "--lr", "1e-3", "--epochs", "1", "--max-train", "48", "--seq-len", "64",
                 "--predictions", str(tmp_path / "preds"), "--report", str(tmp_path / "report"), "--no-record"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    r = res["pretrained"]["resume_ner"]
    assert r["decode"] == "constrained"
    path = tmp_path / "preds" / "ner" / "resume_ner.conll"
    assert 100 * rescored(path)[2] == pytest.approx(r["test_f1"], abs=1e-9)
    assert well_formed_column(path)
    entries = suite_entries(res)
    assert entries and all(e["decode"] == "constrained" and e["protocol"].endswith("+constrained") for e in entries)
