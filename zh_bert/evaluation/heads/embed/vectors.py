"""Texts in, vectors out: the texts of files (`Lines`: every non-blank line, a JSON-lines file's `text` field), a
checkpoint ready to encode them (`Encoder`), the writers of `.npy` and `.parquet` vector files (streamed: one chunk
in memory), and the nearest texts of a query (`nearest`: a heap per query). What `zh-bert embed` and its datatrove
tasks share (`commands.embed`, `parallel`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zh_bert.core.fileio import atomic_write
from zh_bert.core.hardware import resolve_precision
from zh_bert.corpus.corpus_io import document_text, is_jsonl, iter_lines
from zh_bert.corpus.tokenizer_files import load_tokenizer
from zh_bert.evaluation.heads.base import quiet_transformers
from zh_bert.evaluation.heads.embed.encoder import CHUNK_TEXTS, encode_stream, encode_texts, load_encoder
from zh_bert.evaluation.heads.embed.folder import is_st_folder
from zh_bert.evaluation.heads.embed.kind import checkpoint_pooling, checkpoint_seq_len
from zh_bert.evaluation.loop import FinetuneConfig, bars_shown
from zh_bert.train.rundir import model_dir


@dataclass
class Lines:
    """The texts of files: every non-blank line (a JSON-lines file's `text` field), in order; `blank` counts the
    lines skipped."""
    paths: list[Path]
    blank: int = 0
    jsonl: dict = field(default_factory=dict)

    def __iter__(self):
        for path in self.paths:
            jsonl = self.jsonl.setdefault(path, is_jsonl(path))
            for n, line in iter_lines(path):
                text = (document_text(line, path, n) if jsonl else line).strip()
                if text:
                    yield text
                else:
                    self.blank += 1

    def count(self) -> int:
        """How many texts a pass yields (one pass over the files, nothing kept)."""
        return sum(1 for _ in Lines(self.paths))


def progress(total: int, what: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="text", dynamic_ncols=True, disable=not bars_shown())


def write_vectors_npy(f, chunks, rows: int, dim: int) -> int:
    """The chunks' vectors as one .npy array of `rows` x `dim` float32, written as they come."""
    np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (rows, dim)})
    written = 0
    for vecs in chunks:
        f.write(np.ascontiguousarray(vecs, dtype="<f4").tobytes())
        written += len(vecs)
    return written


def write_parquet(f, chunks_with_text, dim: int) -> int:
    """The chunks as Parquet row groups: `text` and `embedding` (a fixed-size list of float32)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("text", pa.string()), ("embedding", pa.list_(pa.float32(), dim))])
    written = 0
    with pq.ParquetWriter(f, schema) as writer:
        for texts, vecs in chunks_with_text:
            values = pa.array(np.ascontiguousarray(vecs, dtype=np.float32).reshape(-1))
            writer.write_table(pa.table({"text": texts, "embedding": pa.FixedSizeListArray.from_arrays(values, dim)},
                                        schema=schema))
            written += len(texts)
    return written


class Encoder:
    """A checkpoint ready to encode: its model, tokenizer, pooling and precision (what every task loads)."""

    def __init__(self, ckpt: str, pooling: str | None, seq_len: int, precision: str):
        quiet_transformers()
        self.folder = model_dir(ckpt)
        self.tok = load_tokenizer(self.folder)
        self.pooling = checkpoint_pooling(self.folder, FinetuneConfig(pooling=pooling))
        self.seq_len = checkpoint_seq_len(self.folder, seq_len)
        self.model = load_encoder(self.folder, self.tok, self.seq_len)
        self.precision = resolve_precision(precision, self.model.device)[0]
        self.embedder = is_st_folder(self.folder)
        self.cut = 0

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    def stream(self, texts, tick=None):
        for vecs, cut in encode_stream(self.model, self.tok, texts, self.pooling, self.seq_len, self.precision,
                                       tick):
            self.cut += cut
            yield vecs

    def encode(self, texts: list[str]) -> np.ndarray:
        vecs, cut = encode_texts(self.model, self.tok, texts, self.pooling, self.seq_len, self.precision)
        self.cut += cut
        return vecs


def chunks_with_text(enc: Encoder, texts, tick, chunk: int):
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == chunk:
            yield batch, enc.encode(batch)
            tick(len(batch))
            batch = []
    if batch:
        yield batch, enc.encode(batch)
        tick(len(batch))


def encode_files(enc: Encoder, lines: Lines, out: Path, total: int) -> int:
    """Every text of `lines` into `out` (.npy or .parquet, by its suffix), written through a temp name."""
    with progress(total, out.name) as bar, atomic_write(out, "wb") as f:
        if out.suffix == ".parquet":
            return write_parquet(f, chunks_with_text(enc, lines, bar.update, CHUNK_TEXTS), enc.dim)
        return write_vectors_npy(f, enc.stream(lines, bar.update), total, enc.dim)


def nearest(enc: Encoder, lines: Lines, queries: np.ndarray, k: int) -> list[list[tuple[float, int, str]]]:
    """Each query's `k` nearest texts (cosine, position, text), best first; a heap per query, so memory holds k
    lines per query and one chunk of vectors."""
    heaps: list[list] = [[] for _ in queries]
    texts: list[str] = []
    base = 0
    for vecs in enc.stream(_remember(lines, texts)):
        scores = vecs @ queries.T
        for q in range(len(queries)):
            for i in np.argsort(-scores[:, q], kind="stable")[:k]:
                item = (float(scores[i, q]), -(base + int(i)), texts[i])
                (heapq.heappush if len(heaps[q]) < k else heapq.heappushpop)(heaps[q], item)
        base += len(vecs)
        texts.clear()
    return [[(s, -neg, t) for s, neg, t in sorted(h, reverse=True)] for h in heaps]


def _remember(lines, into: list[str]):
    for text in lines:
        into.append(text)
        yield text
