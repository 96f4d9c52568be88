"""Distillation's defaults carry signal from a weak teacher: with the recipe keys left at their defaults, a student
distilled for a hundred-odd steps agrees with its teacher's top-1 on held-out text more than the same student
trained alone; the run's first lines state the teacher's soft-target entropy at T as a fraction of ln V and warn,
naming a temperature that keeps signal, when it is above 0.95 (MiniRBT's T = 8 on such a teacher), not at the
default; `--print-recipe` and `plan` show the same measure for a local teacher.

The teacher is a random BERT whose MLM head is sharpened (its output LayerNorm x 20): its top-1 is a function of the
context of its own, which only distillation can teach, and its logits are as flat as a briefly trained teacher's
(0.99 of ln V at T = 8, as the main command's checkpoint's 0.995), so T = 8 leaves the soft term nothing."""

from __future__ import annotations

import pytest
import torch
from test_distill import STUDENT, make_teacher, teacher_agreement, write_recipe

from zh_bert.train.objectives.distill_net import SIGNAL_GONE, entropy_lines, signal_temperature
from zh_bert.train.recipe_keys import ObjectiveKeys

pytestmark = pytest.mark.usefixtures("one_thread")

SHARPEN = 20.0


@pytest.fixture(scope="module")
def weak_teacher(tmp_path_factory, char_shards):
    from safetensors.torch import load_file, save_file

    teacher = make_teacher(tmp_path_factory.mktemp("weak") / "t", char_shards[0])
    weights = load_file(str(teacher / "model.safetensors"))
    for key in ("cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias"):
        weights[key] = weights[key] * SHARPEN
    save_file(weights, str(teacher / "model.safetensors"), metadata={"format": "pt"})
    return teacher


def _run(tmp_path, char_shards, teacher, capsys, **over):
    from zh_bert.train.pretrain import main

    quiet = dict(STUDENT, hidden_dropout_prob=0.0)
    keys = {**dict(max_steps=120, warmup_steps=6, save_every=0, eval_every=0, log_every=40, lr=3e-3), **over}
    assert main([str(write_recipe(tmp_path / "r.yaml", char_shards, teacher, quiet, **keys))]) == 0
    out = capsys.readouterr()
    return tmp_path / "run" / "final", out.out, out.err


def test_default_keys_distil_a_weak_teacher_better_than_training_alone(tmp_path, char_shards, weak_teacher, capsys):
    """Default temperature, kd, hidden and MLM weights (the recipe sets none of them): after the same 120 steps on
    the same tokens, the distilled student picks the teacher's top-1 on held-out masked positions more often
    than the same student trained by masked-LM alone; its first lines state the entropy and give no warning."""
    tokdir, sharddir = char_shards
    distilled, out, err = _run(tmp_path / "kd", char_shards, weak_teacher, capsys)
    assert f"teacher soft targets at temperature {ObjectiveKeys().temperature:g}: entropy" in out
    assert "warning: at temperature" not in err
    alone, _, _ = _run(tmp_path / "mlm", char_shards, None, capsys, objective="mlm", tokenizer=str(tokdir))
    a, b = (teacher_agreement(d, weak_teacher, sharddir) for d in (distilled, alone))
    print(f"held-out top-1 agreement with the teacher: distilled {a:.3f}, alone {b:.3f}")
    assert a > b + 0.05, (a, b)


def test_the_entropy_warning_fires_at_t8_on_a_weak_teacher_and_not_at_the_default(tmp_path, char_shards,
                                                                                    weak_teacher, capsys):
    """At T = 8 the weak teacher's soft targets are above 0.95 of ln V: the run says so in one warning line
    naming a temperature that keeps signal; `--print-recipe` and `plan` give the same number."""
    from zh_bert import cli

    _, out, err = _run(tmp_path / "t8", char_shards, weak_teacher, capsys, temperature=8.0, max_steps=2,
                       warmup_steps=0, log_every=1)
    [warning] = [line for line in err.splitlines() if line.startswith("warning: at temperature 8")]
    entropy = float(warning.split("(entropy ")[1].split(" ")[0])
    assert entropy > SIGNAL_GONE and "keeps signal" in warning, warning
    named = float(warning.split("; temperature: ")[1].split(" ")[0])
    assert named < 8 and named >= ObjectiveKeys().temperature
    assert f"teacher soft targets at temperature 8: entropy {entropy:.3f} of ln V" in out

    recipe = write_recipe(tmp_path / "p" / "r.yaml", char_shards, weak_teacher, dict(STUDENT), temperature=8.0)
    assert cli.main(["pretrain", str(recipe), "--print-recipe"]) == 0
    printed = capsys.readouterr().out
    assert "# teacher soft targets at temperature 8: entropy 0.9" in printed and "# warning: at temperature 8" in printed
    assert cli.main(["plan", "--model", "tiny", "--objective", "distill", "--teacher", str(weak_teacher)]) == 0
    planned = capsys.readouterr().out
    assert f"teacher soft targets at temperature {ObjectiveKeys().temperature:g}: entropy" in planned
    assert "warning" not in planned


def test_the_warning_names_the_highest_temperature_that_keeps_signal():
    entropy = {8.0: 0.995, 4.0: 0.978, 2.0: 0.889, 1.0: 0.582, 0.5: 0.289}   # the main command's checkpoint
    assert signal_temperature(entropy) == 2.0
    line, warning = entropy_lines(entropy, 8.0, 8000, "text")
    assert line == "teacher soft targets at temperature 8: entropy 0.995 of ln V (V = 8,000; 1 = uniform) on text"
    assert warning.endswith("temperature: 2 keeps signal (entropy 0.889)")
    assert entropy_lines(entropy, 1.0, 8000, "text")[1] is None
    flat = {t: 0.99 for t in entropy}
    assert "no temperature down to 0.5 keeps it" in entropy_lines(flat, 8.0, 8000, "text")[1]


def test_soft_target_entropy_is_one_for_uniform_logits_and_falls_with_t():
    """The measure itself: uniform logits give exactly 1 at any T; peaked ones less, and less at a lower T."""
    from transformers import BertConfig, BertForMaskedLM

    from zh_bert.train.objectives.distill_net import soft_target_entropy

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32)).eval()
    ids = torch.randint(5, 50, (2, 12))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    with torch.no_grad():
        model.cls.predictions.decoder.weight.zero_()
        model.cls.predictions.bias.zero_()
    assert soft_target_entropy(model, [batch], (8.0, 1.0)) == pytest.approx({8.0: 1.0, 1.0: 1.0})
    with torch.no_grad():
        model.cls.predictions.bias[7] = 5.0
    h = soft_target_entropy(model, [batch], (8.0, 1.0))
    assert 1.0 > h[8.0] > h[1.0]
