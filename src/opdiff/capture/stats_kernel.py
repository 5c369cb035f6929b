"""Tensor statistics in one fused pass (numba): the capture's hot path, framework-neutral.

Same semantics as the numpy reference `opdiff.store.stats.tensor_stats` (min/max/mean/std/norm
over finite elements in float64, counts of nan/+inf/-inf/zeros), in one read of the data, in a
loop the compiler vectorises (fp32: ~17 GB/s on one core of this machine, against ~2.5 GB/s for a
plain scalar loop):

- sums in float64, reassociation allowed (NaN semantics kept);
- min and max over integer keys: a float's bits, with the magnitude bits flipped when negative,
  order like the float itself, and integer min/max vectorise where float min/max (with its NaN
  rules) does not;
- loops index from 0, so that numba can drop its negative-index check (which stops vectorisation);
- a chunk holding a nan or an inf (its sums are not finite) is measured again element by element;
- chunks of fixed size, summed in chunk order, split among plain threads (the kernel runs without
  the GIL; idle workers sleep instead of spinning against the framework's own thread pool), so the
  result does not depend on the thread count;
- fp16/bf16/fp8 are summed through a lookup table (numba has no 16-bit floats).

See docs/capture.md ("Statistics") for the measurements behind it.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ..base.record import Stats
from ..store.format import numpy_dtype

CHUNK = 1 << 16  # elements per work item; fixed so that results do not depend on the thread count
_OUT = 7  # per chunk: sum, sum of squares, finite, nan, posinf, neginf, zeros
_FAST = {"reassoc", "contract"}  # no nnan/ninf: comparisons keep their IEEE meaning

# float dtype -> (its bits as a signed integer dtype, table-decoded 8/16-bit codes dtype or None)
_FLOAT_BITS = {
    "float64": (np.int64, None),
    "float32": (np.int32, None),
    "float16": (np.int16, np.uint16),
    "bfloat16": (np.int16, np.uint16),
    "float8_e4m3fn": (np.int8, np.uint8),
    "float8_e5m2": (np.int8, np.uint8),
}


def _value(x, table, i):
    """Element i as float64: directly, or through `table` for 8/16-bit float codes."""


@overload(_value, inline="always")
def _value_impl(x, table, i):
    if isinstance(table, types.NoneType):
        return lambda x, table, i: np.float64(x[i])
    return lambda x, table, i: table[x[i]]


def _key(x, bits, i):
    """An integer that orders like element i: the element itself (integers), or its float bits flipped."""


@overload(_key, inline="always")
def _key_impl(x, bits, i):
    if isinstance(bits, types.NoneType):
        return lambda x, bits, i: x[i]
    width = bits.dtype.bitwidth
    shift, mask = width - 1, (1 << (width - 1)) - 1
    ty = bits.dtype

    def impl(x, bits, i):
        b = bits[i]
        return b ^ ((b >> ty(shift)) & ty(mask))

    return impl


def _flip(b):
    """The min/max key of float bits `b` (see _key): the magnitude bits flipped when negative."""


@overload(_flip, inline="always")
def _flip_impl(b):
    ty = getattr(np, f"int{b.bitwidth}")
    shift, mask = ty(b.bitwidth - 1), ty((1 << (b.bitwidth - 1)) - 1)
    return lambda b: b ^ ((b >> shift) & mask)


def _unsigned(b):
    """The same bits as an unsigned integer of the same width (a free reinterpretation)."""


@overload(_unsigned, inline="always")
def _unsigned_impl(b):
    ty = getattr(np, f"uint{b.bitwidth}")
    return lambda b: ty(b)


def _signed(u, like):
    """The same bits as `like`'s signed integer type."""


@overload(_signed, inline="always")
def _signed_impl(u, like):
    ty = getattr(np, f"int{like.bitwidth}")
    return lambda u, like: ty(u)


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _chunk_fast_keys(x, bits, table, o, k):
    """_chunk_fast for integer dtypes: the elements are their own keys."""
    s1 = 0.0
    s2 = 0.0
    zeros = np.int64(0)
    kmn = x[0]
    kmx = kmn
    for i in range(x.size):
        v = _value(x, table, i)
        s1 += v
        s2 += v * v
        zeros += np.int64(v == 0.0)
        kmn = min(kmn, x[i])
        kmx = max(kmx, x[i])
    o[0], o[1], o[2], o[3], o[4], o[5], o[6] = s1, s2, x.size, 0, 0, 0, zeros
    k[0], k[1] = kmn, kmx


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _chunk_fast_bits(x, bits, table, o, k):
    """_chunk_fast for floats: the extreme keys from three plain integer reductions of the bits.

    Signed bits order positive floats, unsigned bits put every negative float above every positive one and
    order negatives by magnitude; so the key maximum is the signed maximum when some bits are >= 0 (else the
    signed minimum), and the key minimum is the unsigned maximum when some element is negative (else the
    signed minimum). Three min/max instructions per element instead of the key's five operations: the pass
    is then about as fast as memory (fp32: ~25 against ~18 GB/s), with the very same keys."""
    s1 = 0.0
    s2 = 0.0
    zeros = np.int64(0)
    smn = bits[0]
    smx = smn
    umx = _unsigned(smn)
    for i in range(x.size):
        v = _value(x, table, i)
        s1 += v
        s2 += v * v
        zeros += np.int64(v == 0.0)
        b = bits[i]
        smn = min(smn, b)
        smx = max(smx, b)
        umx = max(umx, _unsigned(b))
    o[0], o[1], o[2], o[3], o[4], o[5], o[6] = s1, s2, x.size, 0, 0, 0, zeros
    neg = _signed(umx, smn)
    k[0] = _flip(neg if neg < 0 else smn)
    k[1] = _flip(smx if smx >= 0 else smn)


def _chunk_fast(x, bits, table, o, k):
    """A chunk (array views) assuming every element is finite (the caller checks the sums).

    Indices run from 0 so that numba can see they are not negative: a loop from `lo` would keep
    a wraparound check per element and not vectorise (8x slower).
    """


@overload(_chunk_fast, inline="always")
def _chunk_fast_impl(x, bits, table, o, k):
    if isinstance(bits, types.NoneType):
        return lambda x, bits, table, o, k: _chunk_fast_keys(x, bits, table, o, k)
    return lambda x, bits, table, o, k: _chunk_fast_bits(x, bits, table, o, k)


@nb.njit(cache=True, nogil=True)
def _chunk_exact(x, bits, table, o, k):
    """A chunk element by element, sorting out nan, +inf and -inf (statistics over the finite)."""
    s1 = 0.0
    s2 = 0.0
    fin = nan = pinf = ninf = zeros = 0
    kmn = kmx = _key(x, bits, 0)
    for i in range(x.size):
        v = _value(x, table, i)
        zeros += v == 0.0
        if v - v == 0.0:
            key = _key(x, bits, i)
            if fin == 0:
                kmn = kmx = key
            fin += 1
            s1 += v
            s2 += v * v
            kmn = min(kmn, key)
            kmx = max(kmx, key)
        elif v != v:
            nan += 1
        elif v > 0:
            pinf += 1
        else:
            ninf += 1
    o[0], o[1], o[2], o[3], o[4], o[5], o[6] = s1, s2, fin, nan, pinf, ninf, zeros
    k[0], k[1] = kmn, kmx


def _part(a, lo, hi):
    """a[lo:hi], or None for None."""


@overload(_part, inline="always")
def _part_impl(a, lo, hi):
    if isinstance(a, types.NoneType):
        return lambda a, lo, hi: None
    return lambda a, lo, hi: a[lo:hi]


@nb.njit(cache=True, nogil=True)
def _chunks(x, bits, table, c0, c1, parts, keys):
    """Chunks c0..c1 into their rows of `parts` and `keys`."""
    n = x.size
    for c in range(c0, c1):
        lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
        xs, bs, o, k = x[lo:hi], _part(bits, lo, hi), parts[c], keys[c]
        _chunk_fast(xs, bs, table, o, k)
        if o[0] - o[0] != 0.0 or o[1] - o[1] != 0.0:  # a nan or an inf (or squares beyond float64)
            _chunk_exact(xs, bs, table, o, k)


@nb.njit(cache=True, nogil=True)
def _combine(parts, keys):
    """Totals over chunks, in chunk order; min/max keys over the chunks that had a finite element."""
    o = np.zeros(_OUT)
    kmn = kmx = keys[0, 0]
    seen = False
    for c in range(parts.shape[0]):
        for j in range(_OUT):
            o[j] += parts[c, j]
        if parts[c, 2] > 0:
            if not seen:
                kmn, kmx, seen = keys[c, 0], keys[c, 1], True
            kmn = min(kmn, keys[c, 0])
            kmx = max(kmx, keys[c, 1])
    return o, kmn, kmx


def _keys_buffer(x, bits):
    """Room for a chunk's (min key, max key), in the keys' own integer type."""


@overload(_keys_buffer, inline="always")
def _keys_buffer_impl(x, bits):
    if isinstance(bits, types.NoneType):
        return lambda x, bits: np.empty(2, x.dtype)
    return lambda x, bits: np.empty(2, bits.dtype)


def _from_key_nb(key, x, bits, table):
    """The float64 value a min/max key stands for (inverse of _key)."""


@overload(_from_key_nb, inline="always")
def _from_key_nb_impl(key, x, bits, table):
    if isinstance(bits, types.NoneType):
        return lambda key, x, bits, table: np.float64(key)
    width = bits.dtype.bitwidth
    shift, mask = width - 1, (1 << (width - 1)) - 1
    ty = bits.dtype

    def impl(key, x, bits, table):
        buf = np.empty(1, bits.dtype)
        buf[0] = key ^ ((key >> ty(shift)) & ty(mask))  # the flip is its own inverse
        return _value(buf.view(x.dtype), table, 0)

    return impl


@nb.njit(cache=True, nogil=True)
def _summary(x, bits, table):
    """Every chunk on the calling thread, totals in chunk order (the very sums _run and _combine make):
    sum, sum of squares, finite, nan, +inf, -inf, zeros, min, max (min/max nan when nothing is finite)."""
    n = x.size
    o = np.zeros(_OUT)
    part = np.empty(_OUT)
    k = _keys_buffer(x, bits)
    kmn = kmx = _key(x, bits, 0)
    seen = False
    for c in range((n + CHUNK - 1) // CHUNK):
        lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
        xs, bs = x[lo:hi], _part(bits, lo, hi)
        _chunk_fast(xs, bs, table, part, k)
        if part[0] - part[0] != 0.0 or part[1] - part[1] != 0.0:
            _chunk_exact(xs, bs, table, part, k)
        for j in range(_OUT):
            o[j] += part[j]
        if part[2] > 0:
            if not seen:
                kmn, kmx, seen = k[0], k[1], True
            kmn = min(kmn, k[0])
            kmx = max(kmx, k[1])
    mn = mx = np.nan
    if seen:
        mn, mx = _from_key_nb(kmn, x, bits, table), _from_key_nb(kmx, x, bits, table)
    return o[0], o[1], o[2], o[3], o[4], o[5], o[6], mn, mx


@intrinsic
def _address(typingctx, addr):
    """An integer address as a void pointer (for numba.carray)."""
    sig = types.voidptr(addr)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


def _at(addr, n, witness):
    """n elements of witness's dtype at `addr`, or None for a None witness."""


@overload(_at, inline="always")
def _at_impl(addr, n, witness):
    if isinstance(witness, types.NoneType):
        return lambda addr, n, witness: None
    return lambda addr, n, witness: nb.carray(_address(addr), n, witness.dtype)  # type: ignore[call-arg]  # numba passes typingctx


@nb.njit(cache=True, nogil=True)
def _summary_at(addr, n, xw, bw, table):
    """_summary of n elements lying at `addr` (a live buffer the caller keeps alive), read as xw's dtype
    (and as bw's for the float bits): no array object is made on the Python side."""
    return _summary(_at(addr, n, xw), _at(addr, n, bw), table)


WORKERS = max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
MIN_CHUNKS_PER_WORKER = 4  # below this a tensor is measured on the calling thread alone
_pool: ThreadPoolExecutor | None = None


def _forget_pool() -> None:
    global _pool
    _pool = None  # a forked child has none of the parent's threads: it starts its own pool


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _run(x, bits, table):
    """The kernel over all chunks, split among WORKERS threads; totals taken in chunk order."""
    global _pool
    nch = (x.size + CHUNK - 1) // CHUNK
    parts = np.zeros((nch, _OUT))
    keys = np.zeros((nch, 2), dtype=x.dtype if bits is None else bits.dtype)
    workers = min(WORKERS, nch // MIN_CHUNKS_PER_WORKER)
    if workers <= 1:
        _chunks(x, bits, table, 0, nch, parts, keys)
    else:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS - 1, thread_name_prefix="opdiff-stats")
        bounds = [nch * k // workers for k in range(workers + 1)]
        jobs = [_pool.submit(_chunks, x, bits, table, bounds[k], bounds[k + 1], parts, keys) for k in range(1, workers)]
        _chunks(x, bits, table, bounds[0], bounds[1], parts, keys)
        for job in jobs:
            job.result()
    return _combine(parts, keys)


_TABLES: dict[str, np.ndarray] = {}


def _table(dtype: str) -> np.ndarray:
    """float64 value of every 8/16-bit code of a small float dtype."""
    t = _TABLES.get(dtype)
    if t is None:
        codes = np.arange(1 << (8 * numpy_dtype(dtype).itemsize), dtype=_FLOAT_BITS[dtype][1])
        with np.errstate(invalid="ignore"):
            t = _TABLES[dtype] = codes.view(numpy_dtype(dtype)).astype(np.float64)
    return t


_FLIP = {np.dtype(t): t(np.iinfo(t).max) for t in (np.int8, np.int16, np.int32, np.int64)}


def _from_key(key, dtype: str, bits_dtype) -> float:
    """The float a min/max key stands for (a numpy scalar view: no array is made)."""
    if bits_dtype is None:
        return float(key)
    b = bits_dtype.type(key)
    if b < 0:
        b = b ^ _FLIP[bits_dtype]
    return float(b.view(numpy_dtype(dtype)))


def _measure(flat: np.ndarray, dtype: str) -> Stats:
    n = int(flat.size)
    x, bits, table = _views(flat, dtype)
    if n < SMALL:
        return _small_stats(n, _summary(x, bits, table))
    o, kmn, kmx = _run(x, bits, table)
    return _totals(n, o, kmn, kmx, dtype, None if bits is None else bits.dtype)


def _views(flat: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(values as the kernel reads them, float bits or None, decoding table or None) of a flat array."""
    x, bits, table = flat, None, None
    if dtype in _FLOAT_BITS:
        bits_type, code_type = _FLOAT_BITS[dtype]
        bits = flat.view(bits_type)
        if code_type is not None:
            x, table = flat.view(code_type), _table(dtype)
    elif dtype == "bool":
        x = flat.view(np.uint8)
    return x, bits, table


def _totals(n: int, o: np.ndarray, kmn, kmx, dtype: str, bits_dtype) -> Stats:
    """The Stats of n elements from their chunk totals (_combine) and extreme keys."""
    s1, s2, fin, nan, pinf, ninf, zeros = o.tolist()
    stats = Stats(numel=n, nan=int(nan), posinf=int(pinf), neginf=int(ninf), zeros=int(zeros))
    fin = int(fin)
    if fin:
        mean = s1 / fin
        stats.min, stats.max = _from_key(kmn, dtype, bits_dtype), _from_key(kmx, dtype, bits_dtype)
        stats.mean, stats.std, stats.norm = mean, math.sqrt(max(s2 / fin - mean * mean, 0.0)), math.sqrt(s2)
    return stats


SMALL = MIN_CHUNKS_PER_WORKER * 2 * CHUNK  # below this many elements _run would use one thread: one call does it all
_WITNESSES: dict[str, tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = {}


def _witness(dtype: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(empty array of the dtype the values are read as, of the float bits or None, decoding table or None)."""
    w = _WITNESSES.get(dtype)
    if w is None:
        xw, bw, table = np.empty(0, numpy_dtype(dtype)), None, None
        if dtype in _FLOAT_BITS:
            bits_type, code_type = _FLOAT_BITS[dtype]
            bw = np.empty(0, bits_type)
            if code_type is not None:
                xw, table = np.empty(0, code_type), _table(dtype)
        elif dtype == "bool":
            xw = np.empty(0, np.uint8)
        w = _WITNESSES[dtype] = (xw, bw, table)
    return w


def stats_at(addr: int, n: int, dtype: str) -> Stats:
    """Stats of n > 0 contiguous elements of format dtype `dtype` at memory address `addr`, in one call of
    the fused kernel on this thread (n < SMALL; the caller keeps the buffer alive and unchanged meanwhile).

    The per-tensor cost of capture is mostly here for the many small activations: making a numpy view,
    the chunk tables and decoding min/max in Python cost several times the kernel itself."""
    xw, bw, table = _witness(dtype)
    return _small_stats(n, _summary_at(addr, n, xw, bw, table))


def _small_stats(n: int, summary: tuple[float, ...]) -> Stats:
    """The Stats of _summary's nine numbers."""
    s1, s2, fin, nan, pinf, ninf, zeros, mn, mx = summary
    stats = Stats(numel=n, nan=int(nan), posinf=int(pinf), neginf=int(ninf), zeros=int(zeros))
    if fin:
        mean = s1 / fin
        stats.min, stats.max = mn, mx
        stats.mean, stats.std, stats.norm = mean, math.sqrt(max(s2 / fin - mean * mean, 0.0)), math.sqrt(s2)
    return stats


def array_stats(arr: np.ndarray, dtype: str) -> Stats:
    """Stats of a contiguous array whose format dtype name is `dtype` (ml_dtypes for bf16/fp8)."""
    if arr.size == 0:
        return Stats(numel=0)
    return _measure(arr.reshape(-1), dtype)


def copy_with_stats(arr: np.ndarray, dtype: str) -> tuple[np.ndarray, Stats]:
    """A copy of a contiguous array (numpy's memcpy) and its statistics (read from the fresh copy)."""
    out = arr.copy()
    return out, array_stats(out, dtype)


TILE = 64  # transpose tile: a 64 x 64 block of the source and of the result stay in L1/L2 while it is copied


@nb.njit(cache=True, nogil=True)
def _transpose_tiles(src, out):
    """out[j, i] = src[i, j], tile by tile, writing rows of `out` in order."""
    rows, cols = src.shape
    for i0 in range(0, rows, TILE):
        i1 = min(rows, i0 + TILE)
        for j0 in range(0, cols, TILE):
            j1 = min(cols, j0 + TILE)
            for j in range(j0, j1):
                for i in range(i0, i1):
                    out[j, i] = src[i, j]


_SAME_WIDTH = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def transpose_into(src: np.ndarray, out: np.ndarray) -> None:
    """Write the transpose of contiguous 2-D `src` into contiguous `out` (shape reversed, same dtype), bit for
    bit (moved as same-width integers): tile by tile, ~2.5x quicker than torch's strided copy of a transposed
    matrix (GPT-2's [768, 50257] output embedding into memory already touched: 41-44 against ~100 ms)."""
    ty = _SAME_WIDTH[src.dtype.itemsize]
    _transpose_tiles(src.view(ty), out.view(ty))


@nb.njit(cache=True, nogil=True)
def _transpose_band(src, r0, r1, out):
    """out[(k - r0) * rows + i] = src[i, k] for k in r0..r1: rows r0..r1 of src's transpose, row-major, into flat
    `out`, tile by tile (TILE source rows at a time, so each source cache line is used while it is at hand)."""
    rows = src.shape[0]
    for i0 in range(0, rows, TILE):
        i1 = min(rows, i0 + TILE)
        for k in range(r0, r1):
            base = (k - r0) * rows
            for i in range(i0, i1):
                out[base + i] = src[i, k]


BAND_BYTES = 4 << 20  # rows of the transpose made at a time: a few MB that stay in cache while hashed and measured


def transposed_hash_stats(src: np.ndarray, dtype: str) -> tuple[str, Stats] | None:
    """The content hash and statistics of `src.T` (src a contiguous 2-D array of format dtype `dtype`), in the
    transpose's row-major order: the very bits content_hash and array_stats give for a row-major copy, without
    making one. None when a row of the transpose exceeds BAND_BYTES (the caller copies instead).

    A few rows of the transpose at a time go into one small buffer; every complete chunk of it is hashed and
    measured (the chunks, their sums and their order are those of array_stats on the copy), the rest carried to
    the next band. A transposed weight read by mm/addmm at aten level is measured this way while its bytes are
    stored once, as the parameter (154 MB and its page faults not made for GPT-2's output embedding)."""
    from ..store.stats import content_hasher

    rows, cols = src.shape
    item = src.dtype.itemsize
    if rows * item > BAND_BYTES or src.size < SMALL:
        return None
    line = max(1, 128 // item)  # two whole cache lines of each source row per band (GPT-2's [50257, 768]: 52 ms
    # against 62 ms for one line, 113 ms for a quarter; the source's columns, read line by line, are what it costs)
    band = max(line, BAND_BYTES // (rows * item) // line * line)
    buf = np.empty(CHUNK + band * rows, dtype=src.dtype)
    ty = _SAME_WIDTH[item]
    src_u, buf_u = src.view(ty), buf.view(ty)
    x, bits, table = _views(buf, dtype)
    n = src.size
    parts = np.zeros(((n + CHUNK - 1) // CHUNK, _OUT))
    keys = np.zeros((len(parts), 2), dtype=x.dtype if bits is None else bits.dtype)
    hasher = content_hasher(dtype, (cols, rows))
    fill = done = r = 0
    while r < cols:
        k = min(band, cols - r)
        _transpose_band(src_u, r, r + k, buf_u[fill:fill + k * rows])
        fill, r = fill + k * rows, r + k
        ready = fill if r == cols else fill - fill % CHUNK
        if not ready:
            continue
        hasher.update(buf_u[:ready].view(np.uint8).data)
        c = (ready + CHUNK - 1) // CHUNK
        _chunks(x[:ready], None if bits is None else bits[:ready], table, 0, c, parts[done:done + c],
                keys[done:done + c])
        done += c
        buf_u[:fill - ready] = buf_u[ready:fill]  # the tail of an unfinished chunk (it cannot overlap: ready >= CHUNK)
        fill -= ready
    o, kmn, kmx = _combine(parts, keys)
    return "xxh3:" + hasher.hexdigest(), _totals(n, o, kmn, kmx, dtype, None if bits is None else bits.dtype)


def warm_up(dtypes=("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")) -> None:
    """Compile (or load from numba's cache) the kernels for these dtypes now rather than on first use."""
    for name in dtypes:
        for n in (1, 2 * CHUNK + 1):
            arr = np.zeros(n, dtype=numpy_dtype(name))
            array_stats(arr, name)
            copy_with_stats(arr, name)
            stats_at(arr.ctypes.data, n, name)
    for width in _SAME_WIDTH.values():
        transpose_into(np.zeros((2, 3), width), np.empty((3, 2), width))
        _transpose_band(np.zeros((2, 3), width), 0, 3, np.empty(6, width))
