"""Reading SHARDDIR (its layout: `zh_bert.corpus.sharddir`): O(1) random access to packed sequences, and a
resumable, rank-sharded loader.

`ShardDataset` reads a multi-part SHARDDIR as one split: row i of the whole is row i - offset(p) of part p,
parts in order, so shuffling, resume and rank sharding see one index space either way.

.npy files are loaded with allow_pickle=False; every file's size is checked against meta.json at open so a
truncated copy fails with a clear message instead of a crash mid-training.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from zh_bert.core.errors import ZhBertError
from zh_bert.corpus.sharddir import META, SPLITS, UNIGRAM_COUNTS, read_meta, split_file
from zh_bert.corpus.tokenizer_files import tokenizer_fingerprint
from zh_bert.train.masking import MaskingConfig, mask_batch


def _fingerprint_of(tok) -> tuple[str, str]:
    """(fingerprint, description) from a fingerprint string, a tokenizer dir, or a tokenizer object."""

    if isinstance(tok, (str, os.PathLike)) and Path(tok).is_dir():
        return tokenizer_fingerprint(tok), f"tokenizer {tok}"
    if isinstance(tok, str):
        return tok, "the training tokenizer"
    return tokenizer_fingerprint(tok), f"tokenizer {getattr(tok, 'name_or_path', '') or type(tok).__name__}"


class PartRows:
    """Same-width row arrays (the parts' memmaps) read as one (N, L) array: `rows[i]`, `rows[a:b]`,
    `rows[index_array]`, with further indices after the row (`rows[i, :n]`). Only the rows asked for are read."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = parts
        self.offsets = np.cumsum([0] + [len(p) for p in parts])
        self.shape = (int(self.offsets[-1]), int(parts[0].shape[1]))
        self.dtype = parts[0].dtype
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype=dtype)

    def __getitem__(self, key):
        key, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        n = self.shape[0]
        scalar = isinstance(key, (int, np.integer))
        idx = np.arange(n)[key] if isinstance(key, slice) else np.asarray(key, dtype=np.int64)
        flat = idx.reshape(-1)
        if flat.size and (flat.min() < -n or flat.max() >= n):
            raise IndexError(f"row index out of range for {n} rows")
        flat = flat % max(n, 1)
        out = np.empty((flat.size, self.shape[1]), dtype=self.dtype)
        part = np.searchsorted(self.offsets, flat, side="right") - 1
        for p in np.unique(part).tolist():
            sel = part == p
            out[sel] = self.parts[p][flat[sel] - self.offsets[p]]
        out = out.reshape(idx.shape + (self.shape[1],))
        return out[rest] if scalar else out[(slice(None),) * idx.ndim + rest]


class ShardDataset:
    """Sequence i of one split of SHARDDIR as numpy arrays; memory-mapped, O(1) per item.

    `tokenizer_fingerprint` may be a fingerprint string, a tokenizer dir, or a tokenizer object; when it
    does not match the one the shards were built with, ZhBertError names both.
    """

    def __init__(self, sharddir: str | Path, split: str = "train", tokenizer_fingerprint=None):
        if split not in SPLITS:
            raise ZhBertError(f"split must be one of {', '.join(SPLITS)}, got '{split}'")
        self.dir = Path(sharddir)
        self.split = split
        self.meta = meta = read_meta(self.dir)
        if tokenizer_fingerprint is not None:
            self.check_tokenizer(tokenizer_fingerprint)
        self.seq_len: int = int(meta["seq_len"])
        self.vocab_size: int = int(meta["vocab_size"])
        self.pairs: str | None = meta.get("pairs")
        self.pad_id, self.cls_id, self.sep_id = int(meta["pad_id"]), int(meta["cls_id"]), int(meta["sep_id"])
        self.mask_id, self.unk_id = int(meta["mask_id"]), int(meta["unk_id"])
        self.special_ids: list[int] = [int(i) for i in meta["special_ids"]]
        self.n = int(meta["counts"][split]["sequences"])
        if meta.get("parts"):
            self._open_parts(meta["parts"])
        else:
            self._assign(self._open(self.dir, meta["counts"][split]))

    def _assign(self, arrays: dict) -> None:
        self.ids, self.word_start = arrays["ids"], arrays["word_start"]
        self.lengths, self.doc_starts = arrays["lengths"], arrays["doc_starts"]
        if self.pairs:
            self.b_start, self.nsp = arrays["b_start"], arrays["nsp"]

    def _open(self, folder: Path, counts: dict) -> dict:
        """One split's arrays in `folder` (SHARDDIR or one part of it), each checked against `counts`."""
        n, L, split = int(counts["sequences"]), self.seq_len, self.split

        def file(kind: str) -> Path:
            return folder / split_file(split, kind)

        out = {"ids": self._memmap(file("ids.bin"), np.dtype(self.meta["ids_dtype"]), (n, L)),
               "word_start": self._memmap(file("word_start.bin"), np.dtype(np.uint8), (n, L)),
               "lengths": self._npy(file("lengths.npy"), (n,)),
               "doc_starts": self._npy(file("doc_starts.npy"), (int(counts["documents"]),))}
        if self.pairs:
            out["b_start"] = self._npy(file("b_start.npy"), (n,))
            out["nsp"] = self._npy(file("nsp.npy"), (n,))
        return out

    def _open_parts(self, parts: list[dict]) -> None:
        """The parts of a multi-part SHARDDIR as one split: row arrays stay per-part memmaps behind
        `PartRows`; the small per-row arrays are concatenated, document starts shifted by each part's rows."""
        opened = [self._open(self.dir / p["name"], p["counts"][self.split]) for p in parts]
        rows = np.cumsum([0] + [len(o["lengths"]) for o in opened])
        if rows[-1] != self.n:
            raise ZhBertError(f"{self.dir / META}: parts hold {rows[-1]} {self.split} sequences but the "
                              f"total says {self.n}; re-run `zh-bert shard`")
        cat = {k: np.concatenate([o[k] for o in opened]) for k in opened[0] if k not in ("ids", "word_start")}
        cat["doc_starts"] = np.concatenate([o["doc_starts"] + off * self.seq_len for o, off in zip(opened, rows)])
        self._assign({"ids": PartRows([o["ids"] for o in opened]),
                      "word_start": PartRows([o["word_start"] for o in opened]), **cat})

    # -- opening files with size checks ------------------------------------------------------------
    def _memmap(self, path: Path, dtype: np.dtype, shape: tuple[int, int]) -> np.ndarray:
        expected = dtype.itemsize * shape[0] * shape[1]
        if not path.is_file():
            raise ZhBertError(f"{path}: missing shard file; re-run `zh-bert shard`")
        size = path.stat().st_size
        if size != expected:
            raise ZhBertError(f"{path}: shard file is truncated or corrupt ({size} bytes, meta.json says "
                              f"{expected}); re-run `zh-bert shard`")
        if expected == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", shape=shape)

    def _npy(self, path: Path, shape: tuple[int, ...]) -> np.ndarray:
        try:
            arr = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise ZhBertError(f"{path}: missing shard file; re-run `zh-bert shard`") from None
        except (ValueError, OSError, EOFError) as e:
            raise ZhBertError(f"{path}: shard file is truncated or corrupt ({e}); re-run `zh-bert shard`") from None
        if arr.shape != shape:
            raise ZhBertError(f"{path}: shape {arr.shape} but meta.json says {shape}; re-run `zh-bert shard`")
        return arr

    # -- checks the trainer calls --------------------------------------------------------------------
    def check_tokenizer(self, tok) -> None:
        """Refuse shards built with another tokenizer (fingerprint string, tokenizer dir or object)."""
        fp, what = _fingerprint_of(tok)
        have = self.meta.get("tokenizer_fingerprint")
        if fp != have:
            raise ZhBertError(
                f"{self.dir} was built with tokenizer {self.meta.get('tokenizer', '?')} (fingerprint {have}), "
                f"but {what} has fingerprint {fp}; re-run `zh-bert shard --tokenizer` with the training tokenizer")

    def check_positions(self, max_position_embeddings: int) -> None:
        if self.seq_len > max_position_embeddings:
            raise ZhBertError(f"{self.dir}: seq_len {self.seq_len} is longer than the model's "
                              f"max_position_embeddings {max_position_embeddings}")

    # -- access ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n

    def batch(self, idx) -> dict:
        """Items `idx` stacked: input_ids, word_start, token_type_ids, attention_mask (B, L) (+ nsp labels)."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size and (idx.min() < -self.n or idx.max() >= self.n):
            raise IndexError(f"index out of range for {self.n} sequences")
        idx = idx % max(self.n, 1)
        pos = np.arange(self.seq_len)
        lengths = self.lengths[idx].astype(np.int64)
        out = {
            "input_ids": np.asarray(self.ids[idx], dtype=np.int64),
            "word_start": np.asarray(self.word_start[idx], dtype=bool),
            "attention_mask": (pos[None, :] < lengths[:, None]).astype(np.int64),
        }
        if self.pairs:
            b = self.b_start[idx].astype(np.int64)
            out["token_type_ids"] = ((pos[None, :] >= b[:, None]) & (pos[None, :] < lengths[:, None])).astype(np.int64)
            out["next_sentence_label"] = self.nsp[idx].astype(np.int64)
        else:
            out["token_type_ids"] = np.zeros((len(idx), self.seq_len), dtype=np.int64)
        return out

    def __getitem__(self, i) -> dict:
        i = int(i)
        if not -self.n <= i < self.n:
            raise IndexError(f"sequence {i} out of range for {self.n} sequences")
        b = self.batch([i])
        out = {k: v[0] for k, v in b.items()}
        if "next_sentence_label" in out:
            out["next_sentence_label"] = int(out["next_sentence_label"])
        return out

    def unigram_probs(self) -> np.ndarray:
        """(vocab_size,) float64 token frequencies of the train split (specials excluded)."""
        counts = self._npy(self.dir / UNIGRAM_COUNTS, (self.vocab_size,)).astype(np.float64)
        total = counts.sum()
        if total <= 0:
            raise ZhBertError(f"{self.dir}: {UNIGRAM_COUNTS} is empty")
        return counts / total


class ShardLoader:
    """Endless batches of dynamically masked sequences, resumable without replay.

    The sample stream is the concatenation of per-epoch permutations, each drawn from (seed, epoch). Each
    step takes the next `batch_size * world_size` samples; rank r takes every world_size-th of them
    starting at r, so ranks are disjoint and together consume exactly one global batch. `position` counts
    samples of the current epoch consumed by all ranks, so `state_dict()` is identical on every rank and
    `load_state_dict()` jumps there by arithmetic. Each sequence is masked with randomness keyed by its
    place in the global sample stream (seed, epoch, position), so a resumed run masks exactly as an
    uninterrupted one would, and 1 process × 2k micro-batches sees the very same masked sequences as
    2 processes × k (the same recipe gives the same updates on any number of processes).
    """

    def __init__(self, dataset: ShardDataset, batch_size: int, masking: MaskingConfig, seed: int,
                 rank: int = 0, world_size: int = 1, shuffle: bool = True, pin_memory: bool = False):
        """`pin_memory`: batches in page-locked host memory, so that copies to a GPU run asynchronously."""
        if len(dataset) == 0:
            raise ZhBertError(f"{dataset.dir}: split '{dataset.split}' has no sequences")
        if batch_size < 1:
            raise ZhBertError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= rank < world_size:
            raise ZhBertError(f"rank {rank} not in [0, {world_size})")
        self.dataset, self.batch_size, self.masking = dataset, int(batch_size), masking
        self.seed, self.rank, self.world_size, self.shuffle = int(seed), int(rank), int(world_size), shuffle
        self.epoch, self.position, self.pin_memory = 0, 0, pin_memory
        self.mask_rate = masking.mask_rate   # training batches; the trainer sets it per step (mask_rate_schedule)
        self.last_indices = np.zeros(0, dtype=np.int64)
        self._perm_cache: dict[int, np.ndarray] = {}
        self._unigram = dataset.unigram_probs() if masking.strategy == "unigram-noise" else None
        self._similar = None
        if masking.strategy == "correction":   # MacBERT's similar words, learned once per shard dir
            from zh_bert.corpus.similar_words import load_or_build

            self._similar = load_or_build(dataset)

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perm_cache:
            n = len(self.dataset)
            perm = (np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle
                    else np.arange(n))
            if n < 2**31:   # 4 bytes per sequence: 40 M sequences (~5 B tokens at 128) = 160 MB per process
                perm = perm.astype(np.int32)
            self._perm_cache = {epoch: perm}  # only the current epoch is kept
        return self._perm_cache[epoch]

    def _global_indices(self) -> tuple[np.ndarray, np.ndarray]:
        """The next global batch: dataset rows and each row's stream key (epoch, position); advances."""
        need, n = self.batch_size * self.world_size, len(self.dataset)
        parts, keys = [], []
        while need:
            perm = self._perm(self.epoch)
            take = perm[self.position:self.position + need]
            parts.append(take)
            keys.append(np.stack([np.full(len(take), self.epoch),
                                  np.arange(self.position, self.position + len(take))], axis=1))
            need -= len(take)
            self.position += len(take)
            if self.position >= n:
                self.epoch, self.position = self.epoch + 1, 0
        return np.concatenate(parts), np.concatenate(keys)

    def _mask_per_sequence(self, idx: np.ndarray, keys: np.ndarray) -> dict:
        """Mask each row with its own RNG from (seed, epoch, position): independent of ranks and batching."""
        masking = self.masking if self.mask_rate == self.masking.mask_rate else dataclasses.replace(
            self.masking, mask_rate=self.mask_rate)
        return self.make_batch(idx, [np.random.default_rng([self.seed, int(e), int(p)]) for e, p in keys], masking)

    def make_batch(self, idx: np.ndarray, rng, masking: MaskingConfig | None = None) -> dict:
        """Masked numpy batch for dataset rows `idx` (also used for fixed-mask evaluation); `rng` is one
        generator or one per row (`mask_batch`); `masking` defaults to the loader's."""
        ds = self.dataset
        b = ds.batch(idx)
        ids, labels = mask_batch(b["input_ids"], b["word_start"], masking or self.masking, rng, mask_id=ds.mask_id,
                                 special_ids=ds.special_ids, vocab_size=ds.vocab_size,
                                 unigram_probs=self._unigram, similar=self._similar)
        out = {"input_ids": ids, "attention_mask": b["attention_mask"], "token_type_ids": b["token_type_ids"],
               "labels": labels}
        if "next_sentence_label" in b:
            out["next_sentence_label"] = b["next_sentence_label"]
        return out

    def next_numpy(self) -> dict:
        idx, keys = self._global_indices()
        idx, keys = idx[self.rank::self.world_size], keys[self.rank::self.world_size]
        self.last_indices = idx  # dataset rows of the batch just made (for tests and debugging)
        return self._mask_per_sequence(idx, keys)

    def __iter__(self):
        import torch

        while True:
            yield {k: self._tensor(torch, v) for k, v in self.next_numpy().items()}

    def _tensor(self, torch, array):
        t = torch.from_numpy(array)
        return t.pin_memory() if self.pin_memory else t

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, d: dict) -> None:
        epoch, position = int(d["epoch"]), int(d["position"])
        if epoch < 0 or not 0 <= position < max(len(self.dataset), 1):
            raise ZhBertError(f"loader state {d} does not fit a split of {len(self.dataset)} sequences")
        self.epoch, self.position = epoch, position

    def one_pass(self, seed: int | None = None):
        """One ordered pass over this rank's share of the split (last batch may be short), masked with a
        fixed RNG per batch: the same batches every call, for validation loss/accuracy."""
        import torch

        n, seed = len(self.dataset), self.seed if seed is None else seed
        mine = np.arange(self.rank, n, self.world_size)
        for k, start in enumerate(range(0, len(mine), self.batch_size)):
            rng = np.random.default_rng([seed, 2**31 - 1, k, self.rank])
            batch = self.make_batch(mine[start:start + self.batch_size], rng)
            yield {key: self._tensor(torch, v) for key, v in batch.items()}
