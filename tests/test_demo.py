"""The cloze demo: pure fill logic (blank parsing, joint decoding, messages), the Gradio `fill` API through
gradio_client against a live in-process server, and the CLI's no-model message."""

from __future__ import annotations

import math
from pathlib import Path
import subprocess
import sys
from types import SimpleNamespace

import pytest

from zh_bert.release.demo import (FillError, ModelPool, check_input, fill, filled_text, masked_ids, parse_blanks, result_html,
                          run_fill)


@pytest.mark.parametrize("text,lengths,pieces", [
    ("北京是中国的[MASK]都。", [1], ["北京是中国的", "都。"]),
    ("[MASK][MASK]是首都", [2], ["", "是首都"]),
    ("他是一名优秀的＿＿。", [2], ["他是一名优秀的", "。"]),
    ("长江是中国最长的____，", [2], ["长江是中国最长的", "，"]),
    ("a__b[MASK]c＿d", [1, 1, 1], ["a", "b", "c", "d"]),
    ("[MASK]＿__", [3], ["", ""]),
    ("没有空格_的句子", [], ["没有空格_的句子"]),
])
def test_parse_blanks(text, lengths, pieces):
    p, blanks = parse_blanks(text)
    assert [b.length for b in blanks] == lengths and p == pieces


def test_messages_for_bad_input():
    for text, needle in [("北京是中国的首都。", "No blank"), ("", "Type a Chinese sentence"),
                         ("好" * 300 + "[MASK]", "too long"), ("[MASK]，" * 9, "Too many blanks"),
                         ("[MASK]" * 5, r"too long \(at most 4\)"),
                         ("\ud800中[MASK]", r"character 1 is a lone surrogate \(U\+D800\)")]:
        with pytest.raises(FillError, match=needle):
            check_input(text, parse_blanks(text)[1])


@pytest.fixture(scope="module")
def tok(google_tokdir):
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    t = load_tokenizer(google_tokdir)
    assert t.convert_tokens_to_ids("北") == 1266
    return t


def test_masked_ids_positions(tok):
    ids, pos = masked_ids(tok, *parse_blanks("北京是中国的[MASK]都，＿＿。"))
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert pos == [[7], [10, 11]] and all(ids[p] == tok.mask_token_id for ps in pos for p in ps)


class WordModel:
    """A fake masked LM over two blank positions (1, 2) whose marginals mislead independent filling:
    alone, position 1 prefers 北 (.55 vs 上 .45) and position 2 prefers 海 (.6 vs 京 .4), giving 北海; but
    given either neighbour it knows the word (北→京, 京→北, 上→海, 海→上). Joint decoding must give whole
    words: 上海 (.6 × .9) then 北京 (.4 × .9), never 北海."""

    def __init__(self, tok):
        import torch

        self.t = torch
        self.config = SimpleNamespace(max_position_embeddings=512)
        self.mask = tok.mask_token_id
        self.v = len(tok)
        self.id = {c: tok.convert_tokens_to_ids(c) for c in "北京上海"}

    def __call__(self, input_ids, attention_mask=None):
        t, ID = self.t, self.id
        logits = t.full((*input_ids.shape, self.v), -30.0)
        for b, row in enumerate(input_ids.tolist()):
            left, right = row[1], row[2]
            p1 = {ID["北"]: .55, ID["上"]: .45} if right == self.mask else (
                {ID["上"]: .9, ID["北"]: .1} if right == ID["海"] else {ID["北"]: .9, ID["上"]: .1})
            p2 = {ID["海"]: .6, ID["京"]: .4} if left == self.mask else (
                {ID["京"]: .9, ID["海"]: .1} if left == ID["北"] else {ID["海"]: .9, ID["京"]: .1})
            for pos, dist in ((1, p1), (2, p2)):
                for k, p in dist.items():
                    logits[b, pos, k] = math.log(p)
        return SimpleNamespace(logits=logits)


def test_joint_filling_gives_whole_words(tok):
    res = fill(WordModel(tok), tok, "[MASK][MASK]是中国的大城市。", top_k=2)
    cands = [(c["text"], c["prob"]) for c in res[0]["candidates"]]
    assert [c for c, _ in cands] == ["上海", "北京"]
    assert cands[0][1] == pytest.approx(0.54, rel=1e-3) and cands[1][1] == pytest.approx(0.36, rel=1e-3)
    assert filled_text("[MASK][MASK]是中国的大城市。", res) == "上海是中国的大城市。"


def test_fill_real_tiny_model(nudged_tiny):
    from zh_bert.release.demo import load_model

    model, tok = load_model(str(nudged_tiny))
    res = fill(model, tok, "北京是中国的[MASK]都。他是＿＿。", top_k=5)
    assert [r["length"] for r in res] == [1, 2]
    first = res[0]["candidates"]
    assert first[0]["text"] == "首" and len(first) == 5
    probs = [c["prob"] for c in first]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
    assert all(len(c["text"]) >= 2 for c in res[1]["candidates"])
    assert not any(c["text"].startswith("[") for r in res for c in r["candidates"])  # no special tokens


def test_run_fill_never_raises(nudged_tiny, tiny_model_dir):
    pool = ModelPool([str(nudged_tiny)])
    assert "No blank" in run_fill(pool, "北京是中国的首都。", str(nudged_tiny))["error"]
    r = run_fill(pool, "北京是中国的[MASK]都。", str(nudged_tiny), 3, "no-such-alias")
    assert r["blanks"][0]["candidates"][0]["text"] == "首" and "neither a catalog alias" in r["compare"]["error"]
    r = run_fill(pool, "北京是中国的[MASK]都。", str(nudged_tiny), 3, str(tiny_model_dir))
    main_html, cmp_html = result_html(r)
    assert "首" in main_html and "zh-cand" in cmp_html and r["compare"]["model"] == str(tiny_model_dir)
    assert "⚠️" in result_html(run_fill(pool, "", str(nudged_tiny)))[0]


def test_gradio_client_fill_api(demo_url, nudged_tiny):
    from gradio_client import Client

    client = Client(demo_url, verbose=False)
    api = client.view_api(print_info=False, return_format="dict")
    assert list(api["named_endpoints"]) == ["/fill"]
    out = client.predict("北京是中国的[MASK]都。", str(nudged_tiny), 5, "(none)", api_name="/fill")
    assert out["blanks"][0]["candidates"][0]["text"] == "首" and len(out["blanks"][0]["candidates"]) == 5
    assert out["filled"] == "北京是中国的首都。"
    out = client.predict("北京是中国的首都。", str(nudged_tiny), 5, "(none)", api_name="/fill")
    assert "No blank" in out["error"]


def test_run_fill_lone_surrogate_is_a_message_and_json_safe(nudged_tiny):
    """A lone surrogate (possible only through the raw API) is answered with what is wrong, and the answer
    encodes as JSON (Gradio's orjson refuses surrogates: the client would get {"error": null})."""
    import orjson

    pool = ModelPool([str(nudged_tiny)])
    for text, at in [("\ud800中[MASK]", 1), ("北京是中国的[MASK]都\udfff", 14)]:
        r = run_fill(pool, text, str(nudged_tiny))
        assert f"character {at} is a lone surrogate" in r["error"] and "blanks" not in r, r
        assert r["text"] == text.replace(text[at - 1], "\ufffd") and orjson.loads(orjson.dumps(r)) == r
    assert "Type a Chinese sentence" in run_fill(pool, None, str(nudged_tiny))["error"]


def _raw_fill(url: str, *data) -> tuple[str, object]:
    """POST the /fill API as raw JSON (\\u escapes, so a lone surrogate survives the trip), then read the
    result stream; (last event name, its data)."""
    import json

    import httpx

    r = httpx.post(f"{url}/gradio_api/call/fill", content=json.dumps({"data": list(data)}),
                   headers={"Content-Type": "application/json"}, timeout=60)
    r.raise_for_status()
    events = httpx.get(f"{url}/gradio_api/call/fill/{r.json()['event_id']}", timeout=120).text
    name = payload = None
    for line in events.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name != "heartbeat":
            payload = json.loads(line[6:])
    return name, payload


def test_raw_api_lone_surrogate_gets_a_message(demo_url, nudged_tiny):
    name, out = _raw_fill(demo_url, "\ud800中[MASK]", str(nudged_tiny), 5, "(none)")
    assert name == "complete", (name, out)
    assert "lone surrogate (U+D800)" in out[0]["error"] and out[0]["text"] == "\ufffd中[MASK]"
    name, out = _raw_fill(demo_url, "北京是中国的[MASK]都。", str(nudged_tiny), 5, "(none)")
    assert name == "complete" and out[0]["filled"] == "北京是中国的首都。"


def test_cli_without_model_says_how_to_get_one(tmp_path):
    r = subprocess.run([sys.executable, "-m", "zh_bert", "demo"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "zh-bert pretrain recipes/tiny-cpu.yaml" in r.stderr and "zh-bert download" in r.stderr


def test_cli_serves_default_tiny_run_on_localhost(nudged_tiny, tmp_path):
    """`zh-bert demo` with no argument serves runs/tiny-cpu/final (the README recipe's output) on 127.0.0.1."""
    import os
    import shutil

    from gradio_client import Client

    from hub_server import free_port, serving

    shutil.copytree(nudged_tiny, tmp_path / "runs" / "tiny-cpu" / "final")
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(Path(__file__).parent.parent)}
    cmd = [sys.executable, "-m", "zh_bert", "demo", "--port", str(port), "--threads", "1"]
    with serving(cmd, f"http://127.0.0.1:{port}/", tmp_path / "demo.log", timeout=90, cwd=tmp_path, env=env):
        out = Client(f"http://127.0.0.1:{port}", verbose=False).predict(
            "北京是中国的[MASK]都。", "runs/tiny-cpu/final", 3, "(none)", api_name="/fill")
        assert out["filled"] == "北京是中国的首都。"
        import socket

        with socket.socket() as s:  # bound to loopback only
            ip = [a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")]
            if ip:
                assert s.connect_ex((ip[0], port)) != 0


def test_space_app_builds(nudged_tiny, monkeypatch):
    """demo/app.py (the Space entry point) builds the same Blocks from $ZH_BERT_MODELS without launching."""
    import runpy

    monkeypatch.setattr(sys, "argv", ["app.py"])
    monkeypatch.setenv("ZH_BERT_MODELS", str(nudged_tiny))
    ns = runpy.run_path(str(Path(__file__).parent.parent / "demo" / "app.py"), run_name="space_app")
    assert ns["models"] == [str(nudged_tiny)] and ns["demo"].zh_pool.choices[0] == str(nudged_tiny)


def test_model_arguments(nudged_tiny, tmp_path):
    """A run dir serves its final/; an ORG/NAME that is not a local folder stays a repo id (as the model card's
    `zh-bert demo ORG/NAME` says); a missing local path is refused by name."""
    import shutil

    from zh_bert.release.demo import DemoConfig, model_arg
    from zh_bert.core.errors import ZhBertError

    run = tmp_path / "run"
    shutil.copytree(nudged_tiny, run / "final")
    assert model_arg(str(run)) == str(run / "final")
    assert model_arg("zh-org/tiny-zh") == "zh-org/tiny-zh" and model_arg("uer-tiny") == "uer-tiny"
    with pytest.raises(ZhBertError, match="no such checkpoint"):
        model_arg(str(tmp_path / "missing"))
    with pytest.raises(ZhBertError, match="--port: must be between 1 and 65535, got 70000"):
        DemoConfig(port=70000)
    with pytest.raises(ZhBertError, match="--port: must be between 1 and 65535, got 0"):
        DemoConfig(port=0)


def _demo_fails_before_gradio(args: list[str], cwd: Path) -> str:
    """Run `zh-bert demo ARGS` in a fresh interpreter; it must fail with one line, without importing Gradio."""
    code = ("import sys; from zh_bert.cli import main; rc = main(sys.argv[1:]); "
            "assert 'gradio' not in sys.modules, 'gradio was imported'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, "demo", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("zh-bert demo: error: "), r.stderr
    return lines[0]


def test_port_in_use_is_one_line_before_gradio(nudged_tiny, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        line = _demo_fails_before_gradio([str(nudged_tiny), "--port", str(port)], tmp_path)
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in line


@pytest.mark.slow
def test_broken_second_model_is_one_line_at_start(nudged_tiny, tmp_path):
    """Models load lazily on the page, but every local MODEL named on the command line is checked first."""
    import os
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(nudged_tiny, broken)
    os.truncate(broken / "model.safetensors", 1000)
    line = _demo_fails_before_gradio([str(nudged_tiny), str(broken), "--port", "65003"], tmp_path)
    assert f"{broken / 'model.safetensors'}: cannot open the weights" in line
    (broken / "config.json").write_text("{not json")
    line = _demo_fails_before_gradio([str(nudged_tiny), str(broken), "--port", "65003"], tmp_path)
    assert f"{broken}: cannot load a model config" in line
