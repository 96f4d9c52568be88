"""CRC-32C (Castagnoli), the checksum TensorFlow writes beside every tensor of a checkpoint and every block of its
index, computed without TensorFlow or a C extension.

A TensorFlow 1 checkpoint of BERT-base with its Adam slots is 1.2 GB; `tf_checkpoint` checks the ~400 MB it
reads. A byte-at-a-time Python loop would take minutes, so a large buffer is cut into equal chunks whose CRCs
are computed side by side with numpy (one table lookup per byte position for all chunks at once) and then
combined: a CRC is linear over GF(2), so the CRC of A+B is "A's CRC pushed through len(B) zero bytes" XOR B's.
"""

from __future__ import annotations

_POLY = 0x82F63B78   # Castagnoli, reflected


def _table() -> list[int]:
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        out.append(c)
    return out


_CRC_TABLE = _table()
#: below this many bytes the plain loop is faster than setting up numpy
_SMALL = 4096
#: the most chunks computed side by side
_LANES = 1 << 16


def _raw(data, crc: int = 0) -> int:
    """The CRC register after `data` from `crc`, without the standard's pre- and post-inversion."""
    t = _CRC_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def _zeros_operator(n_bytes: int) -> list[int]:
    """The linear map "push the register through n zero bytes", as the images of the 32 unit vectors."""
    op = [_raw(b"\0", 1 << k) for k in range(32)]        # one zero byte
    result = [1 << k for k in range(32)]                  # identity
    while n_bytes:
        if n_bytes & 1:
            result = [_apply(op, v) for v in result]
        op = [_apply(op, v) for v in op]
        n_bytes >>= 1
    return result


def _apply(op: list[int], value: int) -> int:
    out, k = 0, 0
    while value:
        if value & 1:
            out ^= op[k]
        value >>= 1
        k += 1
    return out


def _raw_large(data) -> int:
    """`_raw(data)` from a zero register for a large buffer: chunks side by side, then combined pairwise."""
    import numpy as np

    n = len(data)
    lanes = min(_LANES, 1 << (n.bit_length() - 1))
    width = 1 << max(0, (-(-n // lanes) - 1).bit_length())   # chunk length: a power of two, lanes*width >= n
    padded = np.zeros(lanes * width, np.uint8)             # leading zeros leave a zero register unchanged
    padded[lanes * width - n:] = np.frombuffer(data, np.uint8)
    columns = np.ascontiguousarray(padded.reshape(lanes, width).T)
    table = np.array(_CRC_TABLE, np.uint32)
    crc = np.zeros(lanes, np.uint32)
    for row in columns:
        crc = table[(crc ^ row) & 0xFF] ^ (crc >> 8)
    while len(crc) > 1:                                    # (left, right) -> left pushed through right's bytes ^ right
        op = np.array(_zeros_operator(width), np.uint32)
        left, right = crc[0::2], crc[1::2]
        pushed = np.zeros_like(left)
        for k in range(32):
            pushed ^= np.where((left >> k) & 1 == 1, op[k], np.uint32(0))
        crc, width = pushed ^ right, width * 2
    return int(crc[0])


def crc32c(data) -> int:
    """The standard CRC-32C of a bytes-like object."""
    n = len(data)
    raw = _raw(data) if n < _SMALL else _raw_large(data)
    return raw ^ _apply(_zeros_operator(n), 0xFFFFFFFF) ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    """The form LevelDB and TensorFlow store a CRC in (rotated and offset, so a CRC of CRCs is not trivial)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
