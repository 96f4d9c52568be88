"""Reading a TensorFlow 1 checkpoint (a tensor bundle: `PREFIX.index` + `PREFIX.data-NNNNN-of-NNNNN`) without
TensorFlow.

Google's `chinese_L-12_H-768_A-12` and HFL's BERT-wwm / RoBERTa-wwm / MacBERT releases ship as such bundles, and
installing TensorFlow only to read them is a 600 MB detour that no longer installs beside recent Pythons. The
format is small: the `.index` is a LevelDB table (sorted keys, prefix-compressed blocks, a 48-byte footer ending
in a magic number) mapping each variable name to a `BundleEntryProto` (dtype, shape, shard, offset, size, masked
CRC-32C); the empty key holds a `BundleHeaderProto` (shard count, byte order). A tensor is the little-endian,
row-major bytes of its shard at [offset, offset + size). Everything read is checked before it is trusted: the
footer's magic, every block's CRC, every varint and field against the bytes left, every entry against its
shard's length (a truncated download is one line naming the tensor), every tensor against its CRC.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from glob import escape as glob_escape
from pathlib import Path

import google_crc32c

from zh_bert.core.errors import ZhBertError

TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48
_TRAILER = 5           # block type (1 byte) + masked CRC-32C (4 bytes)
#: TensorFlow DataType -> (numpy dtype, bytes per element); strings, resources and variants are not tensors here
_DTYPES = {1: ("<f4", 4), 2: ("<f8", 8), 3: ("<i4", 4), 4: ("u1", 1), 5: ("<i2", 2), 6: ("i1", 1), 9: ("<i8", 8),
           10: ("?", 1), 14: ("<u2", 2), 19: ("<f2", 2)}
_BFLOAT16 = 14
#: the dtypes a weight may have (float32, float64, bfloat16, float16): TF's own restore refuses a variable whose
#: saved dtype differs from the graph's, so an int32 kernel is a damaged or forged entry, never a weight
FLOAT_DTYPES = frozenset({1, 2, 14, 19})
#: the highest rank read (TensorFlow allows 254, numpy 64; a BERT's tensors are rank 1 or 2)
MAX_RANK = 8
#: the most bytes of an index read (Google's BERT-large index with Adam slots is ~40 KB)
MAX_INDEX = 64 << 20


def masked_crc(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of `data` in the form LevelDB and TensorFlow store it (rotated and offset, so a
    CRC of CRCs is not trivial); the CRC from google-crc32c's C code: ~400 MB of BERT-base are checked on read."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass(frozen=True)
class BundleEntry:
    name: str
    dtype: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc: int | None


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ZhBertError(f"{where}: a number runs past the end of its record: not a TensorFlow checkpoint "
                              f"index, or a damaged one")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _proto_fields(buf: bytes, where: str):
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes, fixed as int."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, where)
        elif wire == 2:
            n, pos = _varint(buf, pos, where)
            if pos + n > len(buf):
                raise ZhBertError(f"{where}: a field runs past the end of its record (damaged index)")
            value, pos = buf[pos:pos + n], pos + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            if pos + n > len(buf):
                raise ZhBertError(f"{where}: a field runs past the end of its record (damaged index)")
            value, pos = int.from_bytes(buf[pos:pos + n], "little"), pos + n
        else:
            raise ZhBertError(f"{where}: field {number} has wire type {wire}, which no checkpoint index holds")
        yield number, value


def _shape(buf: bytes, where: str) -> tuple[int, ...]:
    dims = []
    for number, value in _proto_fields(buf, where):
        if number == 2:          # TensorShapeProto.dim
            if len(dims) == MAX_RANK:
                raise ZhBertError(f"{where}: a tensor of rank above {MAX_RANK}: no checkpoint weight has one "
                                  f"(a damaged or forged index)")
            dims.append(next((v for n, v in _proto_fields(value, where) if n == 1), 0))
        elif number == 3 and value:
            raise ZhBertError(f"{where}: a tensor of unknown rank")
    return tuple(dims)


def _entry(name: str, value: bytes, where: str) -> BundleEntry:
    got = {"dtype": 0, "shape": (), "shard": 0, "offset": 0, "size": 0, "crc": None}
    for number, v in _proto_fields(value, where):
        if number == 1:
            got["dtype"] = v
        elif number == 2:
            got["shape"] = _shape(v, where)
        elif number in (3, 4, 5, 6):
            got[{3: "shard", 4: "offset", 5: "size", 6: "crc"}[number]] = v
        elif number == 7:
            raise ZhBertError(f"{where}: {name} is saved in slices (a partitioned variable); only whole tensors "
                              f"are read")
    return BundleEntry(name, **got)


def _block(data: bytes, handle: bytes, path: Path) -> bytes:
    """The contents of the block a (varint offset, varint size) handle points at, its CRC checked."""
    offset, pos = _varint(handle, 0, str(path))
    size, _ = _varint(handle, pos, str(path))
    if offset + size + _TRAILER > len(data):
        raise ZhBertError(f"{path}: a block at byte {offset:,} ({size:,} bytes) runs past the end of the file "
                          f"({len(data):,} bytes): truncated or not a TensorFlow checkpoint index")
    contents, kind = data[offset:offset + size], data[offset + size]
    stored = int.from_bytes(data[offset + size + 1:offset + size + _TRAILER], "little")
    if masked_crc(data[offset:offset + size + 1]) != stored:
        raise ZhBertError(f"{path}: the block at byte {offset:,} fails its CRC check: the index is damaged")
    if kind != 0:
        raise ZhBertError(f"{path}: compressed blocks (type {kind}); TensorFlow writes checkpoint indexes "
                          f"uncompressed, so this is no checkpoint index zh-bert reads")
    return contents


def _block_items(block: bytes, path: Path):
    """(key, value) of a table block: prefix-compressed entries, then the restart array and its length."""
    where = str(path)
    if len(block) < 4:
        raise ZhBertError(f"{path}: a block too short to hold its restart count (damaged index)")
    restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise ZhBertError(f"{path}: a block's restart array is longer than the block (damaged index)")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos, where)
        fresh, pos = _varint(block, pos, where)
        size, pos = _varint(block, pos, where)
        if shared > len(key) or pos + fresh + size > end:
            raise ZhBertError(f"{path}: an entry runs past the end of its block (damaged index)")
        key = key[:shared] + block[pos:pos + fresh]
        yield key, block[pos + fresh:pos + fresh + size]
        pos += fresh + size


def read_index(path: Path) -> tuple[dict, dict[str, BundleEntry]]:
    """(header fields, {name: entry}) of a checkpoint's `.index`."""
    size = path.stat().st_size
    if size > MAX_INDEX:
        raise ZhBertError(f"{path}: {size:,} bytes, more than any checkpoint index; not read")
    data = path.read_bytes()
    if len(data) < _FOOTER or struct.unpack("<Q", data[-8:])[0] != TABLE_MAGIC:
        raise ZhBertError(f"{path}: not a TensorFlow checkpoint index (no table footer); a cut-short download?")
    footer = data[-_FOOTER:]
    _, pos = _varint(footer, 0, str(path))                 # the metaindex handle: nothing there for a bundle
    _, pos = _varint(footer, pos, str(path))
    header: dict = {}
    entries: dict[str, BundleEntry] = {}
    for _, handle in _block_items(_block(data, footer[pos:], path), path):
        for key, value in _block_items(_block(data, handle, path), path):
            name = key.decode("utf-8", "replace")
            where = f"{path}: {name or 'the header'}"
            if not key:
                header = {n: v for n, v in _proto_fields(value, where) if n in (1, 2)}
            else:
                entries[name] = _entry(name, value, where)
    if not entries:
        raise ZhBertError(f"{path}: the index lists no tensors")
    return header, entries


@dataclass
class TfCheckpoint:
    """A bundle opened for reading: its entries checked against the shards' lengths before any tensor is read."""

    prefix: Path
    entries: dict[str, BundleEntry]
    shards: list[Path]

    @classmethod
    def open(cls, prefix: Path) -> TfCheckpoint:
        index = Path(f"{prefix}.index")
        header, entries = read_index(index)
        if header.get(2, 0) != 0:
            raise ZhBertError(f"{index}: a big-endian checkpoint; only little-endian ones are read")
        count = header.get(1, 1)
        # The declared count is checked against the shard files there before it sizes anything: a forged header
        # saying 10^12 shards costs one directory listing, not a list of 10^12 paths.
        present = {p.name for p in Path(prefix).parent.glob(f"{glob_escape(Path(prefix).name)}.data-*-of-*")}
        first = Path(f"{prefix}.data-00000-of-{count:05d}")
        if not 1 <= count <= max(len(present), 1) or first.name not in present:
            raise ZhBertError(f"{index}: the header names {count:,} data shards, and {len(present):,} "
                              f"{Path(prefix).name}.data-* file{'s' * (len(present) != 1)} are there: "
                              f"{'a damaged index' if count > len(present) else f'{first.name} is missing'}")
        shards = [Path(f"{prefix}.data-{i:05d}-of-{count:05d}") for i in range(count)]
        for shard in shards:
            if shard.name not in present:
                raise ZhBertError(f"{shard}: missing (the index names {count} data shard{'s' * (count > 1)})")
        sizes = [os.path.getsize(s) for s in shards]
        for e in entries.values():
            if e.shard >= count:
                raise ZhBertError(f"{index}: {e.name} is in data shard {e.shard}, but the header names {count}")
            if e.offset + e.size > sizes[e.shard]:
                raise ZhBertError(f"{shards[e.shard]}: {sizes[e.shard]:,} bytes, but the index puts {e.name} at "
                                  f"bytes {e.offset:,}..{e.offset + e.size:,}: the shard is truncated")
        return cls(Path(prefix), entries, shards)

    def array(self, name: str, weight: bool = True):
        """The tensor `name` as a float32 numpy array (float16/bfloat16/float64 widened or narrowed exactly as
        stored values allow), its byte count and CRC checked; a `weight` must be stored as floating point."""
        import numpy as np

        e = self.entries[name]
        if e.dtype not in _DTYPES:
            raise ZhBertError(f"{self.prefix}: {name} has TensorFlow dtype {e.dtype}, not a numeric tensor")
        if weight and e.dtype not in FLOAT_DTYPES:
            raise ZhBertError(f"{self.prefix}.index: {name} is stored as {_DTYPES[e.dtype][0]} integers, but a weight "
                              f"is floating point (TensorFlow's own restore refuses it): a damaged or forged index")
        code, width = _DTYPES[e.dtype]
        count = 1
        for d in e.shape:
            count *= d
        if count * width != e.size:
            raise ZhBertError(f"{self.prefix}.index: {name} is {list(e.shape)} of {width}-byte values "
                              f"({count * width:,} bytes), but the index says {e.size:,} bytes")
        with open(self.shards[e.shard], "rb") as f:
            f.seek(e.offset)
            raw = f.read(e.size)
        if e.crc is not None and masked_crc(raw) != e.crc:
            raise ZhBertError(f"{self.shards[e.shard]}: {name} fails its CRC check: the data shard is damaged")
        values = np.frombuffer(raw, code).reshape(e.shape)
        if e.dtype == _BFLOAT16:
            return (values.astype(np.uint32) << 16).view(np.float32)
        return values.astype(np.float32) if values.dtype.kind == "f" else values
