"""Real-data metrics of a tensor pair: chunked reads, per-chunk upcast, one kernel pass, the final numbers.

Tensors come from memory (numpy arrays) or straight from a dump's shard (file + offset, memory-mapped
and released chunk by chunk, so memory stays bounded whatever the tensor size). fp16/bf16/fp8, ints
and bool are upcast chunk by chunk to float32 (float64 where float32 is not exact) — never the whole
tensor. See docs/metrics.md for every formula.
"""

from __future__ import annotations

import math
import mmap
import os
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from itertools import repeat
from operator import setitem
from pathlib import Path

import numpy as np
import xxhash

from ..base.errors import DumpError
from ..base.pair import Metrics
from ..store.format import dtype_name, numpy_dtype
from ..store.stats import content_hasher
from . import kernel as K
from . import names as M
from .names import ERR_MESSAGE  # re-exported: the key of a metrics dict that carries the reasons

CHUNK_ELEMENTS = 1 << 20  # elements read per side at a time (4 MB of fp32)
FAULT_AROUND = max(mmap.PAGESIZE, 64 << 10)  # Linux's default fault_around_bytes
# a tensor of at most this many bytes is read from its file by one pread into a reused buffer:
# cheaper than mapping the file and faulting its pages in (per-tensor formats: thousands of small files)
SMALL_READ = 1 << 20
OPEN_MAPS = 256  # mapped files a workspace keeps (vm.max_map_count bounds a process's maps)
# dtypes float32 cannot hold exactly: their pairs run through the float64 kernel
_WIDE = frozenset({"float64", "int64", "int32", "uint64", "uint32"})


class TensorDataError(DumpError):
    """One tensor's data is unreadable or does not match its record (its pair becomes N/A)."""


@dataclass(slots=True)
class TensorSource:
    """Where one tensor's elements come from: an array, or `path` at byte `offset`."""

    dtype: str
    shape: tuple[int, ...]
    array: np.ndarray | None = None
    path: Path | None = None
    offset: int = 0
    hash: str | None = None  # recorded content hash: verified while reading from a file
    label: str = ""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @classmethod
    def of(cls, arr: np.ndarray, label: str = "") -> TensorSource:
        arr = np.asarray(arr)
        return cls(dtype=dtype_name(arr.dtype), shape=tuple(arr.shape), array=arr.reshape(-1), label=label)


@dataclass
class Workspace:
    """Reusable chunk buffers and mapped shard files of one worker thread (kept across pairs)."""

    chunk: int = CHUNK_ELEMENTS
    _bufs: dict[tuple[str, np.dtype | None], np.ndarray] = field(default_factory=dict)
    _maps: OrderedDict[Path, mmap.mmap] = field(default_factory=OrderedDict)
    _fds: OrderedDict[Path, int] = field(default_factory=OrderedDict)  # files read by pread, kept open

    def buf(self, role: str, dtype: np.dtype) -> np.ndarray:
        b = self._bufs.get((role, dtype))
        if b is None:
            b = self._bufs[(role, dtype)] = np.empty(self.chunk, dtype=dtype)
        return b

    def block(self, role: str) -> np.ndarray:
        """A float64 scratch row for one kernel block's sums."""
        b = self._bufs.get((role, None))
        if b is None:
            b = self._bufs[(role, None)] = np.zeros(K.N_ACC, dtype=np.float64)
        return b

    def mapped(self, path: Path) -> mmap.mmap:
        """A read-only memory map of `path`, kept for the OPEN_MAPS files used last."""
        mm = self._maps.get(path)
        if mm is not None:
            self._maps.move_to_end(path)
            return mm
        try:
            with open(path, "rb") as f:
                mm = self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise TensorDataError(f"{path}: cannot map shard: {getattr(exc, 'strerror', None) or exc}") from None
        while len(self._maps) > OPEN_MAPS:
            _close_map(self._maps.popitem(last=False)[1])
        return mm

    def read_small(self, path: Path, offset: int, nbytes: int, role: str) -> memoryview:
        """`nbytes` of `path` at `offset`, read by one pread into this workspace's buffer for `role`."""
        buf = self._bufs.get((role, None))
        if buf is None or buf.nbytes < nbytes:
            buf = self._bufs[(role, None)] = np.empty(max(nbytes, 64 << 10), dtype=np.uint8)
        view = memoryview(buf.data)[:nbytes]
        self.pread(path, offset, view)
        return view

    def opened(self, path: Path) -> int:
        """A read-only descriptor of `path`, kept open for the OPEN_MAPS files read last (a shard of many
        small tensors is opened once, not once per tensor)."""
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        try:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise TensorDataError(f"{path}: cannot open: {exc.strerror or exc}") from None
        while len(self._fds) > OPEN_MAPS:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def pread(self, path: Path, offset: int, view: memoryview) -> None:
        """Fill `view` with the bytes of `path` at `offset`; TensorDataError when the file ends before."""
        nbytes = len(view)
        fd = self.opened(path)
        try:
            got = os.preadv(fd, [view], offset) if nbytes else 0
            size = os.fstat(fd).st_size if got < nbytes else 0
        except OSError as exc:
            raise TensorDataError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if got < nbytes:
            raise TensorDataError(f"{path}: tensor is truncated (needs bytes up to {offset + nbytes}, the file "
                                  f"has {size})")

    def close(self) -> None:
        for mm in self._maps.values():
            _close_map(mm)
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_map(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:  # a caller still holds a view: the map goes when the view does
        pass


F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def kernel_dtype(a: str, b: str) -> np.dtype:
    """float32 when it holds both dtypes exactly, else float64."""
    return F64 if a in _WIDE or b in _WIDE else F32


class _Reader:
    """Reads one source chunk by chunk as kernel-dtype arrays, verifying its hash when asked.

    Shard data is read zero-copy from a memory map; the pages of a chunk are released from this
    process (MADV_DONTNEED; the OS page cache keeps them) as soon as the next chunk is read, so the
    resident memory stays at about one chunk per side whatever the tensor size."""

    def __init__(self, src: TensorSource, ws: Workspace, side: str, kdtype: np.dtype, verify: bool):
        self.src = src
        self.np_dtype = numpy_dtype(src.dtype)
        self.kdtype = kdtype
        self.work = ws.buf(side + ".work", kdtype)
        self.mm: mmap.mmap | None = None
        self.hasher: xxhash.xxh3_64 | None = None
        self.held: tuple[int, int] | None = None  # page-aligned byte range of the chunk in use
        self.ws = ws
        self.side = side
        self.small = False  # read by one pread (SMALL_READ), not through a map
        if src.array is None:
            if src.path is None:
                raise ValueError(f"tensor source {src.label!r} has neither an array nor a path")
            self.small = src.numel * self.np_dtype.itemsize <= min(SMALL_READ, ws.chunk * self.np_dtype.itemsize)
            if not self.small:
                self.mm = ws.mapped(src.path)
            if verify and src.hash and src.hash.startswith("xxh3:"):
                self.hasher = content_hasher(src.dtype, src.shape)

    def read(self, start: int, count: int) -> np.ndarray:
        if self.src.array is not None:
            raw = self.src.array[start:start + count]
        elif self.small:  # the whole tensor in one read (count is numel: it fits one chunk)
            assert self.src.path is not None  # a source without an array has a path
            size = self.np_dtype.itemsize
            data = self.ws.read_small(self.src.path, self.src.offset + start * size, count * size, self.side + ".raw")
            raw = np.frombuffer(data, dtype=self.np_dtype, count=count)
            if self.hasher is not None:
                self.hasher.update(data)
        else:
            assert self.mm is not None  # mapped in __init__: a source without an array has a path
            self.release()
            first = self.src.offset + start * self.np_dtype.itemsize
            end = first + count * self.np_dtype.itemsize
            if end > len(self.mm):
                raise TensorDataError(f"{self.src.path}: tensor {self.src.label!r} is truncated "
                                      f"(needs bytes up to {end}, the shard has {len(self.mm)})")
            raw = np.frombuffer(self.mm, dtype=self.np_dtype, count=count, offset=first)
            # the kernel maps the aligned 64 KB around each faulting page ("fault-around"): release
            # that whole window, or pages of neighbouring tensors stay resident
            lo = first - first % FAULT_AROUND
            hi = min(len(self.mm), end + (-end % FAULT_AROUND))
            self.held = (lo, hi - lo)
            ahead = min(len(self.mm), self.src.offset + self.src.numel * self.np_dtype.itemsize) - hi
            if ahead > 0:  # start reading the next chunk from disk while this one is computed
                self.mm.madvise(mmap.MADV_WILLNEED, hi, min(ahead, end - first))
            if self.hasher is not None:
                self.hasher.update(raw.view(np.uint8).data)
        if raw.dtype == self.kdtype:
            return raw
        out = self.work[:count]
        if raw.dtype == F16 and self.kdtype == F32:
            K.half_to_float(raw.view(np.uint16), out)  # numpy's own cast is 18x slower
        else:
            np.copyto(out, raw, casting="unsafe")
        return out

    def release(self) -> None:
        """Drop the pages of the chunk last read from this process's memory."""
        if self.held is not None and self.mm is not None:
            self.mm.madvise(mmap.MADV_DONTNEED, *self.held)
            self.held = None

    def finish(self) -> None:
        self.release()
        if self.hasher is not None and "xxh3:" + self.hasher.hexdigest() != self.src.hash:
            raise TensorDataError(f"{self.src.path}: data of {self.src.label!r} does not match its recorded "
                                  f"hash (corrupt shard)")


def finite_range(src: TensorSource, ws: Workspace) -> tuple[float | None, float | None, float]:
    """(min, max) over the finite elements (None when there are none) and a shift near the data."""
    kd = kernel_dtype(src.dtype, src.dtype)
    rd = _Reader(src, ws, "range", kd, verify=False)
    lo, hi, s, w = math.inf, -math.inf, 0.0, 0
    for start in range(0, src.numel, ws.chunk):
        count = min(ws.chunk, src.numel - start)
        c_lo, c_hi, c_mean, c_found = K.finite_range(rd.read(start, count))
        if c_found:  # the shift: the chunks' means weighted by their sizes, near the mean (docs/metrics.md)
            s, w = s + c_mean * count, w + count
            lo, hi = min(lo, c_lo), max(hi, c_hi)
    rd.release()
    return (lo, hi, s / w) if w else (None, None, 0.0)


def _kl_norm(lo: float | None, hi: float | None) -> tuple[float, float]:
    """msaccucmp's (x - min) / (max - min) as (offset, scale); the raw values when the range is empty."""
    if lo is None or hi is None or not hi > lo:
        return 0.0, 1.0
    return lo, 1.0 / (hi - lo)


def pair_metrics(
    golden: TensorSource,
    target: TensorSource,
    ws: Workspace | None = None,
    *,
    golden_range: tuple[float | None, float | None, float] | None = None,
    target_range: tuple[float | None, float | None, float] | None = None,
    verify: bool = True,
) -> Metrics:
    """Every real-data metric of one pair in one streaming pass (plus a min/max pre-pass per side
    when its range is not given: the KL normalization needs it). Raises TensorDataError on bad data."""
    if ws is None:
        with Workspace() as own:
            return pair_metrics(golden, target, own, golden_range=golden_range, target_range=target_range,
                                verify=verify)
    if tuple(golden.shape) != tuple(target.shape):
        return na_metrics(f"shape mismatch: golden {list(golden.shape)} vs target {list(target.shape)}")
    n = golden.numel
    if n == 0:
        return na_metrics("empty tensor: nothing to compare", numel=0)
    g_lo, g_hi, g_shift = golden_range if golden_range is not None else finite_range(golden, ws)
    t_lo, t_hi, t_shift = target_range if target_range is not None else finite_range(target, ws)
    p = np.zeros(K.N_PARAM)
    p[K.P_GMIN], p[K.P_GINV] = _kl_norm(g_lo, g_hi)
    p[K.P_TMIN], p[K.P_TINV] = _kl_norm(t_lo, t_hi)
    p[K.P_GSHIFT], p[K.P_TSHIFT] = g_shift, t_shift
    acc, cnt = K.new_state()
    kd = kernel_dtype(golden.dtype, target.dtype)
    scratch = ws.block("sums")
    rg = _Reader(golden, ws, "g", kd, verify)
    rt = _Reader(target, ws, "t", kd, verify)
    for start in range(0, n, ws.chunk):
        count = min(ws.chunk, n - start)
        g = rg.read(start, count)
        t = rt.read(start, count)
        K.fold(g, t, p, acc, cnt, scratch, start)
    rg.finish()
    rt.finish()
    g_absmax = None if g_lo is None or g_hi is None else max(abs(g_lo), abs(g_hi))
    return finalize(acc, cnt, n, g_absmax, (g_shift, t_shift), constant_sides(g_lo, g_hi, t_lo, t_hi))


def constant_sides(g_lo: float | None, g_hi: float | None, t_lo: float | None, t_hi: float | None) -> bool:
    """Both sides constant over their finite elements (one-element tensors, masks, scalars)."""
    return g_lo is not None and g_lo == g_hi and t_lo is not None and t_lo == t_hi


def tensor_metrics(golden: np.ndarray, target: np.ndarray, ws: Workspace | None = None) -> Metrics:
    """All real-data metrics of two numpy arrays (any dump dtype), float64, one fused chunked pass.

    N/A metrics are None with the reason in the `err_message` field; never raises on odd data
    (empty, scalar, all-zero, nan/inf, shape mismatch).
    """
    return pair_metrics(TensorSource.of(golden, "golden"), TensorSource.of(target, "target"), ws)


def na_metrics(reason: str, numel: int | None = None) -> Metrics:
    """A metrics dict where nothing could be computed, and why."""
    out: Metrics = {
        M.COSINE: None, M.MAX_ABS_ERR: None, M.MAX_REL_ERR: None, M.MEAN_ABS_ERR: None, M.MEAN_REL_ERR: None,
        M.RMSE: None, M.ACC_REL_ERR: None, M.MAX_REL_ERROR: None, M.MEAN_REL_ERROR: None, M.RED: None,
        M.EUC_DIST: None, M.KL_DIV: None,
        M.GOLDEN_STD: None, M.TARGET_STD: None, M.ONE_THOUSANDTH: None, M.FIVE_THOUSANDTH: None,
        M.NORM_MAX_ABS_ERR: None, M.GOLDEN_MEAN: None, M.TARGET_MEAN: None, M.GOLDEN_ABS_MAX: None,
    }
    if numel is not None:
        out.update({
            M.NUMEL: numel, M.COMPARED: 0, M.DIFF_COUNT: 0, M.GOLDEN_NAN: 0, M.GOLDEN_POSINF: 0,
            M.GOLDEN_NEGINF: 0, M.TARGET_NAN: 0, M.TARGET_POSINF: 0, M.TARGET_NEGINF: 0, M.NONFINITE_MISMATCH: 0,
        })
    out[ERR_MESSAGE] = reason
    return out


def _mean_std(s_c: float, s_c2: float, shift: float, n: int) -> tuple[float, float]:
    mc = s_c / n
    return shift + mc, math.sqrt(max(s_c2 / n - mc * mc, 0.0))


def _cos(a: list[float], ng: float, nt: float) -> float:
    """Cosine similarity. Close sides (D = |t - g|^2 <= |g||t|): from D and P = sum (t - g)(t + g),
    1 - cos = (D - P^2/(|g| + |t|)^2)/(2|g||t|), no rounded dot product, so 1 - cos keeps the precision of the
    differences (near-identical tensors); its rounding grows with D/(|g||t|), so sides further apart take the
    dot product, whose rounding is a fixed fraction of |g||t| (docs/metrics.md, "Precision")."""
    if a[K.A_SUM_D2] > ng * nt:
        return min(1.0, max(-1.0, a[K.A_SUM_GT] / (ng * nt)))
    q = a[K.A_SUM_DP] / (ng + nt)
    return min(1.0, max(-1.0, 1.0 - (a[K.A_SUM_D2] - q * q) / (2.0 * ng * nt)))


def _log_ratio(sa: float, sb: float, sd: float) -> float:
    """log(A/B) for the KL sums (both > 0, floored at eps32): log1p(D/B) where A and B are close (no
    cancellation), log A - log B where A is tiny beside B (D/B rounds to -1: log1p would raise)."""
    x = sd / sb
    return math.log1p(x) if x > -0.5 else math.log(sa) - math.log(sb)


def finalize(acc: np.ndarray | list[float], cnt: np.ndarray | list[int], numel: int, golden_absmax: float | None,
             shifts: tuple[float, float] = (0.0, 0.0), constant: bool = False) -> Metrics:
    """Turn the kernel's accumulators (arrays, or their rows as Python lists) into the metrics dict
    (docs/metrics.md). `constant`: both sides constant over their finite elements (constant_sides), whose KL is
    exactly 0 (p = q, both uniform), not the float32 kernel's a log(a/b) terms against the float64 log(A/B) here,
    which leave about 6e-8 |log(t/g)| of either sign."""
    a: list[float] = acc.tolist() if isinstance(acc, np.ndarray) else acc
    c: list[int] = cnt.tolist() if isinstance(cnt, np.ndarray) else cnt
    n = c[K.C_FINITE]
    if n == numel and not c[K.C_MISMATCH] and a[K.A_SUM_G2] > 0.0 and a[K.A_SUM_T2] > 0.0:
        m = _finalize_plain(a, c, n, golden_absmax, shifts)
    else:
        m = finalize_full(a, c, numel, golden_absmax, shifts)
    if constant and m[M.KL_DIV] is not None:
        m[M.KL_DIV] = 0.0
    return m


def finalize_full(a: list[float], c: list[int], numel: int, golden_absmax: float | None,
                  shifts: tuple[float, float] = (0.0, 0.0)) -> Metrics:
    """finalize of any pair, case by case (non-finite elements, all-zero sides, messages)."""
    n = c[K.C_FINITE]
    out = na_metrics("", None)
    msgs: list[str] = []
    out.update({
        M.NUMEL: numel,
        M.COMPARED: n,
        M.DIFF_COUNT: c[K.C_DIFF],
        M.GOLDEN_NAN: c[K.C_G_NAN], M.GOLDEN_POSINF: c[K.C_G_PINF], M.GOLDEN_NEGINF: c[K.C_G_NINF],
        M.TARGET_NAN: c[K.C_T_NAN], M.TARGET_POSINF: c[K.C_T_PINF], M.TARGET_NEGINF: c[K.C_T_NINF],
        M.NONFINITE_MISMATCH: c[K.C_MISMATCH],
        M.GOLDEN_ABS_MAX: golden_absmax,
    })
    if c[K.C_MISMATCH]:
        out[M.FIRST_NONFINITE_MISMATCH] = c[K.C_FIRST_MISMATCH]
        msgs.append(f"{c[K.C_MISMATCH]} element(s) are nan/inf on one side only or differ in sign of inf "
                    f"(first at flat index {c[K.C_FIRST_MISMATCH]})")
    if n == 0:
        msgs.append("no element is finite on both sides")
        out[ERR_MESSAGE] = "; ".join(msgs)
        return out
    if n < numel:
        msgs.append(f"metrics over the {n} of {numel} elements finite on both sides")
    ng, nt = math.sqrt(a[K.A_SUM_G2]), math.sqrt(a[K.A_SUM_T2])
    if ng == 0.0 and nt == 0.0:
        cosine = 1.0
    elif ng == 0.0 or nt == 0.0:
        cosine = None
        msgs.append(f"{M.COLUMN[M.COSINE]} N/A: {'golden' if ng == 0.0 else 'target'} is all zero")
    elif c[K.C_DIFF] == 0:
        cosine = 1.0  # the same values: exactly 1, not the 0.9999999999999998 the rounded sums give
    else:
        cosine = _cos(a, ng, nt)
    euc = math.sqrt(a[K.A_SUM_D2])
    if ng > 0.0:
        red = euc / ng
    elif euc == 0.0:
        red = 0.0
    else:
        red = None
        msgs.append(f"{M.COLUMN[M.RED]} N/A: golden is all zero")
    # KL = sum(a log(a/b))/A + log(B/A), with log(B/A) = -log1p(sum(a - b)/B) (no cancellation)
    kl = a[K.A_KL_SL] / a[K.A_KL_SA] - _log_ratio(a[K.A_KL_SA], a[K.A_KL_SB], a[K.A_KL_SD])
    if abs(kl) < K.EPS64:
        kl = 0.0
    g_mean, g_std = _mean_std(a[K.A_SUM_GC], a[K.A_SUM_GC2], shifts[0], n)
    t_mean, t_std = _mean_std(a[K.A_SUM_TC], a[K.A_SUM_TC2], shifts[1], n)
    out.update({
        M.COSINE: cosine,
        M.MAX_ABS_ERR: a[K.A_MAX_AD],
        M.MAX_REL_ERR: a[K.A_MAX_REL],
        M.MEAN_ABS_ERR: a[K.A_SUM_AD] / n,
        M.MEAN_REL_ERR: a[K.A_SUM_REL] / n,
        M.MAX_REL_ERROR: a[K.A_MAX_ACC],
        M.MEAN_REL_ERROR: a[K.A_SUM_ACC] / n,
        M.RMSE: math.sqrt(a[K.A_SUM_D2] / n),
        M.ACC_REL_ERR: a[K.A_SUM_ACC],
        M.RED: red,
        M.EUC_DIST: euc,
        M.KL_DIV: kl,
        M.GOLDEN_STD: g_std,
        M.TARGET_STD: t_std,
        M.GOLDEN_MEAN: g_mean,
        M.TARGET_MEAN: t_mean,
        M.ONE_THOUSANDTH: a[K.A_CNT_1K] / n,
        M.FIVE_THOUSANDTH: a[K.A_CNT_5K] / n,
        M.NORM_MAX_ABS_ERR: (a[K.A_MAX_AD] / golden_absmax) if golden_absmax else None,
        M.WORST_INDEX: c[K.C_WORST_IDX],
        M.WORST_GOLDEN: a[K.A_WORST_G],
        M.WORST_TARGET: a[K.A_WORST_T],
    })
    out[ERR_MESSAGE] = "; ".join(msgs)
    return out


def _finalize_plain(a: list[float], c: list[int], n: int, golden_absmax: float | None,
                    shifts: tuple[float, float]) -> Metrics:
    """finalize of the common pair (every element finite on both sides, neither side all zero), in one
    dict literal: the same values, keys in the same order (a third of the cost for small pairs)."""
    ng, nt = math.sqrt(a[K.A_SUM_G2]), math.sqrt(a[K.A_SUM_T2])
    cosine = 1.0 if c[K.C_DIFF] == 0 else _cos(a, ng, nt)
    euc = math.sqrt(a[K.A_SUM_D2])
    kl = a[K.A_KL_SL] / a[K.A_KL_SA] - _log_ratio(a[K.A_KL_SA], a[K.A_KL_SB], a[K.A_KL_SD])
    if abs(kl) < K.EPS64:
        kl = 0.0
    g_mean, g_std = _mean_std(a[K.A_SUM_GC], a[K.A_SUM_GC2], shifts[0], n)
    t_mean, t_std = _mean_std(a[K.A_SUM_TC], a[K.A_SUM_TC2], shifts[1], n)
    max_ad = a[K.A_MAX_AD]
    return dict(zip(_PLAIN_KEYS, (  # type: ignore[return-value]
        cosine, max_ad, a[K.A_MAX_REL], a[K.A_SUM_AD] / n, a[K.A_SUM_REL] / n, math.sqrt(a[K.A_SUM_D2] / n),
        a[K.A_SUM_ACC], a[K.A_MAX_ACC], a[K.A_SUM_ACC] / n, euc / ng, euc, kl, g_std, t_std, a[K.A_CNT_1K] / n,
        a[K.A_CNT_5K] / n, (max_ad / golden_absmax) if golden_absmax else None, g_mean, t_mean, golden_absmax, "",
        n, n, c[K.C_DIFF], c[K.C_G_NAN], c[K.C_G_PINF], c[K.C_G_NINF], c[K.C_T_NAN], c[K.C_T_PINF], c[K.C_T_NINF],
        0, c[K.C_WORST_IDX], a[K.A_WORST_G], a[K.A_WORST_T])))


# finalize_full's keys in its order, for _finalize_plain
_PLAIN_KEYS = (M.COSINE, M.MAX_ABS_ERR, M.MAX_REL_ERR, M.MEAN_ABS_ERR, M.MEAN_REL_ERR, M.RMSE, M.ACC_REL_ERR,
               M.MAX_REL_ERROR, M.MEAN_REL_ERROR, M.RED, M.EUC_DIST, M.KL_DIV, M.GOLDEN_STD, M.TARGET_STD,
               M.ONE_THOUSANDTH, M.FIVE_THOUSANDTH, M.NORM_MAX_ABS_ERR, M.GOLDEN_MEAN, M.TARGET_MEAN,
               M.GOLDEN_ABS_MAX, ERR_MESSAGE, M.NUMEL, M.COMPARED, M.DIFF_COUNT, M.GOLDEN_NAN, M.GOLDEN_POSINF,
               M.GOLDEN_NEGINF, M.TARGET_NAN, M.TARGET_POSINF, M.TARGET_NEGINF, M.NONFINITE_MISMATCH, M.WORST_INDEX,
               M.WORST_GOLDEN, M.WORST_TARGET)

def finalize_rows(acc: np.ndarray, cnt: np.ndarray, numel: list[int], absmax: list[float | None],
                  shifts: list[tuple[float, float]]) -> list[Metrics]:
    """finalize of many pairs at once (a batch's rows of accumulators): the common pairs' metrics computed
    as whole columns by the same IEEE operations (sqrt, +, -, *, / round alike in numpy and in Python), the
    KL divergence by finalize's own per-pair code, the others by finalize; equal values, keys in order."""
    return finalize_table(acc, cnt, numel, absmax, shifts)[0]


Columns = dict[str, np.ndarray]  # metric field -> float64 column over a batch's rows (nan: N/A or not plain)


def finalize_table(acc: np.ndarray, cnt: np.ndarray, numel: list[int], absmax: list[float | None],
                   shifts: list[tuple[float, float]], constant: np.ndarray | None = None
                   ) -> tuple[list[Metrics], np.ndarray, Columns]:
    """finalize_rows' metrics, the rows that took the common ("plain") way, and those rows' numeric metrics
    as float64 columns (nan where a metric is N/A): what a verdict by columns reads (metrics/verdict.py,
    Judge.passing), the same numbers as the dicts hold. `constant`: finalize's flag, one per row."""
    const = [False] * len(numel) if constant is None else constant.tolist()
    n_all = np.asarray(numel, dtype=np.int64)
    finite, diff = cnt[:, K.C_FINITE], cnt[:, K.C_DIFF]
    g2, t2 = acc[:, K.A_SUM_G2], acc[:, K.A_SUM_T2]
    with np.errstate(all="ignore"):
        ng, nt = np.sqrt(g2), np.sqrt(t2)
        q = acc[:, K.A_SUM_DP] / (ng + nt)
        d2, gt = acc[:, K.A_SUM_D2], ng * nt
        raw_cos = np.where(d2 > gt, acc[:, K.A_SUM_GT] / gt, 1.0 - (d2 - q * q) / (2.0 * gt))  # _cos, by columns
    plain = (finite == n_all) & (cnt[:, K.C_MISMATCH] == 0) & (g2 > 0.0) & (t2 > 0.0) & np.isfinite(raw_cos) \
        & (n_all > 0)
    out: list[Metrics | None] = [None] * len(numel)
    rows = np.flatnonzero(plain)
    cols: Columns = {}
    if len(rows):
        rl = rows.tolist()
        dicts, cols = _plain_rows(acc[rows], cnt[rows], ng[rows], raw_cos[rows], diff[rows], n_all[rows],
                                  [absmax[i] for i in rl], [shifts[i] for i in rl], [const[i] for i in rl])
        for i, m in zip(rl, dicts):
            out[i] = m
    for i in np.flatnonzero(~plain).tolist():
        out[i] = finalize(acc[i], cnt[i], numel[i], absmax[i], shifts[i], const[i])
    return out, rows, cols  # type: ignore[return-value]


def _plain_rows(a: np.ndarray, c: np.ndarray, ng: np.ndarray, raw_cos: np.ndarray, diff: np.ndarray, n: np.ndarray,
                absmax: list[float | None], shifts: list[tuple[float, float]], constant: list[bool]
                ) -> tuple[list[Metrics], Columns]:
    """_finalize_plain's metrics of rows that take it, column by column, and the numeric ones as columns
    (finalize's `constant`: KL 0)."""
    nf = n.astype(np.float64)
    cosine = np.where(diff == 0, 1.0, np.minimum(1.0, np.maximum(-1.0, raw_cos)))
    euc = np.sqrt(a[:, K.A_SUM_D2])
    sh = np.array(shifts, dtype=np.float64).reshape(len(shifts), 2)
    g_mc, t_mc = a[:, K.A_SUM_GC] / nf, a[:, K.A_SUM_TC] / nf
    g_std = np.sqrt(np.maximum(a[:, K.A_SUM_GC2] / nf - g_mc * g_mc, 0.0))
    t_std = np.sqrt(np.maximum(a[:, K.A_SUM_TC2] / nf - t_mc * t_mc, 0.0))
    kl = [0.0 if z and v is not None else v for v, z in zip(_kl_rows(a), constant)] if any(constant) else _kl_rows(a)
    max_ad = a[:, K.A_MAX_AD].tolist()
    if None in absmax:
        nmae = [(m / x) if x else None for m, x in zip(max_ad, absmax)]
        nmae_col = np.array([np.nan if v is None else v for v in nmae], dtype=np.float64)
        absmax_col = np.array([np.nan if v is None else v for v in absmax], dtype=np.float64)
    else:
        absmax_col = np.array(absmax, dtype=np.float64)
        nz = absmax_col != 0.0
        if nz.all():  # the same IEEE division as the line below, by numpy
            with np.errstate(all="ignore"):  # overflow gives inf, as in Python
                nmae_col = a[:, K.A_MAX_AD] / absmax_col
            nmae = nmae_col.tolist()
        else:
            nmae = [(m / x) if x else None for m, x in zip(max_ad, absmax)]
            nmae_col = np.array([np.nan if v is None else v for v in nmae], dtype=np.float64)
    arrays = (cosine, a[:, K.A_MAX_AD], a[:, K.A_MAX_REL], a[:, K.A_SUM_AD] / nf, a[:, K.A_SUM_REL] / nf,
              np.sqrt(a[:, K.A_SUM_D2] / nf), a[:, K.A_SUM_ACC], a[:, K.A_MAX_ACC], a[:, K.A_SUM_ACC] / nf, euc / ng,
              euc, np.array(kl, dtype=np.float64), g_std, t_std, a[:, K.A_CNT_1K] / nf, a[:, K.A_CNT_5K] / nf,
              nmae_col, sh[:, 0] + g_mc, sh[:, 1] + t_mc, absmax_col)
    cols = [x.tolist() for x in arrays]
    cols[1], cols[11], cols[16], cols[19] = max_ad, kl, nmae, absmax  # as computed (None kept)
    rows = len(n)
    k = n.tolist()
    count_cols = c[:, _COUNT_IDX]
    counts = count_cols.T.tolist()
    every = (*cols, k, k, *counts, c[:, K.C_WORST_IDX].tolist(), a[:, K.A_WORST_G].tolist(), a[:, K.A_WORST_T].tolist())
    table: Columns = dict(zip(_PLAIN_KEYS[:len(arrays)], arrays))
    table[M.NUMEL] = table[M.COMPARED] = nf
    for key, col in zip(_COUNT_KEYS, count_cols.T):
        table[key] = col.astype(np.float64)
    table[M.NONFINITE_MISMATCH] = np.zeros(rows)
    return _dicts(rows, every), table


def _dicts(rows: int, every: tuple[list[object], ...]) -> list[Metrics]:
    """`rows` metrics dicts of _PLAIN_KEYS in order from their columns (`every`: the keys' columns, less the two
    constants): copies of one template (a presized table, keys in order), then each key's column set by C-level
    maps: a fifth cheaper than a dict(zip()) per row."""
    out = list(map(dict.copy, repeat(_TEMPLATE, rows)))
    for key, col in zip(_SET_KEYS, every):
        deque(map(setitem, out, repeat(key), col), 0)
    return out  # type: ignore[return-value]  # each one a Metrics: _PLAIN_KEYS filled


def _kl_rows(a: np.ndarray) -> list[float]:
    """_finalize_plain's KL divergence of each row of accumulators: its own operations (`_log_ratio` inlined)."""
    kl = []
    log1p, log = math.log1p, math.log
    eps = K.EPS64
    for sl, sa, sb, sd in a[:, [K.A_KL_SL, K.A_KL_SA, K.A_KL_SB, K.A_KL_SD]].tolist():
        x = sd / sb
        v = sl / sa - (log1p(x) if x > -0.5 else log(sa) - log(sb))
        kl.append(0.0 if abs(v) < eps else v)
    return kl


# _finalize_plain's dict with its two constants (no message, no nan/inf mismatch) set, the other keys None
_TEMPLATE: dict[str, object] = {**dict.fromkeys(_PLAIN_KEYS), ERR_MESSAGE: "", M.NONFINITE_MISMATCH: 0}
_SET_KEYS = tuple(k for k in _PLAIN_KEYS if k not in (ERR_MESSAGE, M.NONFINITE_MISMATCH))  # the columns of `every`

_COUNT_IDX = [K.C_DIFF, K.C_G_NAN, K.C_G_PINF, K.C_G_NINF, K.C_T_NAN, K.C_T_PINF, K.C_T_NINF]
_COUNT_KEYS = (M.DIFF_COUNT, M.GOLDEN_NAN, M.GOLDEN_POSINF, M.GOLDEN_NEGINF, M.TARGET_NAN, M.TARGET_POSINF,
               M.TARGET_NEGINF)


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels for every array signature compare uses:
    float32/float64, each side writable (an upcast chunk) or read-only (a mapped shard), with and
    without nan (the careful path)."""
    ramps: tuple[K.Chunk, ...] = (np.arange(5, dtype=np.float32), np.arange(5, dtype=np.float64))
    for ramp in ramps:
        for g_ro in (False, True):
            for t_ro in (False, True):
                g = ramp.copy()
                t = g.copy()
                t[1] = np.nan
                g.setflags(write=not g_ro)
                t.setflags(write=not t_ro)
                tensor_metrics(g, t)
                K.finite_range(g)
    for ramp in ramps:  # the batched path (metrics/batch.py): pairs laid end to end, one call
        K.fold_segments(ramp.copy(), ramp.copy(), np.array([0, 2, 5]), np.zeros((2, K.N_PARAM)),
                        np.zeros((2, K.N_ACC)), np.zeros((2, K.N_CNT), dtype=np.int64), np.zeros(K.N_ACC))
    half = np.zeros(1, dtype=np.uint16)
    K.half_to_float(half, np.zeros(1, dtype=np.float32))
    half.setflags(write=False)  # as a mapped shard gives it
    K.half_to_float(half, np.zeros(1, dtype=np.float32))
