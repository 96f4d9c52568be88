"""`zh-bert models --hub`: Chinese masked LMs listed from a Hub-compatible server on 127.0.0.1, each row read
from the repo's own config.json / tokenizer_config.json / card; hostile repos give a row's error or a note,
never a crash and never a line of their code run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _hub_helpers import seed_repo
from hub_server import free_port
from test_download import olah, published  # noqa: F401  (fixtures: the olah mirror of a published run)

from zh_bert.cli import main
from zh_bert.core.errors import ZhBertError
from zh_bert.hub.listing import (
    FILE_CAP,
    card_metadata,
    facts_of_files,
    hub_models,
    load_safety,
    repo_facts,
)
from zh_bert.train.arch import of_config

ZH_CARD = "---\nlicense: {licence}\nlanguage: zh\npipeline_tag: fill-mask\n{extra}---\n# model\n"


def _card(licence: str = "apache-2.0", extra: str = "") -> bytes:
    return ZH_CARD.format(licence=licence, extra=extra).encode()


def _folder(model_dir: Path, **changes: bytes) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()}
    return {**files, **changes}


def _formula(model_dir: Path) -> int:
    """The architecture's base-model count on the fixture's own config.json (what `zh-bert models` uses)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    extra = {k: cfg[c] for k, c in (("positions", "max_position_embeddings"), ("type_vocab", "type_vocab_size"))
             if c in cfg}
    return of_config(cfg).params(cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"],
                                 cfg["vocab_size"], head="base", **extra)


@pytest.fixture(scope="module")
def seeded(hub, tiny_model_dir, tiny_modernbert_dir, tmp_path_factory):
    """The listing's repos: good ones of both families, hostile ones of every kind, and ones it must not list."""
    marker = tmp_path_factory.mktemp("marker") / "remote-code-ran"
    config = json.loads((tiny_model_dir / "config.json").read_text())
    fill = {"pipeline_tag": "fill-mask", "tags": ("zh",)}
    seed_repo(hub, "zh-org/tiny-modernbert", _folder(tiny_modernbert_dir, **{"README.md": _card()}),
              downloads=300, likes=2, last_modified=3000.0)
    seed_repo(hub, "zh-org/tiny-bert", _folder(tiny_model_dir, **{"README.md": _card(
        "other", "license_name: tiny-licence\n")}), downloads=500, likes=1, last_modified=1000.0)
    seed_repo(hub, "hfl/rbt3", _folder(tiny_model_dir), downloads=10, likes=9, last_modified=2000.0)  # catalog
    seed_repo(hub, "alice/tagged", _folder(tiny_model_dir, **{"README.md": b"---\ntags: [zh-bert]\n---\n"}),
              downloads=7)
    seed_repo(hub, "evil/remote-code", {
        "config.json": json.dumps({**config, "auto_map": {"AutoModelForMaskedLM": "modeling_x.XModel"}}).encode(),
        "tokenizer_config.json": b'{"tokenizer_class": "BertTokenizer"}', "vocab.txt": b"[PAD]\n",
        "modeling_x.py": f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n".encode(),
        "README.md": _card("mit")}, downloads=40, **fill)
    seed_repo(hub, "evil/broken-config", {"config.json": b'{"model_type": "bert", '}, downloads=30, **fill)
    seed_repo(hub, "evil/list-card", {"config.json": json.dumps(config).encode(),
                                      "README.md": b"---\n- a\n- b\n---\n"}, downloads=20, **fill)
    seed_repo(hub, "evil/huge-card", {"config.json": json.dumps(config).encode(),
                                      "README.md": _card() + b"x" * FILE_CAP}, downloads=15, **fill)
    seed_repo(hub, "evil/script-licence", {"config.json": json.dumps(config).encode(),
                                           "README.md": _card("<script>alert(1)</script>")}, downloads=12, **fill)
    seed_repo(hub, "../evil", _folder(tiny_model_dir), downloads=99, **fill)
    seed_repo(hub, "evil/\x1b[31mred", _folder(tiny_model_dir), downloads=98, **fill)
    seed_repo(hub, "en-org/english", _folder(tiny_model_dir), downloads=1000, pipeline_tag="fill-mask",
              tags=("en",))
    seed_repo(hub, "zh-org/not-fill-mask", _folder(tiny_model_dir), downloads=1000, tags=("zh",),
              pipeline_tag="text-classification")
    return marker


def _listing(hub, capsys, *flags) -> tuple[dict[str, dict], str]:
    assert main(["models", "--hub", "--endpoint", hub.url, "--json", *flags]) == 0
    out, err = capsys.readouterr()
    return {r["repo_id"]: r for r in json.loads(out)["hub"]}, err


def test_listing_reads_each_repo_from_its_files(seeded, hub, tiny_model_dir, tiny_modernbert_dir, online, capsys):
    rows, err = _listing(hub, capsys)
    assert set(rows) == {"zh-org/tiny-modernbert", "zh-org/tiny-bert", "hfl/rbt3", "alice/tagged",
                         "evil/remote-code", "evil/broken-config", "evil/list-card", "evil/huge-card",
                         "evil/script-licence"}   # not English, not another task, not the hostile names
    modern, bert = rows["zh-org/tiny-modernbert"], rows["zh-org/tiny-bert"]
    assert (modern["architecture"], modern["layers"], modern["hidden"]) == ("modernbert", 2, 128)
    assert modern["params"] == _formula(tiny_modernbert_dir) and bert["params"] == _formula(tiny_model_dir)
    from transformers import AutoModel

    assert bert["params"] == AutoModel.from_pretrained(tiny_model_dir).num_parameters()  # BertModel, pooler too
    assert (bert["architecture"], bert["vocab_kind"], bert["vocab_size"]) == ("bert", "char (WordPiece)", 21128)
    assert (modern["licence"], bert["licence"]) == ("apache-2.0", "other (tiny-licence)")
    assert rows["hfl/rbt3"]["licence"] == "none stated"
    assert {r["load_safety"] for k, r in rows.items() if not k.startswith("evil/")} == {"stock"}
    assert [rows[k]["source"] for k in ("zh-org/tiny-bert", "hfl/rbt3", "alice/tagged")] == [
        "hub", "catalog", "zh-bert tag"]
    assert (modern["downloads"], modern["likes"], modern["last_modified"][:4]) == (300, 2, "1970")

    remote = rows["evil/remote-code"]
    assert remote["load_safety"] == "needs trust_remote_code" and remote["error"] is None
    assert not seeded.exists() and not [m for m in sys.modules if "modeling_x" in m]
    assert not [p for m, p in hub.log if p.endswith("modeling_x.py")]   # not even fetched
    assert rows["evil/broken-config"]["error"].startswith("config unreadable: config.json:1: not valid JSON")
    assert rows["evil/list-card"]["error"] == ("config unreadable: README.md: the YAML front matter is a list, "
                                               "not a mapping")
    assert "over the 256 KiB read" in rows["evil/huge-card"]["error"]
    assert rows["evil/script-licence"]["error"] == ("config unreadable: README.md: license is not a plain name "
                                                    "(letters, digits, '.', '_', '+', '-')")
    assert all(rows[k]["params"] is None for k in rows if rows[k]["error"])
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len([n for n in notes if "skipped a listed repo" in n]) == 2 and "\x1b" not in err
    assert any(n.startswith("note: 15 catalog repos are not on ") for n in notes)

    assert main(["models", "--hub", "--endpoint", hub.url]) == 0
    table = capsys.readouterr().out
    assert "<script" not in table and "\x1b" not in table and "needs trust_remote_code" in table
    assert table.splitlines()[0].split()[:4] == ["repo", "id", "source", "arch"]
    assert "evil/broken-config: config unreadable: config.json:1: not valid JSON" in table


def test_search_and_sort(seeded, hub, online, capsys):
    rows, _ = _listing(hub, capsys, "--search", "TINY")
    assert list(rows) == ["zh-org/tiny-bert", "zh-org/tiny-modernbert"]   # downloads, the default
    for sort, order in (("likes", ["zh-org/tiny-modernbert", "zh-org/tiny-bert"]),
                        ("recent", ["zh-org/tiny-modernbert", "zh-org/tiny-bert"]),
                        ("downloads", ["zh-org/tiny-bert", "zh-org/tiny-modernbert"])):
        assert list(_listing(hub, capsys, "--search", "tiny", "--sort", sort)[0]) == order
    assert list(_listing(hub, capsys, "--search", "rbt", "--sort", "recent")[0]) == ["hfl/rbt3"]
    assert [r["repo_id"] for r in hub_models(hub.url, sort="likes", limit=2)] == ["hfl/rbt3",
                                                                                  "zh-org/tiny-modernbert"]


@pytest.mark.parametrize("argv, message", [
    (["--search", "bert"], "--search needs --hub"),
    (["--sort", "likes", "--search", "x"], "--search and --sort need --hub"),
    (["--hub", "--sort", "stars"], "invalid choice"),
])
def test_hub_options_are_checked(argv, message, capsys):
    assert main(["models", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) <= 2   # argparse adds its usage line


def test_unreachable_endpoint_is_one_line(online, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["models", "--hub", "--endpoint", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"zh-bert models: error: cannot reach {url}") and "\n" not in err


def test_repo_facts_of_one_repo(seeded, hub, tiny_model_dir, online):
    facts = repo_facts("zh-org/tiny-bert", endpoint=hub.url)
    assert facts == {"repo_id": "zh-org/tiny-bert", "architecture": "bert", "layers": 2, "hidden": 128,
                     "params": _formula(tiny_model_dir), "vocab_kind": "char (WordPiece)", "vocab_size": 21128,
                     "licence": "other (tiny-licence)", "load_safety": "stock", "error": None}
    assert "repository not found" in repo_facts("zh-org/absent", endpoint=hub.url)["error"]
    assert repo_facts("../x", endpoint=hub.url)["error"] == "repo id '../x': expected ORG/NAME"


def test_facts_of_files_and_load_safety_rules():
    bert = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96,
            "vocab_size": 500}
    assert load_safety(bert, {"tokenizer_class": "BertTokenizerFast"}) == "stock"
    assert load_safety({**bert, "model_type": "qwen-custom"}, None) == "needs trust_remote_code"
    assert load_safety(bert, {"tokenizer_class": "ChineseBertTokenizer"}) == "needs trust_remote_code"
    assert load_safety(bert, {"auto_map": {"AutoTokenizer": ["t.Tok", None]}}) == "needs trust_remote_code"
    assert load_safety({k: v for k, v in bert.items() if k != "model_type"}, None) == "stock"
    other = facts_of_files({**bert, "model_type": "electra"}, None, None, ["vocab.txt"])
    assert (other["architecture"], other["params"], other["licence"]) == ("electra", None, "none stated")
    assert facts_of_files(bert, None, None, ["spiece.model"])["vocab_kind"] == "sentencepiece"
    assert facts_of_files(bert, None, None, ["vocab.json", "merges.txt"])["vocab_kind"] == "bpe"
    assert facts_of_files({**bert, "hidden_size": "64"}, None, None, [])["error"] == (
        "config unreadable: config.json: hidden_size is not a count (str)")
    assert facts_of_files([1], None, None, [])["error"] == "config unreadable: config.json is a JSON list, not an object"
    assert facts_of_files(None, None, None, [])["error"] == "config unreadable: the repo has no config.json"
    assert card_metadata("# no front matter\n", "x/README.md") == {}
    assert card_metadata("---\nlicense: mit\ntags: [a]\n---\ntext", "w") == {"license": "mit", "tags": ["a"]}
    with pytest.raises(ZhBertError, match=r"^x/README.md: the YAML front matter: not valid YAML"):
        card_metadata("---\nlicense: [mit\n---\n", "x/README.md")
    with pytest.raises(ZhBertError, match=r"^x/README.md: the YAML front matter is a str, not a mapping$"):
        card_metadata("---\njust text\n---\n", "x/README.md")


@pytest.mark.slow
def test_repo_facts_through_olah_mirror(olah, published, run_dir, online):  # noqa: F811
    """The published run read back through olah (a real mirror serving it from git)."""
    final = run_dir / "final"
    facts = repo_facts(published, endpoint=olah)
    assert facts["error"] is None, facts
    assert facts == {**facts, "architecture": "bert", "layers": 2, "hidden": 128, "params": _formula(final),
                     "vocab_size": 21128, "vocab_kind": "char (WordPiece)", "load_safety": "stock"}
    assert facts["licence"] != "none stated"   # publish writes the card's licence
