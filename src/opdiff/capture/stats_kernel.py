"""Tensor statistics in one fused pass (numba): the capture's hot path, framework-neutral.

Same semantics as the numpy reference `opdiff.store.stats.tensor_stats` (min/max/mean/std/norm
over finite elements in float64, counts of nan/+inf/-inf/zeros), but one read of the data, float64
accumulators, all cores (plain threads: the kernel runs without the GIL, and idle workers sleep
instead of spinning against the framework's own thread pool), and a fixed chunking so that the
result does not depend on the thread count. fp16/bf16/fp8 are decoded through a lookup table (numba has no 16-bit floats).
See bench/capture_bench.py and docs/capture.md ("Statistics") for the measurements behind it.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

from ..store.format import Stats

CHUNK = 1 << 16  # elements per work item; fixed so that results do not depend on the thread count
_OUT = 9  # min, max, sum, sum of squares, finite, nan, posinf, neginf, zeros


@nb.njit(cache=True, nogil=True, inline="always")
def _store(o, mn, mx, s1, s2, fin, nan, pinf, ninf, zeros):
    o[0] = mn
    o[1] = mx
    o[2] = s1
    o[3] = s2
    o[4] = fin
    o[5] = nan
    o[6] = pinf
    o[7] = ninf
    o[8] = zeros


def _value(x, table, i):
    """Element i of x as float64: directly, or through `table` for 8/16-bit float codes."""


@overload(_value, inline="always")
def _value_impl(x, table, i):
    if isinstance(table, types.NoneType):
        return lambda x, table, i: np.float64(x[i])
    return lambda x, table, i: table[x[i]]


def _copy(dst, x, i):
    """dst[i] = x[i], or nothing when there is no `dst` (statistics only)."""


@overload(_copy, inline="always")
def _copy_impl(dst, x, i):
    if isinstance(dst, types.NoneType):
        return lambda dst, x, i: None

    def impl(dst, x, i):
        dst[i] = x[i]

    return impl


@nb.njit(cache=True, nogil=True)
def _chunk(x, table, dst, lo, hi, o):
    mn, mx, s1, s2 = np.inf, -np.inf, 0.0, 0.0
    fin = nan = pinf = ninf = zeros = 0
    for i in range(lo, hi):
        _copy(dst, x, i)
        v = _value(x, table, i)
        zeros += v == 0.0
        if v - v == 0.0:  # finite
            fin += 1
            s1 += v
            s2 += v * v
            mn = min(mn, v)
            mx = max(mx, v)
        elif v != v:
            nan += 1
        elif v > 0:
            pinf += 1
        else:
            ninf += 1
    _store(o, mn, mx, s1, s2, fin, nan, pinf, ninf, zeros)


@nb.njit(cache=True, nogil=True)
def _combine(parts):
    o = np.zeros(_OUT)
    o[0] = np.inf
    o[1] = -np.inf
    for c in range(parts.shape[0]):  # fixed order: deterministic whatever the thread count
        o[0] = min(o[0], parts[c, 0])
        o[1] = max(o[1], parts[c, 1])
        for k in range(2, _OUT):
            o[k] += parts[c, k]
    return o


@nb.njit(cache=True, nogil=True)
def _chunks(x, table, dst, c0, c1, parts):
    """Chunks c0..c1 into their rows of `parts` (runs without the GIL, so threads share the work)."""
    n = x.size
    for c in range(c0, c1):
        _chunk(x, table, dst, c * CHUNK, min(n, (c + 1) * CHUNK), parts[c])


WORKERS = max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
MIN_CHUNKS_PER_WORKER = 4  # below this a tensor is measured on the calling thread alone
_pool: ThreadPoolExecutor | None = None


def _run(x, table, dst) -> np.ndarray:
    """The kernel over all chunks, split among WORKERS threads; the sum is taken in chunk order."""
    global _pool
    nch = (x.size + CHUNK - 1) // CHUNK
    parts = np.zeros((nch, _OUT))
    workers = min(WORKERS, nch // MIN_CHUNKS_PER_WORKER)
    if workers <= 1:
        _chunks(x, table, dst, 0, nch, parts)
    else:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS - 1, thread_name_prefix="opdiff-stats")
        bounds = [nch * k // workers for k in range(workers + 1)]
        jobs = [_pool.submit(_chunks, x, table, dst, bounds[k], bounds[k + 1], parts) for k in range(1, workers)]
        _chunks(x, table, dst, bounds[0], bounds[1], parts)
        for job in jobs:
            job.result()
    return _combine(parts)


def _table(np_dtype, bits: int) -> np.ndarray:
    codes = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    with np.errstate(invalid="ignore"):
        return codes.view(np_dtype).astype(np.float64)


_LUTS: dict[str, tuple[type, np.ndarray]] = {}
_LUT_DTYPES = {
    "float16": (np.float16, np.uint16, 16),
    "bfloat16": (ml_dtypes.bfloat16, np.uint16, 16),
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, np.uint8, 8),
    "float8_e5m2": (ml_dtypes.float8_e5m2, np.uint8, 8),
}


def _lut(name: str) -> tuple[type, np.ndarray]:
    hit = _LUTS.get(name)
    if hit is None:
        np_dtype, code_dtype, bits = _LUT_DTYPES[name]
        hit = _LUTS[name] = (code_dtype, _table(np_dtype, bits))
    return hit


def raw_stats(flat: np.ndarray, dtype: str, copy_to: np.ndarray | None = None) -> np.ndarray:
    """[min, max, sum, sumsq, finite, nan, posinf, neginf, zeros] of a 1-D contiguous array.

    With `copy_to` (an array of the same size and dtype), the data is copied there in the same pass.
    """
    code_dtype, table = _lut(dtype) if dtype in _LUT_DTYPES else (np.uint8 if dtype == "bool" else None, None)
    if code_dtype is not None:
        flat = flat.view(code_dtype)
        copy_to = copy_to.view(code_dtype) if copy_to is not None else None
    return _run(flat, table, copy_to)


def to_stats(o: np.ndarray, numel: int) -> Stats:
    """Stats from the raw accumulators of `raw_stats`."""
    mn, mx, s1, s2, fin, nan, pinf, ninf, zeros = o.tolist()
    fin = int(fin)
    stats = Stats(numel=numel, nan=int(nan), posinf=int(pinf), neginf=int(ninf), zeros=int(zeros))
    if fin:
        mean = s1 / fin
        var = max(s2 / fin - mean * mean, 0.0)
        stats.min, stats.max, stats.mean = mn, mx, mean
        stats.std, stats.norm = math.sqrt(var), math.sqrt(s2)
    return stats


def copy_with_stats(arr: np.ndarray, dtype: str) -> tuple[np.ndarray, Stats]:
    """A copy of a contiguous array and its statistics, in one read of the data."""
    out = np.empty_like(arr)
    if arr.size == 0:
        return out, Stats(numel=0)
    return out, to_stats(raw_stats(arr.reshape(-1), dtype, out.reshape(-1)), int(arr.size))


def array_stats(arr: np.ndarray, dtype: str) -> Stats:
    """Stats of a contiguous array whose format dtype name is `dtype` (ml_dtypes for bf16/fp8)."""
    n = int(arr.size)
    if n == 0:
        return Stats(numel=0)
    return to_stats(raw_stats(arr.reshape(-1), dtype), n)


def warm_up(dtypes=("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")) -> None:
    """Compile (or load from numba's cache) the kernels for these dtypes now rather than on first use."""
    from ..store.format import numpy_dtype

    for name in dtypes:
        for n in (1, 2 * CHUNK + 1):
            arr = np.zeros(n, dtype=numpy_dtype(name))
            array_stats(arr, name)
            copy_with_stats(arr, name)
