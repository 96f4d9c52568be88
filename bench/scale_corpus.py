"""A synthetic Chinese corpus of any size with a known set of planted duplicates, for bench/scale.py.

The bundled text (corpora/sample/, ~5 MB; attribution in corpora/sample/SOURCE.md: Chinese Wikipedia text is
CC BY-SA, CLUECorpusSmall texts belong to their authors, research/test use) is far too small to copy up to 1 GB:
copies would be removed by dedup, which is what we want to measure, not what the corpus should be. So the text
is split into sentences (after 。！？) and every document is a random draw of 10-40 of ~34,000 sentences: two
such documents share a sentence or two at most, i.e. almost no character 5-gram (measured Jaccard < 0.05),
and exact and near-duplicate dedup both keep them. Every sentence is one that zh-bert's normaliser leaves
unchanged, so a document's text survives `zh-bert clean` byte for byte and output documents can be matched to
input documents by the hash of their text.

Planted on top: exact copies (verbatim copy of an earlier document) and near copies (an earlier document with
characters replaced/inserted/deleted, and sometimes a sentence swapped, until the exact Jaccard of the two
character 5-gram sets, newlines ignored, lies in [0.85, 0.95]). Each copy sits in a later file than its
original, and in a file that another task reads whether tasks take files round-robin or in contiguous blocks,
so only a cross-task dedup can find it. Each original is used once.

Layout written by `generate(spec, outdir)` (in a temp dir renamed when complete; reused when a complete corpus
of the same spec is there):
    OUTDIR/input/docs-00000.jsonl ...  one {"text": ...} per line, `spec.files` files of ~equal size
    OUTDIR/truth.json                  spec, counts, per planted doc: hash, kind, orig_hash, jaccard, places
    OUTDIR/hashes.bin                  16-byte text hash of every document, in file order
Deterministic for a seed (and independent of `workers`).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench import REPO
from zh_bert.core.fileio import atomic_dir, atomic_write, parse_json, read_json, write_text

SAMPLE = REPO / "corpora" / "sample"
POOL_FILES = ("CLUECorpusSmall_sampled.txt", "zhwiki_sampled.txt", "CLUECorpusSmall_5000_lines_bert.txt")
_SENTENCE_RE = re.compile(r"[^。！？\n]*[。！？]+|[^。！？\n]+")
_HAN_RE = re.compile(r"[\u4e00-\u9fff]")
LINE_OVERHEAD = len('{"text": ""}\n')
GENERATOR = 1       # bumped when the same spec would give other bytes: a stored corpus is then rebuilt
CHUNK_DOCS = 1024   # documents drawn per RNG call: the draw sequence (hence the corpus) does not depend on sizes


@dataclass(frozen=True)
class CorpusSpec:
    size_mb: float
    files: int = 64
    seed: int = 0
    exact_frac: float = 0.01          # share of documents that are verbatim copies of an earlier one
    near_frac: float = 0.015          # share that are near copies
    min_sentences: int = 10
    max_sentences: int = 40
    tasks: int = 16                   # copies go to a file that another of this many tasks reads
    jaccard_lo: float = 0.85
    jaccard_hi: float = 0.95


def text_hash(text: str) -> str:
    """What truth.json identifies documents by: blake2b-128 of the UTF-8 text, hex."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def shingles(text: str, n: int = 5) -> set[str]:
    """Distinct character n-grams, newlines ignored (zh-bert's MinHash shingles, exactly)."""
    t = text.replace("\n", "")
    return {t[i:i + n] for i in range(max(1, len(t) - n + 1))}


def jaccard(a: str | set, b: str | set) -> float:
    sa = a if isinstance(a, set) else shingles(a)
    sb = b if isinstance(b, set) else shingles(b)
    return len(sa & sb) / len(sa | sb)


# --- the sentence pool ---------------------------------------------------------------------------
@dataclass
class Pool:
    sentences: list[str]
    nbytes: np.ndarray                # UTF-8 bytes of each sentence
    han: str                          # Han characters of the pool text (edits draw from it: frequency-weighted)


def sentence_pool(sample_dir: Path = SAMPLE) -> Pool:
    """Distinct sentences of 8-300 characters, at least half Han, no character pair covering over 20% of a
    sentence of 30+ characters (runs such as ◆◆◆◆ would fail the documents' repetition filter), and unchanged by zh-bert's
    normaliser."""
    from zh_bert.corpus.clean.filters import top_ngram_frac
    from zh_bert.corpus.clean.normalize import NormalizeConfig, Normalizer
    from zh_bert.core.text import cjk_ratio

    norm = Normalizer(NormalizeConfig())
    seen: dict[str, None] = {}
    for name in POOL_FILES:
        for s in _SENTENCE_RE.findall((Path(sample_dir) / name).read_text(encoding="utf-8")):
            s = s.strip()
            if 8 <= len(s) <= 300 and s not in seen and cjk_ratio(s) >= 0.5 and norm(s) == s \
                    and (len(s) < 30 or top_ngram_frac(np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32), 2) <= 0.2):
                seen[s] = None
    sentences = list(seen)
    nbytes = np.array([len(json.dumps(s, ensure_ascii=False).encode()) - 2 for s in sentences], dtype=np.int64)
    han = "".join(_HAN_RE.findall("".join(sentences[::7])))
    return Pool(sentences, nbytes, han)


# --- documents of one file ------------------------------------------------------------------------
def file_layout(pool: Pool, spec: CorpusSpec, f: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, sentence ids) of file f's base documents: document k is ids[starts[k]:starts[k+1]]. Drawn in
    chunks of CHUNK_DOCS documents until the file holds size/files bytes (a pure function of seed and f)."""
    rng = np.random.default_rng([spec.seed, f])
    target = spec.size_mb * 1e6 / spec.files
    lens, ids, total = [], [], 0
    while total < target:
        n = rng.integers(spec.min_sentences, spec.max_sentences + 1, CHUNK_DOCS)
        s = rng.integers(0, len(pool.sentences), int(n.sum()))
        doc_bytes = np.add.reduceat(pool.nbytes[s], np.concatenate(([0], np.cumsum(n)[:-1]))) + LINE_OVERHEAD
        cum = total + np.cumsum(doc_bytes)
        k = min(CHUNK_DOCS, int(np.searchsorted(cum, target)) + 1)
        lens.append(n[:k])
        ids.append(s[:int(n[:k].sum())])
        total = int(cum[k - 1])
    lens = np.concatenate(lens)
    return np.concatenate(([0], np.cumsum(lens))), np.concatenate(ids)


def doc_text(pool: Pool, layout: tuple[np.ndarray, np.ndarray], k: int) -> str:
    starts, ids = layout
    return "".join([pool.sentences[i] for i in ids[starts[k]:starts[k + 1]].tolist()])


def other_task(g: int, f: int, spec: CorpusSpec) -> bool:
    """Files g and f are read by different tasks under round-robin and under contiguous assignment."""
    t = spec.tasks
    return g % t != f % t and g * t // spec.files != f * t // spec.files


def plan_plants(ndocs: list[int], spec: CorpusSpec) -> dict[int, dict[int, tuple[str, int, int]]]:
    """file -> {slot: (kind, orig file, orig slot)}: which base documents are replaced by copies of which
    earlier, unplanted, not yet copied documents."""
    rng = np.random.default_rng([spec.seed, 1_000_003])
    plan: dict[int, dict[int, tuple[str, int, int]]] = {}
    used: set[tuple[int, int]] = set()
    for f in range(spec.files):
        earlier = [g for g in range(f) if other_task(g, f, spec)]
        if not earlier:
            continue
        u = rng.random(ndocs[f])
        slots = np.flatnonzero(u < spec.exact_frac + spec.near_frac)
        plan[f] = {}
        for k in slots.tolist():
            kind = "exact" if u[k] < spec.exact_frac else "near"
            for _ in range(100):
                g = earlier[int(rng.integers(len(earlier)))]
                j = int(rng.integers(ndocs[g]))
                if j not in plan.get(g, {}) and (g, j) not in used:
                    used.add((g, j))
                    plan[f][k] = (kind, g, j)
                    break
    return plan


def near_copy(orig: str, pool: Pool, rng: np.random.Generator, spec: CorpusSpec, normalize) -> tuple[str, float]:
    """`orig` edited until the exact 5-gram Jaccard is in [lo, hi]: sometimes one sentence replaced, then
    single Han characters replaced, inserted or deleted at random places until below a random target. A
    character edit moves the Jaccard by ~10/len, so stopping at the first step below the target lands in range;
    a rare miss (or a text the normaliser would change) is retried with the next draws."""
    base, lo, hi = shingles(orig), spec.jaccard_lo, spec.jaccard_hi
    for _ in range(20):
        target = rng.uniform(lo + 0.3 * (hi - lo), hi - 0.1 * (hi - lo))
        text = orig
        if rng.random() < 0.3:
            sents = _SENTENCE_RE.findall(text)
            i = int(rng.integers(len(sents)))
            sents[i] = pool.sentences[int(rng.integers(len(pool.sentences)))]
            if jaccard(base, "".join(sents)) >= target:
                text = "".join(sents)
        chars, j = list(text), jaccard(base, text)
        steps = int(len(chars) * (1 - target) / (5 * (1 + target)) * 0.8)   # ~80% of the edits needed
        while j > target or steps > 0:
            _edit_char(chars, pool, rng)
            steps -= 1
            if steps <= 0:
                j = jaccard(base, "".join(chars))
        text = "".join(chars)
        if lo <= j <= hi and normalize(text) == text:
            return text, j
    raise RuntimeError("could not plant a near duplicate in the Jaccard range")


def _edit_char(chars: list[str], pool: Pool, rng: np.random.Generator) -> None:
    """Replace, insert before or delete one Han character (Han only: no edit can make digits or Latin meet)."""
    for _ in range(50):
        p = int(rng.integers(len(chars)))
        if _HAN_RE.match(chars[p]):
            break
    op, c = int(rng.integers(3)), pool.han[int(rng.integers(len(pool.han)))]
    if op == 0:
        chars[p] = c
    elif op == 1:
        chars.insert(p, c)
    elif len(chars) > 50:
        del chars[p]


# --- writing -------------------------------------------------------------------------------------
_STATE: dict = {}   # pool, spec, plan: set before the worker processes fork


def _write_file(f: int, path: Path) -> dict:
    """Write file f; returns its hashes, planted records and a sample of its base documents."""
    from zh_bert.corpus.clean.normalize import NormalizeConfig, Normalizer

    pool, spec, plan = _STATE["pool"], _STATE["spec"], _STATE["plan"]
    normalize = Normalizer(NormalizeConfig())
    layout = file_layout(pool, spec, f)
    plants, layouts = plan.get(f, {}), {}
    hashes, planted, sample = [], [], []
    with atomic_write(path) as out:
        for k in range(len(layout[0]) - 1):
            if k in plants:
                kind, g, j = plants[k]
                if g not in layouts:
                    layouts[g] = file_layout(pool, spec, g)
                orig = doc_text(pool, layouts[g], j)
                text, jac = (orig, 1.0) if kind == "exact" else \
                    near_copy(orig, pool, np.random.default_rng([spec.seed, f, k, 7]), spec, normalize)
                planted.append({"hash": text_hash(text), "kind": kind, "orig_hash": text_hash(orig),
                                "jaccard": round(jac, 6), "file": f, "line": k, "orig_file": g, "orig_line": j})
            else:
                text = doc_text(pool, layout, k)
                if len(sample) < 32:
                    sample.append(text)
            hashes.append(hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest())
            out.write(json.dumps({"text": text}, ensure_ascii=False))
            out.write("\n")
    return {"file": f, "hashes": b"".join(hashes), "planted": planted, "sample": sample,
            "bytes": path.stat().st_size}


def _write_file_star(args):
    return _write_file(*args)


def random_pair_jaccard(texts: list[str], pairs: int, seed: int) -> dict:
    """Max and mean exact 5-gram Jaccard over `pairs` random pairs of distinct documents."""
    rng = np.random.default_rng([seed, 99])
    sets = [shingles(t) for t in texts]
    js = []
    for _ in range(pairs):
        a, b = rng.choice(len(sets), 2, replace=False)
        js.append(jaccard(sets[a], sets[b]))
    return {"pairs": pairs, "max": round(max(js), 4), "mean": round(float(np.mean(js)), 5)} if js else {}


def generate(spec: CorpusSpec, outdir: Path, workers: int = 2, pool: Pool | None = None) -> dict:
    """Write the corpus (see the module docstring) into `outdir`; returns truth.json's content. A complete
    corpus of the same spec already at `outdir` is reused as it is."""
    outdir = Path(outdir)
    if (outdir / "truth.json").is_file():
        truth = read_json(outdir / "truth.json")
        if truth.get("spec") == asdict(spec) and truth.get("generator") == GENERATOR:
            return truth
    t0 = time.perf_counter()
    pool = pool or sentence_pool()
    ndocs = [len(file_layout(pool, spec, f)[0]) - 1 for f in range(spec.files)]
    plan = plan_plants(ndocs, spec)
    # the whole corpus is committed by one rename; an existing one is replaced only when it is this
    # generator's own (its manifest, or before manifests the three names it writes)
    with atomic_dir(outdir, overwrite=True, legacy=lambda name, _: name in ("input", "hashes.bin", "truth.json")) as tmp:
        (tmp / "input").mkdir(parents=True)
        _STATE.update(pool=pool, spec=spec, plan=plan)
        jobs = [(f, tmp / "input" / f"docs-{f:05d}.jsonl") for f in range(spec.files)]
        try:
            if workers > 1 and "fork" in mp.get_all_start_methods():
                with mp.get_context("fork").Pool(workers) as p:
                    results = p.map(_write_file_star, jobs, chunksize=1)
            else:
                results = [_write_file(*j) for j in jobs]
        finally:
            _STATE.clear()
        with atomic_write(tmp / "hashes.bin", "wb") as fh:
            for r in results:
                fh.write(r["hashes"])
        planted = [p for r in results for p in r["planted"]]
        nbytes = sum(r["bytes"] for r in results)
        near = [p["jaccard"] for p in planted if p["kind"] == "near"]
        seconds = time.perf_counter() - t0
        truth = {
            "spec": asdict(spec), "generator": GENERATOR, "files": spec.files, "docs": sum(ndocs), "bytes": nbytes,
            "pool_sentences": len(pool.sentences), "sources": [f"corpora/sample/{n}" for n in POOL_FILES],
            "exact": sum(p["kind"] == "exact" for p in planted), "near": len(near),
            "near_jaccard": {"min": min(near), "max": max(near), "mean": round(float(np.mean(near)), 4)} if near else {},
            "random_pair_jaccard": random_pair_jaccard([t for r in results for t in r["sample"]], 1000, spec.seed),
            "generate_seconds": round(seconds, 2), "generate_mb_per_s": round(nbytes / 1e6 / seconds, 2),
            "planted": planted,
        }
        write_text(tmp / "truth.json", json.dumps(truth, ensure_ascii=False, indent=1))
    return truth


# --- scoring a clean output against the truth ----------------------------------------------------
def output_files(out: Path) -> list[Path]:
    """The clean output's document files: OUT.jsonl itself, or a directory's part-*.jsonl[.gz]."""
    out = Path(out)
    if out.is_file():
        return [out]
    return sorted(p for p in out.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))


def output_hashes(out: Path) -> tuple[dict[bytes, int], int]:
    """(16-byte text hash -> occurrences in the output, number of output documents)."""
    import gzip

    seen: dict[bytes, int] = {}
    n = 0
    for path in output_files(out):
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
            for line in f:
                if line.strip():
                    h = hashlib.blake2b(parse_json(line, str(path))["text"].encode("utf-8"), digest_size=16).digest()
                    seen[h] = seen.get(h, 0) + 1
                    n += 1
    return seen, n


def dedup_quality(corpus: Path, out: Path, report: dict) -> dict:
    """Recall and precision of the dedup on the planted pairs. A pair is caught when at least one of its two
    documents is gone (which one an engine keeps is its business); recall = caught / planted. Precision =
    caught / documents removed as duplicates (removed = input docs - output docs - docs the filters dropped,
    cross-checked with the report's `duplicates`). Output documents whose hash matches no input document
    (`unknown_out`, should be 0) would mean cleaning changed a text and the matching is off."""
    truth = read_json(Path(corpus) / "truth.json")
    counts, docs_out = output_hashes(out)
    kept = set(counts)
    raw = np.fromfile(Path(corpus) / "hashes.bin", dtype="V16")
    inputs = {bytes(h) for h in raw}
    by = {"exact": [0, 0], "near": [0, 0]}
    bins: dict[str, list[int]] = {}
    planted_members, both_gone = set(), 0
    for p in truth["planted"]:
        h, o = bytes.fromhex(p["hash"]), bytes.fromhex(p["orig_hash"])
        planted_members.update((h, o))
        left = counts.get(h, 0) + (counts.get(o, 0) if h != o else 0)   # an exact pair shares one hash
        caught = left < 2
        both_gone += left == 0
        by[p["kind"]][0] += caught
        by[p["kind"]][1] += 1
        if p["kind"] == "near":
            b = bins.setdefault(f"{int(p['jaccard'] * 100) / 100:.2f}", [0, 0])   # [0.85, 0.86) -> "0.85"
            b[0] += caught
            b[1] += 1
    caught = by["exact"][0] + by["near"][0]
    filtered = sum(report.get("filtered", {}).values())
    removed = len(raw) - docs_out - filtered
    return {
        "planted": len(truth["planted"]), "caught": caught,
        "recall": round(caught / max(1, len(truth["planted"])), 4),
        "recall_exact": round(by["exact"][0] / max(1, by["exact"][1]), 4),
        "recall_near": round(by["near"][0] / max(1, by["near"][1]), 4),
        "recall_near_by_jaccard": {k: f"{c}/{n}" for k, (c, n) in sorted(bins.items())},
        "removed_as_duplicates": removed, "report_duplicates": report.get("duplicates"),
        "precision": round(caught / removed, 4) if removed > 0 else None,
        "pairs_both_removed": both_gone, "filtered": filtered,
        "unplanted_removed": len(inputs - kept - planted_members),
        "docs_in": len(raw), "docs_out": docs_out, "unknown_out": len(kept - inputs),
    }
