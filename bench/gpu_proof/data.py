"""The inputs of `python -m bench.gpu_proof`, built where the whole toolkit is installed (`--prepare DIR`) and read
where it is not.

Why a separate step: the GPU machine has no jieba/rjieba (so it cannot shard: wwm needs word boundaries), no
network, and takes at most 64 MiB of inputs beside the checkout. So the tokenizers, the shards and the
similar-word table of `masking: correction` are built here, on a CPU, and shipped xz-compressed (token ids of
real text compress about 4×: the whole cleaned `zh_real_text` corpus, 48M tokens, packs into 30 MiB); the
GPU side only unpacks (seconds) and trains.

DIR/manifest.json     what was built, from what, and every packed file's size and sha256
DIR/main/             tokenizer/ + shards/*.xz of the bundled sample corpus (fp16 vs fp32, kill + resume)
DIR/science/          tokenizer/ + shards/*.xz of zh_real_text (the --science grid) + its SOURCE.md (CC-BY-4.0)
DIR/tasks/            --quick only: every 5th-20th example of ChnSentiCorp and TNEWS (a full run fine-tunes
                      on corpora/tasks of the checkout, which travels with it)
"""

from __future__ import annotations

import hashlib
import json
import lzma
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

from bench import REPO
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import atomic_write, copy_file, read_json, remove_scratch, write_bytes, write_text

SCIENCE_CORPUS = REPO.parent / "shared" / "data" / "zh_real_text"
SAMPLE = [REPO / "corpora" / "sample" / n for n in ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt")]
FORMAT, VERSION, MANIFEST = "zh-bert gpu_proof data", 1, "manifest.json"
CHUNK = 16 << 20          # xz streams of 16 MiB, compressed in parallel and concatenated (lzma reads them as one)
VOCAB_SIZE = 8000         # tiny-cpu's char vocabulary size; keeps every frequent character of either corpus
TOY_TASKS = {"chnsenticorp": {"train.tsv": 20, "dev.tsv": 20, "test.tsv": 20},
             "fewclue/tnews": {"train_few_all.json": 5, "dev_few_all.json": 10, "test_public.json": 20}}


class ProofError(Exception):
    """Bad input to gpu_proof: one line, exit 2, nothing written."""


# --------------------------------------------------------------------------- reading a prepared DIR

def read_manifest(data: Path) -> dict:
    """DIR/manifest.json, refused in one line when DIR is not a complete prepared dir."""
    path = Path(data) / MANIFEST
    if not Path(data).is_dir() or not path.is_file():
        raise ProofError(f"--data {data}: not a prepared gpu_proof dir (no {MANIFEST}); build it on a CPU machine "
                         f"with: python -m bench.gpu_proof --prepare {data}")
    try:
        manifest = read_json(path)
    except ZhBertError as e:
        raise ProofError(f"--data {data}: unreadable {MANIFEST} ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ProofError(f"--data {data}: {MANIFEST} is not a gpu_proof data manifest of version {VERSION}; "
                         f"prepare it again with --prepare")
    broken = _manifest_problem(manifest)
    if broken:
        raise ProofError(f"--data {data}: {MANIFEST} is broken ({broken}); prepare it again with --prepare")
    for name, ds in manifest["datasets"].items():
        for rel, info in (ds or {}).get("files", {}).items():
            f = Path(data) / rel
            if not f.is_file() or f.stat().st_size != info["size"]:
                raise ProofError(f"--data {data}: incomplete ({rel} missing or of another size); prepare it again")
    return manifest


def _manifest_problem(m: dict) -> str | None:
    """What in a manifest of the right format is not of the shape `prepare` writes (None: nothing): every
    field the proof reads, checked before it is read."""
    if not isinstance(m.get("quick"), bool):
        return "'quick' is not true or false"
    if m.get("tasks") is not None and not isinstance(m["tasks"], str):
        return "'tasks' is not a folder name"
    if not isinstance(m.get("datasets"), dict) or not isinstance(m["datasets"].get("main"), dict):
        return "no 'datasets' with a 'main' entry"
    for name, ds in m["datasets"].items():
        if ds is None:
            continue
        if not isinstance(ds, dict):
            return f"dataset {name!r} is not an object"
        for key, kind in (("tokenizer", str), ("shards", str), ("files", dict), ("vocab_size", int)):
            if not isinstance(ds.get(key), kind):
                return f"dataset {name!r} has no {key!r} of the right type"
        bad = next((rel for rel, info in ds["files"].items()
                    if not isinstance(info, dict) or not isinstance(info.get("size"), int)), None)
        if bad is not None:
            return f"file {bad!r} has no size"
    return None


def unpack(data: Path, manifest: dict, name: str, work: Path) -> tuple[Path, Path]:
    """(tokenizer dir, SHARDDIR) of dataset `name`, its shards decompressed under `work` once (a rerun in
    the same work dir finds them)."""
    ds = manifest["datasets"][name]
    out = work / "data" / name
    stamp = out / ".unpacked"
    key = hashlib.sha256(json.dumps(ds["files"], sort_keys=True).encode()).hexdigest()
    if not (stamp.is_file() and stamp.read_text() == key):
        remove_scratch(out)     # under the claimed work dir
        (out / "shards").mkdir(parents=True)
        for rel in ds["files"]:
            src = Path(data) / rel
            if rel.startswith(ds["shards"] + "/"):
                raw = lzma.decompress(src.read_bytes()) if src.suffix == ".xz" else src.read_bytes()
                write_bytes(out / "shards" / src.name.removesuffix(".xz"), raw)
        write_text(stamp, key)
    return Path(data) / ds["tokenizer"], out / "shards"


# --------------------------------------------------------------------------- building one

def prepare(dest: Path, quick: bool, corpus: Path | None, command: str, log=print) -> dict:
    """Build DIR (`dest`, new or empty): main data always, science data from `corpus` when it exists (a
    --quick toy falls back to the bundled sample, saying so); returns the manifest."""
    from zh_bert.core.fileio import atomic_dir

    t0 = time.time()
    with atomic_dir(dest, overwrite=False) as tmp:
        work = tmp / ".build"
        datasets = {"main": _dataset(tmp, "main", _main_text(work, quick), work, quick, log)}
        datasets["science"], note = None, None
        corpus = Path(corpus) if corpus else SCIENCE_CORPUS
        if (corpus / "SOURCE.md").is_file():
            datasets["science"] = _dataset(tmp, "science", _science_text(corpus, work, quick), work, quick, log,
                                           correction=True)
            _attribution(corpus, tmp / "science" / "SOURCE.md", quick)
            datasets["science"]["files"]["science/SOURCE.md"] = _file_info(tmp / "science" / "SOURCE.md")
        elif quick:
            note = f"{corpus} not found: the toy science grid trains on the bundled sample instead"
            datasets["science"] = _dataset(tmp, "science", _main_text(work, quick, offset=1), work, quick, log,
                                           correction=True)
        else:
            note = f"{corpus} not found (no SOURCE.md): no science data; --science will refuse this dir"
        if note:
            log(f"[prepare] note: {note}")
        if quick:
            _toy_tasks(tmp / "tasks")
        remove_scratch(work)
        manifest = {"format": FORMAT, "version": VERSION, "quick": quick, "created": date.today().isoformat(),
                    "command": command, "datasets": datasets, "note": note, "tasks": "tasks" if quick else None,
                    "bytes": sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file()),
                    "seconds": round(time.time() - t0, 1)}
        write_text(tmp / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False))
    return manifest


def _main_text(work: Path, quick: bool, offset: int = 0) -> list[Path]:
    """The bundled sample corpus (what tiny-cpu trains on); --quick: 300 lines of each file (`offset` picks
    another 300, for a toy science corpus that is not the main one)."""
    if not quick:
        return SAMPLE
    out = []
    for path in SAMPLE:
        lines = [l for l in path.read_text(encoding="utf-8").split("\n") if l.strip()]
        dst = work / f"text-{offset}" / path.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_text(dst, "\n".join(lines[300 * offset:300 * (offset + 1)]) + "\n")
        out.append(dst)
    return out


def _science_text(corpus: Path, work: Path, quick: bool) -> list[Path]:
    """zh_real_text decompressed (one document per line): every document, or 30 of each file for --quick."""
    out = []
    for src in sorted(corpus.glob("*.txt.xz")):
        dst = work / "science-text" / src.name.removesuffix(".xz")
        dst.parent.mkdir(parents=True, exist_ok=True)
        with lzma.open(src, "rt", encoding="utf-8") as fin, atomic_write(dst) as fout:
            for i, line in enumerate(fin):
                if quick and i >= 30:
                    break
                fout.write(line)
        out.append(dst)
    return out


def _dataset(dest: Path, name: str, text: list[Path], work: Path, quick: bool, log, correction: bool = False) -> dict:
    """clean -> char vocab -> shards (seq 128) of `text` through zh-bert's own pipeline, then tokenizer copied
    and shards packed under dest/name; with `correction`, the similar-word table is built first and shipped."""
    from zh_bert.train.data import ShardDataset
    from zh_bert.corpus.pipeline import prepare_data
    from zh_bert.train.recipe import load_recipe
    from zh_bert.corpus.sharddir import read_meta

    recipe = load_recipe(None, {"data": [str(p) for p in text], "vocab_kind": "char", "vocab_size": VOCAB_SIZE,
                                "valid_docs": 20 if quick else 200, "seq_len": 128,
                                "data_cache": str(work / f"cache-{name}"), "out_dir": str(work / f"run-{name}")})
    prepared = prepare_data(recipe, log=lambda m: log(f"[prepare {name}] {m}"))
    if correction:
        from zh_bert.corpus.similar_words import load_or_build

        load_or_build(ShardDataset(prepared.sharddir, "train"), log=lambda m: log(f"[prepare {name}] {m}"))
    for p in sorted(prepared.tokdir.iterdir()):
        copy_file(p, dest / name / "tokenizer" / p.name)
    files = {f"{name}/tokenizer/{p.name}": _file_info(p) for p in sorted((dest / name / "tokenizer").iterdir())}
    packed = dest / name / "shards"
    packed.mkdir(parents=True)
    t0 = time.time()
    for src in sorted(prepared.sharddir.iterdir()):
        dst = packed / (src.name + ".xz" if src.stat().st_size > 4096 else src.name)
        if dst.suffix == ".xz":
            _compress(src, dst)
        else:
            copy_file(src, dst)
        files[f"{name}/shards/{dst.name}"] = _file_info(dst)
    meta = read_meta(prepared.sharddir)
    log(f"[prepare {name}] packed {sum(f['size'] for f in files.values()) / 2**20:.1f} MiB in "
        f"{time.time() - t0:.0f} s")
    return {"tokenizer": f"{name}/tokenizer", "shards": f"{name}/shards", "files": files,
            "train_tokens": meta["counts"]["train"]["tokens"], "train_sequences": meta["counts"]["train"]["sequences"],
            "vocab_size": meta["vocab_size"], "sources": [p.name for p in text],
            "clean_report": {k: (prepared.clean_report or {}).get(k) for k in ("docs_in", "docs_out", "chars_out")}}


def _compress(src: Path, dst: Path) -> None:
    """xz of `src`, in CHUNK-sized streams compressed by two processes (lzma.decompress reads the
    concatenation)."""
    raw = src.read_bytes()
    chunks = [raw[i:i + CHUNK] for i in range(0, len(raw), CHUNK)] or [b""]
    if len(chunks) == 1:
        write_bytes(dst, lzma.compress(chunks[0], preset=6))
        return
    with ProcessPoolExecutor(2) as pool:
        write_bytes(dst, b"".join(pool.map(_xz, chunks)))


def _xz(chunk: bytes) -> bytes:
    return lzma.compress(chunk, preset=6)


def _file_info(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _attribution(corpus: Path, dst: Path, quick: bool) -> None:
    """The corpus's SOURCE.md, verbatim, under a note saying what this copy is (CC-BY asks for both)."""
    what = "the first 30 documents of each file" if quick else "every document"
    write_text(dst, f"# Shards of zh_real_text for `python -m bench.gpu_proof --science`\n\nBuilt by `python -m "
                   f"bench.gpu_proof --prepare` from {what} of zh_real_text: cleaned by `zh-bert clean` (exact dedup, quality "
                   f"filters), a char vocabulary of {VOCAB_SIZE} tokens, packed 128-token sequences, xz-compressed. "
                   f"The text is the corpus's, under its licence and attribution below.\n\n---\n\n"
                   + (corpus / "SOURCE.md").read_text(encoding="utf-8"))


def _toy_tasks(dest: Path) -> None:
    """Every k-th example of each bundled task split (header kept), with each task's SOURCE.md: fine-tuning
    at toy size still reads real task files."""
    for task, files in TOY_TASKS.items():
        src = REPO / "corpora" / "tasks" / task
        (dest / task).mkdir(parents=True)
        for f in src.iterdir():
            if f.name not in files:
                copy_file(f, dest / task / f.name)
        if task != src.name and not (dest / task).parent.joinpath("SOURCE.md").exists():   # a suite's SOURCE.md
            copy_file(src.parent / "SOURCE.md", (dest / task).parent / "SOURCE.md")
        for name, every in files.items():
            lines = (src / name).read_text(encoding="utf-8").splitlines()
            head, body = (lines[:1], lines[1:]) if name.endswith(".tsv") else ([], lines)
            write_text(dest / task / name, "\n".join(head + body[::every]) + "\n")
