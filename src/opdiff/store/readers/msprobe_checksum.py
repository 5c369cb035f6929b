"""msprobe's per-tensor checksums (dump.json's `md5` field) recomputed from the dumped data.

In md5 summary mode msprobe writes the CRC-32 (zlib) of the tensor's raw bytes; in xor mode the XOR
of its bytes read as little-endian 64-bit words, zero-padded (msprobe/pytorch/xor_checksum). Where a
record has both a checksum and its .pt data, the data must match, or the record is damaged.
"""

from __future__ import annotations

import zlib

import numpy as np


def checksum(raw: bytes, kind: str) -> str | None:
    """The checksum of `kind` ("crc32" or "xor64") of a tensor's raw bytes as opdiff's hash names it."""
    if kind == "crc32":
        return f"crc32:{zlib.crc32(raw) & 0xFFFFFFFF:08x}"
    if kind == "xor64":
        pad = (-len(raw)) % 8
        words = np.frombuffer(raw + b"\0" * pad, dtype="<u8")
        x = int(np.bitwise_xor.reduce(words)) if words.size else 0
        return f"xor64:{x:016x}"
    return None


def mismatch(raw: bytes, expected: str | None, numel: int, ndim: int) -> str | None:
    """Why the data does not match the recorded checksum (None when it does, or nothing can be checked:
    no checksum, or a 0-d tensor whose xor "checksum" is its value)."""
    if not expected or ":" not in expected or (expected.startswith("xor64:") and ndim == 0) or numel == 0:
        return None
    kind = expected.split(":", 1)[0]
    got = checksum(raw, kind)
    if got is None or got == expected:
        return None
    return f"its data's {kind} is {got.split(':', 1)[1]} but dump.json says {expected.split(':', 1)[1]}"
