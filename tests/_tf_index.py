"""Rewriting a TensorFlow checkpoint index (a LevelDB table of BundleEntryProto values) with a field changed and every
CRC made right again: how the reading tests forge a header or an entry that only the bounds can catch."""

from __future__ import annotations

import struct
from pathlib import Path

from zh_bert.hub.tf_checkpoint import masked_crc
from zh_bert.hub.tf_checkpoint import TABLE_MAGIC, _block, _block_items, _proto_fields, _varint


def varint(n: int) -> bytes:
    """Protobuf's base-128 varint; a negative int64 as its two's complement, ten bytes, as protobuf writes it."""
    n &= (1 << 64) - 1
    out = b""
    while True:
        out += bytes([n & 0x7F | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def field(number: int, value) -> bytes:
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def entry_bytes(dtype: int, shape: tuple[int, ...], shard: int, offset: int, size: int, crc: int | None) -> bytes:
    dims = b"".join(field(2, field(1, d)) for d in shape)
    out = field(1, dtype) + field(2, dims) + field(3, shard) + field(4, offset) + field(5, size)
    return out + (varint(6 << 3 | 5) + struct.pack("<I", crc) if crc is not None else b"")


def items(path: Path) -> list[tuple[bytes, bytes]]:
    data = path.read_bytes()
    footer = data[-48:]
    _, pos = _varint(footer, 0, "")
    _, pos = _varint(footer, pos, "")
    return [kv for _, h in _block_items(_block(data, footer[pos:], path), path)
            for kv in _block_items(_block(data, h, path), path)]


def _table_block(pairs: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in pairs)
    return body + struct.pack("<I", 0) + struct.pack("<I", 1)


def write(path: Path, pairs: list[tuple[bytes, bytes]]) -> None:
    """One data block, one index block, the footer; each block with its type byte and masked CRC-32C."""
    data = _table_block(pairs)
    out = data + b"\0" + struct.pack("<I", masked_crc(data + b"\0"))
    index = _table_block([(pairs[-1][0] + b"\xff", varint(0) + varint(len(data)))])
    index_at = len(out)
    out += index + b"\0" + struct.pack("<I", masked_crc(index + b"\0"))
    footer = (varint(0) + varint(0) + varint(index_at) + varint(len(index))).ljust(40, b"\0")
    path.write_bytes(out + footer + struct.pack("<Q", TABLE_MAGIC))


def decode_entry(value: bytes) -> dict:
    got = {"dtype": 0, "shape": (), "shard": 0, "offset": 0, "size": 0, "crc": None}
    for n, v in _proto_fields(value, ""):
        if n == 2:
            got["shape"] = tuple(next((x for m, x in _proto_fields(d, "") if m == 1), 0)
                                 for k, d in _proto_fields(v, "") if k == 2)
        elif n in (1, 3, 4, 5, 6):
            got[{1: "dtype", 3: "shard", 4: "offset", 5: "size", 6: "crc"}[n]] = v
    return got


def rewrite(path: Path, num_shards: int | None = None, name: str | None = None, **changes) -> None:
    """The index at `path` with the header's shard count and/or entry `name`'s fields replaced, CRCs right."""
    pairs = []
    for key, value in items(path):
        if key == b"" and num_shards is not None:
            value = field(1, num_shards)
        elif name is not None and key == name.encode():
            value = entry_bytes(**{**decode_entry(value), **changes})
        pairs.append((key, value))
    write(path, pairs)
