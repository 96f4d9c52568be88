"""Trust nothing read, from a Hub and from model folders: an endpoint answering a page of HTML, a listing whose
fields are not what the Hub sends, a repo or folder that names code of its own, and weights that disagree with
their config.json. Each is one stderr line, exit 2, no traceback, and nothing written anywhere: the `sandbox` of
test_download.py (cwd and the temp dir inside it) holds the Hugging Face cache too, and its files are listed
before and after. Every server is on 127.0.0.1."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from _hub_helpers import seed_repo
from _run_helpers import save_recipe
from conftest import CHAR_SEQ, SAMPLE, read_lines
from hub_server import MAINTENANCE_PAGE, free_port
from test_download import _digest, _tree, sandbox  # noqa: F401  (sandbox: the fixture)
from zh_bert.cli import main

#: the smallest `eval suite` / `leaderboard verify`: one FewCLUE task, one split, one epoch
SMALL_SUITE = ["--only", "eprstmt", "--splits", "1", "--epochs", "1", "--lr", "2e-3", "--seq-len", "64"]
STOCK = "zh-org/tiny"
REMOTE = "evil/remote-code"
REMOTE_TOKENIZER = "evil/remote-tokenizer"


def one_line(rc: int, err: str, command: str) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"zh-bert {command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _files(model_dir: Path, **config_changes) -> dict[str, bytes]:
    """A model folder's top-level files, with `config_changes` put into its config.json."""
    files = {p.name: p.read_bytes() for p in sorted(model_dir.iterdir()) if p.is_file()}
    config = {**json.loads(files["config.json"]), **config_changes}
    return {**files, "config.json": json.dumps(config).encode()}


def _code_folder(model_dir: Path, dest: Path, marker: Path) -> Path:
    """A copy of the tiny model whose config names its own class, with that class's code beside it: importing
    it would write `marker`."""
    dest.mkdir(parents=True)
    for name, data in _files(model_dir, auto_map={"AutoModelForMaskedLM": "modeling_evil.EvilForMaskedLM"}).items():
        (dest / name).write_bytes(data)
    (dest / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return dest


def _mismatched(model_dir: Path, dest: Path) -> Path:
    """A copy of the tiny model whose config.json was edited after training: intermediate_size halved."""
    shutil.copytree(model_dir, dest)
    config = json.loads((dest / "config.json").read_text())
    config["intermediate_size"] //= 2
    (dest / "config.json").write_text(json.dumps(config))
    return dest


@pytest.fixture(scope="module")
def repos(hub, tiny_model_dir):
    """A stock repo and two that name code of their own (in config.json, in tokenizer_config.json)."""
    seed_repo(hub, STOCK, tiny_model_dir, pipeline_tag="fill-mask", tags=("zh",))
    seed_repo(hub, REMOTE, {**_files(tiny_model_dir, auto_map={"AutoModelForMaskedLM": "modeling_x.XModel"}),
                            "modeling_x.py": b"raise SystemExit('the repo code ran')\n"})
    tokenizer_config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    seed_repo(hub, REMOTE_TOKENIZER, {**_files(tiny_model_dir), "tokenization_x.py": b"raise SystemExit(1)\n",
                                      "tokenizer_config.json": json.dumps({**tokenizer_config, "auto_map": {
                                          "AutoTokenizer": ["tokenization_x.XTokenizer", None]}}).encode()})
    return hub


@pytest.fixture
def box(sandbox, online, monkeypatch):  # noqa: F811
    """The sandbox with the Hugging Face cache inside it, and its files before the command."""
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_CACHE", str(sandbox / "cwd" / "hf-cache"))
    return sandbox


def _untouched(box: Path, before: dict) -> None:
    """No file added, changed or removed under the sandbox, the temp dir empty (but for the empty folder that
    Gradio makes there when the demo's page is built: a Hub MODEL is loaded, and refused, after that)."""
    assert _tree(box.parent) == before, set(_tree(box.parent)) ^ set(before)
    assert [p.name for p in (box / "tmp").iterdir()] in ([], ["gradio"])


def _weights_asked(hub, since: int) -> list[str]:
    return [p for _, p in hub.log[since:] if "/resolve/" in p and p.endswith((".safetensors", ".bin"))]


# ------------------------------------------------------------------------- an endpoint answering a page of HTML

def _html_commands(url: str, cwd: Path) -> dict[str, list[str]]:
    return {
        "models --hub": ["models", "--hub", "--endpoint", url],
        "models --community": ["models", "--community", "--endpoint", url],
        "download": ["download", STOCK, "--endpoint", url, "-o", str(cwd / "out")],
        "download --source modelscope": ["download", STOCK, "--source", "modelscope", "--endpoint", url,
                                         "-o", str(cwd / "out")],
        "leaderboard build": ["leaderboard", "build", f"hub:{STOCK}", "--endpoint", url, "-o", str(cwd / "board"),
                              "--no-contamination"],
        "leaderboard verify": ["leaderboard", "verify", f"hub:{STOCK}", "--endpoint", url,
                               "-o", str(cwd / "record.json"), *SMALL_SUITE],
        "eval suite": ["eval", "suite", f"hub:{STOCK}", *SMALL_SUITE],   # the endpoint: HF_ENDPOINT
    }


@pytest.mark.parametrize("command", list(_html_commands("", Path("."))))
def test_trust_nothing_read_an_endpoint_answering_html_is_one_line(command, repos, box, monkeypatch, capsys):
    """A mirror in maintenance answers every request with status 200 and `<html>maintenance</html>`: each command
    that asks a Hub (or ModelScope) says so in one line naming the endpoint, never a JSONDecodeError."""
    monkeypatch.setenv("HF_ENDPOINT", repos.url)
    args = _html_commands(repos.url, box / "cwd")[command]
    before = _tree(box.parent)
    repos.maintenance = ""
    try:
        rc = main(args)
    finally:
        repos.maintenance = None
    line = one_line(rc, capsys.readouterr().err, args[0])
    api = "ModelScope's API" if "modelscope" in command else "the Hub API"
    endpoint = f"{STOCK} on ModelScope ({repos.url})" if "modelscope" in command else repos.url
    assert f"{endpoint} answered text/html, not {api} ({MAINTENANCE_PAGE!r})" in line, line
    _untouched(box, before)


def test_trust_nothing_read_file_requests_answered_by_a_page_are_one_line(repos, box, capsys):
    """The API answers, the file requests get the page: the first file asked for (config.json, before any
    weights) is one line saying the endpoint is not a Hub, not "cannot reach it"."""
    out = box / "cwd" / "out"
    before, since = _tree(box.parent), len(repos.log)
    repos.maintenance = "/resolve/"
    try:
        rc = main(["download", STOCK, "--endpoint", repos.url, "-o", str(out)])
    finally:
        repos.maintenance = None
    line = one_line(rc, capsys.readouterr().err, "download")
    assert f"{repos.url} answered a file request without the Hub's X-Repo-Commit header, not the Hub API" in line
    assert not _weights_asked(repos, since)
    _untouched(box, before)


# ------------------------------------------------------------------- listing fields that are not the Hub's

@pytest.mark.parametrize("field, value, problem", [
    ("lastModified", "yesterday", "lastModified: expected an ISO 8601 date and time, got 'yesterday'"),
    ("lastModified", 12, "lastModified: expected text, got a number 12"),
    ("siblings", "config.json", "siblings: expected a list, got text 'config.json'"),
    ("siblings", [{"rfilename": 3}], "siblings[0].rfilename: expected text, got a number 3"),
    ("downloads", "many", "downloads: expected an integer ≥ 0, got text 'many'"),
    ("likes", -1, "likes: expected an integer ≥ 0, got -1"),
    ("sha", "../../x", "sha: expected a commit hash, got '../../x'"),
])
def test_trust_nothing_read_a_bad_listing_field_is_that_rows_note(field, value, problem, repos, tiny_model_dir,
                                                                  box, capsys):
    """A repo whose listing row and model info hold a field of the wrong type: that row says what is wrong, every
    other row is listed as before (never a traceback out of huggingface_hub's ModelInfo)."""
    bad = f"odd/{field}-{type(value).__name__}"
    seed_repo(repos, bad, tiny_model_dir, pipeline_tag="fill-mask", tags=("zh", "zh-bert"), downloads=5,
              answer={field: value})
    try:
        assert main(["models", "--hub", "--endpoint", repos.url, "--json"]) == 0
        out, err = capsys.readouterr()
        rows = {r["repo_id"]: r for r in json.loads(out)["hub"]}
        assert rows[STOCK]["error"] is None and rows[STOCK]["load_safety"] == "stock"
        assert problem in rows[bad]["error"] and "Traceback" not in err
        assert rows[bad]["params"] is None and not [line for line in err.splitlines() if bad in line]
        assert main(["models", "--community", "--endpoint", repos.url]) == 0   # the tag listing reads rows alike
        listed = capsys.readouterr().out
        assert f"  {bad}  (downloads " in listed and problem in listed, listed
    finally:
        del repos.repos[bad]


def test_trust_nothing_read_a_board_of_a_hub_repo_with_a_bad_model_info_is_one_line(repos, tiny_model_dir, box,
                                                                                      capsys):
    """`leaderboard build hub:ORG/NAME` reads the repo's model info as `models --hub` does: `siblings` that is no
    list is one line naming the field, nothing written (not a TypeError out of huggingface_hub's ModelInfo)."""
    bad = "odd/board-siblings"
    seed_repo(repos, bad, tiny_model_dir, pipeline_tag="fill-mask", answer={"siblings": "config.json"})
    try:
        before = _tree(box.parent)
        out = box / "cwd" / "board"
        rc = main(["leaderboard", "build", f"hub:{bad}", "-o", str(out), "--endpoint", repos.url])
        line = one_line(rc, capsys.readouterr().err, "leaderboard")
        assert bad in line and "siblings: expected a list, got text 'config.json'" in line, line
        assert not out.exists()
        _untouched(box, before)
    finally:
        del repos.repos[bad]


def test_trust_nothing_read_listing_rows_that_are_no_repo_are_notes(repos, box, capsys):
    """Rows without an id are left out with a note each; the listing goes on."""
    seed_repo(repos, "odd/no-id", {"config.json": b"{}"}, pipeline_tag="fill-mask", tags=("zh",),
              answer={"id": None, "modelId": None})
    try:
        assert main(["models", "--hub", "--endpoint", repos.url, "--json"]) == 0
        out, err = capsys.readouterr()
        assert STOCK in {r["repo_id"] for r in json.loads(out)["hub"]}
        assert "note: skipped a listed repo: " in err and "modelId: expected text, got null" in err
    finally:
        del repos.repos["odd/no-id"]


def test_trust_nothing_read_card_front_matter_with_a_key_twice_is_that_rows_error(repos, tiny_model_dir, box,
                                                                                   capsys):
    card = b"---\nlicense: mit\nlicense: apache-2.0\nlanguage: zh\n---\n# card\n"
    seed_repo(repos, "odd/twice", {**_files(tiny_model_dir), "README.md": card}, pipeline_tag="fill-mask",
              tags=("zh",))
    try:
        assert main(["models", "--hub", "--endpoint", repos.url, "--json"]) == 0
        rows = {r["repo_id"]: r for r in json.loads(capsys.readouterr().out)["hub"]}
        assert rows["odd/twice"]["error"].startswith("config unreadable: README.md: the YAML front matter: ")
        assert "license" in rows["odd/twice"]["error"] and rows[STOCK]["error"] is None
    finally:
        del repos.repos["odd/twice"]


# ------------------------------------------------------------------------ code of its own: refused everywhere

@pytest.fixture
def code_folder(tiny_model_dir, tmp_path):
    """A folder (outside the sandbox) that names its own code, and the marker its code would write."""
    marker = tmp_path / "EXECUTED"
    return _code_folder(tiny_model_dir, tmp_path / "remote", marker), marker


def _local_commands(folder: Path, cwd: Path) -> dict[str, list[str]]:
    text = cwd.parent / "docs.txt"
    cloze = cwd.parent / "cloze.jsonl"
    return {
        "eval mlm": ["eval", "mlm", str(folder), "--text", str(text)],
        "eval cloze": ["eval", "cloze", str(folder), "--data", str(cloze)],
        "eval suite": ["eval", "suite", str(folder), *SMALL_SUITE],
        "finetune": ["finetune", str(folder), "--task", "chnsenticorp", "--epochs", "1"],
        "leaderboard verify": ["leaderboard", "verify", str(folder), "-o", str(cwd / "record.json"), *SMALL_SUITE],
        "demo": ["demo", str(folder), "--port", str(free_port())],
    }


def _inputs(cwd: Path) -> None:
    """The text and cloze items the commands read (beside the sandbox's cwd, so listed in its tree)."""
    docs = read_lines(SAMPLE / "zhwiki_sampled.txt", 20)
    (cwd.parent / "docs.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (cwd.parent / "cloze.jsonl").write_text('{"text": "我爱[MASK]京。", "answer": "北"}\n', encoding="utf-8")


@pytest.mark.parametrize("command", list(_local_commands(Path("f"), Path("c"))))
def test_trust_nothing_read_a_folder_naming_its_own_code_is_refused(command, code_folder, box, capsys):
    """Every command that loads weights refuses a folder whose config.json has an auto_map, in one line, before
    loading anything (never as a stock class by another name); its code never runs; nothing is written."""
    folder, marker = code_folder
    _inputs(box / "cwd")
    args = _local_commands(folder, box / "cwd")[command]
    before, folder_before = _tree(box.parent), _digest(folder)
    rc = main(args)
    line = one_line(rc, capsys.readouterr().err, args[0])
    assert f"{folder}: needs trust_remote_code: its config.json has an auto_map" in line, line
    assert not marker.exists() and "modeling_evil" not in sys.modules
    assert _digest(folder) == folder_before
    _untouched(box, before)


def test_trust_nothing_read_pretrain_init_from_a_folder_naming_its_own_code(code_folder, sample_jsonl, build_shards,
                                                                           google_tokdir, box, capsys):
    folder, marker = code_folder
    tokdir = google_tokdir
    sharddir = build_shards(sample_jsonl, google_tokdir, "--seq-len", str(CHAR_SEQ), "--valid-docs", "20")
    out = box / "cwd" / "run"
    recipe = save_recipe(box / "recipe.yaml", {
        "out_dir": str(out), "data": str(sharddir), "tokenizer": str(tokdir), "model": "tiny",
        "init_from": str(folder), "seq_len": CHAR_SEQ, "global_batch": 8, "micro_batch": 8, "max_steps": 2,
        "save_every": 0, "eval_every": 0, "precision": "fp32"})
    before = _tree(box.parent)
    rc = main(["pretrain", str(recipe)])
    line = one_line(rc, capsys.readouterr().err, "pretrain")
    assert f"{folder}: needs trust_remote_code: its config.json has an auto_map" in line, line
    assert not marker.exists() and not out.exists()
    _untouched(box, before)


def _hub_commands(repo: str, url: str, cwd: Path) -> dict[str, list[str]]:
    return {
        "download": ["download", repo, "--endpoint", url, "-o", str(cwd / "out")],
        "eval suite": ["eval", "suite", f"hub:{repo}", *SMALL_SUITE],
        "leaderboard verify": ["leaderboard", "verify", f"hub:{repo}", "--endpoint", url,
                               "-o", str(cwd / "record.json"), *SMALL_SUITE],
        "demo": ["demo", repo, "--port", str(free_port())],
    }


@pytest.mark.parametrize("repo", [REMOTE, REMOTE_TOKENIZER])
@pytest.mark.parametrize("command", list(_hub_commands("r", "u", Path("c"))))
def test_trust_nothing_read_a_hub_repo_naming_its_own_code_is_refused_before_its_weights(command, repo, repos,
                                                                                        box, monkeypatch, capsys):
    """`eval suite hub:ORG/NAME`, `leaderboard verify`, `demo` and `download` read the repo's config.json and
    tokenizer_config.json alone and refuse it there: no weights asked for, nothing in the cache, no folder."""
    monkeypatch.setenv("HF_ENDPOINT", repos.url)
    args = _hub_commands(repo, repos.url, box / "cwd")[command]
    before, since = _tree(box.parent), len(repos.log)
    rc = main(args)
    line = one_line(rc, capsys.readouterr().err, args[0])
    where = "config.json" if repo == REMOTE else "tokenizer_config.json"
    assert f"{repo} on {repos.url}: needs trust_remote_code: its {where} has an auto_map" in line, line
    assert not _weights_asked(repos, since) and not [p for _, p in repos.log[since:] if p.endswith(".py")]
    _untouched(box, before)


def test_trust_nothing_read_a_modelscope_repo_naming_its_own_code_is_refused_before_its_weights(tiny_model_dir, box,
                                                                                               capsys):
    from hub_server import modelscope_server

    files = _files(tiny_model_dir, auto_map={"AutoModelForMaskedLM": "modeling_x.XModel"})
    out, asked = box / "cwd" / "out", []
    before = _tree(box.parent)
    with modelscope_server(files, asked=asked) as url:
        rc = main(["download", "evil/remote", "--source", "modelscope", "--endpoint", url, "-o", str(out)])
    line = one_line(rc, capsys.readouterr().err, "download")
    assert f"evil/remote on ModelScope ({url}): needs trust_remote_code: its config.json has an auto_map" in line
    assert sorted(asked) == ["config.json", "tokenizer_config.json"]   # the two small files, nothing else
    _untouched(box, before)


def test_trust_nothing_read_a_cached_repo_naming_its_own_code_is_refused_offline(repos, box, monkeypatch, capsys):
    """Offline, `download` assembles from the Hugging Face cache: a repo put there by another tool that names its
    own code is refused by the same rule before anything is assembled."""
    import huggingface_hub.constants as C
    from huggingface_hub import snapshot_download

    snapshot_download(REMOTE, endpoint=repos.url)   # into the sandbox's cache, as `hf download` would
    capsys.readouterr()
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    out = box / "cwd" / "out"
    before = _tree(box.parent)
    rc = main(["download", REMOTE, "--endpoint", repos.url, "-o", str(out)])
    line = one_line(rc, capsys.readouterr().err, "download")
    assert f"{REMOTE} (cached): needs trust_remote_code: its config.json has an auto_map" in line, line
    _untouched(box, before)


def test_trust_nothing_read_a_stock_hub_repo_still_downloads(repos, tiny_model_dir, box):
    """The check costs the stock repo nothing but two small requests: it downloads and loads as before."""
    out = box / "cwd" / "out"
    assert main(["download", STOCK, "--endpoint", repos.url, "-o", str(out)]) == 0
    assert (out / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()


# --------------------------------------------------------------------- weights that disagree with config.json

def _mismatch_commands(folder: Path, cwd: Path) -> dict[str, list[str]]:
    return {k: v for k, v in _local_commands(folder, cwd).items() if k in ("eval mlm", "eval suite", "finetune",
                                                                           "demo", "eval cloze")}


@pytest.mark.parametrize("command", list(_mismatch_commands(Path("f"), Path("c"))))
def test_trust_nothing_read_weights_that_disagree_with_config_json_are_one_line(command, tiny_model_dir, tmp_path,
                                                                                 box, capsys):
    """A config.json edited after training (intermediate_size halved): transformers' size-mismatch
    RuntimeError becomes one line naming the folder and the first tensor; nothing is written."""
    folder = _mismatched(tiny_model_dir, tmp_path / "edited")
    _inputs(box / "cwd")
    args = _mismatch_commands(folder, box / "cwd")[command]
    before, folder_before = _tree(box.parent), _digest(folder)
    rc = main(args)
    line = one_line(rc, capsys.readouterr().err, args[0])
    assert f"{folder}: cannot load " in line and "the weights disagree with config.json" in line, line
    assert re.search(r"(intermediate|output)\.dense\.(weight|bias) is \[512(, 128)?\] in the weights, \[256(, 128)?\] "
                     r"by config.json|\[128, 512\] in the weights, \[128, 256\] by config.json", line), line
    assert _digest(folder) == folder_before
    _untouched(box, before)
