"""`zh-bert convert`: released checkpoints made by their own tools (tests/data/convert_fixtures/README.md says how:
TensorFlow's Saver with Google's names and Adam slots, UER-py's converter before and after its 2023 key change,
TencentPretrain's, transformers' own pytorch_model.bin) become stock folders that give the logits those tools
computed, within 1e-5; every bad input is one line, leaves no OUT and changes no input."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from _tf_index import varint
from conftest import DATA, SAMPLE
from zh_bert.cli import main

FIXTURES = DATA / "convert_fixtures"
KINDS = ("hf", "tf1", "uer_legacy", "uer_modular", "tencentpretrain")
#: what conversion.json must say of each fixture: (kind, key generation)
SOURCE = {"hf": ("hf", None), "tf1": ("tf1", None), "uer_legacy": ("uer", "legacy"), "uer_modular": ("uer", "modular"),
          "tencentpretrain": ("tencentpretrain", "modular")}
TF4 = os.environ.get("ZH_BERT_TF4_PYTHON")
#: TencentPretrain's converter wrote the same bytes as UER-py's current one (README.md): its fixture is that folder
FOLDER = {"tencentpretrain": "uer_modular"}


def fixture(kind: str) -> Path:
    return FIXTURES / FOLDER.get(kind, kind)


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its sha256: what a refused command must leave exactly as it was."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Each fixture converted once by the command (tencentpretrain with --from, the others detected)."""
    root = tmp_path_factory.mktemp("converted")
    before = tree(FIXTURES)
    out = {}
    for kind in KINDS:
        out[kind] = root / kind
        extra = ["--from", "tencentpretrain"] if kind == "tencentpretrain" else []
        assert main(["convert", str(fixture(kind)), "-o", str(out[kind]), *extra]) == 0
    assert tree(FIXTURES) == before, "convert changed its input"
    return out


def logits(folder: Path, ref) -> tuple[np.ndarray, np.ndarray]:
    import torch
    from transformers import AutoModelForMaskedLM, BertForPreTraining

    batch = {k: torch.tensor(ref[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        mlm = AutoModelForMaskedLM.from_pretrained(str(folder)).eval()(**batch).logits.numpy()
        nsp = BertForPreTraining.from_pretrained(str(folder)).eval()(**batch).seq_relationship_logits.numpy()
    return mlm, nsp


@pytest.mark.parametrize("kind", KINDS)
def test_converted_model_gives_the_source_tools_logits(kind, converted):
    """The reference logits were computed by the source's own code (TensorFlow, UER-py, TencentPretrain,
    transformers 4.x) when the fixture was made; the converted folder, loaded by AutoModelForMaskedLM, gives them."""
    from transformers import AutoTokenizer

    ref = np.load(fixture(kind) / "reference_logits.npz")
    mlm, nsp = logits(converted[kind], ref)
    valid = ref["attention_mask"].astype(bool)
    assert np.abs(mlm - ref["mlm"])[valid].max() < 1e-5 and np.abs(nsp - ref["nsp"]).max() < 1e-5
    assert AutoTokenizer.from_pretrained(str(converted[kind]))("北京")["input_ids"] == [2, 40, 23, 3]
    record = json.loads((converted[kind] / "conversion.json").read_text(encoding="utf-8"))
    assert (record["source"]["kind"], record["source"]["key_generation"]) == SOURCE[kind]
    assert record["model"]["class"] == "BertForPreTraining" and record["model"]["predicts"] == ["mlm", "nsp"]
    for name, digest in record["source"]["files"].items():
        assert hashlib.sha256((fixture(kind) / name).read_bytes()).hexdigest() == digest
    eq = record["equality"]
    assert eq["mlm_max_abs_diff"] < 1e-5 and eq["nsp_max_abs_diff"] < 1e-5
    if kind == "tf1":   # Google's 2018 modeling.py: gelu is erf, what a plain rename gives too
        assert record["tensors"]["skipped"] == {"adam_m": 46, "adam_v": 46, "global_step": 1}
        assert record["model"]["hidden_act"] == "gelu" and record["source"]["gelu"] == "erf" and "rename_only" not in eq
    if kind.startswith(("uer", "tencent")):   # UER's LayerNorm: a plain rename is off by far more than 1e-5
        assert eq["rename_only"]["mlm_max_abs_diff"] > 1e-2


def test_gelu_tanh_converts_a_checkpoint_trained_with_googles_later_code(tmp_path, capsys):
    """`--gelu tanh`: modeling.py since 2019-02-07 (the curve TensorFlow computed `reference_logits_tanh.npz`
    with); OUT says `gelu_new`, equal to that forward within 1e-5, and a plain rename (erf) is measurably off.
    `--gelu` of a format that names its curve is one line."""
    out = tmp_path / "tanh"
    assert main(["convert", str(FIXTURES / "tf1"), "-o", str(out), "--gelu", "tanh"]) == 0
    ref = np.load(FIXTURES / "tf1" / "reference_logits_tanh.npz")
    mlm, nsp = logits(out, ref)
    valid = ref["attention_mask"].astype(bool)
    assert np.abs(mlm - ref["mlm"])[valid].max() < 1e-5 and np.abs(nsp - ref["nsp"]).max() < 1e-5
    record = json.loads((out / "conversion.json").read_text(encoding="utf-8"))
    assert record["model"]["hidden_act"] == "gelu_new" and record["source"]["gelu"] == "tanh"
    assert record["equality"]["rename_only"]["mlm_max_abs_diff"] > 1e-4
    assert json.loads((out / "config.json").read_text())["hidden_act"] == "gelu_new"
    capsys.readouterr()
    assert main(["convert", str(FIXTURES / "uer_modular"), "-o", str(tmp_path / "uer"), "--gelu", "tanh"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only a TensorFlow 1 checkpoint leaves its gelu's curve unsaid" in err[0]


def _renamed(tmp: Path, kind: str, rename) -> Path:
    """A copy of fixture `kind` whose .bin has its keys renamed: the names other commits of the same tool wrote."""
    import torch

    src = tmp / f"{kind}-renamed"
    shutil.copytree(FIXTURES / kind, src)
    name = "pytorch_model.bin" if kind == "hf" else "model.bin"
    state = torch.load(src / name, weights_only=True)
    torch.save({rename(k): v for k, v in state.items()}, src / name)
    return src


@pytest.mark.parametrize("kind, rename, generation", [
    # UER-py before Feb 2022 (commit 4784e5f renamed nsp_linear to sp_linear)
    ("uer_legacy", lambda k: k.replace("target.sp_linear", "target.nsp_linear"), "legacy"),
    # UER-py's converter from "Modify Target" (#368, July 2023) to "Modify convert" (#395, Oct 2023)
    ("uer_modular", lambda k: k.replace("target.mlm.layer_norm", "target.layer_norm"), "October 2023"),
    # pytorch-pretrained-bert's names (bert-base-chinese's first pytorch_model.bin: UER-py #45)
    ("hf", lambda k: k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"), None),
])
def test_other_spellings_of_the_same_format_convert_equal(kind, rename, generation, tmp_path):
    src = _renamed(tmp_path, kind, rename)
    assert main(["convert", str(src), "-o", str(tmp_path / "out")]) == 0
    ref = np.load(FIXTURES / kind / "reference_logits.npz")
    mlm, _ = logits(tmp_path / "out", ref)
    assert np.abs(mlm - ref["mlm"])[ref["attention_mask"].astype(bool)].max() < 1e-5
    record = json.loads((tmp_path / "out" / "conversion.json").read_text(encoding="utf-8"))
    assert generation is None or generation in record["source"]["key_generation"]


def _index_past_end(src: Path) -> None:
    """The footer's index-block handle moved past the end of the file (a block handle nothing can read)."""
    index = src / "bert_model.ckpt.index"
    data = index.read_bytes()
    footer = data[-48:]
    handles, pos = [], 0
    for _ in range(4):
        n = shift = 0
        while True:
            b = footer[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        handles.append(n)
    body = varint(handles[0]) + varint(handles[1]) + varint(handles[2] + 10_000) + varint(handles[3])
    index.write_bytes(data[:-48] + body.ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57))


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


class Hostile:
    """A pickle whose unpickling would run a shell command that leaves a marker file (it must never run)."""

    marker = ""

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hostile(src: Path) -> None:
    import torch

    Hostile.marker = str(src / "MARKER")
    torch.save({"embedding.word.embedding.weight": Hostile()}, src / "model.bin")


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def _state_of_other_architecture(src: Path, names: list[str]) -> None:
    import torch

    torch.save({n: torch.zeros(2, 2) for n in names}, src / "model.bin")


BAD = {   # fixture, how to break the copy, what the one line says
    "truncated-shard": ("tf1", lambda s: (s / "bert_model.ckpt.data-00000-of-00001").write_bytes(
        (s / "bert_model.ckpt.data-00000-of-00001").read_bytes()[:100_000]), "the shard is truncated"),
    "index-past-end": ("tf1", _index_past_end, "runs past the end of the file"),
    "index-cut": ("tf1", lambda s: (s / "bert_model.ckpt.index").write_bytes((s / "bert_model.ckpt.index").read_bytes()[:-60]),
                  "not a TensorFlow checkpoint index"),
    "shard-corrupt": ("tf1", lambda s: _flip_byte(s / "bert_model.ckpt.data-00000-of-00001", 50), "fails its CRC check"),
    "missing-vocab": ("uer_modular", lambda s: (s / "vocab.txt").unlink(), "no vocab.txt beside the checkpoint"),
    "tf1-missing-vocab": ("tf1", lambda s: (s / "vocab.txt").unlink(), "no vocab.txt"),
    "config-shape": ("tf1", lambda s: _edit_json(s / "bert_config.json", intermediate_size=64),
                     "intermediate/dense/kernel is [32, 48], but the config and vocab give [32, 64]"),
    "uer-config-shape": ("uer_legacy", lambda s: _edit_json(s / "config.json", hidden_size=64, emb_size=64),
                         "is [120, 32], but the config and vocab give [120, 64]"),
    "vocab-size": ("hf", lambda s: (s / "vocab.txt").write_text("[PAD]\n[UNK]\n", encoding="utf-8"),
                   "vocab_size 120, but the vocab file has 2 tokens"),
    "albert-config": ("uer_modular", lambda s: _edit_json(s / "config.json", factorized_embedding_parameterization=True),
                      "ALBERT's factorized embedding, an architecture zh-bert cannot express"),
    "albert-tf1": ("tf1", lambda s: _edit_json(s / "bert_config.json", embedding_size=16, num_hidden_groups=1),
                   "embedding_size is a key of ALBERT's config"),
    "albert-names": ("uer_modular", lambda s: _state_of_other_architecture(s, ["albert.embeddings.word_embeddings.weight"]),
                     "tensor albert.embeddings.word_embeddings.weight is ALBERT's"),
    "xlnet-names": ("uer_modular", lambda s: _state_of_other_architecture(s, ["transformer.layer.0.rel_attn.q"]),
                    "tensor transformer.layer.0.rel_attn.q is XLNet's"),
    "hostile-pickle": ("uer_modular", _hostile, "refused: not a plain state dict of tensors (it would call posix.system)"),
    "wrong-from": ("uer_modular", lambda s: None, "holds no TensorFlow 1 checkpoint"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_leaves_no_out_and_changes_no_input(case, tmp_path, capsys, monkeypatch):
    kind, spoil, says = BAD[case]
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / kind, src)
    spoil(src)
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    extra = ["--from", "tf1"] if case == "wrong-from" else []
    rc = main(["convert", str(src), "-o", "out", *extra])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("zh-bert convert: error: "), err
    assert says in lines[0] and "Traceback" not in err, lines[0]
    assert tree(tmp_path) == before and not (tmp_path / "out").exists()
    assert not (src / "MARKER").exists()


def test_out_is_never_a_folder_of_someone_else_nor_inside_src(tmp_path, capsys):
    theirs = tmp_path / "thesis"
    theirs.mkdir()
    (theirs / "draft.tex").write_text("四年的心血\n", encoding="utf-8")
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "uer_modular", src)
    for out, says in ((theirs, "is not an earlier output of zh-bert convert"), (src / "out", "inside the input")):
        before = tree(tmp_path)
        assert main(["convert", str(src), "-o", str(out), "--force"]) == 2
        assert says in capsys.readouterr().err and tree(tmp_path) == before


def test_force_replaces_only_an_earlier_convert_output(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", str(FIXTURES / "uer_legacy"), "-o", str(out)]) == 0
    assert main(["convert", str(FIXTURES / "uer_legacy"), "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["convert", str(FIXTURES / "tf1"), "-o", str(out), "--force"]) == 0
    assert json.loads((out / "conversion.json").read_text(encoding="utf-8"))["source"]["kind"] == "tf1"


def test_crc32c_is_the_standard_in_tensorflows_masked_form():
    """google-crc32c's C code (not its slow pure-Python fallback) gives the CRC-32C check value, stored masked as
    LevelDB's `crc32c::Mask`."""
    import google_crc32c

    from zh_bert.hub.tf_checkpoint import masked_crc

    assert google_crc32c.implementation == "c"
    assert google_crc32c.value(b"123456789") == 0xE3069283          # the CRC-32C check value
    crc = 0xE3069283
    assert masked_crc(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_models_says_each_entry_source_format():
    from zh_bert.hub.catalog import CATALOG, catalog_json, format_table

    assert "format" in format_table().splitlines()[0].split()
    assert [e["source_format"] for e in catalog_json(None)["catalog"]] == [e.source_format for e in CATALOG]


@pytest.mark.parametrize("kind", ["tf1", "uer_modular"])
def test_download_converts_a_release_on_arrival(kind, hub, online, tmp_path):
    """A repo that ships a TensorFlow 1 checkpoint (or a UER .bin) is converted by the same code on download."""
    from hub_server import Repo

    repo = Repo(owner="zh-org", private=False)
    repo.commit("main", {p.name: p.read_bytes() for p in (FIXTURES / kind).iterdir()
                         if p.name != "reference_logits.npz"}, "release")
    hub.repos[f"zh-org/release-{kind}"] = repo
    out = tmp_path / "out"
    assert main(["download", f"zh-org/release-{kind}", "-o", str(out), "--endpoint", hub.url,
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    assert {"model.safetensors", "conversion.json", ".zh-bert-download.json"} <= {p.name for p in out.iterdir()}
    ref = np.load(FIXTURES / kind / "reference_logits.npz")
    mlm, _ = logits(out, ref)
    assert np.abs(mlm - ref["mlm"])[ref["attention_mask"].astype(bool)].max() < 1e-5


PROBE_TF4 = r'''
import json, sys, numpy as np, torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForPreTraining
job, out = json.loads(sys.stdin.read()), {}
for kind, (folder, ref_path) in job.items():
    ref = np.load(ref_path)
    batch = {k: torch.tensor(ref[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        mlm = AutoModelForMaskedLM.from_pretrained(folder).eval()(**batch).logits.numpy()
        nsp = BertForPreTraining.from_pretrained(folder).eval()(**batch).seq_relationship_logits.numpy()
    valid = ref["attention_mask"].astype(bool)
    out[kind] = [float(np.abs(mlm - ref["mlm"])[valid].max()), float(np.abs(nsp - ref["nsp"]).max()),
                 AutoTokenizer.from_pretrained(folder)("北京")["input_ids"]]
import transformers
out["version"] = transformers.__version__
print(json.dumps(out))
'''


@pytest.mark.slow
def test_converted_folders_load_in_transformers_4(converted):
    if not TF4:
        if os.environ.get("CI"):
            pytest.fail("ZH_BERT_TF4_PYTHON is not set: .ci/run must create the transformers 4.x venv")
        pytest.skip("no transformers 4.x python (set ZH_BERT_TF4_PYTHON; .ci/run does)")
    job = {k: [str(converted[k]), str(fixture(k) / "reference_logits.npz")] for k in KINDS}
    r = subprocess.run([TF4, "-c", PROBE_TF4], input=json.dumps(job), capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got.pop("version").startswith("4.")
    for kind, (mlm, nsp, ids) in got.items():
        assert mlm < 1e-5 and nsp < 1e-5 and ids == [2, 40, 23, 3], (kind, mlm, nsp, ids)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tf1", "uer_legacy"])
def test_pretrain_continues_from_a_converted_folder(kind, converted, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = [ln for ln in (SAMPLE / "zhwiki_sampled.txt").read_text(encoding="utf-8").split("\n") if ln.strip()][:40]
    Path("docs.jsonl").write_text("".join(json.dumps({"text": t, "source": str(i)}, ensure_ascii=False) + "\n"
                                          for i, t in enumerate(lines)), encoding="utf-8")
    Path("r.yaml").write_text("data: [docs.jsonl]\nout_dir: run\nmax_steps: 2\nseq_len: 24\nglobal_batch: 4\n"
                              "micro_batch: 4\nvalid_docs: 4\nobjective: mlm+nsp\n", encoding="utf-8")
    assert main(["pretrain", "r.yaml", "--set", f"init_from={converted[kind]}"]) == 0
    run = json.loads(Path("run/run.json").read_text(encoding="utf-8"))
    assert run["status"] == "finished" and Path("run/final/model.safetensors").is_file()
