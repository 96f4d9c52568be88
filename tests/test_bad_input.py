"""Every command against bad input: exit code 2, exactly one line on stderr `zh-bert CMD: error: ...`, no
traceback, and nothing new in the working folder that could be taken for a finished output.

One table; each row is (id, argv, what the error line must contain). `{w}` in argv is the row's working folder
(cwd of the command), which `write_bad_files` fills first; `{tiny}` is a real tiny model folder, `{truncated}`
the same with its model.safetensors cut in half, `{tok}` a real tokenizer folder, `{shards}` a real SHARDDIR. A row may name paths it is allowed to
leave behind (for example a folder that existed before the command).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

LONE_SURROGATE = '{"text": "\\ud800 中文句子。", "source": "x"}\n'   # valid JSON, not encodable as UTF-8


def write_bad_files(w: Path) -> None:
    """The bad inputs every row may refer to, written into the row's working folder."""
    (w / "empty.jsonl").write_text("", encoding="utf-8")
    (w / "broken.jsonl").write_text('{"text": "好的"}\n{"text": 不是JSON\n', encoding="utf-8")
    (w / "notext.jsonl").write_text('{"txt": "中文"}\n', encoding="utf-8")
    (w / "gbk.txt").write_bytes("中文句子，不是UTF-8编码的文本。\n".encode("gbk") * 3)
    (w / "surrogate.jsonl").write_text(LONE_SURROGATE, encoding="utf-8")
    (w / "docs.jsonl").write_text("".join(json.dumps({"text": "北京是中国的首都，也是一座历史悠久的城市。" * 3,
                                                      "source": str(i)}, ensure_ascii=False) + "\n"
                                          for i in range(20)), encoding="utf-8")
    (w / "recipe_typo.yaml").write_text("lerning_rate: 0.001\n", encoding="utf-8")
    (w / "recipe_ngram.yaml").write_text("masking: ngram\nmax_ngram: 5\n", encoding="utf-8")
    (w / "not_yaml.yaml").write_text("a: [1, 2\n", encoding="utf-8")
    (w / "a_dir").mkdir()
    (w / "trainrel_recipe.yaml").write_text("model: tiny\nout_dir: run\nmax_steps: 2\nseq_len: 64\n"
                                            "global_batch: 8\nmicro_batch: 8\n", encoding="utf-8")
    (w / "trainrel_size_text.json").write_text('{"hidden_size": "abc", "num_attention_heads": 2}', encoding="utf-8")
    (w / "trainrel_heads.json").write_text('{"hidden_size": 130, "num_attention_heads": 4}', encoding="utf-8")
    (w / "trainrel_bad_init").mkdir()
    (w / "trainrel_bad_init" / "config.json").write_text('{"vocab_size": 21128, "hidden', encoding="utf-8")


@dataclass
class Case:
    id: str
    argv: list[str]
    says: str = ""                      # a substring the error line must contain (after the prefix)
    may_leave: tuple[str, ...] = ()     # new paths (relative to the working folder) that are acceptable


CASES: list[Case] = [
    # ------------------------------------------------------------------ any command
    Case("unknown-flag", ["clean", "docs.jsonl", "-o", "out.jsonl", "--no-such-flag"], "--no-such-flag"),
    Case("missing-required", ["shard", "docs.jsonl"], "required"),
    Case("not-an-int", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--seq-len", "abc"], "--seq-len"),
    Case("bad-choice", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--pairs", "nxp"], "did you mean"),

    # ------------------------------------------------------------------ clean
    Case("clean-missing-input", ["clean", "nope.txt", "-o", "out.jsonl"], "nope.txt"),
    Case("clean-empty-input", ["clean", "empty.jsonl", "-o", "out.jsonl"], "no documents"),

    # ------------------------------------------------------------------ vocab
    Case("vocab-broken-jsonl", ["vocab", "broken.jsonl", "-o", "tok"], "broken.jsonl:2"),
    Case("vocab-no-text", ["vocab", "notext.jsonl", "-o", "tok"], "notext.jsonl:1"),
    Case("vocab-empty", ["vocab", "empty.jsonl", "-o", "tok"], "empty"),
    Case("vocab-not-utf8", ["vocab", "gbk.txt", "-o", "tok"], "gbk.txt"),

    # ------------------------------------------------------------------ shard / inspect
    Case("shard-empty", ["shard", "empty.jsonl", "--tokenizer", "{tok}", "-o", "sh"], "empty"),
    Case("shard-no-tokenizer", ["shard", "docs.jsonl", "--tokenizer", "a_dir", "-o", "sh"], "a_dir"),
    Case("shard-seq-too-short", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--seq-len", "4"],
         "--seq-len"),
    Case("inspect-not-sharddir", ["inspect", "a_dir"], "a_dir"),

    # ------------------------------------------------------------------ pretrain / plan
    Case("pretrain-missing-recipe", ["pretrain", "nope.yaml"], "nope.yaml"),
    Case("pretrain-typo-key", ["pretrain", "recipe_typo.yaml"], "did you mean 'lr'"),
    Case("pretrain-max-ngram", ["pretrain", "recipe_ngram.yaml"], "max_ngram must be 1..4"),
    Case("pretrain-bad-yaml", ["pretrain", "not_yaml.yaml"], "not_yaml.yaml"),
    Case("pretrain-bad-set", ["pretrain", "recipe_ngram.yaml", "--set", "max_ngram"], "key=value"),
    Case("plan-unknown-gpu", ["plan", "--gpu", "gtx9999"], "gtx9999"),
    Case("pretrain-lr-inf", ["pretrain", "trainrel_recipe.yaml", "--set", "lr=inf"], "'lr' must be a finite number"),
    Case("pretrain-lr-nan", ["pretrain", "trainrel_recipe.yaml", "--set", "lr=nan"], "'lr' must be a finite number"),
    Case("pretrain-betas-inf", ["pretrain", "trainrel_recipe.yaml", "--set", "betas=[0.9, .inf]"], "'betas'"),
    Case("pretrain-max-steps-negative", ["pretrain", "trainrel_recipe.yaml", "--set", "max_steps=-5"],
         "'max_steps' must be at least 1"),
    Case("pretrain-model-size-text", ["pretrain", "trainrel_recipe.yaml", "--set", "model=trainrel_size_text.json",
                                      "--set", "data={shards}", "--set", "tokenizer={tok}"], "hidden_size"),
    Case("pretrain-model-heads", ["pretrain", "trainrel_recipe.yaml", "--set", "model=trainrel_heads.json",
                                  "--set", "data={shards}", "--set", "tokenizer={tok}"], "num_attention_heads"),
    Case("pretrain-init-truncated", ["pretrain", "trainrel_recipe.yaml", "--set", "init_from={truncated}",
                                     "--set", "data={shards}", "--set", "tokenizer={tok}"], "cannot load"),
    Case("pretrain-init-bad-config", ["pretrain", "trainrel_recipe.yaml", "--set", "init_from=trainrel_bad_init",
                                      "--set", "data={shards}", "--set", "tokenizer={tok}"], "trainrel_bad_init"),
    Case("pretrain-resume-missing", ["pretrain", "trainrel_recipe.yaml", "--resume", "no_ckpt"], "no_ckpt"),
    Case("pretrain-resume-not-checkpoint", ["pretrain", "trainrel_recipe.yaml", "--resume", "a_dir"],
         "trainer_state.json is missing"),
    Case("plan-model-size-text", ["plan", "--model", "trainrel_size_text.json"], "hidden_size"),
    Case("plan-model-heads", ["plan", "--model", "trainrel_heads.json"], "num_attention_heads"),
    Case("plan-mask-rate-nan", ["plan", "--mask-rate", "nan"], "finite"),
    Case("plan-days-inf", ["plan", "--days", "inf"], "finite"),

    # ------------------------------------------------------------------ eval / finetune / ablate
    Case("eval-no-checkpoint", ["eval", "mlm", "nope", "--text", "docs.jsonl"], "nope"),
    Case("eval-broken-text", ["eval", "mlm", "{tiny}", "--text", "broken.jsonl", "--no-record"], "broken.jsonl:2"),
    Case("eval-batch-size-0", ["eval", "mlm", "{tiny}", "--text", "docs.jsonl", "--batch-size", "0", "--no-record"],
         "--batch-size"),
    Case("eval-truncated-weights", ["eval", "mlm", "{truncated}", "--text", "docs.jsonl", "--no-record"],
         "cannot load"),
    Case("finetune-truncated-weights", ["finetune", "{truncated}", "--task", "chnsenticorp", "--no-record"],
         "cannot load"),
    Case("finetune-unknown-task", ["finetune", "{tiny}", "--task", "chnsenticorpp", "--no-record"], "chnsenticorp"),

    # ------------------------------------------------------------------ publish / download / models / demo
    Case("publish-not-a-model", ["publish", "a_dir", "--repo-id", "me/x", "--dry-run", "-o", "staged"], "a_dir"),
    Case("download-bad-repo-id", ["download", "not a repo", "-o", "dl"], "not a repo"),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def bad_root(tmp_path_factory, tiny_model_dir, google_tokdir, sample_jsonl, build_shards):
    truncated = tmp_path_factory.mktemp("truncated") / "model"
    shutil.copytree(tiny_model_dir, truncated)
    weights = truncated / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)          # a killed copy
    return {"tiny": str(tiny_model_dir), "tok": str(google_tokdir), "truncated": str(truncated),
            "shards": str(build_shards(sample_jsonl, google_tokdir, "--seq-len", "64"))}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, bad_root, tmp_path, capsys, monkeypatch):
    from zh_bert.cli import main

    w = tmp_path / "w"
    w.mkdir()
    write_bad_files(w)
    before = _tree(w)
    argv = [a.format(w=w, **bad_root) for a in case.argv]
    monkeypatch.chdir(w)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = [l for l in err.split("\n") if l.strip()]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith(f"zh-bert {argv[0]}: error: "), err
    assert "Traceback" not in err and case.says in lines[0], lines[0]
    new = {p for p in _tree(w) - before if not any(p == a or p.startswith(a + os.sep) for a in case.may_leave)}
    assert not new, f"left behind: {sorted(new)}"
