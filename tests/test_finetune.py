"""`zh-bert finetune` and the task readers, on real ChnSentiCorp / TNEWS text."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import REPO

from zh_bert import cli
from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.task_files import read_tsv
from zh_bert.corpus.task_registry import task_named
from zh_bert.evaluation.heads.classify import eval_entries
from zh_bert.evaluation.metrics.classification import macro_f1
from zh_bert.evaluation.result import Result
from zh_bert.evaluation.tasks.classification import load_pair, load_task

CHNSENTI = REPO / "corpora" / "tasks" / "chnsenticorp"


def chnsenti_rows(split: str, n: int) -> list[tuple[str, str]]:
    lines = (CHNSENTI / f"{split}.tsv").read_text(encoding="utf-8").split("\n")[1:]
    return [tuple(l.split("\t", 1)) for l in lines if l.strip()][:n]


def balanced(split: str, n: int) -> list[tuple[str, str]]:
    """n rows, half of each label, in file order (so majority class = 50%)."""
    rows = chnsenti_rows(split, 100_000)
    return ([r for r in rows if r[0] == "0"][:n // 2] + [r for r in rows if r[0] == "1"][:n // 2])


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_finetune_learns_on_real_slice(tiny_model_dir, tmp_path, capsys, pooling):
    """A random-init L2/H128 model on 600 real reviews (text<TAB>label, no header: columns detected),
    with the stock [CLS] pooler head and with mean pooling."""
    import torch

    torch.set_num_threads(1)  # 6 other test files share 2 cores; one thread avoids oversubscription
    train = write(tmp_path / "train.tsv", [f"{t}\t{l}" for l, t in balanced("train", 600)])
    dev = write(tmp_path / "dev.tsv", [f"{t}\t{l}" for l, t in balanced("dev", 200)])
    test = write(tmp_path / "test.tsv", [f"{t}\t{l}" for l, t in balanced("test", 100)])
    rc = cli.main(["finetune", str(tiny_model_dir), "--task", f"tsv:{train},{dev},{test}", "--epochs", "3",
                   "--lr", "2e-3", "--seq-len", "48", "--batch-size", "16", "--seed", "1", "--pooling", pooling])
    out = capsys.readouterr().out.strip().split("\n")
    res = json.loads(out[-1])
    assert rc == 0
    assert res["majority_dev_acc"] == 0.5 and res["dev_acc"] > 0.6, res  # seed 1 gives ~0.66
    assert res["test_acc"] > 0.6 and 0 < res["test_macro_f1"] <= 1
    assert res["seeds"] == [1] and "dev_acc_std" not in res and res["config"]["pooling"] == pooling


def test_finetune_in_fp16_scales_the_loss_like_pretrain(tiny_model_dir, tmp_path, capsys):
    """--precision takes the recipe's four values: fp16 fine-tunes through pretrain's loss scaler (real fp16
    matmuls on a CPU too) and ends with finite dev figures."""
    train = write(tmp_path / "train.tsv", [f"{t}\t{l}" for l, t in balanced("train", 64)])
    dev = write(tmp_path / "dev.tsv", [f"{t}\t{l}" for l, t in balanced("dev", 32)])
    rc = cli.main(["finetune", str(tiny_model_dir), "--task", f"tsv:{train},{dev}", "--epochs", "1",
                   "--seq-len", "32", "--batch-size", "16", "--precision", "fp16", "--no-record"])
    res = json.loads(capsys.readouterr().out.strip().split("\n")[-1])
    assert rc == 0 and res["config"]["precision"] == "fp16" and 0 <= res["dev_acc"] <= 1, res


def test_malformed_tsv_line(tiny_model_dir, tmp_path, capsys):
    rows = [f"{l}\t{t}" for l, t in chnsenti_rows("train", 6)]
    rows[3] = rows[3].replace("\t", " ")                     # line 5 with the header: a lost tab
    train = write(tmp_path / "train.tsv", ["label\ttext_a"] + rows)
    dev = write(tmp_path / "dev.tsv", ["label\ttext_a"] + rows[:2])
    rc = cli.main(["finetune", str(tiny_model_dir), "--task", f"tsv:{train},{dev}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0
    assert f"{train}:5: expected 2 tab-separated fields, found 1" in err


@pytest.mark.parametrize("header, order", [("label\ttext_a", "lt"), ("text_a\tlabel", "tl"), ("sentence\tlabel", "tl"),
                                           (None, "lt"), (None, "tl")])
def test_tsv_columns_detected(tmp_path, header, order):
    rows = chnsenti_rows("dev", 30)
    lines = [f"{l}\t{t}" if order == "lt" else f"{t}\t{l}" for l, t in rows]
    path = write(tmp_path / "x.tsv", ([header] if header else []) + lines)
    got = read_tsv(path)
    assert [(e.label, e.text_a) for e in got] == [(l, t.strip()) for l, t in rows]


def test_tsv_pairs_and_explicit_columns(tmp_path):
    path = write(tmp_path / "p.tsv", ["sentence1\tsentence2\tlabel", "今天天气很好\t天气不错\t1", "我爱北京\t他讨厌上海\t0"])
    got = read_tsv(path)
    assert got[0].text_a == "今天天气很好" and got[0].text_b == "天气不错" and got[1].label == "0"
    path = write(tmp_path / "c.tsv", ["好评\t1", "差评\t0"])
    assert read_tsv(path, "text,label")[0].label == "1"
    with pytest.raises(ZhBertError, match="unknown column role 'txt'"):
        read_tsv(path, "label,txt")


def test_chnsenticorp_duplicates_dropped_from_train_and_test_texts_from_dev():
    """Test stays as published; dev loses the 39 reviews test holds (nothing chosen on the reported split),
    train its repeats and every review of dev or test (nothing trained on a held-out one)."""
    task = load_task("chnsenticorp")
    held = {e.text_a for e in task.dev + task.test}
    assert len(task.dev) == 1161 and len(task.test) == 1200 and task.labels == ["0", "1"]
    assert not {e.text_a for e in task.dev} & {e.text_a for e in task.test}
    assert not any(e.text_a in held for e in task.train)
    assert len({e.text_a for e in task.train}) == len(task.train) == 7589
    assert task.notes[0].startswith("dev: dropped 39 examples whose text is also in test (1,161 left)")
    assert task.notes[1] == "train: dropped 1324 repeated examples and 687 whose text is also in dev/test (7589 left)"
    assert task.roles == {"trains": str(CHNSENTI / "train.tsv"), "chooses": str(CHNSENTI / "dev.tsv"),
                          "reports": str(CHNSENTI / "test.tsv")}


def test_tnews_and_unknown_task():
    task = load_task("tnews")
    assert len(task.labels) == 15 and "news_sports" in task.labels and len(task.test) == 2010
    assert task.roles["reports"] == str(REPO / "corpora" / "tasks" / "fewclue" / "tnews" / "test_public.json")
    with pytest.raises(ZhBertError, match="did you mean 'chnsenticorp'"):
        load_task("chnsenticrop")
    with pytest.raises(ZhBertError, match="eprstmt: EPRSTMT has no train/dev/test files .* --only eprstmt"):
        load_task("eprstmt")        # a FewCLUE task without unions runs under its suite


def test_metrics_and_seed_summary():
    gold, pred = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0])
    # per class F1: c0 = 2*1/(2+1+1) = .5, c1 = 2*2/(4+1+0) = .8, c2 = 0
    assert macro_f1(gold, pred) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    runs = [{"seed": i, "dev_acc": a, "dev_macro_f1": a, "test_acc": a, "test_macro_f1": a}
            for i, a in enumerate((0.8, 0.9, 1.0))]
    s = Result("chnsenticorp", False, [0, 1, 2], runs).summary()
    assert s["test_acc"] == pytest.approx(0.9) and s["test_acc_std"] == pytest.approx(0.1)  # sample std
    assert s["init"] == "pretrained" and "seed_std" not in s and len(s["per_seed"]) == 3
    entries = eval_entries({**s, "task": "chnsenticorp", "seeds": [1, 2, 3]}, "chnsenticorp")
    assert {e["metric_name"] for e in entries} == {"dev accuracy", "test accuracy", "test macro-F1"}
    assert all(e["dataset_name"] == "ChnSentiCorp" and e["protocol"] == "finetune-v1" for e in entries)
    tnews = eval_entries({**s, "task": "tnews", "seeds": [1]}, "tnews")     # one TNEWS: FewCLUE's dataset and split
    assert {(e["dataset_type"], e["metric_name"]) for e in tnews} == {("fewclue-tnews", "dev_few_all accuracy"),
                                                                      ("fewclue-tnews", "test_public accuracy")}


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["--warmup", "1.5"], "--warmup is a fraction"),
    (["--seed", "-1"], "--seed must be in [0, 4,294,967,295] (a 32-bit seed), got -1"),      # out-of-range seeds:
    (["--seed", str(2**32)], "got 4294967296"),                                             # numpy raised mid-run
    (["--seed", str(2**32 - 2), "--seeds", "3"], "got 4294967294..4294967296"),
])
def test_finetune_refuses_bad_options(tiny_model_dir, capsys, argv, message):
    rc = cli.main(["finetune", str(tiny_model_dir), "--task", "chnsenticorp"] + argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_finetune_config_validates_like_the_cli():
    from zh_bert.evaluation.loop import FinetuneConfig

    with pytest.raises(ZhBertError, match="--precision: invalid choice 'fp8'.*choose from auto, fp32, fp16, bf16"):
        FinetuneConfig(precision="fp8")
    with pytest.raises(ZhBertError, match="--epochs must be >= 1"):
        FinetuneConfig(epochs=0)


@pytest.mark.parametrize("key", ["lr", "warmup", "weight_decay"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_float_settings_must_be_finite(key, value):
    """`nan < x` is False for every x: each float setting is checked for nan/inf by name first."""
    from zh_bert.evaluation.loop import FinetuneConfig

    with pytest.raises(ZhBertError, match=f"--{key.replace('_', '-')} must be"):
        FinetuneConfig(**{key: value})


def test_train_split_needs_two_classes(tmp_path):
    one = write(tmp_path / "train.tsv", [f"1\t好评第{i}条" for i in range(6)])
    dev = write(tmp_path / "dev.tsv", ["0\t差评", "1\t好评"])
    with pytest.raises(ZhBertError, match=r"train.tsv: the train split of task .* holds only one class \('1'\)"):
        load_task(f"tsv:{one},{dev}")
    leaked = write(tmp_path / "leaked.tsv", ["0\t差评", "1\t好评"])
    with pytest.raises(ZhBertError, match="no examples left after dropping 0 repeated and 2 also in dev/test"):
        load_task(f"tsv:{leaked},{dev}")


def test_one_class_task_is_refused_before_any_model_is_loaded(tmp_path, monkeypatch):
    """The Python API too: a TaskData built by hand with one class never reaches training."""
    from zh_bert.evaluation.loop import FinetuneConfig
    from zh_bert.evaluation.tasks.classification import Example, TaskData

    from zh_bert.evaluation.heads import classify

    monkeypatch.setattr(classify, "load_tokenizer", lambda *a: pytest.fail("loaded a tokenizer"))
    task = TaskData("t", [Example("好", "1"), Example("棒", "1")], [Example("差", "0")], None, ["0", "1"])
    with pytest.raises(ZhBertError, match="fewer than two classes"):
        classify.run_classifier(tmp_path, task, FinetuneConfig(), [1])
    task.train.append(Example("差劲", "0"))
    with pytest.raises(ZhBertError, match="--max-train 1: seed 1 draws training examples of one class only"):
        classify.run_classifier(tmp_path, task, FinetuneConfig(max_train=1), [1])


def test_dev_label_unseen_in_train_is_a_warning(tiny_model_dir, tmp_path, capsys):
    """Legal (a few-shot split may miss a class) but reported on stderr and in the summary."""
    import torch

    torch.set_num_threads(1)
    train = write(tmp_path / "train.tsv", ["0\t差评一条", "1\t好评一条", "0\t很差的", "1\t很好的"])
    dev = write(tmp_path / "dev.tsv", ["0\t差", "1\t好", "2\t一般"])
    rc = cli.main(["finetune", str(tiny_model_dir), "--task", f"tsv:{train},{dev}", "--epochs", "1",
                   "--seq-len", "16", "--no-record"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "warning: dev labels never seen in train: ['2'] (1 of 3 dev examples" in cap.err
    assert json.loads(cap.out.strip().split("\n")[-1])["warnings"][0].startswith("dev labels never seen")


@pytest.mark.parametrize("random_init", [False, True])
def test_unbuildable_config_is_one_line(tiny_model_dir, tmp_path, capsys, random_init):
    """A config.json whose hidden size does not divide into its heads: one line naming the folder, also on the
    random-init path (which builds the model from the config alone)."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_model_dir, bad)
    cfg = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    (bad / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 3}), encoding="utf-8")
    train = write(tmp_path / "train.tsv", ["0\t差评一条", "1\t好评一条"])
    dev = write(tmp_path / "dev.tsv", ["0\t差", "1\t好"])
    rc = cli.main(["finetune", str(bad), "--task", f"tsv:{train},{dev}", "--no-record"]
                  + (["--random-init"] if random_init else []))
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"{bad}: cannot load" in err and "Traceback" not in err, err


def _eprstmt_encoded(tiny_model_dir, n: int, seq_len: int = 64):
    from zh_bert.evaluation.heads.classify import load_classifier, tokenize_examples, tokenizer_for

    task = load_pair(task_named("eprstmt"), 0)
    tok = tokenizer_for(tiny_model_dir)
    data = tokenize_examples(tok, task.test[:n], {l: i for i, l in enumerate(task.labels)}, seq_len)
    return task, tok, data, load_classifier(tiny_model_dir, len(task.labels), False, task.labels)


def test_length_sorted_predict_returns_the_unsorted_predictions(tiny_model_dir):
    """predict batches examples of similar length and puts them back in order: the same class for every
    example as batches in file order give, and the model's train/eval mode as it was."""
    import torch

    from zh_bert.evaluation.heads.classify import collate, logits, predict

    torch.set_num_threads(1)
    _, tok, data, model = _eprstmt_encoded(tiny_model_dir, 80)
    lengths = [len(x) for x in data["input_ids"]]
    assert len(set(lengths)) > 20   # real reviews of many lengths: the sorted order differs from file order
    model.eval()
    in_order = [collate(data, np.arange(s, min(s + 16, len(lengths))), tok.pad_token_id) for s in range(0, 80, 16)]
    with torch.no_grad():
        ref = np.concatenate([logits(model, {k: v for k, v in b.items() if k != "labels"}, "cls").argmax(-1).numpy()
                              for b in in_order])
    model.train()
    for batch_size in (3, 16):
        assert np.array_equal(predict(model, data, batch_size, tok.pad_token_id, "fp32"), ref), batch_size
    assert model.training
    model.eval()
    predict(model, data, 16, tok.pad_token_id, "fp32")
    assert not model.training


def test_train_batches_are_seeded_length_buckets_of_the_whole_epoch():
    from zh_bert.evaluation.heads.classify import train_batches

    lengths = np.random.default_rng(0).integers(5, 200, size=1000)
    epochs = [train_batches(lengths, 16, np.random.default_rng(3)) for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*epochs))              # a seed draws the same batches
    got = epochs[0]
    assert sorted(np.concatenate(got).tolist()) == list(range(1000))       # every example once
    assert sum(len(b) < 16 for b in got) == 1 and len(got) == 63           # as many steps as before
    spread = np.mean([np.ptp(lengths[b]) for b in got])
    assert spread < 0.2 * np.ptp(lengths), spread                           # batches of similar length
    rng = np.random.default_rng(3)
    assert not np.array_equal(np.concatenate(train_batches(lengths, 16, rng)),
                              np.concatenate(train_batches(lengths, 16, rng)))   # each epoch its own order
    few = train_batches(lengths[:32], 16, np.random.default_rng(0))        # a few-shot split: not sorted
    assert [len(b) for b in few] == [16, 16]


def test_length_groups_cover_every_example_once_and_cut_only_where_padding_costs_more():
    from zh_bert.evaluation.length_groups import length_groups

    lengths = np.random.default_rng(0).integers(5, 129, size=300)
    for rows, overhead in ((16, 0), (16, 64), (32, 160), (1, 64)):
        groups = length_groups(lengths, rows, overhead)
        assert sorted(np.concatenate(groups).tolist()) == list(range(300))       # every example once
        assert all(1 <= len(g) <= rows for g in groups)
        assert all(lengths[a].max() <= lengths[b].min() for a, b in zip(groups, groups[1:]))   # shortest first
    cost = lambda gs, o: sum(len(g) * lengths[g].max() + o for g in gs)     # noqa: E731
    order = np.argsort(lengths, kind="stable")
    fixed = [order[s:s + 16] for s in range(0, 300, 16)]                     # sorted, cut every 16 rows
    assert cost(length_groups(lengths, 16, 64), 64) <= cost(fixed, 64)
    assert len(length_groups(np.full(40, 50), 16, 64)) == 3                 # equal lengths: no cut that saves nothing
    assert len(length_groups(np.array([10] * 8 + [128] * 8), 16, 64)) == 2   # 8 x 118 pad tokens > one more forward
    assert len(length_groups(np.array([120] * 8 + [128] * 8), 16, 64)) == 1  # 8 x 8 pad tokens < one more forward


def test_a_step_by_length_groups_has_the_gradient_of_the_padded_batch(tiny_model_dir):
    """train_one runs a batch's forward per length group and sums the per-example losses / batch size: the
    gradient of the whole padded batch's mean loss (dropout off to compare)."""
    import torch

    from zh_bert.evaluation.heads.classify import collate, logits
    from zh_bert.evaluation.length_groups import length_groups

    torch.set_num_threads(1)
    _, tok, data, model = _eprstmt_encoded(tiny_model_dir, 16)
    model.eval()
    idx = np.arange(16)
    lengths = np.array([len(x) for x in data["input_ids"]])
    grads = []
    for groups in ([idx], length_groups(lengths, 16, 0)):
        model.zero_grad()
        loss = 0.0
        for g in groups:
            b = collate(data, idx[g], tok.pad_token_id)
            labels = b.pop("labels")
            loss = loss + torch.nn.functional.cross_entropy(logits(model, b, "mean"), labels, reduction="sum") / 16
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert len(length_groups(lengths, 16, 0)) > 1
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_fine_tuning_is_deterministic_for_a_seed_and_tokenizes_once(tiny_model_dir, monkeypatch, optimizers_made):
    """Two runs with one seed: the same losses, dev figures and test figures; dev and test are tokenized by
    the first only (encode_cached), and the tokenizer is loaded once per checkpoint folder; each run steps with
    pretrain's fused AdamW at fine-tuning's eps (`step.stepping`, as the span head and PET)."""
    import dataclasses

    import torch

    from zh_bert.evaluation.heads import classify
    from zh_bert.evaluation.loop import FinetuneConfig

    torch.set_num_threads(1)
    task = load_pair(task_named("eprstmt"), 0)
    task = dataclasses.replace(task, test=task.test[:64])
    calls, real = [], classify.tokenize_examples
    monkeypatch.setattr(classify, "tokenize_examples", lambda tok, ex, *a: calls.append(len(ex)) or real(tok, ex, *a))
    cfg = FinetuneConfig(epochs=2, seq_len=32, batch_size=8, lr=1e-3)
    logs = [[], []]
    runs = [classify.run_classifier(tiny_model_dir, task, cfg, [5], log=logs[i].append).summary() for i in range(2)]
    for r in runs:
        r["per_seed"][0].pop("train_s")
    untimed = [[re.sub(r", [\d.]+ s\)$", ")", m) for m in log] for log in logs]
    assert runs[0] == runs[1] and untimed[0] == untimed[1] and len(untimed[0]) == 4   # pooling, 2 dev evals, summary
    assert untimed[0][0].startswith("pooling auto -> mean: the checkpoint trained no pooler") and runs[0]["pooling"] == "mean"
    assert sorted(calls) == [32, 32, 64]                                   # train, dev, test: once each
    assert optimizers_made == [(1e-3, 1e-8, "fused")] * 2
    assert classify.tokenizer_for(tiny_model_dir) is classify.tokenizer_for(tiny_model_dir)


def test_pooling_auto_pools_by_cls_only_where_the_checkpoint_trained_its_pooler(tiny_model_dir, tmp_path):
    """`--pooling auto` (the default): a masked LM alone (no pooler weights) pools by mean; a checkpoint with an
    NSP/SOP head or a fine-tuned classifier by cls; `--pooling` given is kept; a pooling no classifier computes is
    one line; `--save` under auto writes the stock [CLS] classifier and says so."""
    from transformers import BertConfig, BertForPreTraining, BertForSequenceClassification

    from zh_bert.evaluation.heads.classify import ClassifyKind, auto_pooling, classifier_config
    from zh_bert.evaluation.loop import FinetuneConfig

    small = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertForPreTraining(small).save_pretrained(tmp_path / "nsp")
    BertForSequenceClassification(small).save_pretrained(tmp_path / "classifier")
    assert auto_pooling(tiny_model_dir)[0] == "mean"
    assert auto_pooling(tmp_path / "nsp") == ("cls", "cls: the checkpoint trained [CLS] through its pooler (an "
                                                     "NSP/SOP head)")
    assert auto_pooling(tmp_path / "classifier")[1].endswith("(a fine-tuned classifier)")
    said = []
    assert classifier_config(FinetuneConfig(pooling="auto"), tiny_model_dir, said.append).pooling == "mean"
    assert said == ["pooling auto -> mean: the checkpoint trained no pooler (MLM only), so [CLS] through it would "
                    "start from noise"]
    assert classifier_config(FinetuneConfig(pooling="cls"), tiny_model_dir, said.append).pooling == "cls"
    with pytest.raises(ZhBertError, match="a classifier pools by cls or mean"):
        classifier_config(FinetuneConfig(pooling="first-last-avg"), tiny_model_dir)
    assert ClassifyKind().check_save(tiny_model_dir, FinetuneConfig(), {}).pooling == "cls"
    with pytest.raises(ZhBertError, match="--save with --pooling mean"):
        ClassifyKind().check_save(tiny_model_dir, FinetuneConfig(pooling="mean"), {})


def test_the_pooling_is_recorded_with_every_figure(tiny_model_dir):
    """eval_results entries of a classifier name the pooling it ran with (auto resolved)."""
    from zh_bert.evaluation.heads.classify import eval_entries

    summary = {"seeds": [1], "dev_acc": 0.5, "test_acc": 0.4, "test_macro_f1": 0.3, "pooling": "mean"}
    entries = eval_entries(summary, "chnsenticorp")
    assert entries and all(e["pooling"] == "mean" for e in entries)
