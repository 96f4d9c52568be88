"""The linear-chain CRF of the tag head (`zh_bert/evaluation/ner_crf.py`, `--crf`): its log-partition, path score
and Viterbi path equal brute-force enumeration over every tag path of tiny random cases, masked positions change
nothing, the scheme constraint is respected, and crf.safetensors round-trips or is refused in one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import save_safetensors
from zh_bert.evaluation.ner_crf import (
    CRF_FILE,
    LinearChainCRF,
    attach_crf,
    crf_tags,
    gather_labelled,
    load_crf,
    save_crf,
    scheme_constraint,
)
from zh_bert.evaluation.ner_data import load_ner
from zh_bert.evaluation.ner_tags import OUTSIDE, SCHEMES
from zh_bert.evaluation.tagging import IGNORED, encode, predict_rows, tags_of

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
    tok = BertTokenizerFast(vocab_file=str(VOCAB))
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
