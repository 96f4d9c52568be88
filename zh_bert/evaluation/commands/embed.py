"""`zh-bert embed CKPT FILE... -o OUT`: a sentence vector for every non-blank line of FILE (the `text` field of a
JSON-lines file), in input order; `zh-bert embed CKPT --search FILE --query TEXT [-k 10]`: FILE's nearest lines.

OUT is `.npy` (float32, one row per line) or `.parquet` (the text beside its vector). Texts are encoded a chunk
at a time, sorted by length within it (`heads.embed.encoder`), and written as they come: memory holds one chunk
whatever the file's length. `--precision auto` is bf16 on a CPU that computes it natively, fp32 elsewhere.
With `--executor local|slurm|ray --tasks N` (datatrove, as `clean` and `shard`), OUT is a folder of parts, task r
encoding its share of the input: the parts in order are the one-process output, row for row.

CKPT is any model folder or run; a sentence-transformers folder (what `finetune --task stsb|pairs:|simcse: --save`
writes) pools as it declares, anything else by `--pooling` (default mean) and is said not to be a trained
embedder. `--search` needs a trained embedder: a masked LM's vectors rank lines below counting shared characters.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from zh_bert.core.config import at_least, config_from_args, option, option_of
from zh_bert.core.config import build_parser as derive_parser
from zh_bert.core.errors import ZhBertError
from zh_bert.core.fileio import claim_file
from zh_bert.core.hardware import Precision
from zh_bert.core.options import Shared
from zh_bert.corpus.corpus_io import corpus_files
from zh_bert.corpus.executors import ExecutorOptions
from zh_bert.evaluation.eval_results import CheckpointArgs
from zh_bert.evaluation.heads.embed.folder import is_st_folder
from zh_bert.evaluation.heads.embed.vectors import Encoder, Lines, encode_files, nearest
from zh_bert.evaluation.loop import FinetuneConfig, PoolingName
from zh_bert.train.recipe_keys import PrecisionKeys
from zh_bert.train.rundir import model_dir

#: what -o may be without an executor (with one: a folder of parts of the same format)
VECTOR_FORMATS = (".npy", ".parquet")


@dataclass
class EmbedArgs:
    """What `zh-bert embed` encodes, with which model, into what."""
    ckpt: str = option_of(CheckpointArgs, "ckpt", help="a model folder or run (a sentence-transformers folder pools "
                                                       "as it declares)")
    files: list[str] = option(default_factory=list, positional=True, metavar="FILE",
                              help="text files, one text a line (JSON lines: the text field), .gz/.zst too")
    output: Optional[str] = option(None, flags=("-o", "--output"), metavar="OUT",
                                   help="OUT.npy (float32 rows) or OUT.parquet (text, vector); with --executor a "
                                        "folder of parts")
    search: Optional[str] = option(None, metavar="FILE", help="rank FILE's lines by cosine to --query")
    query: list[str] = option(default_factory=list, action="append", metavar="TEXT",
                              help="--search: the text to find neighbours of (repeatable)")
    k: int = option(10, flags=("-k",), help="--search: how many nearest lines to print")
    pooling: Optional[PoolingName] = option_of(FinetuneConfig, "pooling")
    seq_len: int = option_of(FinetuneConfig, "seq_len", help="max tokens of a text (longer ones are cut, said once); "
                                                             "a sentence-transformers folder's own max length wins")
    precision: Precision = option_of(PrecisionKeys, "precision", default="auto",
                                     help="auto: bf16 on a CPU with native bf16 (avx512_bf16, AMX), fp32 elsewhere")
    workers: Optional[int] = option_of(Shared, "workers", help="--executor local: tasks run at once (default: 1; "
                                                               "each task's torch threads share the cores)")

    def __post_init__(self):
        at_least(self, 1, "k")
        if self.search and self.files:
            raise ZhBertError("--search FILE ranks one file's lines: give the file after --search, not as FILE")
        if self.search and not self.query:
            raise ZhBertError("--search needs --query TEXT (what to find the nearest lines of)")
        if self.query and not self.search:
            raise ZhBertError("--query goes with --search FILE")
        if not self.search and not self.files:
            raise ZhBertError("give FILE... to encode (and -o OUT), or --search FILE --query TEXT")
        if self.files and not self.output:
            raise ZhBertError("-o OUT: where the vectors go (OUT.npy or OUT.parquet)")


def build_parser() -> argparse.ArgumentParser:
    return derive_parser("zh-bert embed", __doc__.split("\n\n")[0], EmbedArgs, ExecutorOptions)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    cfg, opts = config_from_args(EmbedArgs, args), config_from_args(ExecutorOptions, args)
    if cfg.search:
        return _search(cfg)
    paths = corpus_files(cfg.files)
    if opts.enabled:
        from zh_bert.evaluation.heads.embed.parallel import embed_parts

        embed_parts(cfg, opts, paths)
        return 0
    out = Path(cfg.output)
    if out.suffix not in VECTOR_FORMATS:
        raise ZhBertError(f"-o {out}: write .npy or .parquet (with --executor, a folder of parts)")
    claim_file(out, inputs=paths, what="a vector file zh-bert embed wrote")
    lines = Lines(paths)
    total = lines.count()
    if not total:
        raise ZhBertError(f"{', '.join(map(str, paths))}: no text to encode (blank lines only)")
    enc = Encoder(cfg.ckpt, cfg.pooling, cfg.seq_len, cfg.precision)
    _say(enc, cfg)
    written = encode_files(enc, lines, out, total)
    print(f"zh-bert embed: {written:,} vectors of {enc.dim} ({enc.pooling.name} pooling, {enc.precision}) -> {out}"
          + (f"; {lines.blank:,} blank lines skipped" if lines.blank else "")
          + (f"; {enc.cut:,} texts cut at {enc.seq_len} tokens" if enc.cut else ""), flush=True)
    return 0


def _say(enc: Encoder, cfg: EmbedArgs) -> None:
    if not enc.embedder:
        print(f"note: {enc.folder} is not a trained sentence embedder (no modules.json): {enc.pooling.name}-pooled "
              f"states of its encoder; train one with `zh-bert finetune CKPT --task stsb|pairs:...|simcse:FILE "
              f"--save DIR`", file=sys.stderr, flush=True)


def _search(cfg: EmbedArgs) -> int:
    folder = model_dir(cfg.ckpt)
    if not is_st_folder(folder):
        raise ZhBertError(f"--search: {folder} is not a sentence embedder (no modules.json); its vectors rank lines "
                          f"no better than shared characters. Train one: zh-bert finetune {cfg.ckpt} --task stsb "
                          f"--save DIR, then zh-bert embed DIR --search ...")
    lines = Lines(corpus_files([cfg.search]))
    if not lines.count():
        raise ZhBertError(f"--search {cfg.search}: no text to search (blank lines only)")
    enc = Encoder(cfg.ckpt, cfg.pooling, cfg.seq_len, cfg.precision)
    queries = enc.encode(cfg.query)
    for query, found in zip(cfg.query, nearest(enc, lines, queries, cfg.k)):
        print(f"query: {query}")
        for score, pos, text in found:
            print(f"  {score:.4f}  {pos + 1}: {text}")
    return 0
