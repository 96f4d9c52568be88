"""`zh-bert shard --executor local --tasks N`: a multi-part SHARDDIR holds the same documents, split the same
way, for any N and as the in-process build; it reads as one dataset (one index space, exact resume, disjoint
ranks); a killed job finishes on rerun with the same bytes; directories of parts (.gz too) are corpora."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import CHAR_SEQ, REPO
from zh_bert.core.errors import ZhBertError

SEQ = 64
FRACTION = "0.1"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def shard(*argv: str) -> int:
    from zh_bert.corpus.shard import main

    return main([str(a) for a in argv])


def shard_cli(*argv, fault: str | None = None) -> subprocess.CompletedProcess:
    """`zh-bert shard` in its own process group; whatever it leaves running when killed (datatrove's manager
    process) is killed with it, as a job scheduler would."""
    env = {**ENV, **({"ZH_BERT_FAULT": fault} if fault else {})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([sys.executable, "-m", "zh_bert", "shard", *map(str, argv)], cwd=REPO, env=env,
                             stdout=out, stderr=err, text=True, start_new_session=True)
        try:
            rc = p.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(p.args, rc, out.read(), err.read())


@pytest.fixture(scope="module")
def parts(tmp_path_factory, sample_jsonl, google_tokdir):
    """`parts(tasks)`: the sample corpus sharded by `--executor local --tasks N`, built once per N."""
    built = {}

    def build(tasks: int) -> Path:
        if tasks not in built:
            out = tmp_path_factory.mktemp(f"parts{tasks}") / "shards"
            assert shard(sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--seq-len", SEQ, "--valid-fraction",
                         FRACTION, "--executor", "local", "--tasks", tasks, "--workers", 1) == 0
            built[tasks] = out
        return built[tasks]

    return build


def documents(sharddir: Path, split: str) -> Counter:
    """The token sequence of every document in a packed split, recovered from the rows: within one part, the
    rows' contents ([CLS] and the row's last [SEP] dropped) are one stream of documents joined by [SEP]."""
    from zh_bert.train.data import ShardDataset

    ds = ShardDataset(sharddir, split)
    sizes = [p["counts"][split]["sequences"] for p in ds.meta.get("parts", [{"counts": ds.meta["counts"]}])]
    docs, row = Counter(), 0
    for n in sizes:
        stream = np.concatenate([np.zeros(0, np.int64)] + [np.asarray(ds.ids[r, 1:int(ds.lengths[r]) - 1], np.int64)
                                                           for r in range(row, row + n)])
        bounds = np.concatenate([[-1], np.flatnonzero(stream == ds.sep_id), [len(stream)]])
        docs.update(tuple(stream[a + 1:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:]) if b > a + 1)
        row += n
    return docs


def split_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith(("train.", "valid."))}


# ---------------------------------------------------------------------------------------------- the split
def test_documents_and_hash_split_do_not_depend_on_tasks(parts, build_shards, sample_jsonl, google_tokdir):
    one, three = parts(1), parts(3)
    inproc = build_shards(sample_jsonl, google_tokdir, "--seq-len", str(SEQ), "--valid-fraction", FRACTION)
    # one task reads the file as the in-process build does: the very same bytes
    assert split_files(one / "part-00000") == split_files(inproc)
    assert (one / "unigram_counts.npy").read_bytes() == (inproc / "unigram_counts.npy").read_bytes()
    # three tasks: the same documents in each split, however the corpus was cut
    for split in ("train", "valid"):
        assert documents(three, split) == documents(inproc, split), split
    meta = json.loads((three / "meta.json").read_text(encoding="utf-8"))
    assert [p["name"] for p in meta["parts"]] == ["part-00000", "part-00001", "part-00002"]
    assert all(p["text"]["docs"] > 100 for p in meta["parts"]), "one .jsonl is cut across all three tasks"
    assert sum(p["text"]["docs"] for p in meta["parts"]) == meta["text"]["documents"] == 600
    for split in ("train", "valid"):
        for k in ("documents", "sequences", "tokens"):
            assert meta["counts"][split][k] == sum(p["counts"][split][k] for p in meta["parts"])
    assert 30 <= meta["valid_docs"] <= 90 and meta["valid_fraction"] == 0.1    # ~10% of 600
    summed = sum(np.load(three / p["name"] / "unigram_counts.npy") for p in meta["parts"])
    top = np.load(three / "unigram_counts.npy")
    assert top[meta["special_ids"]].sum() == 0 and (top == np.where(top > 0, summed, 0)).all()
    assert meta["tokenizer_fingerprint"] == json.loads((inproc / "meta.json").read_text())["tokenizer_fingerprint"]


def test_directory_of_parts_with_gzip_is_the_same_corpus(tmp_path, sample_jsonl, google_tokdir, build_shards, parts):
    lines = sample_jsonl.read_text(encoding="utf-8").splitlines(keepends=True)
    corpus = tmp_path / "cleaned"
    corpus.mkdir()
    (corpus / "part-00000.jsonl").write_text("".join(lines[:250]), encoding="utf-8")
    with gzip.open(corpus / "part-00001.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(lines[250:]))
    single = build_shards(sample_jsonl, google_tokdir, "--seq-len", str(SEQ), "--valid-docs", "20")
    assert shard(corpus, "--tokenizer", google_tokdir, "-o", tmp_path / "a", "--seq-len", SEQ, "--valid-docs", 20,
                 "--workers", 1) == 0
    assert split_files(tmp_path / "a") == split_files(single)
    assert shard(corpus, "--tokenizer", google_tokdir, "-o", tmp_path / "b", "--seq-len", SEQ, "--valid-fraction",
                 FRACTION, "--executor", "local", "--tasks", 3, "--workers", 1) == 0
    for split in ("train", "valid"):
        assert documents(tmp_path / "b", split) == documents(parts(3), split)


def test_plan_cuts_big_files_and_keeps_compressed_ones_whole(tmp_path):
    from zh_bert.corpus.shard.parallel import plan_shares, segment_lines

    text = "".join(json.dumps({"text": f"第{i}篇文档。" * (i % 7 + 1)}, ensure_ascii=False) + "\n" for i in range(200))
    big, small = tmp_path / "big.jsonl", tmp_path / "small.jsonl.gz"
    big.write_text(text, encoding="utf-8")
    small.write_bytes(gzip.compress(text[:3000].encode()))
    shares = plan_shares([big, small], 4)
    assert [len(s) for s in shares] == [1, 1, 1, 2] and shares[3][1] == (str(small), 0, -1)
    got = [line for s in shares for p, a, b in s if p == str(big) for _, line in segment_lines(p, a, b)]
    assert got == text.splitlines()         # every line once, in order, whatever the cuts
    first = [n for n, _ in segment_lines(str(big), *shares[0][0][1:])]
    later = [n for n, _ in segment_lines(str(big), *shares[2][0][1:])]
    assert first[:3] == [1, 2, 3] and all(n < 0 for n in later)   # mid-file: byte offsets, numbered on demand


# ---------------------------------------------------------------------------------------------- reading
def test_parts_read_as_one_dataset(parts):
    from zh_bert.train.data import ShardDataset, ShardLoader
    from zh_bert.train.masking import MaskingConfig

    three = parts(3)
    ds = ShardDataset(three)
    meta = ds.meta
    sizes = [p["counts"]["train"]["sequences"] for p in meta["parts"]]
    assert len(ds) == sum(sizes) == meta["counts"]["train"]["sequences"]
    offsets = np.cumsum([0] + sizes)
    dtype = np.dtype(meta["ids_dtype"])
    for k, p in enumerate(meta["parts"]):       # global row offsets[k] + i is row i of part k
        own = np.fromfile(three / p["name"] / "train.ids.bin", dtype=dtype).reshape(-1, SEQ)
        for i in (0, len(own) - 1):
            assert (ds[int(offsets[k] + i)]["input_ids"] == own[i]).all()
    rows = np.array([0, offsets[1] - 1, offsets[1], offsets[2] + 3, len(ds) - 1])
    assert (ds.batch(rows)["input_ids"] == np.stack([ds[int(r)]["input_ids"] for r in rows])).all()
    starts = ds.doc_starts                       # every document start is a token right after [CLS] or [SEP]
    assert len(starts) == meta["counts"]["train"]["documents"] and (np.diff(starts) > 0).all()
    r, c = starts // SEQ, starts % SEQ
    before = np.asarray(ds.ids[r])[np.arange(len(r)), c - 1]
    assert set(np.unique(before).tolist()) <= {ds.cls_id, ds.sep_id}

    two = [ShardLoader(ds, 8, MaskingConfig(), seed=1, rank=k, world_size=2) for k in (0, 1)]
    one = ShardLoader(ds, 16, MaskingConfig(), seed=1)
    for _ in range(len(ds) // 16 + 2):          # past an epoch end: every row once per epoch, split by rank
        for lo in (*two, one):
            lo.next_numpy()
        assert not set(two[0].last_indices) & set(two[1].last_indices)
        assert sorted(np.concatenate([lo.last_indices for lo in two])) == sorted(one.last_indices)
    resumed = ShardLoader(ds, 16, MaskingConfig(), seed=1)
    resumed.load_state_dict(one.state_dict())
    assert (resumed.next_numpy()["labels"] == one.next_numpy()["labels"]).all()


def test_pairs_per_part(tmp_path, sample_jsonl, google_tokdir):
    from zh_bert.train.data import ShardDataset

    out = tmp_path / "sop"
    assert shard(sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--seq-len", SEQ, "--pairs", "sop",
                 "--executor", "local", "--tasks", 2, "--workers", 1) == 0
    ds = ShardDataset(out)
    b = ds.batch(np.arange(len(ds)))
    assert len(ds) == sum(p["counts"]["train"]["sequences"] for p in ds.meta["parts"]) > 100
    assert set(np.unique(b["next_sentence_label"]).tolist()) == {0, 1}
    assert (b["token_type_ids"].sum(1) > 0).all()


# ---------------------------------------------------------------------------------------------- kill -9, reruns
@pytest.mark.slow
def test_kill9_mid_job_then_rerun_finishes_with_the_same_bytes(tmp_path, sample_jsonl, google_tokdir, parts, capsys):
    from zh_bert.corpus.sharddir import read_meta

    out = tmp_path / "shards"
    argv = [sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--seq-len", SEQ, "--valid-fraction", FRACTION,
            "--executor", "local", "--tasks", 3, "--workers", 1]
    p = shard_cli(*argv, fault="written:part-00001")     # SIGKILL once task 1's part is complete but not renamed
    assert p.returncode == -9, p.stderr[-2000:]
    assert (out / "part-00000").is_dir() and not (out / "part-00001").exists() and not (out / "meta.json").exists()
    with pytest.raises(ZhBertError, match="unfinished `zh-bert shard --executor` job"):
        read_meta(out)
    with pytest.raises(ZhBertError, match="another zh-bert shard job's work"):   # other settings: refused
        shard(*argv[:-4], "--tasks", 2, "--workers", 1)

    p = shard_cli(*argv[:-1], 2)                        # the same job, two tasks at a time
    assert p.returncode == 0, p.stderr[-2000:]
    assert "stage shard-encode: 1 of 3 tasks finished by an earlier run, skipped" in p.stderr
    ref = parts(3)
    for name in ("part-00000", "part-00001", "part-00002"):
        assert split_files(out / name) == split_files(ref / name), name
    assert (out / "unigram_counts.npy").read_bytes() == (ref / "unigram_counts.npy").read_bytes()
    got, want = (json.loads((d / "meta.json").read_text()) for d in (out, ref))
    assert {k: v for k, v in got.items() if k not in ("build", "sources")} == \
        {k: v for k, v in want.items() if k not in ("build", "sources")}
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name]
    capsys.readouterr()
    assert shard(*argv) == 0 and "up to date" in capsys.readouterr().out


def test_in_process_rebuild_replaces_a_multi_part_sharddir(tmp_path, sample_jsonl, google_tokdir):
    from zh_bert.train.data import ShardDataset

    out = tmp_path / "shards"
    assert shard(sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--seq-len", SEQ, "--tasks", 2,
                 "--workers", 1) == 0                     # --tasks alone: the local executor
    assert "parts" in ShardDataset(out).meta
    assert shard(sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--seq-len", SEQ, "--workers", 1) == 0
    assert "parts" not in ShardDataset(out).meta and not (out / "part-00000").exists()


# ---------------------------------------------------------------------------------------------- training
@pytest.mark.slow
def test_multi_part_shards_train_and_resume_exactly_after_kill9(tmp_path, char_shards, sample_jsonl):
    """`zh-bert pretrain` on a 3-part SHARDDIR; killed right after its step-4 checkpoint, `--resume auto`
    logs exactly the losses of an uninterrupted run."""
    import torch

    from test_resume_faults import assert_same_losses, cli, losses, write_recipe
    from zh_bert.train.pretrain import main as pretrain_main

    tokdir, _ = char_shards
    sharddir = tmp_path / "shards"
    assert shard(sample_jsonl, "--tokenizer", tokdir,
                 "-o", sharddir, "--seq-len", CHAR_SEQ, "--valid-fraction", "0.07", "--executor", "local",
                 "--tasks", 3, "--workers", 1) == 0
    data = (tokdir, sharddir)
    over = dict(max_steps=8, save_every=4, eval_every=4)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert pretrain_main([str(write_recipe(tmp_path / "ref" / "r.yaml", data, **over))]) == 0
    finally:
        torch.set_num_threads(before)
    expected = losses(tmp_path / "ref" / "run")
    assert sorted(expected) == list(range(1, 9))

    recipe = write_recipe(tmp_path / "killed" / "r.yaml", data, **over)
    p = cli(str(recipe), env={"ZH_BERT_FAULT": "after:renamed@4"})
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    p = cli(str(recipe), "--resume", "auto")
    assert p.returncode == 0, p.stderr[-2000:]
    assert_same_losses(losses(tmp_path / "killed" / "run"), expected)


@pytest.mark.slow
def test_ray_executor_writes_the_same_parts(tmp_path, sample_jsonl, google_tokdir, parts):
    """A local Ray cluster (started by the command, 2 CPUs) runs the same tasks: the same bytes as local."""
    pytest.importorskip("ray")
    out = tmp_path / "shards"
    p = shard_cli(sample_jsonl, "--tokenizer", google_tokdir, "-o", out, "--seq-len", SEQ, "--valid-fraction", FRACTION,
                  "--executor", "ray", "--tasks", 3, "--workers", 2)
    assert p.returncode == 0, p.stderr[-2000:]
    ref = parts(3)
    for name in ("part-00000", "part-00001", "part-00002"):
        assert split_files(out / name) == split_files(ref / name), name
    assert (out / "unigram_counts.npy").read_bytes() == (ref / "unigram_counts.npy").read_bytes()


@pytest.mark.slow
def test_slurm_job_scripts_write_the_same_parts(tmp_path, sample_jsonl, google_tokdir, parts):
    """Through a stub `sbatch` that runs the generated job arrays here (tests/slurm_stub.py): the same bytes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "srun", "scontrol", "squeue"):
        (bin_dir / name).symlink_to(REPO / "tests" / "slurm_stub.py")
    env = {**ENV, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SLURM_STUB_STATE": str(tmp_path / "state")}
    out = tmp_path / "shards"
    p = subprocess.run([sys.executable, "-m", "zh_bert", "shard", str(sample_jsonl), "--tokenizer", str(google_tokdir),
                        "-o", str(out), "--seq-len", str(SEQ), "--valid-fraction", FRACTION, "--executor", "slurm",
                        "--tasks", "3", "--slurm-partition", "cpu"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not (tmp_path / "state" / "failed").exists()
    ref = parts(3)
    for name in ("part-00000", "part-00001", "part-00002"):
        assert split_files(out / name) == split_files(ref / name), name
    assert json.loads((out / "meta.json").read_text())["counts"] == json.loads((ref / "meta.json").read_text())["counts"]
