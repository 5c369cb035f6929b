"""Statistics and content hashes of numpy tensors, the way every capture must compute them.

Captures in a framework may compute the same numbers on their own device; this is the
reference (docs/format.md, "Statistics" and "Hash").
"""

from __future__ import annotations

import numpy as np
import xxhash

from ..base.record import Stats
from .format import FLOAT_DTYPES, dtype_name


def tensor_stats(arr: np.ndarray) -> Stats:
    """min/max/mean/std/L2 norm over the finite elements (float64), and counts of nan/inf/zeros."""
    name = dtype_name(arr.dtype)
    n = int(arr.size)
    if n == 0:
        return Stats(numel=0)
    flat = arr.reshape(-1)
    if name in FLOAT_DTYPES:
        x = flat.astype(np.float64)
        finite = np.isfinite(x)
        nan = int(np.isnan(x).sum())
        posinf = int(np.isposinf(x).sum())
        neginf = int(np.isneginf(x).sum())
        if not finite.all():
            x = x[finite]
    else:
        x = flat.astype(np.float64)
        nan = posinf = neginf = 0
    zeros = int((flat == 0).sum())
    if x.size == 0:
        return Stats(numel=n, nan=nan, posinf=posinf, neginf=neginf, zeros=zeros)
    return Stats(
        numel=n,
        min=float(x.min()),
        max=float(x.max()),
        mean=float(x.mean()),
        std=float(x.std()),
        norm=float(np.sqrt(np.dot(x, x))),
        nan=nan,
        posinf=posinf,
        neginf=neginf,
        zeros=zeros,
    )


def content_hasher(dtype: str, shape: tuple[int, ...]) -> xxhash.xxh3_64:
    """An xxh3-64 state after content_hash's (dtype, shape) prefix: update it with the raw bytes, then
    "xxh3:" + hexdigest() is the tensor's content hash (readers checking bytes in chunks, or many of one shape)."""
    h = xxhash.xxh3_64()
    h.update(f"{dtype}{list(shape)}".encode())
    return h


def content_hash(data: bytes | memoryview | np.ndarray, dtype: str, shape: tuple[int, ...]) -> str:
    """xxh3-64 of dtype, shape and the raw little-endian bytes: equal iff the tensors are bitwise equal."""
    h = content_hasher(dtype, shape)
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1).data
    h.update(data)
    return "xxh3:" + h.hexdigest()
