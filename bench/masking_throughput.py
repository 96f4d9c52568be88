"""`masking: correction` against `wwm`: the similar-word table's build time and size, examples, and masking
throughput, on the bundled sample corpus (corpora/sample: zhwiki + CLUECorpusSmall, 4.1 MB).

1. Shards of the whole sample (char vocab of --vocab-size built by `zh-bert vocab`, --seq-len tokens),
   unless --sharddir/--tokenizer name existing ones.
2. The table built from scratch (median of --repeat builds), its size on disk, words with similar words
   and their share of word occurrences; the similar words of a few words.
3. Masking throughput in tokens/s, median of --repeat (wwm and correction alternating): (a) one (32, seq_len) batch per
   call, one generator; (b) the training loader's way: 32 rows per call, each row with its own generator (keyed
   per sequence); (c) the same masks as (b), one row per call (the baseline for b).

    python -m bench.masking_throughput [--repeat 5] [--sharddir DIR --tokenizer TOKDIR]
    python -m bench.masking_throughput --quick    # every step on 300 lines per sample file, once (a smoke test)
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bench import REPO
from bench.cli import parse
from bench.timing import machine, timed
from zh_bert.core.config import option
from zh_bert.core.fileio import atomic_write, scratch_dir

EXAMPLES = ("中国", "北京", "美国", "我们", "电影", "大学", "非常", "手机", "提高", "喜欢", "的", "在", "三")


def build_shards(tmp: Path, vocab_size: int, seq_len: int, lines: int | None = None) -> tuple[Path, Path]:
    from zh_bert.corpus.shard import main as shard_main
    from zh_bert.corpus.vocab import main as vocab_main

    corpus = tmp / "sample.jsonl"
    with atomic_write(corpus) as f:
        for name in ("zhwiki_sampled.txt", "CLUECorpusSmall_sampled.txt"):
            text = (REPO / "corpora" / "sample" / name).read_text(encoding="utf-8").split("\n")
            for i, line in enumerate(text[:lines]):
                if line.strip():
                    f.write(json.dumps({"text": line, "source": f"{name}:{i}"}, ensure_ascii=False) + "\n")
    tok, shards = tmp / "tok", tmp / "shards"
    assert vocab_main([str(corpus), "-o", str(tok), "--kind", "char", "--size", str(vocab_size), "-q"]) == 0
    assert shard_main([str(corpus), "--tokenizer", str(tok), "-o", str(shards), "--seq-len", str(seq_len),
                       "--valid-docs", "40"]) == 0
    return tok, shards


def examples(table, tok) -> dict[str, list[str]]:
    text = lambda r: "".join(tok.convert_ids_to_tokens(table.words(r)[0]))  # noqa: E731
    index = {text(r): r for r in range(len(table.keys))}
    return {w: [text(n) for n in table.neighbours[index[w]] if n >= 0] for w in EXAMPLES if w in index}


def masking_speed(ds, table, repeat: int) -> dict:
    import numpy as np

    from zh_bert.train.masking import MaskingConfig, mask_batch
    from zh_bert.corpus.segment import word_units

    b = ds.batch(np.arange(min(len(ds), 512)))
    kw = dict(mask_id=ds.mask_id, special_ids=ds.special_ids, vocab_size=ds.vocab_size, similar=table)
    def batches(cfg):
        rng = np.random.default_rng(0)
        for lo in range(0, len(b["input_ids"]), 32):
            mask_batch(b["input_ids"][lo:lo + 32], b["word_start"][lo:lo + 32], cfg, rng, **kw)

    def per_sequence(cfg):   # the training loader: 32 rows per call, each with its own generator
        for lo in range(0, len(b["input_ids"]), 32):
            gens = [np.random.default_rng([0, 0, j]) for j in range(lo, min(lo + 32, len(b["input_ids"])))]
            mask_batch(b["input_ids"][lo:lo + 32], b["word_start"][lo:lo + 32], cfg, gens, **kw)

    def row_at_a_time(cfg):  # the same masks, one call per row (the baseline for per_sequence)
        for j in range(len(b["input_ids"])):
            mask_batch(b["input_ids"][j:j + 1], b["word_start"][j:j + 1], cfg, np.random.default_rng([0, 0, j]), **kw)

    # the strategies and ways alternate, so that load on a shared machine hits all alike
    fns = {f.__name__: f for f in (batches, per_sequence, row_at_a_time)}
    walls = {(s, name): [] for s in ("wwm", "correction") for name in fns}
    for _ in range(repeat):
        for (s, name), w in walls.items():
            w.append(timed(lambda: fns[name](MaskingConfig(s)), 1, warmup=1).wall)
    n = b["input_ids"].size
    out = {s: {f"{name}_tokens_per_s": n / statistics.median(walls[(s, name)]) for name in fns}
           for s in ("wwm", "correction")}
    for s in ("wwm", "correction"):
        out[s]["per_sequence_vs_row_at_a_time"] = (out[s]["per_sequence_tokens_per_s"]
                                                   / out[s]["row_at_a_time_tokens_per_s"])
    special = np.isin(b["input_ids"], ds.special_ids)
    start = np.flatnonzero(word_units(b["word_start"], special).ravel() & ~special.ravel())
    ends = np.flatnonzero(word_units(b["word_start"], special).ravel())
    length = np.diff(np.append(ends, special.size))[np.isin(ends, start)]
    out["word_occurrences_with_similar"] = float((table.find(b["input_ids"].ravel(), start, length) >= 0).mean())
    for name in fns:
        out[f"correction_vs_wwm_{name}"] = out["correction"][f"{name}_tokens_per_s"] / out["wwm"][f"{name}_tokens_per_s"]
    return out


@dataclass
class Options:
    repeat: int = option(5, help="table builds and masking runs (median)")
    sharddir: Optional[str] = option(None, help="existing shards (default: built from the whole sample)")
    tokenizer: Optional[str] = option(None, help="TOKDIR of --sharddir")
    vocab_size: int = option(8000, help="char vocabulary of the shards built here")
    seq_len: int = option(128, help="sequence length of the shards built here")
    quick: bool = option(False, help="300 lines per sample file, one repeat: a smoke test")


def main(argv: list[str] | None = None) -> None:
    args = parse(Options, "masking_throughput", __doc__, argv)
    if args.quick:
        args.repeat = 1

    from zh_bert.corpus import similar_words as sw
    from zh_bert.train.data import ShardDataset
    from zh_bert.corpus.tokenizer_files import load_tokenizer

    with scratch_dir("zh-bert-bench-") as tmp:
        if args.sharddir:
            tokdir, sharddir = Path(args.tokenizer), Path(args.sharddir)
        else:
            tokdir, sharddir = build_shards(Path(tmp), args.vocab_size, args.seq_len, 300 if args.quick else None)
        ds = ShardDataset(sharddir, "train")
        build = timed(lambda: sw.build(ds), args.repeat)
        table = sw.load_or_build(ds)
        size = os.path.getsize(sharddir / sw.TABLE_FILE)
        result = {
            "machine": machine(), "train_tokens": ds.meta["counts"]["train"]["tokens"],
            "table": {"build_s": round(build.wall, 2), "build_cpu_s": round(build.cpu, 2), "bytes": size,
                      "words": len(table.keys), "with_similar": int((table.n_neighbours > 0).sum()),
                      "occurrence_coverage": round(table.coverage(), 4)},
            "examples": examples(table, load_tokenizer(tokdir)),
            "masking": masking_speed(ds, table, args.repeat),
        }
        print(json.dumps(result, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
