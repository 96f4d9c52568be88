"""`zh-bert download`: publish -> download round trips through the test Hub and through `olah` (a real HF
mirror serving a local git repo), pickle-only repos, offline cache, ModelScope's HTTP API; all on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _hub_helpers import TOKEN, top5
from hub_server import free_port, modelscope_server, serving
from zh_bert.cli import main

REPO_ID = "zh-org/tiny-roundtrip"


@pytest.fixture(scope="module")
def published(run_dir, hub, tmp_path_factory):
    """The run dir published once to the test Hub."""
    import huggingface_hub.constants as C

    old = (C.HF_HUB_OFFLINE, os.environ.get("HF_TOKEN"))
    C.HF_HUB_OFFLINE = False
    os.environ["HF_TOKEN"] = TOKEN
    try:
        assert main(["publish", str(run_dir), "--repo-id", REPO_ID, "--endpoint", hub.url]) == 0
    finally:
        C.HF_HUB_OFFLINE = old[0]
        if old[1] is None:
            os.environ.pop("HF_TOKEN", None)
        else:
            os.environ["HF_TOKEN"] = old[1]
    return REPO_ID


@pytest.fixture(scope="module")
def olah(hub, published, tmp_path_factory):
    """`olah-cli` as a real subprocess serving the published repo from a local git repository."""
    if shutil.which("olah-cli") is None:
        if os.environ.get("CI"):
            pytest.fail("olah-cli not installed (pip install olah)")
        pytest.skip("olah-cli not installed")
    root = tmp_path_factory.mktemp("olah")
    hub.export_git(published, root / "mirrors" / "models" / published)
    port = free_port()
    (root / "olah.toml").write_text(
        f'[basic]\nhost = "127.0.0.1"\nport = {port}\nrepos-path = "{root / "repos"}"\n'
        f'mirrors-path = ["{root / "mirrors"}"]\nmirror-scheme = "http"\n'
        f'mirror-netloc = "127.0.0.1:{port}"\nmirror-lfs-netloc = "127.0.0.1:{port}"\n'
        f'[accessibility]\noffline = true\n')
    url = f"http://127.0.0.1:{port}"
    with serving(["olah-cli", "-c", str(root / "olah.toml")], f"{url}/api/models/{published}/revision/main",
                 root / "olah.log", timeout=30, cwd=root):
        yield url


def download(*args) -> int:
    return main(["download", *map(str, args)])


def test_roundtrip_through_test_hub_same_top5(published, hub, run_dir, online, tmp_path):
    out = tmp_path / "dl"
    assert download(published, "-o", out, "--endpoint", hub.url, "--cache-dir", tmp_path / "cache") == 0
    names = {p.name for p in out.iterdir()}
    assert names == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                     "zh_bert_vocab.json", ".zh-bert-download.json",
                     ".zh-bert-manifest.json"}  # what inference needs, the marker and the layer's manifest
    assert (out / "vocab.txt").read_bytes() == (run_dir / "final" / "vocab.txt").read_bytes()
    original = top5(run_dir / "final")
    assert len(original) == 5 and top5(out) == original

    # offline afterwards: the cache answers
    import huggingface_hub.constants as C

    C.HF_HUB_OFFLINE = True
    assert download(published, "-o", tmp_path / "dl2", "--endpoint", hub.url, "--cache-dir", tmp_path / "cache") == 0
    assert top5(tmp_path / "dl2") == original


@pytest.mark.slow
def test_roundtrip_through_olah_mirror_same_top5(published, olah, run_dir, online, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", olah)  # the mirror via the usual variable, not --endpoint
    out = tmp_path / "via-olah"
    assert download(published, "-o", out, "--cache-dir", tmp_path / "cache") == 0
    assert (out / "model.safetensors").read_bytes() == (run_dir / "final" / "model.safetensors").read_bytes()
    assert top5(out) == top5(run_dir / "final")


def _pickle_repo(hub, repo_id: str, model_dir: Path, payload=None) -> None:
    """A repo as old releases look: pytorch_model.bin + vocab.txt + config.json only."""
    import io

    import torch
    from safetensors.torch import load_file

    from hub_server import Repo

    state = load_file(str(model_dir / "model.safetensors"))
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]  # tied, shared
    buf = io.BytesIO()
    torch.save(payload if payload is not None else state, buf)
    repo = Repo(owner="uer", private=False)
    repo.commit("main", {"config.json": (model_dir / "config.json").read_bytes(),
                         "vocab.txt": (model_dir / "vocab.txt").read_bytes(),
                         "pytorch_model.bin": buf.getvalue(), "tf_model.h5": b"tf weights we never fetch"}, "add")
    hub.repos[repo_id] = repo


def test_pickle_only_repo_is_converted(hub, tiny_model_dir, online, tmp_path, capsys):
    _pickle_repo(hub, "uer/pickle-only", tiny_model_dir)
    out = tmp_path / "conv"
    assert download("uer/pickle-only", "-o", out, "--endpoint", hub.url, "--cache-dir", tmp_path / "c") == 0
    names = {p.name for p in out.iterdir()}
    assert "model.safetensors" in names and "pytorch_model.bin" not in names and "tf_model.h5" not in names
    assert "tokenizer_config.json" in names  # added so AutoTokenizer (transformers 5) loads a vocab.txt-only repo
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    assert load_tokenizer(out).convert_tokens_to_ids("北") == 1266
    assert top5(out) == top5(tiny_model_dir)


def test_pickle_with_code_is_refused(hub, tiny_model_dir, online, tmp_path, capsys):
    import collections

    _pickle_repo(hub, "uer/evil", tiny_model_dir, payload={"w": collections.Counter("abc")})
    rc = download("uer/evil", "-o", tmp_path / "evil", "--endpoint", hub.url, "--cache-dir", tmp_path / "c")
    err = capsys.readouterr().err
    assert rc == 2 and "refused to convert" in err and not (tmp_path / "evil").exists()


@pytest.mark.parametrize("case", ["unknown-alias", "missing-repo", "network-down", "exists"])
def test_download_failures(case, hub, online, tmp_path, capsys):
    args = {"unknown-alias": ["robeta-wwm-ext"], "missing-repo": ["nobody/nothing", "--endpoint", hub.url],
            "network-down": ["nobody/nothing", "--endpoint", f"http://127.0.0.1:{free_port()}"],
            "exists": ["nobody/nothing", "-o", tmp_path]}[case]
    if "-o" not in args:
        args += ["-o", tmp_path / "x"]
    rc = download(*args, "--cache-dir", tmp_path / "c")
    err = capsys.readouterr().err.strip()
    expect = {"unknown-alias": "did you mean 'roberta-wwm-ext'", "missing-repo": "repository not found",
              "network-down": "cannot reach", "exists": "already exists"}[case]
    assert rc == 2 and len(err.splitlines()) == 1 and expect in err, err


def _model_files(model_dir: Path) -> dict[str, bytes]:
    return {n: (model_dir / n).read_bytes() for n in ("config.json", "model.safetensors", "tokenizer.json",
                                                     "tokenizer_config.json", "vocab.txt")}


def test_modelscope_http_api(tiny_model_dir, tmp_path):
    """--source modelscope speaks ModelScope's HTTP API (no `modelscope` package); a fake on 127.0.0.1."""
    files = _model_files(tiny_model_dir)
    files["README.md"] = b"# card"
    with modelscope_server(files) as url:
        out = tmp_path / "ms"
        assert download("tiny/bert", "--source", "modelscope", "--endpoint", url, "-o", out) == 0
        assert {p.name for p in out.iterdir()} == set(files) - {"README.md"} | {".zh-bert-download.json", ".zh-bert-manifest.json"}


def test_full_disk_is_one_line_and_leaves_nothing(tiny_model_dir, sandbox, monkeypatch, capsys):
    import errno

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("zh_bert.hub.download.copy_file", full)
    out = sandbox / "cwd" / "out"
    with modelscope_server(_model_files(tiny_model_dir)) as url:
        rc = download("tiny/bert", "--source", "modelscope", "--endpoint", url, "-o", out)
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and f"{out}: cannot write (No space left on device)" in lines[0], lines
    assert not list((sandbox / "cwd").iterdir()) and not list((sandbox / "tmp").iterdir())


def _digest(path: Path) -> dict[str, str]:
    """sha256 of every file (and the names of the folders) under `path`, or of `path` itself if a file."""
    import hashlib

    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def _ms_download(tiny_model_dir: Path, out: Path, *flags) -> int:
    with modelscope_server(_model_files(tiny_model_dir)) as url:
        return download("tiny/bert", "--source", "modelscope", "--endpoint", url, "-o", out, *flags)


@pytest.mark.parametrize("kind", ["file", "user-dir", "training-run", "download-plus-user-file", "symlink"])
def test_download_force_never_replaces_what_it_did_not_write(kind, tiny_model_dir, run_dir, tmp_path, capsys):
    """Ownership rule: `--force` replaces only a folder whose marker proves download wrote it and that holds
    nothing else. A file, a user's folder, a copy of a training run, a download the user added a file to, a
    symlink: unchanged byte for byte, exit 2, one line naming what is in the way."""
    out = tmp_path / "out"
    foreign = {"file": "out", "user-dir": "mine.txt", "training-run": "checkpoints", "symlink": "out",
               "download-plus-user-file": "notes.txt"}[kind]
    if kind == "file":
        out.write_text("我的笔记：不要删除\n", encoding="utf-8")
    elif kind == "user-dir":
        out.mkdir()
        (out / "mine.txt").write_text("北京是中国的首都。\n", encoding="utf-8")
        shutil.copy(tiny_model_dir / "config.json", out / "config.json")
    elif kind == "training-run":
        shutil.copytree(run_dir, out)
    elif kind == "symlink":
        out.symlink_to(tiny_model_dir, target_is_directory=True)
    else:
        assert _ms_download(tiny_model_dir, out) == 0
        (out / "notes.txt").write_text("我的笔记\n", encoding="utf-8")
    capsys.readouterr()
    target = tiny_model_dir if kind == "symlink" else out
    before = _digest(target)
    rc = _ms_download(tiny_model_dir, out, "--force")
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "refusing to overwrite it" in lines[0] and foreign in lines[0], lines
    assert _digest(target) == before and (kind != "symlink" or out.is_symlink())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]   # no temp folder left beside it


def test_download_force_replaces_its_own_folder(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A folder download wrote (its marker lists every file) is replaced by --force, and stays loadable by
    AutoModel/AutoTokenizer; without --force it is refused with a hint; the current directory never."""
    import json

    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "dl"
    assert _ms_download(tiny_model_dir, out) == 0
    marker = json.loads((out / ".zh-bert-download.json").read_text(encoding="utf-8"))
    assert marker["source"] == "modelscope" and marker["repo_id"] == "tiny/bert"
    assert set(marker["files"]) == {p.name for p in out.iterdir()} - {".zh-bert-download.json", ".zh-bert-manifest.json"}
    capsys.readouterr()
    assert _ms_download(tiny_model_dir, out) == 2
    assert "already exists (use --force" in capsys.readouterr().err
    (out / "vocab.txt").write_text("stale\n")
    assert _ms_download(tiny_model_dir, out, "--force") == 0
    assert (out / "vocab.txt").read_bytes() == (tiny_model_dir / "vocab.txt").read_bytes()
    assert AutoTokenizer.from_pretrained(str(out)).convert_tokens_to_ids("北") == 1266
    assert AutoModelForMaskedLM.from_pretrained(str(out)).config.vocab_size == 21128
    monkeypatch.chdir(out)
    before = _digest(out)
    capsys.readouterr()
    assert _ms_download(tiny_model_dir, Path("."), "--force") == 2
    assert "is the current directory" in capsys.readouterr().err and _digest(out) == before


@pytest.mark.parametrize("bad", [3, None, True])
def test_modelscope_non_string_name_is_named(bad, tiny_model_dir, sandbox, capsys):
    """A listing entry whose Path is a number, null or a boolean is refused as what it is, not 'an empty name'."""
    files = _model_files(tiny_model_dir)
    out = sandbox / "cwd" / "out"
    before = _tree(sandbox.parent)
    with modelscope_server(files, listing=list(files) + [bad]) as url:
        rc = download("evil/model", "--source", "modelscope", "--endpoint", url, "-o", out)
    err = capsys.readouterr().err
    _assert_refused(rc, err, sandbox, out, before)
    assert "a name that is not a string" in err and "empty name" not in err


def test_download_error_is_one_line_on_a_pipe(hub, tiny_model_dir, tmp_path):
    """A failure after the files arrived (a pickle holding code) is exactly one stderr line when stderr is not
    a terminal: huggingface_hub's progress bars are off there."""
    import collections

    _pickle_repo(hub, "uer/evil-pipe", tiny_model_dir, payload={"w": collections.Counter("abc")})
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    r = subprocess.run([sys.executable, "-m", "zh_bert", "download", "uer/evil-pipe", "-o", str(tmp_path / "o"),
                        "--endpoint", hub.url, "--cache-dir", str(tmp_path / "c")], capture_output=True, text=True,
                       env=env, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "refused to convert" in lines[0], r.stderr


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


#: names a hostile or broken server may list; each must be refused before anything is fetched
HOSTILE = ["../x.safetensors", "sub/../../x.safetensors", "{abs}/abs.safetensors", "..\\x.safetensors",
           "C:/x.safetensors", "", "./model.safetensors", "a//x.safetensors", "..", "x\nmodel.safetensors"]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """cwd and the system temp dir inside tmp_path/box, so a write anywhere the command could reach shows."""
    box = tmp_path / "box"
    (box / "cwd").mkdir(parents=True)
    (box / "tmp").mkdir()
    monkeypatch.chdir(box / "cwd")
    monkeypatch.setattr("tempfile.tempdir", str(box / "tmp"))
    return box


def _assert_refused(rc, err, box: Path, out: Path, before: dict) -> None:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("zh-bert download: error: "), err
    assert "refusing to download" in lines[0] and "Traceback" not in err
    assert not out.exists() and _tree(box.parent) == before, set(_tree(box.parent)) ^ set(before)
    assert not list((box / "tmp").iterdir())


@pytest.mark.parametrize("bad", HOSTILE)
def test_modelscope_hostile_listing_writes_nothing(bad, tiny_model_dir, sandbox, capsys):
    bad = bad.format(abs=sandbox)
    files = _model_files(tiny_model_dir)
    out = sandbox / "cwd" / "out"
    before = _tree(sandbox.parent)
    with modelscope_server(files, listing=list(files) + [bad]) as url:
        rc = download("evil/model", "--source", "modelscope", "--endpoint", url, "-o", out)
    _assert_refused(rc, capsys.readouterr().err, sandbox, out, before)


@pytest.mark.parametrize("bad", HOSTILE)
def test_hub_hostile_listing_writes_nothing(bad, hub, tiny_model_dir, online, sandbox, capsys):
    """The same names from a Hub (or a mirror through HF_ENDPOINT): refused before the first file request."""
    from hub_server import Repo

    bad = bad.format(abs=sandbox)
    repo = Repo(owner="evil", private=False)
    repo.commit("main", {**_model_files(tiny_model_dir), bad: b"EVIL"}, "add")
    hub.repos["evil/model"] = repo
    out = sandbox / "cwd" / "out"
    before = _tree(sandbox.parent)
    n_requests = len(hub.log)
    rc = download("evil/model", "-o", out, "--endpoint", hub.url, "--cache-dir", sandbox / "cwd" / "cache")
    _assert_refused(rc, capsys.readouterr().err, sandbox, out, before)
    assert not [p for m, p in hub.log[n_requests:] if "/resolve/" in p]  # not one file was asked for


def test_remote_name_rules():
    from zh_bert.core.errors import ZhBertError
    from zh_bert.hub.endpoint import check_listing, local_path, remote_name

    good = ["model.safetensors", "onnx/model.onnx", "a b/中文.txt", "x..y.json", "~/x"]
    assert check_listing(good, "w") == good
    for bad in ["", None, 3, "/etc/passwd", "C:x", "d:\\x", "a\\b", "../x", "a/..", "a/./b", "a//b", "a/",
                "x\x00y"]:
        with pytest.raises(ZhBertError, match="^w: the file listing has"):
            remote_name(bad, "w")
    assert local_path(Path("/tmp"), "a/b", "w") == Path("/tmp/a/b")


def test_catalog():
    from zh_bert.hub.catalog import BY_ALIAS, CATALOG, resolve

    assert resolve("bert-base-chinese") == ("google-bert/bert-base-chinese", BY_ALIAS["bert-base-chinese"])
    assert resolve("hfl/rbt3")[1].alias == "rbt3"
    assert resolve("someone/else")[1] is None
    # the computed parameter count matches a real BertModel of the same shape
    from transformers import BertConfig, BertModel

    e = BY_ALIAS["uer-tiny"]
    m = BertModel(BertConfig(vocab_size=e.vocab_size, hidden_size=e.hidden, num_hidden_layers=e.layers,
                             num_attention_heads=e.heads, intermediate_size=e.intermediate))
    assert e.params == m.num_parameters()
    assert 37e6 < BY_ALIAS["rbt3"].params < 39e6  # HFL quotes 38M
    assert len({e.alias for e in CATALOG}) == len(CATALOG)
    assert {e.architecture for e in CATALOG} <= {"bert", "modernbert"}
    assert all(e.architecture == "bert" for e in CATALOG if e.paper in ("bert", "wwm", "macbert", "uer"))


def test_catalog_modernbert_params_match_transformers():
    """The ModernBERT formula is checked against a real ModernBertModel of the same shape, not a hand number."""
    from transformers import ModernBertConfig, ModernBertModel

    from zh_bert.hub.catalog import CatalogEntry

    e = CatalogEntry("tiny-modernbert", "test/tiny-modernbert", 2, 64, 2, 96, 500, "test vocab", "n/a",
                     "modernbert", architecture="modernbert")
    # special-token ids inside the tiny vocab (the defaults point into ModernBERT's English 50k vocab)
    cfg = ModernBertConfig(vocab_size=e.vocab_size, hidden_size=e.hidden, num_hidden_layers=e.layers,
                           num_attention_heads=e.heads, intermediate_size=e.intermediate,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
    assert e.params == sum(p.numel() for p in ModernBertModel(cfg).parameters())
    bert_shaped = CatalogEntry("tiny-bert", "test/tiny-bert", 2, 64, 2, 96, 500, "test vocab", "n/a", "bert")
    assert bert_shaped.architecture == "bert" and bert_shaped.params != e.params


def test_catalog_architecture_in_table_json_and_checked():
    import json

    from zh_bert.hub.catalog import CATALOG, CatalogEntry, _as_json, format_table
    from zh_bert.core.errors import ZhBertError

    header, _, first = format_table().splitlines()[:3]
    assert header.split()[:3] == ["alias", "repo", "id"] and "arch" in header.split()
    assert first.split()[:3] == ["bert-base-chinese", "google-bert/bert-base-chinese", "bert"]
    assert [c["architecture"] for c in json.loads(_as_json(None))["catalog"]] == [e.architecture for e in CATALOG]
    with pytest.raises(ZhBertError, match="^catalog entry x: architecture must be one of bert, modernbert, "
                                          "got 'roberta'$"):
        CatalogEntry("x", "a/x", 2, 64, 2, 96, 500, "v", "n/a", "bert", architecture="roberta")


def test_models_cli_fast_and_offline():
    r = subprocess.run([sys.executable, "-m", "zh_bert", "models"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "hfl/chinese-macbert-base" in r.stdout and "uer/chinese_roberta_L-2_H-128" in r.stdout


def test_download_config_validates_like_the_cli():
    from zh_bert.hub.download import DownloadConfig
    from zh_bert.core.errors import ZhBertError

    with pytest.raises(ZhBertError, match="--source: must be 'hf' or 'modelscope', got 's3'"):
        DownloadConfig(name="uer-tiny", source="s3")
    assert DownloadConfig(name="uer-tiny").source == "hf"


def test_hub_error_messages():
    """Each Hub failure reads as one line that says what to do; anything else is not swallowed."""
    from huggingface_hub import errors as E

    from zh_bert.core.errors import ZhBertError
    from zh_bert.hub.endpoint import hub_errors

    for exc, needle in [(E.OfflineModeIsEnabled("offline"), "HF_HUB_OFFLINE=1 is set"),
                        (ConnectionRefusedError("refused"), "cannot reach mirror.example"),
                        (TimeoutError(), "try --endpoint or HF_ENDPOINT")]:
        with pytest.raises(ZhBertError, match=needle) as info:
            with hub_errors("mirror.example", "org/name"):
                raise exc
        assert str(info.value).startswith("org/name: ") and "\n" not in str(info.value)
    with pytest.raises(KeyError):
        with hub_errors("mirror.example"):
            raise KeyError("a bug keeps its traceback")
    with pytest.raises(ValueError, match="Expecting value"):   # not raised inside huggingface_hub: a bug of ours
        with hub_errors("mirror.example"):
            import json

            json.loads("<html>maintenance</html>")


def test_scratch_dir_removes_leftovers_of_killed_runs(tmp_path, monkeypatch):
    """The temp folders of download (ModelScope) and publish carry their process id: a killed run's folder
    is removed by the next run, a live process's folder is kept, and the new one is gone after the block."""
    import os

    from zh_bert.hub.endpoint import scratch_dir

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = tmp_path / "zh-bert-ms-999999999-abcd"   # above Linux's pid_max: no such process
    alive = tmp_path / f"zh-bert-ms-{os.getppid()}-abcd"
    other = tmp_path / "zh-bert-msx"
    for d in (dead, alive, other):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"partial")
    with pytest.raises(KeyboardInterrupt):
        with scratch_dir("zh-bert-ms-") as tmp:
            assert tmp.name.startswith(f"zh-bert-ms-{os.getpid()}-") and not dead.exists()
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])
