"""`zh-bert publish` against a live Hub-compatible server on 127.0.0.1 (tests/hub_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _hub_helpers import OTHER_TOKEN, SECRET, TOKEN
from hub_server import free_port
from zh_bert.cli import main
from zh_bert.release.publish import MODEL_FILES, PUBLISHED_RUN_FILES

ALLOWED = set(MODEL_FILES) | set(PUBLISHED_RUN_FILES) | {"README.md", ".gitattributes"}


def publish(capsys, *args) -> tuple[int, str, str]:
    rc = main(["publish", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_dry_run_stages_only_the_allow_list(run_dir, tmp_path, capsys):
    from huggingface_hub import ModelCard

    rc, out, err = publish(capsys, run_dir, "--repo-id", "zh-org/tiny-zh", "--dry-run", "-o", tmp_path / "staged")
    assert rc == 0, err
    staged = {p.name for p in (tmp_path / "staged").iterdir()}
    assert staged == {"README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                      "vocab.txt", "zh_bert_vocab.json", "recipe.yaml", "metrics.jsonl", "curves.png", "run.json",
                      "eval_results.json", ".zh-bert-manifest.json"}   # the layer's proof that zh-bert wrote it
    assert "optimizer.pt" in out and ".env" in out  # reported as left out
    for p in (tmp_path / "staged").iterdir():
        assert SECRET.encode() not in p.read_bytes()

    card = ModelCard.load(tmp_path / "staged" / "README.md")
    data = card.data.to_dict()
    assert data["language"] == "zh" and data["license"] == "apache-2.0"
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "fill-mask"
    assert "zh-bert" in data["tags"] and data["datasets"] == ["zhwiki_sampled", "CLUECorpusSmall_sampled"]
    assert "[MASK]" in data["widget"][0]["text"] and "北京" in data["widget"][0]["text"]
    results = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert results == {("seamew/ChnSentiCorp", "accuracy"): 0.66, ("zh-cloze", "top-1 accuracy"): 0.05}  # newest wins,
    # ChnSentiCorp named as its task declares it (the Hub dataset id)
    body = card.text
    for needle in ("3,120,000", "char, 21,128", "strategy=wwm", "40,960", "1 min 35 s", "cpu, 1 process",
                   "precision fp32 (requested auto)", "cleaning kept 870 of 1,000 documents (412,000 characters)",
                   "filtered out: too_short 90, not_chinese 28", "4,000 train sequences", "9.8100", "0.0210",
                   'pipeline("fill-mask"', "## Limitations", "neighbour attention"):
        assert needle in body, needle


def test_bare_model_folder_card(tiny_model_dir, tmp_path, capsys):
    """Any stock BERT folder publishes: the card falls back to config + safetensors header numbers."""
    from huggingface_hub import ModelCard

    rc, _, err = publish(capsys, tiny_model_dir, "--repo-id", "alice/bare", "--dry-run", "-o", tmp_path / "s")
    assert rc == 0, err
    card = ModelCard.load(tmp_path / "s" / "README.md")
    from transformers import AutoModelForMaskedLM

    n = AutoModelForMaskedLM.from_pretrained(str(tiny_model_dir)).num_parameters()  # tied weights once
    assert f"{n:,}" in card.text and card.data.pipeline_tag == "fill-mask"


def test_publish_upload_never_leaks(run_dir, hub, online, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    rc, out, err = publish(capsys, run_dir, "--repo-id", "zh-org/tiny-zh", "--endpoint", hub.url)
    assert rc == 0, err
    assert TOKEN not in out + err
    paths = hub.uploaded_paths("zh-org/tiny-zh")
    assert paths <= ALLOWED, paths - ALLOWED
    assert {"model.safetensors", "README.md", "vocab.txt", "curves.png"} <= paths
    for data in hub.repos["zh-org/tiny-zh"].files("main").values():
        assert SECRET.encode() not in data and TOKEN.encode() not in data
    commits = [c for c in hub.repos["zh-org/tiny-zh"].commits.values() if c["message"] != "initial commit"]
    assert len(commits) == 1  # one commit

    # an intermediate checkpoint to a branch; tokenizer files come from the run's final/
    rc, _, err = publish(capsys, run_dir / "checkpoints" / "step-0000010", "--repo-id", "zh-org/tiny-zh",
                         "--endpoint", hub.url, "--revision", "step-10")
    assert rc == 0, err
    repo = hub.repos["zh-org/tiny-zh"]
    assert {"model.safetensors", "vocab.txt", "README.md"} <= set(repo.files("step-10"))
    assert hub.uploaded_paths("zh-org/tiny-zh") <= ALLOWED
    out = tmp_path / "step-10"
    assert main(["download", "zh-org/tiny-zh", "--revision", "step-10", "-o", str(out), "--endpoint", hub.url,
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    assert (out / "model.safetensors").read_bytes() == (run_dir / "checkpoints" / "step-0000010" /
                                                        "model.safetensors").read_bytes()

    # `zh-bert models --community` finds it by its zh-bert tag
    assert main(["models", "--community", "--endpoint", hub.url]) == 0
    assert "zh-org/tiny-zh" in capsys.readouterr().out


def test_publish_retries_transient_errors(run_dir, hub, online, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr("zh_bert.release.publish.RETRY_BACKOFF_S", 0.05)
    hub.fail_next[:] = [503, 502]
    rc, out, err = publish(capsys, run_dir, "--repo-id", "alice/retried", "--endpoint", hub.url)
    assert rc == 0, err
    assert "retrying" in out and not hub.fail_next
    assert "model.safetensors" in hub.repos["alice/retried"].files("main")


@pytest.mark.parametrize("case", ["no-token", "bad-token", "not-ours", "network-down", "no-weights", "bad-repo-id"])
def test_publish_failures_are_one_clear_line(case, run_dir, hub, online, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login
    src, repo, endpoint = run_dir, "zh-org/fail", hub.url
    expect = ""
    if case == "no-token":
        monkeypatch.delenv("HF_TOKEN")
        expect = "no Hugging Face token"
    elif case == "bad-token":
        monkeypatch.setenv("HF_TOKEN", "hf_wrong_token_value_123")
        expect = "HTTP 401"
    elif case == "not-ours":
        monkeypatch.setenv("HF_TOKEN", OTHER_TOKEN)
        expect = "namespace 'zh-org' is not yours"
    elif case == "network-down":
        endpoint = f"http://127.0.0.1:{free_port()}"
        expect = "cannot reach"
    elif case == "no-weights":
        src = tmp_path / "m"
        src.mkdir()
        (src / "config.json").write_text("{}")
        (src / "pytorch_model.bin").write_bytes(b"x")
        expect = "no safetensors weights"
    elif case == "bad-repo-id":
        repo = "no-namespace"
        expect = "expected ORG/NAME"
    rc, out, err = publish(capsys, src, "--repo-id", repo, "--endpoint", endpoint)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zh-bert publish: error:") and expect in lines[0], err
    assert "Traceback" not in err
    for tok in (TOKEN, OTHER_TOKEN, "hf_wrong_token_value_123"):
        assert tok not in out + err
    assert "zh-org/fail" not in hub.repos


def test_secret_in_allowed_file_is_refused(run_dir, tmp_path, hub, online, monkeypatch, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "recipe.yaml").write_text(f"hub_token: {TOKEN}\n")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    rc, out, err = publish(capsys, run, "--repo-id", "alice/leaky", "--endpoint", hub.url)
    assert rc == 2 and "recipe.yaml: contains your Hugging Face token" in err
    assert TOKEN not in out + err and "alice/leaky" not in hub.repos
    assert not list(scratch.iterdir())  # the staged copy holding the token is gone too


def test_private_repo(run_dir, hub, online, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    rc, _, err = publish(capsys, run_dir, "--repo-id", "alice/secret-model", "--endpoint", hub.url, "--private")
    assert rc == 0, err
    assert hub.repos["alice/secret-model"].private
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    rc = main(["download", "alice/secret-model", "-o", str(tmp_path / "x"), "--endpoint", hub.url,
               "--cache-dir", str(tmp_path / "c")])
    assert rc == 2 and "repository not found" in capsys.readouterr().err


def test_python_api_validates_like_the_cli(run_dir):
    from zh_bert.core.errors import ZhBertError
    from zh_bert.release.publish import PublishConfig

    with pytest.raises(ZhBertError, match="--repo-id 'no-namespace': expected ORG/NAME"):
        PublishConfig(source=str(run_dir), repo_id="no-namespace")
    with pytest.raises(ZhBertError, match="-o/--output is for --dry-run"):
        PublishConfig(source=str(run_dir), repo_id="a/b", output="staged")
    assert PublishConfig(source=str(run_dir), repo_id="a/b").license == "apache-2.0"


def test_run_dir_resolution(run_dir, tiny_model_dir, tmp_path):
    """A run dir means its final/; a checkpoint inside a run knows its run; a bare folder has none."""
    from zh_bert.core.errors import ZhBertError
    from zh_bert.train.rundir import find_run_dir, locate, model_dir

    assert locate(run_dir).model_dir == run_dir / "final" and locate(run_dir).run_dir == run_dir.resolve()
    step = run_dir / "checkpoints" / "step-0000010"
    assert locate(step).model_dir == step and locate(step).run_dir == run_dir.resolve()
    assert find_run_dir(run_dir / "final") == run_dir.resolve()
    assert locate(tiny_model_dir).run_dir is None
    with pytest.raises(ZhBertError, match="no such checkpoint"):
        model_dir(tmp_path / "nope")
    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoints" / "step-0000001").mkdir(parents=True)
    (unfinished / "recipe.yaml").write_text("seed: 0\n")
    with pytest.raises(ZhBertError, match="run dir has no final/ model yet; use one of .*checkpoints/step-"):
        model_dir(unfinished)
    with pytest.raises(ZhBertError, match="not a checkpoint"):
        model_dir(tmp_path)


def test_symlinked_vocab_inside_the_folder_is_staged_as_a_file(tiny_model_dir, tmp_path, capsys):
    """vocab.txt linking to tokenizer/vocab.txt in the same folder: the content is staged as vocab.txt, not
    reported as 'not on the allow-list' and silently dropped. A link to a file whose own name is not on the
    allow-list is refused by name (a link must not smuggle a .env out under an allowed name)."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "tokenizer").mkdir()
    (model / "vocab.txt").rename(model / "tokenizer" / "vocab.txt")
    (model / "vocab.txt").symlink_to(Path("tokenizer") / "vocab.txt")
    rc, out, err = publish(capsys, model, "--repo-id", "alice/linked", "--dry-run", "-o", tmp_path / "s")
    assert rc == 0, err
    staged = tmp_path / "s" / "vocab.txt"
    assert not staged.is_symlink() and staged.read_bytes() == (tiny_model_dir / "vocab.txt").read_bytes()
    assert "  vocab.txt" in out.splitlines() and "left out: tokenizer/" in out
    (model / "notes.txt").write_text("私人笔记\n", encoding="utf-8")
    (model / "tokenizer.json").unlink()
    (model / "tokenizer.json").symlink_to("notes.txt")
    rc, out, err = publish(capsys, model, "--repo-id", "alice/linked", "--dry-run", "-o", tmp_path / "s2")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "tokenizer.json: is a symlink to notes.txt (not an allow-listed file)" in err
    assert not (tmp_path / "s2").exists()


@pytest.mark.parametrize("where", ["outside", "broken"])
def test_symlink_out_of_the_folder_is_refused_by_name(where, tiny_model_dir, tmp_path, scratch, capsys):
    """A vocab.txt linking out of the model folder (or to nothing) is never followed: one line that says it
    is a symlink and where it points; nothing staged."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    elsewhere = tmp_path / "elsewhere" / "vocab.txt"
    elsewhere.parent.mkdir()
    if where == "outside":
        shutil.copy(model / "vocab.txt", elsewhere)
    (model / "vocab.txt").unlink()
    (model / "vocab.txt").symlink_to(elsewhere)
    rc, out, err = publish(capsys, model, "--repo-id", "alice/linked", "--dry-run", "-o", tmp_path / "s")
    lines = err.strip().splitlines()
    want = f"{model / 'vocab.txt'}: is a symlink to {elsewhere} ({'outside ' + str(model) if where == 'outside' else 'to nothing'})"
    assert rc == 2 and len(lines) == 1 and want in lines[0], err
    assert not (tmp_path / "s").exists() and not list(scratch.iterdir())


# --- nothing leaked, nothing half-staged -----------------------------------------------------------------

@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The system temp dir, redirected so a staged copy left anywhere in it shows."""
    d = tmp_path / "scratch"
    d.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(d))
    return d


def _leaky_run(run_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "metrics.jsonl").write_text(f'{{"step": 1, "note": "token {TOKEN}"}}\n')
    return run


def _token_copies(root) -> list:
    return [p for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]


@pytest.mark.parametrize("with_output", [True, False])
def test_dry_run_refuses_a_file_holding_the_token(with_output, run_dir, tmp_path, scratch, monkeypatch, capsys):
    """A dry run checks for the token too (when one is set), before copying anything: no staged copy anywhere."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    run = _leaky_run(run_dir, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    args = ["--dry-run"] + (["-o", out / "staged"] if with_output else [])
    rc, stdout, err = publish(capsys, run, "--repo-id", "alice/leaky", *args)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "metrics.jsonl: contains your Hugging Face token" in lines[0], err
    assert TOKEN not in stdout + err
    assert not list(out.iterdir()) and not list(scratch.iterdir())
    assert _token_copies(tmp_path) == [run / "metrics.jsonl"]  # the source only


def test_token_in_weights_metadata_is_refused(tiny_model_dir, tmp_path, scratch, monkeypatch, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    save_file(load_file(str(model / "model.safetensors")), str(model / "model.safetensors"),
              metadata={"format": "pt", "note": TOKEN})
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    rc, out, err = publish(capsys, model, "--repo-id", "alice/x", "--dry-run", "-o", tmp_path / "staged")
    assert rc == 2 and "model.safetensors: contains your Hugging Face token" in err and TOKEN not in out + err
    assert not (tmp_path / "staged").exists() and not list(scratch.iterdir())


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("with_output", [True, False])
def test_staging_is_removed_on_every_exit(failure, with_output, run_dir, tmp_path, scratch, monkeypatch):
    """Ctrl-C or a crash while the card is written (after the weights were copied): no staged folder remains."""
    from zh_bert.release.publish import PublishConfig
    from zh_bert.release.publish import publish as run_publish

    def boom(*a, **k):
        raise failure("stop")

    monkeypatch.setattr("zh_bert.release.publish.build_card", boom)
    out = tmp_path / "out"
    out.mkdir()
    cfg = PublishConfig(source=str(run_dir), repo_id="alice/x", dry_run=True,
                        output=str(out / "staged") if with_output else None)
    with pytest.raises(failure):
        run_publish(cfg)
    assert not list(out.iterdir()) and not list(scratch.iterdir())


def test_upload_failure_removes_the_staged_copy(run_dir, hub, online, scratch, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("zh_bert.release.publish.upload", boom)
    rc, _, _ = publish(capsys, run_dir, "--repo-id", "alice/interrupted", "--endpoint", hub.url)
    assert rc == 130 and not list(scratch.iterdir())


def test_full_disk_while_staging_is_one_line(run_dir, tmp_path, scratch, monkeypatch, capsys):
    import errno

    from zh_bert.release import publish as publish_module

    real = publish_module.copy_file

    def full(src, dst, *a, **k):
        if str(dst).endswith("model.safetensors"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr("zh_bert.release.publish.copy_file", full)
    out = tmp_path / "out"
    out.mkdir()
    rc, _, err = publish(capsys, run_dir, "--repo-id", "alice/x", "--dry-run", "-o", out / "staged")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"{out / 'staged' / 'model.safetensors'}: cannot write (No space left on device)" in lines[0]
    assert not list(out.iterdir()) and not list(scratch.iterdir())


def test_killed_staging_is_cleaned_by_the_next_run(run_dir, tmp_path):
    """kill -9 right after staging (test hook): the copy sits in the temp dir under this process id; the next
    publish removes it. With -o, nothing appears under the -o name."""
    import os
    import subprocess
    import sys

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "ZH_BERT_FAULT": "after:staged"}
    env.pop("HF_TOKEN", None)
    cmd = [sys.executable, "-m", "zh_bert", "publish", str(run_dir), "--repo-id", "alice/x", "--dry-run"]
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert r.returncode == -9, r.stderr
    left = list(scratch.iterdir())
    assert len(left) == 1 and left[0].name.startswith("zh-bert-publish-")
    r = subprocess.run(cmd + ["-o", str(tmp_path / "staged")], env=env, capture_output=True, timeout=120)
    assert r.returncode == -9 and not (tmp_path / "staged").exists()  # only a hidden temp name beside it
    env.pop("ZH_BERT_FAULT")
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not list(scratch.iterdir())


def test_published_run_files_hold_no_absolute_paths(run_dir, tmp_path, capsys):
    import json
    import shutil

    import yaml

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    info = json.loads((run / "run.json").read_text())
    info["vocab"]["tokenizer"] = str(run.resolve() / "data" / "abc" / "tokenizer")
    info["data"]["sharddir"] = str(run.resolve() / "data" / "abc" / "shards")
    info["data"]["shard_meta"]["tokenizer"] = "/home/alice/private/corpora/tok"
    info["data"]["shard_meta"]["sources"][0]["path"] = "/home/alice/private/corpora/zhwiki.txt"
    info["hardware"]["warnings"] = ["cache at /home/alice/.cache/zh-bert is on a slow disk"]
    (run / "run.json").write_text(json.dumps(info))
    (run / "recipe.yaml").write_text(f"out_dir: {run.resolve()}\ndata:\n  - /home/alice/private/corpora/zhwiki.txt\n"
                                     f"  - corpora/sample/CLUECorpusSmall_sampled.txt\nmodel: tiny\n"
                                     f"hub: https://huggingface.co/alice\n")
    rc, _, err = publish(capsys, run, "--repo-id", "alice/tiny", "--dry-run", "-o", tmp_path / "staged")
    assert rc == 0, err
    staged = tmp_path / "staged"
    for p in staged.iterdir():
        if p.suffix in (".json", ".yaml", ".md", ".jsonl"):
            text = p.read_text(encoding="utf-8")
            assert "/home/alice" not in text and str(tmp_path) not in text, p.name
    got = json.loads((staged / "run.json").read_text())
    assert got["vocab"]["tokenizer"] == "data/abc/tokenizer" and got["data"]["sharddir"] == "data/abc/shards"
    assert got["data"]["shard_meta"]["sources"][0]["path"] == "zhwiki.txt"
    assert got["hardware"]["warnings"] == ["cache at zh-bert is on a slow disk"]
    recipe = yaml.safe_load((staged / "recipe.yaml").read_text())
    assert recipe == {"out_dir": ".", "data": ["zhwiki.txt", "corpora/sample/CLUECorpusSmall_sampled.txt"],
                      "model": "tiny", "hub": "https://huggingface.co/alice"}
    assert "zhwiki" in (staged / "README.md").read_text()
    assert (run / "run.json").read_text() == json.dumps(info)  # the run dir itself is untouched
