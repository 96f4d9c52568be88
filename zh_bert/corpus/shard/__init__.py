"""`zh-bert shard`: cleaned documents + tokenizer -> packed, memory-mappable token shards (see sharddir.py).

In one process pool by default; with `--executor local|slurm|ray --tasks N` as datatrove tasks, each
writing one part of a multi-part SHARDDIR (`zh_bert.corpus.shard.parallel`). Text -> ids, packing and pairs live
in `zh_bert.corpus.shard.encode`, the chunked in-process build in `zh_bert.corpus.shard.build`.
"""

from __future__ import annotations

import argparse

from zh_bert.core.config import build_parser as _build_parser
from zh_bert.core.config import config_from_args
from zh_bert.corpus.executors import ExecutorOptions
from zh_bert.corpus.shard.build import (SHARD_FILES, ShardConfig, build_in_process, file_sha256, iter_chunks, parse_docs,
                                 process_chunk)
from zh_bert.corpus.shard.encode import (Encoded, Packer, Specials, TextEncoder, build_pairs, char_lut,
                                  pack_sequences)

__all__ = ["SHARD_FILES", "Encoded", "ExecutorOptions", "Packer", "ShardConfig", "Specials", "TextEncoder",
           "build_pairs", "build_parser", "build_shards", "char_lut", "file_sha256", "iter_chunks", "main",
           "pack_sequences", "parse_docs", "process_chunk"]


def build_shards(cfg: ShardConfig, executor: ExecutorOptions | None = None):
    """Write SHARDDIR `cfg.output`: in process, or as datatrove tasks when `executor` names an engine.
    Returns its path (with Slurm: once the jobs are submitted, before they run)."""
    if executor is not None and executor.enabled:
        from zh_bert.corpus.shard.parallel import build_parts   # datatrove: imported only when it runs

        return build_parts(cfg, executor)
    return build_in_process(cfg)


def build_parser() -> argparse.ArgumentParser:
    return _build_parser("zh-bert shard", __doc__.split("\n")[0], ShardConfig, ExecutorOptions)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    build_shards(config_from_args(ShardConfig, args), config_from_args(ExecutorOptions, args))
    return 0
