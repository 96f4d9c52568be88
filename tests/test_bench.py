"""Every benchmark still runs: `python -m bench.NAME --quick` (every section at toy size, offline) exits 0 and
prints its result lines, ratios against its baseline included (slow: `--slow`). The benchmarks are found by
listing the `bench` package (its helper modules named in HELPERS), so a new one without a `--quick` option, or
without an entry in RESULT_LINES naming what it must print, fails here. The fast tests: every benchmark is a
module of the `bench` package that imports with no edit of the import path, takes its options from one dataclass
(`Options`, `zh_bert.core.config`'s `option` fields), and answers `python -m bench.NAME --help`."""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HELPERS = {"cli", "timing", "scale_corpus"}   # modules of bench/ that are not benchmarks
BENCHES = sorted(m.name for m in pkgutil.iter_modules([str(REPO / "bench")]) if m.name not in HELPERS)
NUM = r"\d[\d,]*(?:\.\d+)?"   # figures print with thousands separators (1,810)

#: benchmark -> regexes (multiline) its --quick stdout must match: the ratio/result lines of that benchmark
RESULT_LINES = {
    "clean_throughput": [rf"^exact / baseline: {NUM}x +workers \d+ / 1: {NUM}x +minhash / exact: {NUM}x",
                         rf"signatures zh-bert / datasketch: (?:{NUM}|nan)x$"],
    "cpu_runtime": [rf"^glibc defaults, ACTIVE \(baseline\) +{NUM} tokens/s .* 1\.00x",
                    rf"^keep_freed_memory, ACTIVE .* {NUM}x +minor faults",
                    rf"^keep_freed_memory, PASSIVE .* {NUM}x +minor faults"],
    "demo_latency": [rf"^zh-bert fill, 1 blank .* median +{NUM} ms", rf"^ratio baseline/ours: {NUM}x"],
    "distill_defaults": [rf"^\| defaults \| 8 \| {NUM} \(T = {NUM}\) \| {NUM} ± {NUM} \| {NUM} ± {NUM} \| {NUM} ± {NUM} \| {NUM} ± {NUM} \|$",
                         rf"^\| scratch \| 8 \| – \| {NUM} ± {NUM} \|"],
    "distill_speed": [rf"^\| mini → tiny \| fp32 \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \| {NUM}% \| {NUM}% \|$",
                      rf"^fp32: first-step loss TextBrewer {NUM}, zh-bert {NUM}$"],
    "embed_speed": [rf"^\| CoSENT on STS-B train, 64 pairs × 1 epochs \| zh-bert \| {NUM} tokens/s \| STS-B test -?{NUM} ",
                    rf"^training tokens/s zh-bert / sentence-transformers: {NUM}x$",
                    rf"^encode sentences/s zh-bert / SentenceTransformer.encode: {NUM}x \(largest \|difference\| ",
                    rf"^zh-bert embed peak RSS: {NUM} MB at 100 lines, {NUM} MB at 400 lines"],
    "finetune_speed": [rf"^\| tiny \| fine-tune 32 × 1 epochs \| Trainer \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|",
                       rf"^\| tiny \| predict 64 \| pipeline \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|",
                       rf"^\| tiny \| CMRC 2018 fine-tune 16 \(trial\) × 1 epochs \| Trainer \| {NUM} \| {NUM} \| "
                       rf"\*\*{NUM}×\*\* \|$",
                       rf"^\| tiny \| CMRC 2018 answer 16 \| Trainer\.predict \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|$",
                       r"^tiny: predicted labels agree with the pipeline's on 100\.0% of test examples",
                       r"^tiny: the same answer text as the Trainer's for 100\.0% of the CMRC questions",
                       rf"^tiny: the Trainer's CMRC batches are {NUM}% real tokens in training, {NUM}% in answering: "
                       rf"removing every pad token saves at most {NUM}× and {NUM}× in the per-token layers$"],
    "main_recipe_length": [rf"^4 steps .* {NUM} ± {NUM}", rf"^random init +- +{NUM} ± {NUM}"],
    "masking_throughput": [rf'"per_sequence_vs_row_at_a_time": {NUM}', rf'"correction_vs_wwm_per_sequence": {NUM}',
                           rf'"build_s": {NUM}'],
    "modernbert_head": [rf"^tiny: zh-bert / transformers sparse_prediction = {NUM}x; modernbert / bert .* = {NUM}x$"],
    "ner_crf": [rf"^\| softmax \(stock\) \| {NUM} \| {NUM} \|$", rf"^\| CRF \| {NUM} \| {NUM} \|$",
                rf"^CRF - softmax: [+-]{NUM} test F1 points$"],
    "ner_speed": [rf"^\| tiny \| fine-tune Resume 64 \({NUM} rows\) × 1 epochs \| Trainer \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|$",
                  rf"^\| tiny \| predict MSRA test 64 \({NUM} rows\) \| Trainer\.predict \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|$",
                  r"^tiny: predicted tags agree with the Trainer's on 100\.0% of characters$"],
    "plan_memory_check": [rf"^mini +4 +{NUM} +{NUM} +{NUM}$", r"^(?:NOT )?all within ±25%"],
    "scale": [rf"^\| 1 MB \| clean executor \| .*\| {NUM} / {NUM} \|",
              rf"^\| 1 MB \| shard executor \| .*\| {NUM} / {NUM} \|"],
    "shard_throughput": [rf"zh-bert shard --workers 2 .* x *{NUM} wall", rf"word-start F1 {NUM}",
                         rf"^  loader / step = {NUM}%"],
    "train_throughput": [rf"^\| tiny \| fp32 \| {NUM} \| {NUM} \| \*\*{NUM}×\*\* \|"],
    "vocab_build": [r"^baseline: tokenizers WordPieceTrainer.* 1\.00x$",
                    *(rf"^zh-bert vocab {kind} .* {NUM}x$" for kind in
                      ("char --size", "wordpiece", "word", "sentencepiece unigram", "sentencepiece bpe"))],
}

#: benchmarks whose --quick run a test of their own makes (and checks more closely, its result lines included)
OWN_TEST = {"gpu_proof": "tests/test_gpu_proof.py"}


def test_every_bench_is_a_module_with_its_options_in_one_dataclass():
    """bench/ edits no import path and writes no argparse by hand; each benchmark imports as `bench.NAME`, has a
    `--quick` entry, and its parser's options are exactly the `option` fields of its `Options` dataclass."""
    from bench.cli import parser
    from zh_bert.core.config import cli_fields

    sources = {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in (REPO / "bench").rglob("*.py")}
    assert not [f for f, text in sources.items() if re.search(r"sys\.path|ArgumentParser\(|add_argument\(", text)]
    assert BENCHES and set(BENCHES) <= set(RESULT_LINES) | set(OWN_TEST), \
        f"add to RESULT_LINES: {set(BENCHES) - set(RESULT_LINES) - set(OWN_TEST)}"
    for name in BENCHES:
        mod = importlib.import_module(f"bench.{name}")
        assert dataclasses.is_dataclass(mod.Options) and callable(mod.main), name
        fields = cli_fields(mod.Options)
        assert "quick" in {f.name for f in fields}, f"bench.{name}: no --quick"
        actions = parser(mod.Options, name, mod.__doc__)._actions
        flags = {s for a in actions for s in a.option_strings} - {"-h", "--help"}
        assert flags == {"--" + f.name.replace("_", "-") for f in fields}, name


def test_python_m_bench_help_for_every_bench():
    """`python -m bench.NAME --help` (run as -m runs it, one process for all): exit 0, usage and --quick shown."""
    code = ("import contextlib, io, runpy, sys\n"
            f"for name in {BENCHES!r}:\n"
            "    sys.argv, out = ['-m', '--help'], io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            runpy.run_module(f'bench.{name}', run_name='__main__', alter_sys=True)\n"
            "        except SystemExit as e:\n"
            "            assert e.code == 0, (name, e.code)\n"
            "    text = out.getvalue()\n"
            "    assert text.startswith(f'usage: python -m bench.{name}') and '--quick' in text, name\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr[-3000:]


@pytest.mark.parametrize("argv, says", [
    (["--qa-train", "0"], "--qa-train must be >= 1, got 0"),
    (["--shapes", "tiyn"], "--shapes: unknown shape 'tiyn' (did you mean 'tiny'?)"),
    (["--qa-shapes", "tiny,huge"], "--qa-shapes: unknown shape 'huge'"),
    (["--qa-only", "--shapes", "base", "--qa-shapes", "tiny"], "--qa-only: no shape of --shapes is in --qa-shapes"),
])
def test_finetune_speed_refuses_bad_options_before_any_work(argv, says, capsys):
    """A count of 0 or a mistyped shape is one line and exit 2, not a traceback after the first rows ran."""
    from bench import finetune_speed

    with pytest.raises(SystemExit) as e:
        finetune_speed.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in BENCHES if n not in OWN_TEST])
def test_bench_quick_mode_runs_every_section(name, tmp_path):
    """Offline, in its own temp dir; exit 0, no traceback, and every result line present."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TMPDIR": str(tmp_path)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", f"bench.{name}", "--quick"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=480)
    took = time.perf_counter() - t0
    print(f"python -m bench.{name} --quick: {took:.1f} s")
    assert r.returncode == 0 and "Traceback" not in r.stderr, f"rc {r.returncode}\n{r.stderr[-3000:]}"
    missing = [rx for rx in RESULT_LINES.get(name, [r"(?!)"]) if not re.search(rx, r.stdout, re.M)]
    assert not missing, f"python -m bench.{name} --quick printed no line matching {missing}:\n{r.stdout[-3000:]}"
