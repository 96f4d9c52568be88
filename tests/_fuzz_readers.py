"""The fuzz harness's child: hostile inputs for one reader, generated from a seed, each run through the reader
and classified. Run by tests/test_fuzz_readers.py under an address-space cap and a time cap:

    python tests/_fuzz_readers.py READER COUNT SEED SCRATCH

prints one JSON line {"reader", "tried", "read", "one_line", "skipped", "peak_rss_mb", "failures"}. An input ends as
"read" (the reader returned), "one_line" (a ZhBertError of one line) or "skipped" (the reader counted the input
as a skipped line or row); anything else, a traceback, is a failure, reported with how the input was made.
"""

from __future__ import annotations

import json
import random
import resource
import shutil
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from zh_bert.core.errors import ZhBertError  # noqa: E402

FIXTURES = HERE / "data" / "convert_fixtures"
HAN = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经"
HUGE = (0, 1, 2, -1, 2**31, 2**32 + 7, 2**53, 10**12, 10**19, 2**63 - 1)


def rand_text(rng: random.Random, n: int) -> str:
    pool = HAN + "，。！？ \t\n\"'\\{}[]:,0123456789abc\u2028\ufeff\x00\udc80"
    return "".join(rng.choice(pool) for _ in range(n)).encode("utf-8", "replace").decode("utf-8", "replace")


def rand_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9)
    if depth > 4 or kind < 3:
        return rng.choice([rng.choice(HUGE), rng.random() * 1e300, -0.0, True, None, rand_text(rng, rng.randrange(20)),
                           "9" * rng.choice([10, 400, 5000]), "NaN"])
    if kind < 6:
        return [rand_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rand_text(rng, rng.randrange(1, 8)): rand_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def hostile_json_text(rng: random.Random) -> str:
    """Valid JSON, deep nesting, huge numbers, constants JSON lacks, cut text, random bytes."""
    kind = rng.randrange(7)
    if kind == 0:
        d = rng.choice([10, 1000, 100_000])
        return "[" * d + "]" * (d if rng.random() < 0.5 else 0)
    if kind == 1:
        return '{"a": ' + "9" * rng.choice([400, 5000, 100_000]) + "}"
    if kind == 2:
        return rng.choice(["NaN", "[Infinity]", '{"x": -Infinity}'])
    text = json.dumps(rand_json(rng), ensure_ascii=rng.random() < 0.5)
    if kind == 3:
        return text[:rng.randrange(len(text) + 1)]
    if kind == 4:
        return rand_text(rng, rng.randrange(200))
    return text


# --------------------------------------------------------------------------- one generator + run per reader

def tf1_index(rng: random.Random, scratch: Path):
    """The TF1 fixture with its index forged: a header shard count, an entry's dtype/shape/offset/size (CRCs made
    right, as a forger would), or raw bytes flipped or cut."""
    import _tf_index

    from zh_bert.hub.tf_checkpoint import TfCheckpoint

    src = scratch / "tf1"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(FIXTURES / "tf1", src)
    index = src / "bert_model.ckpt.index"
    names = [k.decode() for k, _ in _tf_index.items(index) if k]
    how = rng.randrange(4)
    if how == 0:
        _tf_index.rewrite(index, num_shards=rng.choice(HUGE[1:]) if rng.random() < 0.8 else 0)
    elif how == 1:
        name = rng.choice(names)
        field = rng.choice(["dtype", "shape", "offset", "size", "shard"])
        value = {"dtype": rng.choice([0, 3, 7, 14, 19, 20, 99, 2**32]),
                 "shape": tuple(rng.choice(HUGE[:6] + (32, 120)) for _ in range(rng.choice([0, 1, 2, 9, 65]))),
                 "offset": rng.choice(HUGE), "size": rng.choice(HUGE), "shard": rng.choice(HUGE)}[field]
        if field in ("offset", "size", "shard", "dtype") and value < 0:
            value = 0
        _tf_index.rewrite(index, name=name, **{field: value})
    else:
        data = bytearray(index.read_bytes())
        if how == 2:
            for _ in range(rng.randrange(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data = data[:rng.randrange(len(data))]
        index.write_bytes(bytes(data))
    ckpt = TfCheckpoint.open(src / "bert_model.ckpt")
    for name in ckpt.entries:
        ckpt.array(name, weight=not name.endswith("global_step"))
    return f"tf1 index forged ({['shard count', 'entry field', 'bytes flipped', 'cut'][how]})"


def state_dict(rng: random.Random, scratch: Path):
    """A pickled state dict of hostile tensors: stride-0 views, meta and sparse tensors, odd dtypes and shapes,
    objects that are not tensors."""
    import torch

    from zh_bert.hub.sources import load_pickle

    def tensor():
        kind = rng.randrange(7)
        if kind == 0:
            width = rng.choice([1, 1000])
            return torch.zeros(width).expand(rng.choice([10, 10**5]), width)
        if kind == 1:
            return torch.empty(rng.choice([3, 10**9]), device="meta")
        if kind == 2:
            return torch.eye(4).to_sparse()
        if kind == 3:
            return torch.ones(2, dtype=rng.choice([torch.complex64, torch.int8, torch.bool, torch.float16]))
        if kind == 4:
            return torch.zeros(tuple(rng.choice([0, 1, 3]) for _ in range(rng.choice([0, 1, 8]))))
        if kind == 5:
            return rng.choice([3, "x", [torch.ones(1)], {"nested": torch.ones(1)}])
        return torch.randn(rng.randrange(1, 5), 3)

    state = {rng.choice(["bert.embeddings.word_embeddings.weight", "embedding.word.embedding.weight", "x",
                         rand_text(rng, 5)]): tensor() for _ in range(rng.randrange(1, 4))}
    path = scratch / "model.bin"
    torch.save(state, path)
    load_pickle(path)
    return "a state dict of hostile tensors"


def config_and_vocab(rng: random.Random, scratch: Path):
    """The TF1 fixture converted with a forged bert_config.json (sizes of every kind) or a vocab of random bytes."""
    from zh_bert.hub.convert import convert_checkpoint

    src = scratch / "cfg"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(scratch / "cfg-out", ignore_errors=True)
    shutil.copytree(FIXTURES / "tf1", src)
    if rng.random() < 0.7:
        config = json.loads((src / "bert_config.json").read_text())
        for key in rng.sample(sorted(config), rng.randrange(1, 4)):
            config[key] = rng.choice([*HUGE, -5, 0.5, "12", None, [], {"a": 1}, 1e308])
        (src / "bert_config.json").write_text(json.dumps(config))
    else:
        (src / "vocab.txt").write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(2000))))
    convert_checkpoint(src, scratch / "cfg-out")
    return "a forged config or vocab"


def json_text(rng: random.Random, scratch: Path):
    from zh_bert.core.fileio import parse_json, parse_json_line, read_json

    text = hostile_json_text(rng)
    if rng.random() < 0.5:
        path = scratch / "x.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        read_json(path)
    elif rng.random() < 0.5:
        parse_json(text, "x.json")
    else:
        parse_json_line(text, "x.jsonl", 1)
    return "JSON text"


def yaml_text(rng: random.Random, scratch: Path):
    from zh_bert.core.fileio import parse_yaml

    kind = rng.randrange(5)
    if kind == 0:
        width, levels = rng.choice([2, 10]), rng.choice([3, 9, 20])
        text = f"a0: &a0 [{', '.join(['x'] * width)}]\n" + "".join(
            f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]\n" for i in range(1, levels))
    elif kind == 1:
        text = "x: " + "[" * rng.choice([10, 100, 10_000]) + "]" * rng.choice([0, 10_000])
    elif kind == 2:
        text = "x: " + "9" * rng.choice([400, 5000])
    elif kind == 3:
        text = rand_text(rng, rng.randrange(300))
    else:
        import yaml

        text = yaml.safe_dump(rand_json(rng), allow_unicode=True)
    parse_yaml(text, "card")
    return f"YAML ({['aliases', 'nesting', 'digits', 'random text', 'random data'][kind]})"


def card(rng: random.Random, scratch: Path):
    """A model card whose model-index holds anything: the board's reading of it (entries, notes, placement)."""
    import yaml

    from zh_bert.hub.listing import card_metadata
    from zh_bert.leaderboard.cards import model_index_entries
    from zh_bert.leaderboard.record import group_notes, sort_entries

    def metric():
        return {"type": rng.choice(["accuracy", "f1", "cos_sim_spearman", "em", None, 3]),
                "value": rng.choice([0.5, 95, -1, 1e308, "n/a", None, [1], 10**400, float("nan")])}

    results = [{"task": rng.choice([{"type": "text-classification"}, None, "x"]),
                "dataset": rng.choice([{"type": "fewclue-eprstmt", "name": "e", "split": "test_public"},
                                       {"type": "C-MTEB/STSB", "split": "test"}, {"name": rand_text(rng, 300)}, 7]),
                "metrics": rng.choice([[metric() for _ in range(rng.randrange(6))], "bad", None])}
               for _ in range(rng.randrange(30))]
    front = yaml.safe_dump({"license": "mit", "model-index": [{"name": "m", "results": results}]}, allow_unicode=True)
    if rng.random() < 0.3:
        front = front.replace("value: 0.5", "value: &v [*v]") if rng.random() < 0.5 else front + "x: " + "[" * 500
    meta = card_metadata(f"---\n{front}---\n# m\n", "README.md")
    entries, notes = model_index_entries(meta, "README.md")
    _, more = sort_entries(entries, "README.md")
    group_notes(notes + more)
    return "a card's model-index"


def corpus(rng: random.Random, scratch: Path, fmt: str):
    """A corpus file of hostile lines (or rows) read as `clean` reads it: the reader's problems count what it
    skipped."""
    from zh_bert.corpus.clean.readers import ReadOptions, read_input
    from zh_bert.corpus.clean.source import Problems

    rows = []
    for _ in range(rng.randrange(1, 20)):
        kind = rng.randrange(6)
        rows.append({0: "好" * rng.choice([1, 10**5, 12 * 10**6]), 1: rand_text(rng, 50), 2: "",
                     3: None, 4: hostile_json_text(rng), 5: "北京是中国的首都。" * 3}[kind])
    path = scratch / f"corpus.{fmt}"
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        col = [r if rng.random() < 0.9 else rng.choice([None, "x"]) for r in rows]
        pq.write_table(pa.table({rng.choice(["text", "content", "body"]): col}), path,
                       row_group_size=rng.choice([1, 5, 100]))
    else:
        import zstandard

        lines = [json.dumps({"text": r}, ensure_ascii=False) if rng.random() < 0.6 or r is None else str(r)
                 for r in rows]
        raw = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
        if rng.random() < 0.2:
            raw = raw[:rng.randrange(len(raw) + 1)] + bytes([0xFF, 0xFE])
        path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    problems = Problems()
    for _ in read_input(path, ReadOptions(), problems):
        pass
    return ("skipped" if problems.counts else "read"), f"a {fmt} corpus of hostile rows"


def ner_file(rng: random.Random, scratch: Path):
    from zh_bert.evaluation.tasks.ner import load_ner

    files = {}
    for split in ("train", "dev", "test"):
        lines = []
        for _ in range(rng.randrange(0, 30)):
            kind = rng.randrange(5) if rng.random() < 0.004 else 0
            lines.append({0: f"{rng.choice(HAN)} {rng.choice(['B-ORG', 'M-ORG', 'E-ORG', 'S-PER', 'O', 'O'])}",
                          1: "", 2: rand_text(rng, 20), 3: f"{rng.choice(HAN)}\t{rng.choice(['O', 'B-LOC'])}\textra",
                          4: f"{'好' * rng.choice([1, 10**5])} O"}[kind])
        files[split] = scratch / f"{split}.char.bmes"
        files[split].write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    load_ner("fuzz", files["train"], files["dev"], files["test"])
    return "NER files"


def task_file(rng: random.Random, scratch: Path):
    from zh_bert.evaluation.tasks.classification import load_task

    folder = scratch / "task"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for split in ("train", "dev", "test"):
        valid = [f"{''.join(rng.choice(HAN) for _ in range(12))}\t{rng.choice('01')}" for _ in range(rng.randrange(40))]
        odd = [rng.choice([f"{rand_text(rng, 10).replace(chr(9), ' ')}\t{rng.choice(['0', '1', 'x', ''])}",
                           rand_text(rng, 30), "\t\t\t", "sentence\tlabel", "好" * rng.choice([1, 10**5]) + "\t1"])
               for _ in range(rng.choice([0, 0, 1, 5]))]
        rows = valid + odd
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8", errors="surrogatepass")
    load_task(f"tsv:{folder / 'train.tsv'},{folder / 'dev.tsv'},{folder / 'test.tsv'}")
    return "task TSV files"


def manifest(rng: random.Random, scratch: Path):
    from zh_bert.core.fileio import MANIFEST
    from zh_bert.core.fileio.claims import check_dir_ours

    folder = scratch / "out"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "a.txt").write_text("x")
    files = rng.choice([["a.txt"], ["a.txt"], ["a.txt", "../../etc/passwd"], ["/abs", "a.txt"], "a.txt", [1],
                        {"a.txt": {"size": rng.choice(HUGE)}}, ["a.txt"] * 1000, [rand_text(rng, 300)], []])
    (folder / MANIFEST).write_text(hostile_json_text(rng) if rng.random() < 0.3 else json.dumps(
        {"written_by": rng.choice(["zh-bert", "zh-bert", "other", None]), "files": files}),
        encoding="utf-8", errors="surrogatepass")
    check_dir_ours(folder)
    return "a manifest"


def eval_results_file(rng: random.Random, scratch: Path):
    from zh_bert.evaluation import eval_results

    run = scratch / "run"
    run.mkdir(exist_ok=True)
    entry = {"task_type": "text-classification", "dataset_type": "fewclue-eprstmt", "dataset_name": "e",
             "metric_type": "accuracy", "metric_value": 0.5}
    data = [{**entry, rng.choice(sorted(entry)): rand_json(rng)} for _ in range(rng.randrange(4))]
    (run / eval_results.FILENAME).write_text(hostile_json_text(rng) if rng.random() < 0.4 else json.dumps(data),
                                             encoding="utf-8", errors="surrogatepass")
    eval_results.load(run)
    return "eval_results.json"


READERS = {"tf1_index": tf1_index, "state_dict": state_dict, "config_vocab": config_and_vocab, "json": json_text,
           "yaml": yaml_text, "card": card, "parquet": lambda r, s: corpus(r, s, "parquet"),
           "zst": lambda r, s: corpus(r, s, "jsonl.zst"), "ner": ner_file, "task": task_file, "manifest": manifest,
           "eval_results": eval_results_file}


def main(reader: str, count: int, seed: int, scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    tally = {"reader": reader, "tried": 0, "read": 0, "one_line": 0, "skipped": 0, "failures": []}
    for i in range(count):
        rng = random.Random(f"{seed}-{reader}-{i}")
        tally["tried"] += 1
        try:
            got = READERS[reader](rng, scratch)
            tally["skipped" if isinstance(got, tuple) and got[0] == "skipped" else "read"] += 1
        except ZhBertError as e:
            if "\n" in str(e).strip():
                tally["failures"].append(f"input {i}: a ZhBertError of several lines: {str(e)[:200]}")
            tally["one_line"] += 1
        except Exception as e:   # noqa: BLE001 (what the harness exists to find)
            tally["failures"].append(f"input {i} (seed {seed}): {type(e).__name__}: {str(e)[:200]}")
    tally["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(tally))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
