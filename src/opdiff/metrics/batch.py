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

import numpy as np
import xxhash

from ..base.pair import Metrics
from ..store.format import DTYPES, numpy_dtype
from . import kernel as K
from .tensor import F16, F32, TensorDataError, TensorSource, Workspace, _kl_norm, finalize_rows, kernel_dtype, na_metrics

SMALL_PAIR = 1 << 14  # elements per side: a pair at most this big is compared in a batch
GAP = 4096  # bytes between two tensors of a file that one read still spans
READ_MAX = 16 << 20  # bytes one read spans at most

Range = tuple[float | None, float | None, float]
_NUMPY = {name: dt for name, (dt, _) in DTYPES.items()}
_ITEMSIZE = {name: dt.itemsize for name, dt in _NUMPY.items()}


@dataclass
class PairItem:
    """One small pair of a batch: both sources and, when the records' statistics give them, their ranges."""

    golden: TensorSource
    target: TensorSource
    golden_range: Range | None = None
    target_range: Range | None = None


def batch_metrics(items: list[PairItem], ws: Workspace) -> list[Metrics | None]:
    """Every item's metrics (as pair_metrics gives them), or None for an item to compare on its own."""
    out: list[Metrics | None] = [None] * len(items)
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
        _fold_group(items, ks, gold, targ, out, numels)
    return out


def _fold_group(items: list[PairItem], ks: list[int], gold: list[np.ndarray | None], targ: list[np.ndarray | None],
                out: list[Metrics | None], numels: list[int]) -> None:
    """The pairs `ks` (one dtype per side) laid end to end, folded by one kernel call, finalized."""
    first = items[ks[0]]
    kd = kernel_dtype(first.golden.dtype, first.target.dtype)
    g_all = _upcast(np.concatenate([a for k in ks if (a := gold[k]) is not None]), kd)  # all read: grouped
    t_all = _upcast(np.concatenate([a for k in ks if (a := targ[k]) is not None]), kd)
    offsets = np.zeros(len(ks) + 1, dtype=np.int64)
    np.cumsum([numels[k] for k in ks], out=offsets[1:])
    bounds = offsets.tolist()
    rows = []
    ranges = []
    for j, k in enumerate(ks):
        lo, hi = bounds[j], bounds[j + 1]
        g_rng = items[k].golden_range or _finite_range(g_all[lo:hi])
        t_rng = items[k].target_range or _finite_range(t_all[lo:hi])
        rows.append((*_kl_norm(g_rng[0], g_rng[1]), *_kl_norm(t_rng[0], t_rng[1]), g_rng[2], t_rng[2]))
        ranges.append((g_rng, t_rng))
    params = np.array(rows, dtype=np.float64).reshape(len(ks), K.N_PARAM)
    acc = np.zeros((len(ks), K.N_ACC), dtype=np.float64)
    cnt = np.zeros((len(ks), K.N_CNT), dtype=np.int64)
    cnt[:, K.C_FIRST_MISMATCH] = -1
    cnt[:, K.C_WORST_IDX] = -1
    K.fold_segments(g_all, t_all, offsets, params, acc, cnt, np.zeros(K.N_ACC, dtype=np.float64))
    absmax = [None if g_lo is None or g_hi is None else max(abs(g_lo), abs(g_hi)) for (g_lo, g_hi, _), _ in ranges]
    shifts = [(g[2], t[2]) for g, t in ranges]
    numel = np.diff(offsets).tolist()
    for k, m in zip(ks, finalize_rows(acc, cnt, numel, absmax, shifts)):
        out[k] = m

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
    by_file: dict[object, list[int]] = defaultdict(list)
    for k, src in enumerate(sources):
        if src.array is not None:
            out[k] = src.array.reshape(-1)
        elif src.path is not None:
            by_file[src.path].append(k)
    sizes = {k: _nbytes(sources[k]) for ks in by_file.values() for k in ks}  # once per source: read twice below
    hashes = _Hashes()
    for ks in by_file.values():
        ks.sort(key=lambda k: sources[k].offset)
        for run in _runs(sources, ks, sizes):
            _read_run(sources, run, sizes, ws, out, hashes)
    return out


def _nbytes(src: TensorSource) -> int:
    return math.prod(src.shape) * (_ITEMSIZE.get(src.dtype) or numpy_dtype(src.dtype).itemsize)


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
            seeded = self._seeded[key] = xxhash.xxh3_64(f"{src.dtype}{list(src.shape)}".encode())
        h = seeded.copy()
        h.update(raw.data)
        return "xxh3:" + h.hexdigest() == src.hash


def _runs(sources: list[TensorSource], ks: list[int], sizes: dict[int, int]) -> list[list[int]]:
    """Sources of one file (sorted by offset) cut into runs that one read covers."""
    runs: list[list[int]] = []
    start = end = 0
    for k in ks:
        lo = sources[k].offset
        hi = lo + sizes[k]
        if runs and lo - end <= GAP and (end if end > hi else hi) - start <= READ_MAX:
            runs[-1].append(k)
            if hi > end:
                end = hi
        else:
            runs.append([k])
            start, end = lo, hi
    return runs


def _read_run(sources: list[TensorSource], run: list[int], sizes: dict[int, int], ws: Workspace,
              out: list[np.ndarray | None], hashes: _Hashes | None = None) -> None:
    """One pread for a run of tensors; each tensor checked against its hash. A read cut short leaves the
    tensors past its end None (their pairs, compared alone, say the file is truncated)."""
    first = sources[run[0]]
    path = first.path
    assert path is not None  # read_sources passes file sources only
    start = first.offset
    end = max(sources[k].offset + sizes[k] for k in run)
    buf = np.empty(end - start, dtype=np.uint8)
    try:
        ws.pread(path, start, memoryview(buf.data))
    except TensorDataError:
        return
    hashes = hashes or _Hashes()
    for k in run:
        s = sources[k]
        lo = s.offset - start
        raw = buf[lo:lo + sizes[k]]
        if s.hash and s.hash.startswith("xxh3:") and not hashes.matches(s, raw):
            continue
        out[k] = raw.view(_NUMPY.get(s.dtype) or numpy_dtype(s.dtype))
