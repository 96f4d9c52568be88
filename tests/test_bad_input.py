"""Every command against bad input: exit code 2, exactly one line on stderr `zh-bert CMD: error: ...`, no
traceback, and nothing new in the working folder that could be taken for a finished output.

One table; each row is (id, argv, what the error line must contain). `{w}` in argv is the row's working folder
(cwd of the command), which `write_bad_files` fills first; `{tiny}` is a real tiny model folder, `{truncated}`
the same with its model.safetensors cut in half, `{tok}` a real tokenizer folder, `{shards}` a real SHARDDIR
(`{pair_shards}` one built with `--pairs nsp`). A row may name paths it is allowed to
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
    (w / "recipe_surrogate.yaml").write_text("data: surrogate.jsonl\nout_dir: run\nmax_steps: 2\n", encoding="utf-8")
    (w / "foreign_thesis").mkdir()                                 # someone's folder, not a command's output
    (w / "foreign_thesis" / "thesis.tex").write_text("四年的心血\n", encoding="utf-8")
    (w / "foreign_binary.txt").write_bytes(bytes(range(128, 256)) * 300)   # no text encoding fits
    _eval_files(w)
    _train_files(w)
    _part_dirs(w)
    _run_dir_files(w)
    _clean_inputs(w)


def _eval_files(w: Path) -> None:
    """Fine-tuning splits and ablation specs (base recipe on docs.jsonl, relative to the working folder)."""
    (w / "ft_one_class.tsv").write_text("".join(f"1\t好的产品，第{i}号。\n" for i in range(8)), encoding="utf-8")
    (w / "ft_dev.tsv").write_text("".join(f"{i % 2}\t测试句子，第{i}号。\n" for i in range(6)), encoding="utf-8")
    (w / "ft_cloze.jsonl").write_text('{"text": "我爱[MASK]京。", "answer": "北"}\n', encoding="utf-8")
    (w / "ft_leaked.tsv").write_text("0\t测试句子，第0号。\n1\t测试句子，第1号。\n", encoding="utf-8")
    (w / "ft_base.yaml").write_text("data: [docs.jsonl]\nmodel: tiny\nseq_len: 64\nglobal_batch: 8\n"
                                         "micro_batch: 8\nmax_steps: 2\n", encoding="utf-8")
    head = "name: ablation\nbase: ft_base.yaml\nheldout_docs: 2\nfinetune: null\n"
    specs = {"empty": "", "ok": "grid: {max_steps: [1, 2]}\n", "masking_foo": "grid: {masking: [token, foo]}\n",
             "max_steps_neg": "grid: {max_steps: [10, -5]}\n", "dup_labels": "grid: {masking: [token, token]}\n",
             "dup_mapping": "grid: {x: [{label: a, set: {masking: wwm}}, {label: a, set: {masking: token}}]}\n",
             "fraction_text": "grid: {corpus_fraction: [abc, 1]}\n", "heldout_too_many": "grid: {masking: [token, wwm]}\n",
             "wd_nan": "grid: {masking: [token, wwm]}\nfinetune_weight_decay: .nan\n",
             "lr_inf": "grid: {masking: [token, wwm]}\nfinetune_lr: .inf\n",
             "dup_key": "grid: {masking: [token, wwm]}\nheldout_docs: 3\n",
             "one_class": "grid: {masking: [token, wwm]}\nfinetune: tsv:ft_one_class.tsv,ft_dev.tsv\n"}
    for name, body in specs.items():
        text = "" if name == "empty" else head + body
        if name == "heldout_too_many":
            text = text.replace("heldout_docs: 2", "heldout_docs: 10")
        if name == "one_class":   # its own finetune: instead of the head's (a key given twice is refused)
            text = text.replace("finetune: null\n", "")
        (w / f"ft_{name}.yaml").write_text(text, encoding="utf-8")


def _train_files(w: Path) -> None:
    """A pretraining recipe that writes into the working folder, model configs no BERT can have, a broken init_from."""
    (w / "pt_recipe.yaml").write_text("model: tiny\nout_dir: run\nmax_steps: 2\nseq_len: 64\n"
                                            "global_batch: 8\nmicro_batch: 8\n", encoding="utf-8")
    (w / "pt_size_text.json").write_text('{"hidden_size": "abc", "num_attention_heads": 2}', encoding="utf-8")
    (w / "pt_heads.json").write_text('{"hidden_size": 130, "num_attention_heads": 4}', encoding="utf-8")
    (w / "pt_bad_init").mkdir()
    (w / "pt_bad_init" / "config.json").write_text('{"vocab_size": 21128, "hidden', encoding="utf-8")
    (w / "pt_dup_key.yaml").write_text("model: tiny\nmax_steps: 2\nout_dir: run\nmax_steps: 5\n", encoding="utf-8")
    mb = {"model_type": "modernbert", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 256, "vocab_size": 100, "max_position_embeddings": 512, "local_attention": 32}
    for name, over in (("pt_mb", {}), ("pt_mb_layers", {"layer_types": ["sliding_attention", "full_attention"]}),
                       ("pt_mb_window_text", {"local_attention": "64"})):
        (w / f"{name}.json").write_text(json.dumps({**mb, **over}), encoding="utf-8")
    (w / "pt_mb_init").mkdir()   # a ModernBERT checkpoint's config.json as pretrain writes it (read before the weights)
    (w / "pt_mb_init" / "config.json").write_text(json.dumps(
        {**mb, "vocab_size": 21128, "intermediate_size": 416, "max_position_embeddings": 8192, "local_attention": 128,
         "layer_types": ["full_attention", "sliding_attention"], "global_attn_every_n_layers": 3,
         "mlp_dropout": 0.0, "embedding_dropout": 0.0, "attention_dropout": 0.0}), encoding="utf-8")


def _part_dirs(w: Path) -> None:
    """Directories of corpus parts: a `zh-bert clean` OUTDIR whose job has not finished, one with a part cut
    short, one whose parts are not JSON, each next to a recipe that names it as `data:`."""
    import gzip

    docs = (w / "docs.jsonl").read_bytes()
    unfinished = w / "parts_unfinished"
    (unfinished / ".zh-bert").mkdir(parents=True)
    (unfinished / ".zh-bert" / "job.json").write_text('{"command": "clean"}', encoding="utf-8")
    (unfinished / "part-00000.jsonl").write_bytes(docs)          # a finished task; others still running
    cut = w / "parts_truncated"
    cut.mkdir()
    (cut / "part-00000.jsonl").write_bytes(docs)
    whole = gzip.compress(docs * 20)
    (cut / "part-00001.jsonl.gz").write_bytes(whole[:len(whole) // 2])   # a copy killed halfway
    not_json = w / "parts_not_json"
    not_json.mkdir()
    (not_json / "part-00000.jsonl").write_text("北京是中国的首都。\n上海是一座城市。\n", encoding="utf-8")
    (not_json / "report.json").write_text('{"docs_out": 2, "parts": []}', encoding="utf-8")
    for name in ("unfinished", "truncated", "not_json"):
        (w / f"pt_parts_{name}.yaml").write_text(f"data: parts_{name}\nmodel: tiny\nout_dir: run\nmax_steps: 2\n"
                                                 f"seq_len: 64\nglobal_batch: 8\nmicro_batch: 8\n",
                                                 encoding="utf-8")
    (w / "pt_parts_empty.yaml").write_text("data: a_dir\nmodel: tiny\nout_dir: run\nmax_steps: 2\n",
                                           encoding="utf-8")


def _clean_inputs(w: Path) -> None:
    """Inputs of `zh-bert clean`: a .gz cut in half (a killed download), a "gz" that is plain text, and a folder
    of raw text that a command must not take as its output folder."""
    import gzip

    docs = (w / "docs.jsonl").read_bytes()
    whole = gzip.compress(docs * 20)
    (w / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (w / "fake.jsonl.gz").write_bytes(docs)
    (w / "raw_in").mkdir()
    (w / "raw_in" / "a.jsonl").write_bytes(docs)

def _run_dir_files(w: Path) -> None:
    """A folder holding the user's own metrics.jsonl (not a run dir), and ablation specs whose grid needs
    more text than the corpus has (masking correction) or whose `finetune:` is a mapping."""
    (w / "user_run").mkdir()
    (w / "user_run" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n', encoding="utf-8")
    head = "name: ablation\nbase: ft_base.yaml\nheldout_docs: 2\n"
    (w / "ft_correction.yaml").write_text(head + "finetune: null\ngrid: {masking: [wwm, correction]}\n",
                                          encoding="utf-8")
    (w / "ft_finetune_mapping.yaml").write_text(head + "finetune: {a: 1}\ngrid: {masking: [token, wwm]}\n",
                                                encoding="utf-8")


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
    Case("clean-empty-input", ["clean", "empty.jsonl", "-o", "out.jsonl"], "no documents in empty.jsonl"),
    Case("clean-lone-surrogate", ["clean", "surrogate.jsonl", "-o", "out.jsonl"], "surrogate.jsonl:1: lone surrogate"),
    Case("clean-undetectable-encoding", ["clean", "foreign_binary.txt", "-o", "out.jsonl"], "--encoding"),
    Case("clean-output-is-a-dir", ["clean", "docs.jsonl", "-o", "a_dir"], "is a directory"),
    Case("clean-output-not-its-own", ["clean", "docs.jsonl", "-o", "broken.jsonl"], "refusing to overwrite"),
    Case("clean-empty-into-new-folder", ["clean", "empty.jsonl", "-o", "new/sub/out.jsonl"], "no documents"),
    Case("clean-unknown-executor", ["clean", "docs.jsonl", "-o", "out", "--executor", "spark"],
         "choose from local, slurm, ray"),
    Case("clean-tasks-zero", ["clean", "docs.jsonl", "-o", "out", "--tasks", "0"], "--tasks must be at least 1"),
    Case("clean-ray-unreachable", ["clean", "docs.jsonl", "-o", "out", "--executor", "ray", "--ray-address",
                                   "127.0.0.1:9"], "no Ray cluster answers"),
    Case("clean-slurm-setting-without-slurm", ["clean", "docs.jsonl", "-o", "out", "--executor", "local",
                                               "--slurm-partition", "cpu"], "add --executor slurm"),
    Case("clean-slurm-time-alone", ["clean", "docs.jsonl", "-o", "out", "--slurm-time", "1:00:00"],
         "--slurm-time is a Slurm setting"),
    Case("clean-ray-address-without-ray", ["clean", "docs.jsonl", "-o", "out", "--ray-address", "auto"],
         "add --executor ray"),
    Case("clean-executor-output-is-jsonl", ["clean", "docs.jsonl", "-o", "out.jsonl", "--executor", "local"],
         "directory of parts"),
    Case("clean-compression-in-process", ["clean", "docs.jsonl", "-o", "out.jsonl", "--compression", "gzip"],
         "add --executor"),
    Case("clean-executor-foreign-dir", ["clean", "docs.jsonl", "-o", "foreign_thesis", "--executor", "local",
                                        "--force"], "thesis.tex"),
    Case("clean-executor-empty", ["clean", "empty.jsonl", "-o", "out", "--executor", "local", "--tasks", "2"],
         "no documents", may_leave=("out",)),   # only out/.zh-bert (the job's state): consumers refuse it
    Case("clean-truncated-gz", ["clean", "cut.jsonl.gz", "-o", "out.jsonl"],
         "cut.jsonl.gz: broken or truncated compressed file"),
    Case("clean-fake-gz", ["clean", "fake.jsonl.gz", "-o", "out.jsonl"], "fake.jsonl.gz: broken or truncated"),
    Case("clean-executor-truncated-gz", ["clean", "cut.jsonl.gz", "-o", "out", "--executor", "local", "--tasks", "2"],
         "cut.jsonl.gz: broken or truncated compressed file", may_leave=("out",)),   # the job's state only
    Case("clean-executor-fake-gz", ["clean", "fake.jsonl.gz", "-o", "out", "--tasks", "2"],
         "fake.jsonl.gz: broken or truncated", may_leave=("out",)),
    Case("clean-executor-output-is-input-dir", ["clean", "raw_in", "-o", "raw_in", "--executor", "local", "--tasks",
                                                "2"], "-o raw_in: is the input raw_in"),
    Case("clean-executor-output-is-input-dir-force", ["clean", "raw_in", "-o", "raw_in", "--tasks", "2", "--force"],
         "-o raw_in: is the input raw_in"),
    Case("clean-executor-output-inside-input-dir", ["clean", "raw_in", "-o", "raw_in/out", "--tasks", "2"],
         "is inside the input directory raw_in"),
    Case("clean-executor-output-holds-input", ["clean", "raw_in/a.jsonl", "-o", "raw_in", "--tasks", "2"],
         "-o raw_in: holds the input raw_in/a.jsonl"),
    Case("clean-output-is-its-input", ["clean", "raw_in/a.jsonl", "-o", "raw_in/a.jsonl"], "raw_in/a.jsonl"),
    Case("clean-output-inside-input-dir", ["clean", "raw_in", "-o", "raw_in/out2.jsonl"],
         "-o raw_in/out2.jsonl: is inside the input directory raw_in"),
    Case("clean-executor-logging-dir-inside-input-dir", ["clean", "raw_in", "-o", "out", "--tasks", "2",
                                                          "--logging-dir", "raw_in/logs"],
         "--logging-dir raw_in/logs: is inside the input directory raw_in"),
    Case("clean-executor-logging-dir-is-a-file", ["clean", "docs.jsonl", "-o", "out", "--tasks", "2",
                                                  "--logging-dir", "docs.jsonl"], "--logging-dir docs.jsonl"),
    Case("vocab-report-json-is-the-corpus", ["vocab", "report", "{tok}", "docs.jsonl", "--json", "docs.jsonl"],
         "--json docs.jsonl: is the input docs.jsonl"),

    # ------------------------------------------------------------------ vocab
    Case("vocab-broken-jsonl", ["vocab", "broken.jsonl", "-o", "tok"], "broken.jsonl:2"),
    Case("vocab-no-text", ["vocab", "notext.jsonl", "-o", "tok"], "notext.jsonl:1"),
    Case("vocab-empty", ["vocab", "empty.jsonl", "-o", "tok"], "empty"),
    Case("vocab-not-utf8", ["vocab", "gbk.txt", "-o", "tok"], "gbk.txt"),
    Case("vocab-lone-surrogate", ["vocab", "surrogate.jsonl", "-o", "tok"], "surrogate.jsonl:1: lone surrogate"),
    Case("vocab-force-foreign-dir", ["vocab", "docs.jsonl", "-o", "foreign_thesis", "--force"], "thesis.tex"),
    Case("vocab-exists-no-force", ["vocab", "docs.jsonl", "-o", "{tok}"], "--force"),
    Case("vocab-size-zero", ["vocab", "docs.jsonl", "-o", "tok", "--size", "0"], "--size"),
    Case("vocab-sample-mb-zero", ["vocab", "docs.jsonl", "-o", "tok", "--kind", "sentencepiece", "--sample-mb", "0"],
         "--sample-mb"),
    Case("vocab-report-lone-surrogate", ["vocab", "report", "{tok}", "surrogate.jsonl"], "surrogate.jsonl:1"),
    Case("vocab-report-json-is-dir", ["vocab", "report", "{tok}", "docs.jsonl", "--json", "a_dir"], "a_dir"),
    Case("vocab-report-not-tokdir", ["vocab", "report", "a_dir", "docs.jsonl"], "a_dir"),
    Case("vocab-unfinished-clean-outdir", ["vocab", "parts_unfinished", "-o", "tok"], "unfinished `zh-bert clean`"),
    Case("vocab-empty-dir", ["vocab", "a_dir", "-o", "tok"], "a_dir: directory holds no corpus parts"),
    Case("vocab-truncated-gz-part", ["vocab", "parts_truncated", "-o", "tok"], "part-00001.jsonl.gz: broken"),
    Case("vocab-parts-not-json", ["vocab", "parts_not_json", "-o", "tok"], "part-00000.jsonl:1: not JSON"),

    # ------------------------------------------------------------------ shard / inspect
    Case("shard-empty", ["shard", "empty.jsonl", "--tokenizer", "{tok}", "-o", "sh"], "empty"),
    Case("shard-no-tokenizer", ["shard", "docs.jsonl", "--tokenizer", "a_dir", "-o", "sh"], "a_dir"),
    Case("shard-seq-too-short", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--seq-len", "4"],
         "--seq-len"),
    Case("inspect-not-sharddir", ["inspect", "a_dir"], "a_dir"),
    Case("shard-lone-surrogate", ["shard", "surrogate.jsonl", "--tokenizer", "{tok}", "-o", "sh"],
         "surrogate.jsonl:1: lone surrogate"),
    Case("shard-broken-jsonl", ["shard", "broken.jsonl", "--tokenizer", "{tok}", "-o", "sh"], "broken.jsonl:2"),
    Case("shard-foreign-dir", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "foreign_thesis"],
         "thesis.tex"),
    Case("shard-output-is-a-file", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "docs.jsonl"],
         "not a shard directory"),
    Case("inspect-missing", ["inspect", "nope"], "nope"),
    Case("shard-tasks-zero", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--tasks", "0"], "--tasks"),
    Case("shard-valid-docs-with-executor", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--executor",
                                            "local", "--valid-docs", "5"], "--valid-fraction"),
    Case("shard-valid-fraction-one", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--valid-fraction",
                                      "1"], "--valid-fraction"),
    Case("shard-slurm-setting-without-slurm", ["shard", "docs.jsonl", "--tokenizer", "{tok}", "-o", "sh",
                                               "--slurm-partition", "cpu"], "--executor slurm"),
    Case("shard-empty-with-executor", ["shard", "empty.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--tasks", "2"],
         "empty corpus"),
    Case("shard-executor-broken-jsonl", ["shard", "broken.jsonl", "--tokenizer", "{tok}", "-o", "sh", "--tasks", "2"],
         "broken.jsonl:2", may_leave=("sh",)),   # only sh/.zh-bert (the job's state): no meta.json
    Case("shard-dir-without-parts", ["shard", "a_dir", "--tokenizer", "{tok}", "-o", "sh"], "no corpus parts"),

    # ------------------------------------------------------------------ pretrain / plan
    Case("pretrain-missing-recipe", ["pretrain", "nope.yaml"], "nope.yaml"),
    Case("pretrain-lone-surrogate", ["pretrain", "recipe_surrogate.yaml"], "surrogate.jsonl:1"),
    Case("pretrain-typo-key", ["pretrain", "recipe_typo.yaml"], "did you mean 'lr'"),
    Case("pretrain-max-ngram", ["pretrain", "recipe_ngram.yaml"], "max_ngram must be 1..4"),
    Case("pretrain-bad-yaml", ["pretrain", "not_yaml.yaml"], "not_yaml.yaml"),
    Case("pretrain-bad-set", ["pretrain", "recipe_ngram.yaml", "--set", "max_ngram"], "key=value"),
    Case("plan-unknown-gpu", ["plan", "--gpu", "gtx9999"], "gtx9999"),
    Case("pretrain-lr-inf", ["pretrain", "pt_recipe.yaml", "--set", "lr=inf"], "'lr' must be a finite number"),
    Case("pretrain-lr-nan", ["pretrain", "pt_recipe.yaml", "--set", "lr=nan"], "'lr' must be a finite number"),
    Case("pretrain-betas-inf", ["pretrain", "pt_recipe.yaml", "--set", "betas=[0.9, .inf]"], "'betas'"),
    Case("pretrain-max-steps-negative", ["pretrain", "pt_recipe.yaml", "--set", "max_steps=-5"],
         "'max_steps' must be at least 1"),
    Case("pretrain-model-size-text", ["pretrain", "pt_recipe.yaml", "--set", "model=pt_size_text.json",
                                      "--set", "data={shards}", "--set", "tokenizer={tok}"], "hidden_size"),
    Case("pretrain-model-heads", ["pretrain", "pt_recipe.yaml", "--set", "model=pt_heads.json",
                                  "--set", "data={shards}", "--set", "tokenizer={tok}"], "num_attention_heads"),
    Case("pretrain-init-truncated", ["pretrain", "pt_recipe.yaml", "--set", "init_from={truncated}",
                                     "--set", "data={shards}", "--set", "tokenizer={tok}"], "cannot load"),
    Case("pretrain-init-bad-config", ["pretrain", "pt_recipe.yaml", "--set", "init_from=pt_bad_init",
                                      "--set", "data={shards}", "--set", "tokenizer={tok}"], "pt_bad_init"),
    Case("pretrain-electra-pair-shards", ["pretrain", "pt_recipe.yaml", "--set", "objective=electra", "--set",
                                          "data={pair_shards}", "--set", "tokenizer={tok}"],
         "objective electra needs shards without sentence pairs"),
    Case("pretrain-generator-ratio-zero", ["pretrain", "pt_recipe.yaml", "--set", "objective=electra", "--set",
                                           "generator_ratio=0"], "'generator_ratio' must be in (0, 1]"),
    Case("pretrain-generator-ratio-above-one", ["pretrain", "pt_recipe.yaml", "--set", "generator_ratio=1.5"],
         "'generator_ratio' must be in (0, 1]"),
    Case("pretrain-rtd-weight-negative", ["pretrain", "pt_recipe.yaml", "--set", "objective=electra", "--set",
                                          "rtd_weight=-1"], "'rtd_weight' must be >= 0"),
    Case("pretrain-electra-init-from", ["pretrain", "pt_recipe.yaml", "--set", "objective=electra", "--set",
                                        "init_from={tiny}"], "init_from is not supported"),
    Case("pretrain-resume-missing", ["pretrain", "pt_recipe.yaml", "--resume", "no_ckpt"], "no_ckpt"),
    Case("pretrain-resume-not-checkpoint", ["pretrain", "pt_recipe.yaml", "--resume", "a_dir"],
         "trainer_state.json is missing"),
    Case("pretrain-data-unfinished-clean-outdir", ["pretrain", "pt_parts_unfinished.yaml"],
         "unfinished `zh-bert clean`"),
    Case("pretrain-data-empty-dir", ["pretrain", "pt_parts_empty.yaml"], "a_dir: directory holds no corpus parts"),
    Case("pretrain-data-truncated-gz-part", ["pretrain", "pt_parts_truncated.yaml"], "part-00001.jsonl.gz: broken"),
    Case("pretrain-data-parts-not-json", ["pretrain", "pt_parts_not_json.yaml"], "part-00000.jsonl:1: not JSON"),
    Case("pretrain-correction-corpus-too-small", ["pretrain", "pt_recipe.yaml", "--set", "masking=correction",
                                                  "--set", "data={small_shards}", "--set", "tokenizer={tok}"],
         "needs at least 20,000"),
    Case("pretrain-out-dir-empty-is-cwd", ["pretrain", "pt_recipe.yaml", "--set", "out_dir="],
         "is the current directory"),
    Case("pretrain-out-dir-user-metrics", ["pretrain", "pt_recipe.yaml", "--set", "out_dir=user_run"],
         "metrics.jsonl"),
    Case("pretrain-out-dir-is-shards", ["pretrain", "pt_recipe.yaml", "--set", "data={shards}", "--set",
                                        "tokenizer={tok}", "--set", "out_dir={shards}"], "overlap"),
    Case("pretrain-out-dir-is-tokenizer", ["pretrain", "pt_recipe.yaml", "--set", "data={shards}", "--set",
                                           "tokenizer={tok}", "--set", "out_dir={tok}"], "overlap"),
    Case("pretrain-out-dir-in-proc", ["pretrain", "pt_recipe.yaml", "--set", "out_dir=/proc/x"], "cannot create"),
    Case("pretrain-out-dir-is-a-file", ["pretrain", "pt_recipe.yaml", "--set", "out_dir=docs.jsonl"],
         "is not a directory"),
    Case("pretrain-seed-negative", ["pretrain", "pt_recipe.yaml", "--set", "seed=-1"], "'seed' must be in [0,"),
    Case("pretrain-seed-2-32", ["pretrain", "pt_recipe.yaml", "--set", "seed=4294967296"], "'seed' must be in [0,"),
    Case("pretrain-valid-docs-names-the-recipe-key", ["pretrain", "pt_recipe.yaml", "--set", "data=docs.jsonl",
                                                      "--set", "tokenizer={tok}", "--set", "valid_docs=50"],
         "valid_docs 50 must be in [0, "),   # 1 document: clean keeps one of the 20 copies
    Case("pretrain-data-outdir-and-jsonl-file", ["pretrain", "pt_recipe.yaml", "--set",
                                                 "data=[parts_not_json, docs.jsonl]"], "docs.jsonl is a single file"),
    Case("pretrain-data-empty-is-not-cwd", ["pretrain", "pt_recipe.yaml", "--set", "data="],
         "'data' has an empty path"),
    Case("pretrain-data-list-with-empty-entry", ["pretrain", "pt_recipe.yaml", "--set", "data=[docs.jsonl, '']"],
         "'data' has an empty path"),
    Case("pretrain-loss-scale-init-1e38", ["pretrain", "pt_recipe.yaml", "--set", "precision=fp16", "--set",
                                           "loss_scale_init=1e38"], "'loss_scale_init' must be in [1, 16777216]"),
    Case("pretrain-loss-scale-init-1e-30", ["pretrain", "pt_recipe.yaml", "--set", "precision=fp16", "--set",
                                            "loss_scale_init=1e-30"], "'loss_scale_init' must be in [1, 16777216]"),
    Case("pretrain-duplicate-yaml-key", ["pretrain", "pt_dup_key.yaml"],
         "pt_dup_key.yaml:4: invalid YAML: key 'max_steps' given twice (lines 2 and 4)"),
    Case("pretrain-duplicate-key-in-set", ["pretrain", "pt_recipe.yaml", "--set",
                                           "masking={{strategy: wwm, strategy: token}}"], "key 'strategy' given twice"),
    Case("pretrain-bert-from-modernbert-config", ["pretrain", "pt_recipe.yaml", "--set", "architecture=bert", "--set",
                                                  "model=pt_mb.json", "--set", "data={shards}", "--set",
                                                  "tokenizer={tok}"],
         "pt_mb.json: model_type 'modernbert', but architecture is bert"),
    Case("pretrain-modernbert-layer-types-4x-cannot-express", ["pretrain", "pt_recipe.yaml", "--set",
                                                               "architecture=modernbert", "--set",
                                                               "model=pt_mb_layers.json", "--set", "data={shards}",
                                                               "--set", "tokenizer={tok}"],
         "pt_mb_layers.json: layer_types"),
    Case("pretrain-modernbert-window-as-text", ["pretrain", "pt_recipe.yaml", "--set", "architecture=modernbert",
                                                "--set", "model=pt_mb_window_text.json", "--set", "data={shards}",
                                                "--set", "tokenizer={tok}"], "pt_mb_window_text.json"),
    Case("pretrain-init-from-bert-other-dropout", ["pretrain", "pt_recipe.yaml", "--set", "init_from={tiny}",
                                                   "--set", "dropout=0.2", "--set", "data={shards}", "--set",
                                                   "tokenizer={tok}"], "dropout 0.2 with init_from"),
    Case("pretrain-init-from-bert-other-model", ["pretrain", "pt_recipe.yaml", "--set", "init_from={tiny}",
                                                 "--set", "model=base", "--set", "data={shards}", "--set",
                                                 "tokenizer={tok}"], "model base (L12/H768/A12) with init_from"),
    Case("pretrain-init-from-bert-neighbour-init", ["pretrain", "pt_recipe.yaml", "--set", "init_from={tiny}",
                                                    "--set", "attention_init=neighbour", "--set", "data={shards}",
                                                    "--set", "tokenizer={tok}"], "attention_init neighbour with"),
    Case("pretrain-init-from-modernbert-other-window", ["pretrain", "pt_recipe.yaml", "--set",
                                                        "architecture=modernbert", "--set",
                                                        "init_from=pt_mb_init", "--set", "local_attention=64",
                                                        "--set", "data={shards}", "--set", "tokenizer={tok}"],
         "local_attention 64 with init_from"),
    Case("pretrain-init-from-modernbert-other-global-layers", ["pretrain", "pt_recipe.yaml", "--set",
                                                               "architecture=modernbert", "--set",
                                                               "init_from=pt_mb_init", "--set",
                                                               "global_attn_every_n_layers=1", "--set",
                                                               "data={shards}", "--set", "tokenizer={tok}"],
         "global_attn_every_n_layers 1 with init_from"),
    Case("pretrain-init-from-modernbert-other-model", ["pretrain", "pt_recipe.yaml", "--set",
                                                       "architecture=modernbert", "--set",
                                                       "init_from=pt_mb_init", "--set", "model=mini",
                                                       "--set", "data={shards}", "--set", "tokenizer={tok}"],
         "model mini (L4/H256/A4) with init_from"),
    Case("pretrain-init-from-modernbert-other-dropout", ["pretrain", "pt_recipe.yaml", "--set",
                                                         "architecture=modernbert", "--set",
                                                         "init_from=pt_mb_init", "--set", "dropout=0.2",
                                                         "--set", "data={shards}", "--set", "tokenizer={tok}"],
         "dropout 0.2 with init_from"),
    Case("plan-bert-from-modernbert-config", ["plan", "--architecture", "bert", "--model", "pt_mb.json"],
         "pt_mb.json: model_type 'modernbert', but architecture is bert"),
    Case("plan-modernbert-layer-types-4x-cannot-express", ["plan", "--architecture", "modernbert", "--model",
                                                           "pt_mb_layers.json"], "pt_mb_layers.json: layer_types"),
    Case("plan-modernbert-window-as-text", ["plan", "--architecture", "modernbert", "--model",
                                            "pt_mb_window_text.json"], "pt_mb_window_text.json"),
    Case("plan-model-size-text", ["plan", "--model", "pt_size_text.json"], "hidden_size"),
    Case("plan-model-heads", ["plan", "--model", "pt_heads.json"], "num_attention_heads"),
    Case("plan-mask-rate-nan", ["plan", "--mask-rate", "nan"], "finite"),
    Case("plan-days-inf", ["plan", "--days", "inf"], "finite"),
    Case("plan-generator-ratio-zero", ["plan", "--objective", "electra", "--generator-ratio", "0"],
         "--generator-ratio must be in (0, 1]"),

    # ------------------------------------------------------------------ eval / finetune / ablate
    Case("eval-no-checkpoint", ["eval", "mlm", "nope", "--text", "docs.jsonl"], "nope"),
    Case("eval-broken-text", ["eval", "mlm", "{tiny}", "--text", "broken.jsonl", "--no-record"], "broken.jsonl:2"),
    Case("eval-batch-size-0", ["eval", "mlm", "{tiny}", "--text", "docs.jsonl", "--batch-size", "0", "--no-record"],
         "--batch-size"),
    Case("eval-truncated-weights", ["eval", "mlm", "{truncated}", "--text", "docs.jsonl", "--no-record"],
         "cannot load"),
    Case("finetune-truncated-weights", ["finetune", "{truncated}", "--task", "chnsenticorp", "--no-record"],
         "cannot load"),
    Case("eval-lone-surrogate", ["eval", "mlm", "{tiny}", "--text", "surrogate.jsonl", "--no-record"],
         "surrogate.jsonl:1"),
    Case("eval-unfinished-clean-outdir", ["eval", "mlm", "{tiny}", "--text", "parts_unfinished", "--no-record"],
         "unfinished `zh-bert clean`"),
    Case("eval-empty-dir", ["eval", "mlm", "{tiny}", "--text", "a_dir", "--no-record"], "no corpus parts"),
    Case("eval-truncated-gz-part", ["eval", "mlm", "{tiny}", "--text", "parts_truncated", "--no-record"],
         "part-00001.jsonl.gz: broken"),
    Case("eval-parts-not-json", ["eval", "mlm", "{tiny}", "--text", "parts_not_json", "--no-record"],
         "part-00000.jsonl:1: not JSON"),
    Case("finetune-unknown-task", ["finetune", "{tiny}", "--task", "chnsenticorpp", "--no-record"], "chnsenticorp"),
    Case("eval-cloze-not-utf8", ["eval", "cloze", "{tiny}", "--data", "gbk.txt", "--no-record"], "gbk.txt"),
    Case("eval-batch-size-negative", ["eval", "mlm", "{tiny}", "--text", "docs.jsonl", "--batch-size", "-3",
                                      "--no-record"], "--batch-size must be >= 1, got -3"),
    Case("eval-cloze-batch-size-0", ["eval", "cloze", "{tiny}", "--data", "docs.jsonl", "--batch-size", "0",
                                     "--no-record"], "--batch-size"),
    Case("eval-cloze-truncated-weights", ["eval", "cloze", "{truncated}", "--data", "ft_cloze.jsonl", "--no-record"],
         "cannot load"),
    Case("eval-masking-correction-without-shards", ["eval", "mlm", "{tiny}", "--text", "docs.jsonl", "--masking",
                                                    "correction", "--no-record"], "similar-word table"),
    Case("eval-mask-rate-nan", ["eval", "mlm", "{tiny}", "--text", "docs.jsonl", "--mask-rate", "nan",
                                "--no-record"], "mask_rate"),
    Case("finetune-batch-size-negative", ["finetune", "{tiny}", "--task", "chnsenticorp", "--batch-size", "-3",
                                          "--no-record"], "--batch-size"),
    Case("finetune-lr-nan", ["finetune", "{tiny}", "--task", "chnsenticorp", "--lr", "nan", "--no-record"], "--lr"),
    Case("finetune-weight-decay-inf", ["finetune", "{tiny}", "--task", "chnsenticorp", "--weight-decay", "inf",
                                       "--no-record"], "--weight-decay must be a finite number"),
    Case("finetune-train-one-class", ["finetune", "{tiny}", "--task", "tsv:ft_one_class.tsv,ft_dev.tsv",
                                      "--no-record"], "ft_one_class.tsv: the train split"),
    Case("finetune-train-all-leaked", ["finetune", "{tiny}", "--task", "tsv:ft_leaked.tsv,ft_dev.tsv",
                                       "--no-record"], "no examples left"),
    Case("finetune-max-train-one-class", ["finetune", "{tiny}", "--task", "tsv:ft_dev.tsv,ft_one_class.tsv",
                                          "--max-train", "1", "--no-record"], "--max-train 1"),
    Case("ablate-empty-spec", ["ablate", "ft_empty.yaml"], "empty spec"),
    Case("ablate-masking-foo", ["ablate", "ft_masking_foo.yaml"], "run masking=foo"),
    Case("ablate-dry-masking-foo", ["ablate", "ft_masking_foo.yaml", "--dry-run"], "run masking=foo"),
    Case("ablate-dry-max-steps-neg", ["ablate", "ft_max_steps_neg.yaml", "--dry-run"], "max_steps"),
    Case("ablate-max-steps-neg-only-first", ["ablate", "ft_max_steps_neg.yaml", "--only", "max_steps=10"],
         "run max_steps=-5"),
    Case("ablate-dry-dup-labels", ["ablate", "ft_dup_labels.yaml", "--dry-run"], "appears twice"),
    Case("ablate-dup-mapping-labels", ["ablate", "ft_dup_mapping.yaml"], "x=a"),
    Case("ablate-fraction-not-a-number", ["ablate", "ft_fraction_text.yaml", "--dry-run"], "'abc'"),
    Case("ablate-dry-heldout-too-many", ["ablate", "ft_heldout_too_many.yaml", "--dry-run"], "hold out 10"),
    Case("ablate-weight-decay-nan", ["ablate", "ft_wd_nan.yaml"], "finetune_weight_decay"),
    Case("ablate-lr-inf", ["ablate", "ft_lr_inf.yaml", "--dry-run"], "finetune_lr"),
    Case("ablate-duplicate-yaml-key", ["ablate", "ft_dup_key.yaml", "--dry-run"], "key 'heldout_docs' given twice"),
    Case("ablate-set-lr-nan", ["ablate", "ft_ok.yaml", "--set", "finetune_lr=nan"], "finetune_lr"),
    Case("ablate-finetune-one-class", ["ablate", "ft_one_class.yaml", "--dry-run"], "only one class"),
    Case("ablate-set-masking-foo", ["ablate", "ft_ok.yaml", "--set", "masking=foo", "--dry-run"],
         "masking"),

    Case("finetune-seed-negative", ["finetune", "{tiny}", "--task", "chnsenticorp", "--seed", "-1", "--no-record"],
         "--seed must be in [0,"),
    Case("finetune-seeds-past-2-32", ["finetune", "{tiny}", "--task", "chnsenticorp", "--seed", "4294967295",
                                      "--seeds", "2", "--no-record"], "--seed must be in [0,"),
    Case("ablate-seed-negative", ["ablate", "ft_ok.yaml", "--set", "seed=-1", "--dry-run"], "'seed' must be in [0,"),
    Case("ablate-dry-correction-corpus-too-small", ["ablate", "ft_correction.yaml", "--dry-run"],
         "needs at least 20,000"),
    Case("ablate-correction-corpus-too-small", ["ablate", "ft_correction.yaml"], "needs at least 20,000"),
    Case("ablate-finetune-mapping", ["ablate", "ft_finetune_mapping.yaml", "--dry-run"],
         "'finetune' must be a task name"),

    # ------------------------------------------------------------------ publish / download / models / demo
    Case("publish-not-a-model", ["publish", "a_dir", "--repo-id", "me/x", "--dry-run", "-o", "staged"], "a_dir"),
    Case("download-bad-repo-id", ["download", "not a repo", "-o", "dl"], "not a repo"),
    Case("download-dotdot-repo-id", ["download", "../..", "-o", "dl"], "'../..'"),
    Case("download-dotdot-name", ["download", "org/..", "--source", "modelscope", "-o", "dl"], "expected ORG/NAME"),
    Case("download-dotdot-no-slash", ["download", "..", "-o", "dl"], "'..'"),
    Case("download-force-foreign-folder", ["download", "uer-tiny", "-o", "foreign_thesis", "--force"],
         "(it holds thesis.tex); refusing to overwrite it"),
    Case("download-force-over-a-file", ["download", "uer-tiny", "-o", "docs.jsonl", "--force"],
         "docs.jsonl: exists and is not a model folder written by zh-bert download"),
    Case("download-force-current-dir", ["download", "uer-tiny", "-o", ".", "--force"], "is the current directory"),
    Case("publish-truncated-weights", ["publish", "{truncated}", "--repo-id", "me/x", "--dry-run", "-o", "staged"],
         "cannot open the weights"),
    Case("publish-truncated-no-output", ["publish", "{truncated}", "--repo-id", "me/x", "--dry-run"],
         "truncated or corrupt"),
    Case("publish-dotdot-repo-id", ["publish", "{tiny}", "--repo-id", "../..", "--dry-run"], "expected ORG/NAME"),
    Case("publish-output-exists", ["publish", "{tiny}", "--repo-id", "me/x", "--dry-run", "-o", "a_dir"],
         "already exists"),
    Case("demo-port-0", ["demo", "{tiny}", "--port", "0"], "--port"),
    Case("demo-port-70000", ["demo", "{tiny}", "--port", "70000"], "--port"),
    Case("demo-port-abc", ["demo", "{tiny}", "--port", "abc"], "--port"),
    Case("demo-bad-host", ["demo", "{tiny}", "--host", "no-such-host.invalid"], "--host"),
    Case("demo-truncated-weights", ["demo", "{truncated}", "--port", "65001"], "cannot open the weights"),
    Case("demo-not-a-model", ["demo", "a_dir", "--port", "65002"], "a_dir"),
    Case("demo-negative-threads", ["demo", "{tiny}", "--threads", "-1"], "--threads"),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def bad_root(tmp_path_factory, tiny_model_dir, google_tokdir, sample_jsonl, sample_docs, build_shards):
    small = tmp_path_factory.mktemp("small_corpus") / "docs.jsonl"   # 10 documents: too few for correction
    small.write_text("".join(json.dumps({"text": t, "source": str(i)}, ensure_ascii=False) + "\n"
                             for i, t in enumerate(sample_docs[:10])), encoding="utf-8")
    truncated = tmp_path_factory.mktemp("truncated") / "model"
    shutil.copytree(tiny_model_dir, truncated)
    weights = truncated / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)          # a killed copy
    return {"tiny": str(tiny_model_dir), "tok": str(google_tokdir), "truncated": str(truncated),
            "shards": str(build_shards(sample_jsonl, google_tokdir, "--seq-len", "64")),
            "small_shards": str(build_shards(small, google_tokdir, "--seq-len", "64", "--valid-docs", "2")),
            "pair_shards": str(build_shards(sample_jsonl, google_tokdir, "--seq-len", "64", "--pairs", "nsp"))}


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
