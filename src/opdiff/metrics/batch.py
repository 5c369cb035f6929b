"""Metrics of many small tensor pairs at once: bulk reads, one kernel call, the same numbers as one by one.

Comparing a small pair one at a time pays Python for every step (open, read, upcast, kernel call,
accumulators) for a few hundred elements of work. Here the pairs of a batch are read with one pread
per run of neighbouring tensors of a file, laid end to end per kernel dtype and folded by one call
of `kernel.fold_segments`, which folds each pair exactly as `kernel.fold` folds it alone. A pair
whose data cannot be read, or does not match its recorded hash, gets None: the caller compares it
on its own, which names the problem; the rest of the batch is unaffected.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain

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
    finalize_table,
    kernel_dtype,
    na_metrics,
)

SMALL_PAIR = 1 << 14  # elements per side: a pair at most this big is compared in a batch
GAP = 4096  # bytes between two tensors of a file that one read still spans
READ_MAX = 16 << 20  # bytes one read spans at most

Range = tuple[float | None, float | None, float]


@dataclass(slots=True)
class PairItem:
    """One small pair of a batch: both sources and, when the records' statistics give them, their ranges."""

    golden: TensorSource
    target: TensorSource
    golden_range: Range | None = None
    target_range: Range | None = None


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
    n = len(items)
    table = MetricTable([None] * n, np.zeros(n, dtype=bool), {})
    out = table.metrics
    gold = read_sources([it.golden for it in items], ws)
    targ = read_sources([it.target for it in items], ws)
    groups: dict[tuple[np.dtype, np.dtype], list[int]] = defaultdict(list)
    numels = [it.golden.numel for it in items]
    for k, it in enumerate(items):
        g, t = gold[k], targ[k]
        if it.golden.shape != it.target.shape and tuple(it.golden.shape) != tuple(it.target.shape):
            continue  # pair_metrics says why
        if numels[k] == 0:
            out[k] = na_metrics("empty tensor: nothing to compare", numel=0)
        elif g is not None and t is not None:
            groups[(g.dtype, t.dtype)].append(k)
    for ks in groups.values():
        _fold_group(items, ks, gold, targ, table, numels)
    return table


def _fold_group(items: list[PairItem], ks: list[int], gold: list[np.ndarray | None], targ: list[np.ndarray | None],
                table: MetricTable, numels: list[int]) -> None:
    """The pairs `ks` (one dtype per side) laid end to end, folded by one kernel call, finalized."""
    first = items[ks[0]]
    kd = kernel_dtype(first.golden.dtype, first.target.dtype)
    g_all = _upcast(np.concatenate([a for k in ks if (a := gold[k]) is not None]), kd)  # all read: grouped
    t_all = _upcast(np.concatenate([a for k in ks if (a := targ[k]) is not None]), kd)
    offsets = np.zeros(len(ks) + 1, dtype=np.int64)
    np.cumsum([numels[k] for k in ks], out=offsets[1:])
    bounds = offsets.tolist()
    g_rngs = [items[k].golden_range or _finite_range(g_all[bounds[j]:bounds[j + 1]]) for j, k in enumerate(ks)]
    t_rngs = [items[k].target_range or _finite_range(t_all[bounds[j]:bounds[j + 1]]) for j, k in enumerate(ks)]
    params, absmax = _params(g_rngs, t_rngs)
    acc = np.zeros((len(ks), K.N_ACC), dtype=np.float64)
    cnt = np.zeros((len(ks), K.N_CNT), dtype=np.int64)
    cnt[:, K.C_FIRST_MISMATCH] = -1
    cnt[:, K.C_WORST_IDX] = -1
    K.fold_segments(g_all, t_all, offsets, params, acc, cnt, np.zeros(K.N_ACC, dtype=np.float64))
    shifts = [(g[2], t[2]) for g, t in zip(g_rngs, t_rngs)]
    numel = np.diff(offsets).tolist()
    metrics, rows, cols = finalize_table(acc, cnt, numel, absmax, shifts)
    out = table.metrics
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


def _params(g_rngs: list[Range], t_rngs: list[Range]) -> tuple[np.ndarray, list[float | None]]:
    """The kernel's parameter rows (each side's KL normalization, then both shifts) and golden's absolute
    maximum per pair. Ranges that are all finite floats (the common case) go as columns, by the same IEEE
    operations as the per-pair lines (`_kl_norm`, max of abs), which every other range takes."""
    flat = [(*g, *t) for g, t in zip(g_rngs, t_rngs)]
    if flat and set(map(type, chain.from_iterable(flat))) == {float}:
        x = np.array(flat, dtype=np.float64)
        if np.isfinite(x).all():
            g_lo, g_hi, g_sh, t_lo, t_hi, t_sh = x.T
            with np.errstate(all="ignore"):
                g_ok, t_ok = g_hi > g_lo, t_hi > t_lo
                params = np.stack([np.where(g_ok, g_lo, 0.0), np.where(g_ok, 1.0 / (g_hi - g_lo), 1.0),
                                   np.where(t_ok, t_lo, 0.0), np.where(t_ok, 1.0 / (t_hi - t_lo), 1.0), g_sh, t_sh],
                                  axis=1)
            absmax: list[float | None] = np.maximum(np.abs(g_lo), np.abs(g_hi)).tolist()
            return params.reshape(len(x), K.N_PARAM), absmax
    rows = [(*_kl_norm(g[0], g[1]), *_kl_norm(t[0], t[1]), g[2], t[2]) for g, t in zip(g_rngs, t_rngs)]
    absmax = [None if lo is None or hi is None else max(abs(lo), abs(hi)) for lo, hi, _ in g_rngs]
    return np.array(rows, dtype=np.float64).reshape(len(rows), K.N_PARAM), absmax


def _finite_range(x: np.ndarray) -> Range:
    lo, hi, first, found = K.finite_range(x)
    return (lo, hi, first) if found else (None, None, 0.0)


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
    out: list[np.ndarray | None] = [None] * len(sources)
    by_file: dict[int, list[int]] = {}  # by the path object (its __hash__ is Python code): sources of a shard share it
    sizes = [0] * len(sources)  # bytes of each file source, computed once: read twice below
    dtypes: dict[str, np.dtype] = {}  # numpy dtype of each dtype name met
    for k, src in enumerate(sources):
        if src.array is not None:
            out[k] = src.array.reshape(-1)
        elif src.path is not None:
            dt = dtypes.get(src.dtype)
            if dt is None:
                dt = dtypes[src.dtype] = numpy_dtype(src.dtype)
            sizes[k] = math.prod(src.shape) * dt.itemsize
            by_file.setdefault(id(src.path), []).append(k)
    offsets = [src.offset for src in sources]
    hashes = _Hashes()
    for ks in by_file.values():
        ks.sort(key=offsets.__getitem__)
        for run, lo, hi in _runs(offsets, ks, sizes):
            _read_run(sources, run, lo, hi, sizes, ws, out, hashes, dtypes)
    return out


class _Hashes:
    """xxh3 states after the (dtype, shape) prefix of a record's content hash (store/stats.py), made once per
    (dtype, shape) of a batch: a tensor's check then hashes only its bytes."""

    def __init__(self) -> None:
        self._seeded: dict[tuple[str, tuple[int, ...]], xxhash.xxh3_64] = {}

    def matches(self, src: TensorSource, raw: np.ndarray) -> bool:
        """Whether `raw` is the content `src.hash` (an "xxh3:" hash) names."""
        key = (src.dtype, src.shape)
        seeded = self._seeded.get(key)
        if seeded is None:
            seeded = self._seeded[key] = content_hasher(src.dtype, src.shape)
        h = seeded.copy()
        h.update(raw.data)
        return "xxh3:" + h.hexdigest() == src.hash


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


def _read_run(sources: list[TensorSource], run: list[int], start: int, end: int, sizes: list[int], ws: Workspace,
              out: list[np.ndarray | None], hashes: _Hashes, dtypes: dict[str, np.dtype]) -> None:
    """One pread of bytes start..end for a run of tensors; each tensor checked against its hash. A read cut
    short leaves the run's tensors None (their pairs, compared alone, say the file is truncated)."""
    path = sources[run[0]].path
    assert path is not None  # read_sources passes file sources only
    buf = np.empty(end - start, dtype=np.uint8)
    try:
        ws.pread(path, start, memoryview(buf.data))
    except TensorDataError:
        return
    for k in run:
        s = sources[k]
        lo = s.offset - start
        raw = buf[lo:lo + sizes[k]]
        h = s.hash
        if h and h.startswith("xxh3:") and not hashes.matches(s, raw):
            continue
        out[k] = raw.view(dtypes[s.dtype])
