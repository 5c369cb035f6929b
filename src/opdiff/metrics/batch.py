"""Metrics of many small tensor pairs at once: bulk reads, one kernel call, the same numbers as one by one.

Comparing a small pair one at a time pays Python for every step (open, read, upcast, kernel call,
accumulators) for a few hundred elements of work. Here the pairs of a batch are read with one pread
per run of neighbouring tensors of a file, laid end to end per kernel dtype and folded by one call
of `kernel.fold_segments`, which folds each pair exactly as `kernel.fold` folds it alone. A pair
whose data cannot be read, or does not match its recorded hash, gets None: the caller compares it
on its own, which names the problem; the rest of the batch is unaffected.

A batch is held as columns, one `Side` per side (dtypes, shapes, files, offsets, hashes, ranges), not as
an object per pair: compare builds them from the records directly (compare/run.py), `PairItem`s (tests,
callers with arrays) are turned into them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from pathlib import Path

import numpy as np
import xxhash

from ..base.pair import Metrics
from ..store.format import numpy_dtype
from ..store.stats import content_hasher
from . import kernel as K
from .tensor import (
    F16,
    F32,
    Columns,
    TensorDataError,
    TensorSource,
    Workspace,
    _kl_norm,
    constant_sides,
    finalize_table,
    kernel_dtype,
    na_metrics,
)

SMALL_PAIR = 1 << 14  # elements per side: a pair at most this big is compared in a batch
GAP = 4096  # bytes between two tensors of a file that one read still spans
READ_MAX = 16 << 20  # bytes one read spans at most
_FILE_SPAN = 1 << 40  # offsets below this are sorted by file and offset as one int64 key (larger: by Python)

Range = tuple[float | None, float | None, float]
_DTYPE = attrgetter("dtype")


@dataclass(slots=True)
class PairItem:
    """One small pair of a batch: both sources and, when the records' statistics give them, their ranges."""

    golden: TensorSource
    target: TensorSource
    golden_range: Range | None = None
    target_range: Range | None = None


@dataclass(slots=True)
class Side:
    """One side of a batch's pairs as columns: what a TensorSource says of each tensor, and its range (min, max,
    shift) from the record's statistics. `ranges` holds them per pair (None: found from the data); or, when every
    one is a triple of floats (the common case), `floats` holds them as three lists (lo, hi, shift) instead."""

    dtype: list[str]
    shape: list[tuple[int, ...]]
    path: list[Path | None]
    offset: list[int]
    hash: list[str | None]
    array: list[np.ndarray | None] | None = None  # in-memory sources (their path None); None: every one a file span
    ranges: list[Range | None] | None = None
    floats: tuple[list[float], list[float], list[float]] | None = None

    @classmethod
    def of(cls, sources: list[TensorSource], ranges: list[Range | None]) -> Side:
        """The columns of a list of sources and their ranges."""
        arrays, paths = [s.array for s in sources], [s.path for s in sources]
        spans = all(a is None for a in arrays) and all(p is not None for p in paths)
        return cls([s.dtype for s in sources], [s.shape for s in sources], paths, [s.offset for s in sources],
                   [s.hash for s in sources], None if spans else arrays, ranges)

    def range(self, k: int) -> Range | None:
        """Pair k's range, None when it is to be found from the data."""
        if self.floats is not None:
            lo, hi, sh = self.floats
            return lo[k], hi[k], sh[k]
        assert self.ranges is not None
        return self.ranges[k]


@dataclass(slots=True)
class MetricTable:
    """A batch's results: each item's metrics dict (None: compare it on its own), which items took the common
    way (every element finite on both sides, neither side all zero) and their numeric metrics as float64
    columns over every item (nan elsewhere and where N/A), for a verdict by columns (Judge.passing)."""

    metrics: list[Metrics | None]
    plain: np.ndarray  # bool per item
    columns: Columns


def batch_metrics(items: list[PairItem], ws: Workspace) -> list[Metrics | None]:
    """Every item's metrics (as pair_metrics gives them), or None for an item to compare on its own."""
    return batch_table(items, ws).metrics


def batch_table(items: list[PairItem], ws: Workspace) -> MetricTable:
    """batch_metrics' metrics with the common items' numbers as columns too (MetricTable)."""
    return side_table(Side.of([it.golden for it in items], [it.golden_range for it in items]),
                      Side.of([it.target for it in items], [it.target_range for it in items]), ws)


def side_table(gold: Side, targ: Side, ws: Workspace) -> MetricTable:
    """batch_table of a batch held as columns, one Side per side (pair k is row k of both)."""
    n = len(gold.dtype)
    table = MetricTable([None] * n, np.zeros(n, dtype=bool), {})
    out = table.metrics
    g_data, t_data = read_side(gold, ws), read_side(targ, ws)
    numels = list(map(math.prod, gold.shape))
    same = gold.shape == targ.shape  # every pair's shapes equal (compare's batches): no test per pair
    if same and 0 not in numels and set(map(type, g_data)) == set(map(type, t_data)) == {np.ndarray}:
        ok = list(range(n))  # every pair read, none empty: no test per pair either
    else:
        ok = _compared(gold, targ, g_data, t_data, numels, same, out)
    for ks in _by_dtypes(ok, g_data, t_data).values():
        _fold_group(gold, targ, ks, g_data, t_data, table, numels)
    return table


def _compared(gold: Side, targ: Side, g_data: list[np.ndarray | None], t_data: list[np.ndarray | None],
              numels: list[int], same: bool, out: list[Metrics | None]) -> list[int]:
    """The pairs to fold (both sides read, of one shape, not empty); an empty pair's metrics set in `out`."""
    ok: list[int] = []
    for k, (g, t, m) in enumerate(zip(g_data, t_data, numels)):
        if not same and gold.shape[k] != targ.shape[k] and tuple(gold.shape[k]) != tuple(targ.shape[k]):
            continue  # pair_metrics says why
        if m == 0:
            out[k] = na_metrics("empty tensor: nothing to compare", numel=0)
        elif g is not None and t is not None:
            ok.append(k)
    return ok


def _by_dtypes(ok: list[int], g_data: list[np.ndarray | None], t_data: list[np.ndarray | None]
               ) -> dict[tuple[np.dtype, np.dtype], list[int]]:
    """The read pairs `ok` grouped by their two dtypes (one kernel call each)."""
    if len(ok) == len(g_data):  # every pair
        gd, td = list(map(_DTYPE, g_data)), list(map(_DTYPE, t_data))
    else:
        gd = [g_data[k].dtype for k in ok]  # type: ignore[union-attr]  # ok: both read
        td = [t_data[k].dtype for k in ok]  # type: ignore[union-attr]
    if ok and len(set(gd)) == 1 and len(set(td)) == 1:
        return {(gd[0], td[0]): ok}
    groups: dict[tuple[np.dtype, np.dtype], list[int]] = defaultdict(list)
    for k, key in zip(ok, zip(gd, td)):
        groups[key].append(k)
    return groups


def _fold_group(gold: Side, targ: Side, ks: list[int], g_data: list[np.ndarray | None],
                t_data: list[np.ndarray | None], table: MetricTable, numels: list[int]) -> None:
    """The pairs `ks` (one dtype per side) laid end to end, folded by one kernel call, finalized."""
    kd = kernel_dtype(gold.dtype[ks[0]], targ.dtype[ks[0]])
    every = len(ks) == len(g_data)  # ks is then every pair in order (a subsequence of range(n) as long)
    g_all = _upcast(np.concatenate(g_data if every else [g_data[k] for k in ks]), kd)  # type: ignore[arg-type]
    t_all = _upcast(np.concatenate(t_data if every else [t_data[k] for k in ks]), kd)  # type: ignore[arg-type]
    offsets = np.zeros(len(ks) + 1, dtype=np.int64)
    np.cumsum(numels if every else [numels[k] for k in ks], out=offsets[1:])
    params, absmax, shifts, const = _group_params(gold, targ, ks, g_all, t_all, offsets)
    acc = np.zeros((len(ks), K.N_ACC), dtype=np.float64)
    cnt = np.zeros((len(ks), K.N_CNT), dtype=np.int64)
    cnt[:, K.C_FIRST_MISMATCH] = -1
    cnt[:, K.C_WORST_IDX] = -1
    K.fold_segments(g_all, t_all, offsets, params, acc, cnt, np.zeros(K.N_ACC, dtype=np.float64))
    numel = np.diff(offsets).tolist()
    metrics, rows, cols = finalize_table(acc, cnt, numel, absmax, shifts, const)
    out = table.metrics
    if every:
        out[:] = metrics
        at = rows
    else:
        for k, m in zip(ks, metrics):
            out[k] = m
        at = np.array(ks, dtype=np.int64)[rows]
    table.plain[at] = True
    n = len(out)
    for key, col in cols.items():
        full = table.columns.get(key)
        if full is None:
            full = table.columns[key] = np.full(n, np.nan)
        full[at] = col


def _group_params(gold: Side, targ: Side, ks: list[int], g_all: np.ndarray, t_all: np.ndarray, offsets: np.ndarray
                  ) -> tuple[np.ndarray, list[float | None], list[tuple[float, float]], np.ndarray]:
    """The kernel's parameter rows, golden's absolute maxima, both shifts of the pairs `ks` and which pairs have
    both sides constant: from the float columns of both sides' ranges when they have them (_params' column way),
    else from each pair's range (found from its data where the record gives none)."""
    if gold.floats is not None and targ.floats is not None:
        at = np.array(ks, dtype=np.int64)
        x = np.stack([np.array(c, dtype=np.float64)[at] for c in (*gold.floats, *targ.floats)], axis=1)
        if np.isfinite(x).all():
            g_sh, t_sh = x[:, 2].tolist(), x[:, 5].tolist()
            const = (x[:, 0] == x[:, 1]) & (x[:, 3] == x[:, 4])
            return (*_params_of(x), list(zip(g_sh, t_sh)), const)
    bounds = offsets.tolist()
    g_rngs = [gold.range(k) or _finite_range(g_all[bounds[j]:bounds[j + 1]]) for j, k in enumerate(ks)]
    t_rngs = [targ.range(k) or _finite_range(t_all[bounds[j]:bounds[j + 1]]) for j, k in enumerate(ks)]
    params, absmax = _params(g_rngs, t_rngs)
    const = np.array([constant_sides(g[0], g[1], t[0], t[1]) for g, t in zip(g_rngs, t_rngs)], dtype=bool)
    return params, absmax, [(g[2], t[2]) for g, t in zip(g_rngs, t_rngs)], const


def _params(g_rngs: list[Range], t_rngs: list[Range]) -> tuple[np.ndarray, list[float | None]]:
    """The kernel's parameter rows (each side's KL normalization, then both shifts) and golden's absolute
    maximum per pair. Ranges that are all finite floats (the common case) go as columns, by the same IEEE
    operations as the per-pair lines (`_kl_norm`, max of abs), which every other range takes."""
    flat = [(*g, *t) for g, t in zip(g_rngs, t_rngs)]
    if flat and set(map(type, chain.from_iterable(flat))) == {float}:
        x = np.array(flat, dtype=np.float64)
        if np.isfinite(x).all():
            return _params_of(x)
    rows = [(*_kl_norm(g[0], g[1]), *_kl_norm(t[0], t[1]), g[2], t[2]) for g, t in zip(g_rngs, t_rngs)]
    absmax = [None if lo is None or hi is None else max(abs(lo), abs(hi)) for lo, hi, _ in g_rngs]
    return np.array(rows, dtype=np.float64).reshape(len(rows), K.N_PARAM), absmax


def _params_of(x: np.ndarray) -> tuple[np.ndarray, list[float | None]]:
    """_params of finite float ranges as one (pairs, 6) array of golden's lo, hi, shift, then target's."""
    g_lo, g_hi, g_sh, t_lo, t_hi, t_sh = x.T
    with np.errstate(all="ignore"):
        g_ok, t_ok = g_hi > g_lo, t_hi > t_lo
        params = np.stack([np.where(g_ok, g_lo, 0.0), np.where(g_ok, 1.0 / (g_hi - g_lo), 1.0),
                           np.where(t_ok, t_lo, 0.0), np.where(t_ok, 1.0 / (t_hi - t_lo), 1.0), g_sh, t_sh], axis=1)
    absmax: list[float | None] = np.maximum(np.abs(g_lo), np.abs(g_hi)).tolist()
    return params.reshape(len(x), K.N_PARAM), absmax


def _finite_range(x: np.ndarray) -> Range:
    lo, hi, mean, found = K.finite_range(x)
    return (lo, hi, mean) if found else (None, None, 0.0)


def _upcast(raw: np.ndarray, kd: np.dtype) -> np.ndarray:
    """The elements in the kernel dtype, converted as the one-pair reader converts them."""
    if raw.dtype == kd:
        return raw
    if raw.dtype == F16 and kd == F32:
        out = np.empty(raw.size, dtype=F32)
        K.half_to_float(raw.view(np.uint16), out)
        return out
    return raw.astype(kd)


def read_sources(sources: list[TensorSource], ws: Workspace) -> list[np.ndarray | None]:
    """Each source's elements as a flat array of its dtype (None: unreadable, or its bytes do not match its
    recorded hash). File sources are read by one pread per run of neighbouring tensors of a file."""
    return read_side(Side.of(sources, [None] * len(sources)), ws)


def read_side(side: Side, ws: Workspace) -> list[np.ndarray | None]:
    """read_sources of a batch side held as columns."""
    n = len(side.dtype)
    out: list[np.ndarray | None] = [None] * n
    files = list(range(n))  # every source a file span
    if side.array is not None:
        files = []
        for k, (a, p) in enumerate(zip(side.array, side.path)):
            if a is not None:
                out[k] = a.reshape(-1)
            elif p is not None:
                files.append(k)
    names = side.dtype if side.array is None else [side.dtype[k] for k in files]
    dtypes = {d: numpy_dtype(d) for d in set(names)}  # numpy dtype of each file source's dtype name
    sizes = [0] * n  # bytes of each file source
    if side.array is None and len(dtypes) == 1:
        size = next(iter(dtypes.values())).itemsize
        sizes = [m * size for m in map(math.prod, side.shape)]
    else:
        for k in files:
            sizes[k] = math.prod(side.shape[k]) * dtypes[side.dtype[k]].itemsize
    hashes = _Hashes()
    for run, lo, hi in _file_runs(side, files, sizes):
        _read_run(side, run, lo, hi, sizes, ws, out, hashes, dtypes)
    return out


def _file_runs(side: Side, files: list[int], sizes: list[int]) -> list[tuple[list[int], int, int]]:
    """The file sources `files` cut into runs that one read covers: (sources, start, end), sources of one file
    by offset. Sorted and cut by numpy (files apart, a gap over GAP); a run spanning over READ_MAX, or offsets
    past _FILE_SPAN, send the sources through _runs, which cuts them one by one."""
    if not files:
        return []
    paths, offsets, nbytes = side.path, side.offset, sizes
    if len(files) != len(paths):
        paths, offsets, nbytes = ([x[k] for k in files] for x in (paths, offsets, sizes))  # type: ignore[assignment]
    ids = np.array(list(map(id, paths)), dtype=np.uint64)  # by the path object: sources of a shard share it
    lo = np.array(offsets, dtype=np.int64)
    hi = lo + np.array(nbytes, dtype=np.int64)
    if lo.min() < 0 or hi.max() >= _FILE_SPAN:
        return _python_runs(side, files, sizes)
    file_no = np.unique(ids, return_inverse=True)[1]
    order = np.lexsort((lo, file_no))
    base = file_no[order] * _FILE_SPAN  # files apart: each file's offsets above every earlier file's ends
    lo_s, hi_s = lo[order] + base, hi[order] + base
    end_before = np.maximum.accumulate(hi_s)[:-1]  # the run's end so far, when no cut fell inside it
    cut = np.flatnonzero((file_no[order][1:] != file_no[order][:-1]) | (lo_s[1:] - end_before > GAP)) + 1
    starts = np.concatenate(([0], cut))
    stops = np.concatenate((cut, [len(files)]))
    ends = np.maximum.reduceat(hi_s, starts)
    if (ends - lo_s[starts] > READ_MAX).any():
        return _python_runs(side, files, sizes)
    ranked = np.asarray(files, dtype=np.int64)[order].tolist()
    base_s = base[starts]
    return [(ranked[a:b], s, e) for a, b, s, e in zip(starts.tolist(), stops.tolist(),
                                                     (lo_s[starts] - base_s).tolist(), (ends - base_s).tolist())]


def _python_runs(side: Side, files: list[int], sizes: list[int]) -> list[tuple[list[int], int, int]]:
    """_file_runs one source at a time: grouped by file, by offset, cut by _runs."""
    by_file: dict[int, list[int]] = {}
    for k in files:
        by_file.setdefault(id(side.path[k]), []).append(k)
    out: list[tuple[list[int], int, int]] = []
    for ks in by_file.values():
        ks.sort(key=side.offset.__getitem__)
        out += _runs(side.offset, ks, sizes)
    return out


class _Hashes:
    """xxh3 states after the (dtype, shape) prefix of a record's content hash (store/stats.py), made once per
    (dtype, shape) of a batch: a tensor's check then hashes only its bytes."""

    def __init__(self) -> None:
        self._seeded: dict[tuple[str, tuple[int, ...]], xxhash.xxh3_64] = {}

    def matches(self, dtype: str, shape: tuple[int, ...], expect: str, raw: np.ndarray) -> bool:
        """Whether `raw` is the content `expect` (an "xxh3:" hash) names."""
        key = (dtype, shape)
        seeded = self._seeded.get(key)
        if seeded is None:
            seeded = self._seeded[key] = content_hasher(dtype, shape)
        h = seeded.copy()
        h.update(raw.data)
        return "xxh3:" + h.hexdigest() == expect


def _runs(offsets: list[int], ks: list[int], sizes: list[int]) -> list[tuple[list[int], int, int]]:
    """Sources of one file (sorted by offset) cut into runs that one read covers: (sources, start, end)."""
    runs: list[tuple[list[int], int, int]] = []
    run: list[int] = []
    start = end = 0
    for k in ks:
        lo = offsets[k]
        hi = lo + sizes[k]
        if run and lo - end <= GAP and (end if end > hi else hi) - start <= READ_MAX:
            run.append(k)
            if hi > end:
                end = hi
        else:
            if run:
                runs.append((run, start, end))
            run = [k]
            start, end = lo, hi
    if run:
        runs.append((run, start, end))
    return runs


def _read_run(side: Side, run: list[int], start: int, end: int, sizes: list[int], ws: Workspace,
              out: list[np.ndarray | None], hashes: _Hashes, dtypes: dict[str, np.dtype]) -> None:
    """One pread of bytes start..end for a run of tensors; each tensor checked against its hash. A read cut
    short leaves the run's tensors None (their pairs, compared alone, say the file is truncated)."""
    path = side.path[run[0]]
    assert path is not None  # read_side passes file sources only
    buf = np.empty(end - start, dtype=np.uint8)
    try:
        ws.pread(path, start, memoryview(buf.data))
    except TensorDataError:
        return
    offsets, hs = side.offset, side.hash
    if len(dtypes) == 1 and not any(map(hs.__getitem__, run)):  # one dtype, no hash to check: views alone
        dt = next(iter(dtypes.values()))
        size = sizes[run[0]]
        if size and (end - start == size * len(run) and len(set(map(sizes.__getitem__, run))) == 1
                     and list(map(offsets.__getitem__, run)) == list(range(start, end, size))):
            out_views = list(buf.view(dt).reshape(len(run), -1))  # tensors of one size end to end: rows of one view
            for k, v in zip(run, out_views):
                out[k] = v
            return
        for k in run:
            lo = offsets[k] - start
            out[k] = buf[lo:lo + sizes[k]].view(dt)
        return
    for k in run:
        lo = offsets[k] - start
        raw = buf[lo:lo + sizes[k]]
        h = hs[k]
        if h and h.startswith("xxh3:") and not hashes.matches(side.dtype[k], side.shape[k], h, raw):
            continue
        out[k] = raw.view(dtypes[side.dtype[k]])
