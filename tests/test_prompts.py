"""Tasks as cloze (`zh_bert.evaluation.heads.choice`): every declared pattern on its real bundled data, zero-shot
picking exactly the word a hand-set masked-LM head makes best (a two-character word filled jointly where a
per-position choice would pick the other), PET choosing its state on dev_k alone, ModernBERT too, and the
refusal of a checkpoint without a masked-LM head."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.task_registry import task_named, tasks
from zh_bert.evaluation.heads import choice as prompts
from zh_bert.evaluation.loop import FinetuneConfig
from zh_bert.evaluation.heads.choice import candidate_scores, check_mlm_head, predict_items, run_prompt_task
from zh_bert.evaluation.tasks.classification import load_pair

PATTERNS = {t.name: t.pattern for t in tasks() if t.pattern is not None}
CHID, CSL, EPRSTMT = task_named("chid"), task_named("csl"), task_named("eprstmt")


def load_fewclue(name: str, k: int):
    return load_pair(task_named(name), k)


def prompt_data(name: str, k: int):
    return prompts.prompt_data(task_named(name), k)

TINY = FinetuneConfig(epochs=2, lr=1e-3, seq_len=48, batch_size=16, patience=1)


@pytest.fixture(scope="module")
def tok(google_tokdir):
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    return load_tokenizer(google_tokdir)


def _with_bias(src, dst, tok, bias: dict[str, float]):
    """A copy of the tiny BERT whose output bias makes `bias`'s characters win whatever the input: the
    random encoder's logits are about ±1, these are tens."""
    import torch
    from transformers import BertForMaskedLM

    shutil.copytree(src, dst)
    model = BertForMaskedLM.from_pretrained(str(dst))
    with torch.no_grad():
        for ch, b in bias.items():
            model.cls.predictions.bias[tok.convert_tokens_to_ids(ch)] = b
    model.save_pretrained(str(dst))
    return dst


def test_every_pattern_builds_valid_items_on_the_bundled_data(tok):
    assert set(PATTERNS) == {"eprstmt", "csldcp", "tnews", "iflytek", "ocnli", "bustm", "csl", "cluewsc", "chid"}
    for name, pattern in PATTERNS.items():
        if pattern.words is None:
            assert name == "chid"
        else:
            assert pattern.template.count(prompts.BLANK_SLOT) == 1, name
            labels = load_fewclue(name, 0).labels
            assert set(labels) <= set(pattern.words), f"{name}: labels without a word"
            assert len(set(pattern.words.values())) == len(pattern.words), f"{name}: two labels share a word"
        data = prompt_data(name, 0)
        for split in (data.train, data.dev, data.test):
            assert split
            for it in split:
                text = it.prefix + tok.mask_token + it.suffix
                assert text.count(tok.mask_token) == 1 and "#idiom" not in text, it.where
                assert it.answer in it.candidates and len(set(it.candidates)) == len(it.candidates)
        words = set(data.test[0].candidates) if pattern.words is None else set(pattern.words.values())
        for w in words:
            assert len(tok(w, add_special_tokens=False)["input_ids"]) >= 1, (name, w)
    train, dev, test = prompts.load_items(CHID, 0)
    assert all(len(it.candidates) == 7 for it in train + dev + test)


def test_unknown_task_method_and_label_are_one_line_errors():
    with pytest.raises(ZhBertError, match="did you mean 'csl'"):
        task_named("csll")
    with pytest.raises(ZhBertError, match="--method"):
        prompts.check_prompt_task(CSL, "few-shot")
    with pytest.raises(ZhBertError, match="task chnsenticorp: no pattern declared, so no pet"):
        prompts.check_prompt_task(task_named("chnsenticorp"), "pet")
    task = load_fewclue("csl", 0)
    with pytest.raises(ZhBertError, match="no label word for 'maybe'"):
        prompts.pattern_items(CSL, task.dev, task.labels + ["maybe"])
    with pytest.raises(ZhBertError, match="pairs are 0..4"):
        prompts.load_items(CHID, 5)


def test_zero_shot_fills_the_two_character_word_jointly(tiny_model_dir, tmp_path, tok):
    """csl's words are 不能 and 可以. With 不 > 可 at every blank position but 以 far above 能, a per-position
    (first mask first) choice says 不能; the joint fill's mean log-probability says 可以 — and zero-shot must."""
    from zh_bert.evaluation.heads.cloze import candidate_logprobs, load_mlm

    ckpt = _with_bias(tiny_model_dir, tmp_path / "m", tok, {"不": 30.0, "可": 28.0, "以": 28.0, "能": 0.0})
    model, tok2, _ = load_mlm(ckpt)
    items = prompt_data("csl", 0).dev[:12]
    lp = candidate_logprobs(model, tok2, items, 48, 8)
    assert all(x["不能"][0] > x["可以"][0] for x in lp)                     # the first position prefers 不...
    assert all(np.mean(x["可以"]) > np.mean(x["不能"]) for x in lp)         # ...the whole word is 可以
    acc, pred = predict_items(model, tok2, items, 48, 8)
    assert items[0].candidates == ["不能", "可以"] and (pred == 1).all()
    assert acc == np.mean([it.answer == "可以" for it in items])


def test_zero_shot_run_on_a_hand_set_head(tiny_model_dir, tmp_path, tok, monkeypatch):
    """eprstmt with 很 boosted: every test review is called Positive; the summary has every head's shape."""
    ckpt = _with_bias(tiny_model_dir, tmp_path / "m", tok, {"很": 30.0})
    real = prompts.load_pair
    monkeypatch.setattr(prompts, "load_pair", lambda t, k: dataclasses.replace(real(t, k), test=real(t, k).test[:40]))
    result = run_prompt_task(ckpt, EPRSTMT, 0, "zero-shot", TINY, [3, 4], log=lambda m: None)
    res = result.summary()
    test = real(EPRSTMT, 0).test[:40]
    assert result.predictions == ["Positive"] * 40
    assert res["test_acc"] == pytest.approx(np.mean([e.label == "Positive" for e in test]))
    assert res["seeds"] == [3] and "only seed 3 ran" in res["note"]
    assert [set(r) >= {"seed", "dev_acc", "test_acc", "train_s"} for r in res["per_seed"]] == [True]
    assert res["dev_acc"] == pytest.approx(res["per_seed"][0]["dev_acc"], abs=1e-4) and res["chosen_on"] is None


@pytest.mark.parametrize("fixture", ["tiny_model_dir", "tiny_modernbert_dir"])
def test_training_scores_are_the_scores_eval_ranks(fixture, request):
    """PET's differentiable scores equal `candidate_logprobs`' mean log-probabilities (same window, same
    masks), on CSLDCP's mixed-length words, for both families (ModernBERT: no token types, its own head)."""
    import torch

    from zh_bert.evaluation.heads.cloze import candidate_logprobs, load_mlm

    model, tok2, _ = load_mlm(request.getfixturevalue(fixture))
    items = prompt_data("csldcp", 0).dev[:3]
    with torch.no_grad():
        got = candidate_scores(model, tok2, items, 40)
    want = [[np.mean(lp[c]) for c in it.candidates] for it, lp in zip(items, candidate_logprobs(model, tok2, items, 40))]
    np.testing.assert_allclose(got.cpu().numpy(), np.array(want), rtol=1e-4, atol=1e-4)


def _pet(ckpt, monkeypatch, corrupt_test: bool):
    real = prompts.load_pair

    def load(t, k):   # a slice of each split: two steps of 16, dev_k of 8, test_public of 16
        task = real(t, k)
        test = task.test[:16]
        if corrupt_test:   # every test label shuffled: the choice must not move
            labels = np.random.default_rng(0).permutation([e.label for e in test])
            test = [dataclasses.replace(e, label=str(lab)) for e, lab in zip(test, labels)]
        return dataclasses.replace(task, train=task.train[:16], dev=task.dev[:8], test=test)

    monkeypatch.setattr(prompts, "load_pair", load)
    logs = []
    cfg = dataclasses.replace(TINY, seq_len=24, patience=2)
    res = run_prompt_task(ckpt, EPRSTMT, 0, "pet", cfg, [0], log=logs.append)
    return {**res.summary(), "test_predictions": res.predictions}, logs


def test_pet_trains_and_chooses_on_dev_only(tiny_model_dir, monkeypatch):
    clean, logs = _pet(tiny_model_dir, monkeypatch, corrupt_test=False)
    shuffled, _ = _pet(tiny_model_dir, monkeypatch, corrupt_test=True)
    a, b = clean["per_seed"][0], shuffled["per_seed"][0]
    assert a["steps"] == 2 and sum(" step " in m and "dev acc" in m and "epoch" in m for m in logs) == 2 and a["best_step"] in (1, 2)
    assert (a["best_step"], a["dev_acc"], a["steps"]) == (b["best_step"], b["dev_acc"], b["steps"])
    assert clean["test_predictions"] == shuffled["test_predictions"]
    assert clean["chosen_on"] == "dev_0" and len(clean["test_predictions"]) == 16


def test_pet_steps_like_every_fine_tuning_loop(tiny_model_dir, monkeypatch, optimizers_made):
    """PET's optimizer is the classifier's (`step.stepping`: pretrain's fused AdamW at eps 1e-8)."""
    _pet(tiny_model_dir, monkeypatch, corrupt_test=False)
    assert optimizers_made == [(TINY.lr, 1e-8, "fused")]


@pytest.mark.slow
def test_pet_modernbert_and_chid(tiny_modernbert_dir, monkeypatch):
    """ModernBERT trains through the same blank (no token types, its own head); CHID's seven idioms too."""
    real = prompts.load_items
    monkeypatch.setattr(prompts, "load_items", lambda t, k: tuple(s[:24] for s in real(t, k)))
    res = run_prompt_task(tiny_modernbert_dir, CHID, 0, "pet", TINY, [0], log=lambda m: None)
    assert res.runs[0]["steps"] >= 2 and all(0 <= p < 7 for p in res.predictions)
    _pet(tiny_modernbert_dir, monkeypatch, corrupt_test=False)


def test_a_checkpoint_without_a_masked_lm_head_is_refused(tiny_model_dir, tmp_path, monkeypatch):
    import json

    from transformers import BertForSequenceClassification, BertModel

    check_mlm_head(tiny_model_dir)   # the stock tiny masked LM passes
    cls = tmp_path / "classifier"
    BertForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=2).save_pretrained(str(cls))
    shutil.copy(tiny_model_dir / "vocab.txt", cls / "vocab.txt")
    monkeypatch.setattr(prompts, "prompt_data", lambda *a: pytest.fail("data loaded before the refusal"))
    with pytest.raises(ZhBertError, match="BertForSequenceClassification has no masked-LM head") as e:
        run_prompt_task(cls, EPRSTMT, 0, "zero-shot", TINY, [0])
    assert "\n" not in str(e.value)
    bare = tmp_path / "bare"        # an encoder without a head whose config claims a masked LM
    BertModel.from_pretrained(str(tiny_model_dir)).save_pretrained(str(bare))
    config = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    with pytest.raises(ZhBertError, match="no masked-LM head: its weights lack cls.predictions"):
        check_mlm_head(bare)
