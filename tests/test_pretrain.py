"""`zh-bert pretrain` on real Chinese text: loss falls, outputs per the run-dir contract, exact resume after
kill -9, accumulation equivalence, vocab-size checks, and a checkpoint that `pipeline("fill-mask")` loads."""

from __future__ import annotations

import copy
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from _fs_helpers import tmpfs
from _run_helpers import kill_then_resume, metrics, save_recipe
from conftest import CHAR_SEQ, REPO
from zh_bert.core.errors import ZhBertError

SEQ = CHAR_SEQ
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}   # the subprocesses match this process
pytestmark = pytest.mark.usefixtures("one_thread")




def write_recipe(path: Path, tokdir, sharddir, **over) -> Path:
    recipe = {"out_dir": str(path.parent / "run"), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
              "masking": "wwm", "seq_len": SEQ, "global_batch": 16, "micro_batch": 16, "lr": 3e-3,
              "warmup_steps": 5, "max_steps": 40, "log_every": 5, "eval_every": 10, "eval_batches": 4,
              "save_every": 15, "keep_last": 2, "seed": 7, "precision": "auto"}
    return save_recipe(path, {**recipe, **over})


def test_end_to_end_loss_falls_and_checkpoint_fills_masks(tmp_path, char_shards):
    from transformers import pipeline

    from zh_bert.train.pretrain import main

    tokdir, sharddir = char_shards
    recipe = write_recipe(tmp_path / "r.yaml", tokdir, sharddir)
    assert main([str(recipe)]) == 0
    run = tmp_path / "run"
    rows = metrics(run)
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_mlm_loss" in r]
    assert [r["step"] for r in train] == list(range(5, 41, 5))
    assert {"step", "loss", "mlm_acc", "lr", "tokens_per_s", "grad_norm", "tokens_seen"} <= set(train[0])
    assert [r["step"] for r in val] == [10, 20, 30, 40]
    losses = [r["val_mlm_loss"] for r in val]
    assert losses[-1] < losses[0] - 0.1 and losses[-1] == min(losses), losses     # validation loss falls
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert summary["steps"] == 40 and summary["tokens_seen"] == 40 * 16 * SEQ
    assert summary["hardware"]["precision"] in ("bf16", "fp32") and summary["hardware"]["processes"] == 1
    assert summary["hardware"]["malloc"].startswith(("glibc: mmap_threshold", "unchanged: "))
    assert summary["final_validation"]["mlm_acc"] > 20 / summary["model"]["vocab_size"]   # far above chance
    assert summary["parameters"] > 0 and summary["vocab"]["kind"] == "char"
    assert yaml.safe_load((run / "recipe.yaml").read_text())["max_steps"] == 40
    assert (run / "curves.png").stat().st_size > 10_000
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["step-0000030", "step-0000040"]
    final = run / "final"
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"} <= {
        p.name for p in final.iterdir()}
    fill = pipeline("fill-mask", model=str(final), tokenizer=str(final), device="cpu")
    preds = fill("中华人民共和国的首[MASK]是北京。", top_k=5)
    assert len(preds) == 5 and all(len(p["token_str"].strip()) >= 1 for p in preds)
    assert fill.tokenizer.convert_tokens_to_ids("中") != fill.tokenizer.unk_token_id


@pytest.mark.slow
def test_kill9_then_resume_auto_reproduces_losses(tmp_path, char_shards):
    """A real `zh-bert pretrain` process is killed with SIGKILL after its first checkpoint; `--resume auto`
    must then log exactly the per-step losses of an uninterrupted run (CPU, same seed, tolerance 1e-5)."""
    from zh_bert.train.pretrain import main

    tokdir, sharddir = char_shards
    common = dict(max_steps=14, save_every=4, log_every=1, eval_every=0, micro_batch=8, global_batch=16,
                  precision="fp32", keep_last=3)
    ref = write_recipe(tmp_path / "ref" / "r.yaml", tokdir, sharddir, **common)
    assert main([str(ref)]) == 0
    expected = {r["step"]: r["loss"] for r in metrics(tmp_path / "ref" / "run") if "loss" in r}
    assert sorted(expected) == list(range(1, 15))

    recipe = write_recipe(tmp_path / "killed" / "r.yaml", tokdir, sharddir, **common)
    run = tmp_path / "killed" / "run"
    cmd = [sys.executable, "-m", "zh_bert", "pretrain", str(recipe)]
    got = {r["step"]: r["loss"] for r in kill_then_resume(cmd, run, ONE_THREAD, REPO, last_step=14)}
    assert sorted(got) == list(range(1, 15)), "each step logged exactly once after resume"
    diffs = {s: abs(got[s] - expected[s]) for s in expected}
    assert max(diffs.values()) <= 1e-5, diffs


def test_accumulation_4x8_equals_1x32(char_shards):
    """One optimizer step on 32 sequences as 4 micro-batches of 8 equals one batch of 32: the loss is
    normalised by the masked-token count of the whole global batch. Tolerance: 1e-6 on every parameter
    (fp32 summation order only)."""
    from transformers import BertForMaskedLM

    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig
    from zh_bert.train.arch.bert import build_config
    from zh_bert.train.model import PretrainModel
    from zh_bert.train.training import StepStats, lr_lambda, make_accelerator, make_optimizer, train_step
    from zh_bert.train.recipe import Recipe
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    tokdir, sharddir = char_shards
    ds = ShardDataset(sharddir, "train")
    loader = iter(ShardLoader(ds, 8, MaskingConfig(strategy="wwm"), seed=3))
    micro = [next(loader) for _ in range(4)]
    whole = {k: torch.cat([m[k] for m in micro]) for k in micro[0]}
    torch.manual_seed(0)
    cfg = build_config("tiny", len(load_tokenizer(tokdir)), dropout=0.0)
    base = PretrainModel(BertForMaskedLM(cfg))
    acc = make_accelerator("fp32", cpu=True)   # an earlier in-process run may have left bf16 in Accelerate's state
    params = {}
    for name, batches, mb in (("4x8", micro, 8), ("1x32", [whole], 32)):
        recipe = Recipe(lr=1e-3, warmup_steps=0, max_steps=10, global_batch=32, micro_batch=mb)
        model = copy.deepcopy(base)
        opt, _ = make_optimizer(model, recipe)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(recipe))
        stats = StepStats()
        train_step(model, opt, sched, acc, batches, recipe, stats)
        params[name] = {k: v.detach().clone() for k, v in model.named_parameters()}
        params[name + "_loss"] = float(stats.loss) / stats.masked
    assert abs(params["4x8_loss"] - params["1x32_loss"]) < 1e-5
    worst = max((params["4x8"][k] - params["1x32"][k]).abs().max().item() for k in params["4x8"])
    moved = max((params["4x8"][k] - base.state_dict()[k]).abs().max().item() for k in params["4x8"])
    assert moved > 1e-4 and worst <= 1e-6, (worst, moved)


def test_checkpoint_with_other_vocab_size_is_refused(tiny_model_dir, char_shards):
    from zh_bert.train.model import load_init
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    tok = load_tokenizer(char_shards[0])
    with pytest.raises(ZhBertError) as e:
        load_init(tiny_model_dir, tok, "mlm", SEQ)
    msg = str(e.value)
    assert "vocab_size 21128" in msg and f"{len(tok)} tokens" in msg and str(tiny_model_dir) in msg


def test_vocab_extension_grows_embeddings_from_known_characters(tmp_path, tiny_model_dir):
    """A tokenizer = the checkpoint's 21,128 tokens + new ones: embeddings are resized, a new word starts
    at the mean of its characters' rows, the output stays tied and the result is a stock checkpoint."""
    from transformers import BertForMaskedLM, BertTokenizer

    from zh_bert.core.fileio import read_vocab_txt, write_vocab_txt
    from zh_bert.train.model import load_init

    tokens = read_vocab_txt(tiny_model_dir / "vocab.txt") + ["新冠", "𠮷"]
    write_vocab_txt(tmp_path / "vocab.txt", tokens)
    tok = BertTokenizer(vocab=str(tmp_path / "vocab.txt"))
    assert len(tok) == 21130
    old = BertForMaskedLM.from_pretrained(str(tiny_model_dir)).bert.embeddings.word_embeddings.weight
    model = load_init(tiny_model_dir, tok, "mlm", SEQ)
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == 21130 and model.config.vocab_size == 21130
    assert torch.equal(emb[:21128], old)
    want = (old[tok.convert_tokens_to_ids("新")] + old[tok.convert_tokens_to_ids("冠")]) / 2
    assert torch.allclose(emb[21128], want, atol=1e-6)
    assert torch.allclose(emb[21129], old.mean(0), atol=1e-6)
    assert model.cls.predictions.decoder.weight.data_ptr() == emb.data_ptr()
    model.save_pretrained(str(tmp_path / "ext"))
    assert BertForMaskedLM.from_pretrained(str(tmp_path / "ext")).config.vocab_size == 21130


def test_global_batch_must_divide_over_processes(tmp_path, char_shards):
    from zh_bert.train.pretrain import main

    tokdir, sharddir = char_shards
    with pytest.raises(ZhBertError, match="global_batch 24 is not a multiple of micro_batch 16"):
        main([str(write_recipe(tmp_path / "r.yaml", tokdir, sharddir)), "--set", "global_batch=24"])


def test_shards_of_another_tokenizer_are_refused(tmp_path, char_shards, google_tokdir):
    from zh_bert.train.pretrain import main

    tokdir, sharddir = char_shards
    recipe = write_recipe(tmp_path / "r.yaml", google_tokdir, sharddir)
    with pytest.raises(ZhBertError, match="fingerprint"):
        main([str(recipe)])


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_143(tmp_path, char_shards):
    tokdir, sharddir = char_shards
    recipe = write_recipe(tmp_path / "r.yaml", tokdir, sharddir, max_steps=100_000, save_every=0, log_every=1,
                          eval_every=0, micro_batch=8, global_batch=8, precision="fp32")
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "zh_bert", "pretrain", str(recipe)], cwd=REPO, env=ONE_THREAD,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= 2):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-2000:]   # not finished: `pretrain R && publish R` stops here
    assert "SIGTERM: saved" in out and "--resume auto" in out
    (ckpt,) = (run / "checkpoints").iterdir()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert ckpt.name == f"step-{state['step']:07d}" and state["step"] >= 2
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert json.loads((run / "run.json").read_text())["signal"] == "SIGTERM"


def test_metrics_log_on_resume_keeps_the_lines_up_to_the_checkpoint(tmp_path):
    """A killed run may have logged steps after its last checkpoint (and a line cut by the kill): on resume
    they are dropped, to be logged again; a fresh run starts an empty file; other processes write nothing."""
    from zh_bert.core.fileio import claim_dir
    from zh_bert.train.training_run import MetricsLog

    claim_dir(tmp_path)   # what pretrain's out_dir check does before a run writes into its folder
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 6)) + '{"step": 6, "lo',
                    encoding="utf-8")
    log = MetricsLog(tmp_path, enabled=True, resume_step=3)
    log.write({"step": 4, "loss": 0.3})
    log.close()
    assert [r["step"] for r in metrics(tmp_path)] == [1, 2, 3, 4]
    MetricsLog(tmp_path, enabled=True, resume_step=None).close()
    assert path.read_text(encoding="utf-8") == ""
    quiet = MetricsLog(tmp_path / "rank1", enabled=False, resume_step=None)
    quiet.write({"step": 1, "loss": 1.0})
    quiet.close()
    assert not (tmp_path / "rank1").exists()


def test_curves_of_a_run_named_in_chinese_plot_without_missing_glyph_warnings(tmp_path):
    """out_dir 中文实验 puts Chinese in curves.png's title: without a CJK font matplotlib warned 'Glyph ... missing
    from font' once per character at the end of every such run; now a CJK font is used if installed, else quiet."""
    import warnings

    from zh_bert.train.curves import plot_curves

    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 9.0 - s, "mlm_acc": 0.1 * s, "lr": 1e-4}) + "\n"
                           for s in (1, 2, 3)), encoding="utf-8")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        plot_curves(log, tmp_path / "curves.png", title="中文实验: tiny mlm")
    assert not [str(w.message) for w in seen if "missing from" in str(w.message)]
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_the_training_loop_fits_on_a_screen():
    import inspect

    from zh_bert.train.training import fit

    assert len(inspect.getsource(fit).splitlines()) <= 80


def test_sentence_order_objective_trains_and_needs_matching_shards(tmp_path, char_shards, sample_jsonl, build_shards):
    """mlm+sop on `--pairs sop` shards logs the pair loss and accuracy; mlm+nsp on the same shards is refused
    before training, naming the flag that builds the right ones."""
    from zh_bert.train.pretrain import main

    tokdir, _ = char_shards
    sop = build_shards(sample_jsonl, tokdir, "--seq-len", str(SEQ), "--valid-docs", "40", "--pairs", "sop")
    recipe = write_recipe(tmp_path / "r.yaml", tokdir, sop, objective="mlm+sop", max_steps=4, log_every=2,
                          eval_every=0, save_every=0, precision="fp32")
    assert main([str(recipe)]) == 0
    rows = [r for r in metrics(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in rows] == [2, 4] and all(0 <= r["nsp_acc"] <= 1 and r["nsp_loss"] > 0 for r in rows)
    with pytest.raises(ZhBertError, match="needs shards built with --pairs nsp"):
        main([str(recipe), "--set", "objective=mlm+nsp", "--set", f"out_dir={tmp_path / 'run2'}"])


def test_openmp_threads_spin_only_when_the_machine_is_idle(tmp_path, monkeypatch):
    """ACTIVE (spinning) OpenMP threads are ~25% faster alone and ~40% slower beside one busy process: pretrain
    picks from /proc/loadavg's runnable count, tolerates a kernel thread's blip, and never spins for N processes."""
    from zh_bert.core.hardware import omp_wait_policy

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loadavg = tmp_path / "loadavg"

    def policy(running: int) -> str:
        loadavg.write_text(f"0.50 0.40 0.30 {running}/80 12345\n", encoding="ascii")
        return omp_wait_policy(str(loadavg), samples=3, interval=0)

    assert policy(1) == "ACTIVE"        # only the reader runs
    assert policy(2) == "PASSIVE"       # another task is runnable in every sample
    assert omp_wait_policy(str(tmp_path / "missing"), samples=1) == "PASSIVE"   # no /proc: the safe choice
    loadavg.write_text("garbage\n", encoding="ascii")
    assert omp_wait_policy(str(loadavg), samples=1) == "PASSIVE"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert policy(1) == "PASSIVE"       # several processes share the cores

    import zh_bert.core.hardware as hardware
    reads = iter(["2", "1", "1", "1", "1", "1"])
    monkeypatch.delenv("WORLD_SIZE")
    real_open = open

    def blip_open(path, *a, **k):        # one sample of six sees a kernel thread
        if path == "blip":
            return io.StringIO(f"0 0 0 {next(reads)}/80 1\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr(hardware, "open", blip_open, raising=False)
    assert omp_wait_policy("blip", samples=6, interval=0) == "ACTIVE"
    monkeypatch.setenv("WORLD_SIZE", "two")   # not a number: the safe choice, not a traceback
    assert policy(1) == "PASSIVE"


_FAULTS = """
import resource, sys, torch
from zh_bert.core.hardware import keep_freed_memory
said = keep_freed_memory() if sys.argv[1] == "kept" else "default"
torch.ones(1).add_(1)   # warm up
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for step in range(40):  # the MLM head's buffers in a step: logits, log-softmax, their gradients; then freed
    n = 500 + step % 7  # masked tokens per step vary
    bufs = [torch.empty(n, 8000).fill_(1.0) for _ in range(4)]
    del bufs
print(said, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.slow
def test_freed_step_buffers_are_reused_without_page_faults():
    """The 16 MB logits of every `tiny-cpu` step came back from the kernel, page by page, each step (faults: a
    few % to 15% of the step); with keep_freed_memory the process reuses them. A user's malloc settings win."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    runs = {}
    for mode in ("default", "kept"):
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, env=env,
                             check=True).stdout.split()
        runs[mode] = (out[0] if mode == "default" else " ".join(out[:-1]), int(out[-1]))
    pages = 40 * 4 * 500 * 8000 * 4 // 4096
    assert runs["kept"][0] == "glibc: mmap_threshold 32 MiB, no trim"
    assert runs["kept"][1] < pages // 10 < runs["default"][1], runs   # measured: 35k vs 487k of 625k
    out = subprocess.run([sys.executable, "-c", _FAULTS, "kept"], capture_output=True, text=True, check=True,
                         env={**env, "MALLOC_MMAP_THRESHOLD_": "131072"}).stdout
    assert out.startswith("unchanged: set by the environment"), out


# ------------------------------------------------------------------------------------------------ out_dir ownership

def _hashes(root: Path) -> dict:
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _refused(argv: list[str], capsys, says: str) -> str:
    from zh_bert.cli import main

    capsys.readouterr()
    assert main(["pretrain", *argv]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(err) == 1 and err[0].startswith("zh-bert pretrain: error: ") and says in err[0], err
    return err[0]


def test_out_dir_ownership_user_files_and_inputs_survive(tmp_path, char_shards, monkeypatch, capsys):
    """pretrain writes only into a new, empty or own run dir: never the current directory, never a folder with
    the user's files (named in the one line), never an input; every refusal leaves every byte as it was."""
    tokdir, sharddir = char_shards
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("我的笔记\n", encoding="utf-8")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n', encoding="utf-8")   # the user's own
    (tmp_path / "a_file").write_text("文件\n", encoding="utf-8")
    recipe = write_recipe(tmp_path / "r.yaml", tokdir, sharddir, max_steps=2, save_every=0, eval_every=0)
    before = {d: _hashes(d) for d in (tmp_path, Path(tokdir), Path(sharddir))}
    monkeypatch.chdir(work)
    for out, says in [("", "is the current directory"), (".", "is the current directory"),
                      ("..", "is the current directory or above it"), (str(mine), "metrics.jsonl"),
                      (str(sharddir), "overlap"), (str(tokdir), "overlap"), (str(Path(sharddir) / "run"), "overlap"),
                      (str(tmp_path / "a_file"), "is not a directory"), ("/proc/x", "cannot create")]:
        _refused([str(recipe), "--set", f"out_dir={out}"], capsys, says)
    _refused([str(recipe), "--set", f"out_dir={tmp_path / 'cache' / 'run'}", "--set",
              f"data_cache={tmp_path / 'cache'}"], capsys, "is inside the input directory")
    _refused([str(recipe), "--set", f"out_dir={Path(tokdir).parent}"], capsys, "overlap")   # an input inside it
    assert {d: _hashes(d) for d in (tmp_path, Path(tokdir), Path(sharddir))} == before


def test_out_dir_own_run_dir_is_reused_resumed_and_a_failed_start_leaves_nothing(tmp_path, char_shards, capsys):
    """The README's command twice: the second is refused without writing (its checkpoints are there: resume
    or choose another out_dir); --resume auto continues in it; a folder with only the marker (killed before
    its first checkpoint) is the run's own; a start that fails in a new out_dir leaves no folder behind."""
    from zh_bert.cli import main

    tokdir, sharddir = char_shards
    run = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tokdir, sharddir, max_steps=2, save_every=0, eval_every=0)
    assert main(["pretrain", str(recipe)]) == 0
    assert (run / "recipe.yaml").read_text(encoding="utf-8").startswith("# written by zh-bert pretrain")
    (run / "eval_results.json").write_text("[]\n", encoding="utf-8")     # what eval/finetune add to a run dir
    done = _hashes(run)
    _refused([str(recipe)], capsys, "--resume auto")
    assert _hashes(run) == done
    assert main(["pretrain", str(recipe), "--set", "max_steps=3", "--resume", "auto"]) == 0
    assert json.loads((run / "run.json").read_text(encoding="utf-8"))["steps"] == 3
    (run / "thesis.tex").write_text("论文\n", encoding="utf-8")
    _refused([str(recipe), "--set", "max_steps=4", "--resume", "auto"], capsys, "thesis.tex")
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "recipe.yaml").write_text((run / "recipe.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (killed / "data").mkdir()
    assert main(["pretrain", str(recipe), "--set", f"out_dir={killed}"]) == 0
    _refused([str(recipe), "--set", f"out_dir={tmp_path / 'new' / 'run'}", "--set", "seq_len=32"], capsys,
             "seq_len 32 in the recipe")
    assert not (tmp_path / "new").exists()


def test_out_dir_on_a_read_only_mount_is_one_line_and_writes_nothing(tmp_path, char_shards, capsys):
    """A real read-only file system (tmpfs mounted ro; root ignores a read-only mode bit): the folder itself
    and a new folder inside it are both one line, exit 2."""
    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        recipe = write_recipe(tmp_path / "r.yaml", *char_shards, max_steps=2)
        _refused([str(recipe), "--set", f"out_dir={ro}"], capsys, "Read-only file system")
        _refused([str(recipe), "--set", f"out_dir={ro / 'run'}"], capsys, "cannot create it (Read-only file system)")
        assert not list(ro.iterdir())
