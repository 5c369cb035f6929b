"""compare(): align two dumps, compute every pair's metrics in parallel, give each a verdict.

Pairs run on a thread pool (the numba kernels release the GIL); tensors are read from the shards
in chunks, so memory stays bounded whatever the dump size. Shard-level damage (a truncated or
unreadable shard) is a DumpError; a single bad tensor makes only its pair N/A (status "error").
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path

import numpy as np

from ..base import gcpause
from ..base.errors import DumpError, OpdiffError
from ..base.pair import Metrics, PairResult
from ..base.record import Record, Stats
from ..base.vocab import (
    DAMAGED,
    FAIL,
    MATCH_FUSION,
    NA,
    PASS,
    STATUS_COMPARED,
    STATUS_DTYPE_MISMATCH,
    STATUS_ERROR,
    STATUS_NOT_JUDGED,
    STATUS_SHAPE_MISMATCH,
    STATUS_UNMATCHED,
    WARNING,
    PairStatus,
    PairVerdict,
)
from ..match.align import Pair, align
from ..match.mapping import Mapping, load_mapping
from ..metrics import names as M
from ..metrics.batch import SMALL_PAIR, Side, side_table
from ..metrics.counts_mode import counts_compare, needs_counts
from ..metrics.hash_mode import hash_equal, hash_metrics
from ..metrics.masks import mask_pair, mask_view
from ..metrics.names import ERR_MESSAGE
from ..metrics.stats_mode import stats_metrics
from ..metrics.tensor import TensorDataError, TensorSource, Workspace, pair_metrics
from ..metrics.thresholds import Thresholds, dtype_class, load_thresholds, lower_precision, preset
from ..metrics.verdict import Judge, verdict
from ..store import Dump, load
from ..store.format import FLOAT_DTYPES, dtype_name, numpy_dtype
from .gate import Judgement
from .parts import open_pair, shared_steps
from .sameness import check_comparable
from .unmatched import Failing, failing_unmatched

MODES = ("auto", "tensor", "stats", "hash")
CUT_OFF_NOTE = "beyond the end of the cut-off"
_SEVERITY = {FAIL: 3, WARNING: 2, NA: 1, PASS: 0}
_BATCH_BYTES = 32 << 20
_RESULT, _STATUS = attrgetter("result"), attrgetter("status")
_GOLDEN, _TARGET, _MATCH, _NOTE, _GROUP = (attrgetter(a) for a in ("golden", "target", "match", "note", "golden_group"))
_DTYPE, _SHAPE, _HASH, _STATS = attrgetter("dtype"), attrgetter("shape"), attrgetter("hash"), attrgetter("stats")
_MIN, _MAX, _MEAN = attrgetter("min"), attrgetter("max"), attrgetter("mean")
_BATCH_PAIRS = 1024  # small pairs: a batch's fixed numpy cost spread over more pairs (bytes bound it first)


@dataclass
class Comparison:
    """Every pair of a comparison, in the target's execution order, and how it was made."""

    golden: Dump
    target: Dump
    mode: str  # the mode asked for ("auto" resolved to the richest both dumps allow)
    results: list[PairResult]
    thresholds: Thresholds
    mapping: Mapping | None = None
    elapsed: float = 0.0  # seconds spent in compare()
    tensor_bytes: int = 0  # bytes of tensor data read, both sides together
    workers: int = 1
    other_steps: dict[tuple[int, int], Comparison] = field(default_factory=dict)  # (rank, step): the other steps
    judgement: Judgement | None = None  # the run's pass/fail once judged (compare/gate.py); None: fixed thresholds
    _failing: list[Failing] | None = field(default=None, init=False, repr=False, compare=False)  # failing_unmatched()

    def counts(self) -> dict[str, int]:
        """Number of pairs per result: PASS, WARNING, FAIL, N/A."""
        out = {PASS: 0, WARNING: 0, FAIL: 0, NA: 0}
        for k, n in Counter(map(_RESULT, self.results)).items():  # counted in C, keys in order of first meeting
            out[k] = out.get(k, 0) + n
        return out

    def status_counts(self) -> dict[str, int]:
        """Number of pairs per status: compared, unmatched, shape-mismatch, dtype-mismatch, error."""
        return dict(Counter(map(_STATUS, self.results)))  # keys in order of first meeting

    def first_fail(self) -> PairResult | None:
        """The first FAIL in execution order (where the target first goes wrong, by the rules)."""
        return next((r for r in self.results if r.result == FAIL), None)

    def worst(self, n: int = 10) -> list[PairResult]:
        """The n worst compared pairs: FAIL before WARNING, then by relative error."""
        scored = [r for r in self.results if r.status == STATUS_COMPARED and r.result != PASS]
        scored.sort(key=lambda r: (-_SEVERITY.get(r.result, 0), -badness(r)))
        return scored[:n]

    def passed(self, allow_unmatched: bool = False) -> bool:
        """Whether the run passes: its `judgement` (compare/gate.py: the one gate compare's exit code and
        diagnose's verdict share) once made, else the fixed per-pair rules (`passed_thresholds`)."""
        if self.judgement is not None:
            return self.judgement.passes(allow_unmatched)
        return self.passed_thresholds(allow_unmatched)

    def passed_thresholds(self, allow_unmatched: bool = False, every_step: bool = True) -> bool:
        """msprobe's rule: True when at least one pair was compared, nothing FAILs the fixed per-pair rules,
        no pair is a shape/dtype mismatch or unreadable, and (unless allowed) no unmatched record may carry a
        difference no compared pair shows (compare/unmatched.py: the one rule diagnose applies too), in every
        step compared (this step alone unless `every_step`). Records past the end of a cut-off dump never count."""
        if not self.compared_any():
            return False  # nothing compared is not a pass
        if every_step and any(not c.passed_thresholds(allow_unmatched) for c in self.other_steps.values()):
            return False  # a multi-step dump passes only when every step both dumps hold does
        for r in self.results:
            if r.result == FAIL or r.status in (STATUS_SHAPE_MISMATCH, STATUS_DTYPE_MISMATCH, STATUS_ERROR):
                return False
        return allow_unmatched or not self.failing_unmatched()

    def failed_steps(self, allow_unmatched: bool = False) -> list[tuple[int, int]]:
        """(rank, step) of the other steps compared that do not pass the fixed per-pair rules."""
        return [k for k, c in sorted(self.other_steps.items()) if not c.passed_thresholds(allow_unmatched)]

    def by_step(self) -> dict[tuple[int, int], Comparison]:
        """Every (rank, step) part this comparison covers, this one included."""
        return {(self.target.rank, self.target.step): self, **self.other_steps}

    def compared_any(self) -> bool:
        """Whether at least one pair was compared (nothing compared is never a pass)."""
        return any(r.status == STATUS_COMPARED for r in self.results)

    def failing_unmatched(self) -> list[Failing]:
        """Unmatched records (both sides) that fail the run unless unmatched records are allowed, with why;
        the others are reported only (compare/unmatched.py)."""
        if self._failing is None:
            self._failing = failing_unmatched(self.results, {s: self.unmatched(s) for s in ("golden", "target")})
        return self._failing

    def unmatched(self, side: str) -> list[Record]:
        """Records of one side ("golden" or "target") that have no counterpart."""
        other = "target" if side == "golden" else "golden"
        return [getattr(r, side) for r in self.results
                if r.status == STATUS_UNMATCHED and getattr(r, other) is None and getattr(r, side) is not None
                and r.match != MATCH_FUSION and not r.note.startswith(CUT_OFF_NOTE)]


def badness(r: PairResult) -> float:
    """One number to rank pairs by: relative L2 error (1 - cosine, or 1.0 for hash mismatch, as fallback)."""
    m = r.metrics
    for key in (M.RED, M.NORM_REL_DIFF):
        v = m.get(key)
        if isinstance(v, (int, float)):
            return float(v)
    cos = m.get(M.COSINE)
    if isinstance(cos, (int, float)):
        return 1.0 - float(cos)
    return 1.0 if m.get(M.NONFINITE_MISMATCH) or m.get(M.HASH_EQUAL) is False else 0.0


def _pair_mode(mode: str, g: Record, t: Record) -> tuple[str | None, str]:
    """The mode a pair is compared in, or (None, why not)."""
    if g.data is not None and t.data is not None and (mode == "auto" or mode == "tensor"):
        return "tensor", ""  # most pairs, decided without building the table below
    have = {
        "tensor": g.data is not None and t.data is not None,
        "stats": g.stats is not None and t.stats is not None,
        "hash": bool(g.hash) and bool(t.hash),
    }
    if mode == "auto":
        for m in ("tensor", "stats", "hash"):
            if have[m]:
                return m, ""
        return None, "the two records hold nothing in common to compare (no data, stats or hash on both sides)"
    if have[mode]:
        return mode, ""
    missing = "golden" if mode == "tensor" and g.data is None or mode == "stats" and g.stats is None \
        or mode == "hash" and not g.hash else "target"
    return None, f"{mode} mode: the {missing} record has no {'tensor data' if mode == 'tensor' else mode}"


def _source(dump: Dump, rec: Record) -> TensorSource:
    """Where a record's data lies (a span of a file, or an array), checked against the record."""
    loc = dump.locate(rec)
    if loc is not None:  # the format checked its file against the record's dtype and shape
        return TensorSource(rec.dtype, rec.shape if type(rec.shape) is tuple else tuple(rec.shape), None, loc[0],
                            loc[1], rec.hash, rec.name)
    src = dump.span(rec)
    if isinstance(src, np.ndarray):
        if src.size != rec.numel:
            raise TensorDataError(f"{dump.root}: tensor {rec.name!r} holds {src.size} elements but its record says "
                                  f"{rec.dtype}{list(rec.shape)}")
        return TensorSource(dtype=dtype_name(src.dtype), shape=tuple(rec.shape), array=src.reshape(-1),
                            hash=rec.hash, label=rec.name)
    # a scalar stored as [1] is the same data
    if src.dtype != rec.dtype or (src.shape != rec.shape and src.numel != rec.numel):
        raise TensorDataError(f"{src.path}: tensor {rec.name!r} is {src.dtype}{list(src.shape)} in the file but "
                              f"{rec.dtype}{list(rec.shape)} in the record")
    shape = rec.shape if type(rec.shape) is tuple else tuple(rec.shape)
    return TensorSource(src.dtype, shape, None, src.path, src.offset, rec.hash, rec.name)


def _range(rec: Record) -> tuple[float | None, float | None, float] | None:
    """(min, max, shift) from the record's statistics, so the kernel needs no extra pass."""
    s = rec.stats
    if s is None or (s.min is None and rec.numel and not (s.nan or s.posinf or s.neginf)):
        return None
    if s.mean is None:  # the shift of the mean/std sums must be near the data: found from it (docs/metrics.md)
        return None
    return s.min, s.max, s.mean


def _result(pair: Pair, status: PairStatus, mode: str, metrics: Metrics | None = None, result: PairVerdict = NA,
            bitwise: bool | None = None, err: str = "", precision: str = "") -> PairResult:
    return PairResult(index=0, golden=pair.golden, target=pair.target, match=pair.match, status=status, mode=mode,
                      metrics=metrics or Metrics(), result=result, bitwise_equal=bitwise, err_message=err,
                      note=pair.note, golden_group=list(pair.golden_group), precision=precision)


def precision_floors(records: list[Record]) -> dict[str, str | None]:
    """Record name -> the lowest float precision among it and every record that ran before it.

    An op computed in bf16 leaves bf16-sized error in everything downstream, even in tensors
    stored as fp32 (a residual sum under autocast): those are judged at bf16, not fp32."""
    out: dict[str, str | None] = {}
    low: str | None = None
    for r in records:
        if r.dtype in FLOAT_DTYPES and r.dtype != low:
            low = lower_precision(low, r.dtype)
        out[r.name] = low
    return out


def compare_pair(golden_dump: Dump, target_dump: Dump, pair: Pair, mode: str = "auto",
                 thresholds: Thresholds | None = None, ws: Workspace | None = None,
                 floor: str | None = None, computed: Metrics | None = None, judge: Judge | None = None) -> PairResult:
    """Compare one aligned pair; never raises on bad data (the pair becomes N/A with the reason).

    `floor`: lowest float precision that ran before the pair (see precision_floors); None judges
    the pair by its own dtypes. `computed`: the pair's tensor metrics when a batch computed them
    already (small_pair_metrics); every check and the verdict are still made here. `judge`: a Judge of
    `thresholds` shared by many pairs (compare_subset), the same verdicts with the rules looked up once."""
    thresholds = judge.thresholds if judge is not None else thresholds or preset("default")
    g, t = pair.golden, pair.target
    if g is None or t is None:
        side = "golden" if g is None else "target"
        why = pair.note or f"no {side} counterpart"
        return _result(pair, STATUS_UNMATCHED, mode, err=why)
    damaged = g.extra.get(DAMAGED) or t.extra.get(DAMAGED)
    if damaged:  # a checksum failed: never compared as data
        return _result(pair, STATUS_ERROR, mode, err=f"damaged record: {damaged}")
    if needs_counts(g, t):  # a side holds only counts, shape or flags (tfdbg health / SHAPE modes)
        metrics, result, reason = counts_compare(g, t)
        err = "; ".join(x for x in (reason, metrics.pop(ERR_MESSAGE, "")) if x)
        status: PairStatus = STATUS_NOT_JUDGED if result == NA else STATUS_COMPARED
        return _result(pair, status, "counts", metrics, result, None, err)
    pmode, why = _pair_mode(mode, g, t)
    if pmode is None:
        return _result(pair, STATUS_ERROR, mode, err=why)
    if tuple(g.shape) != tuple(t.shape):
        return _result(pair, STATUS_SHAPE_MISMATCH, pmode,
                       err=f"shape mismatch: golden {list(g.shape)} vs target {list(t.shape)}")
    if pmode == "hash":
        if g.dtype != t.dtype:
            return _result(pair, STATUS_DTYPE_MISMATCH, pmode,
                           err=f"dtype mismatch in hash mode: golden {g.dtype} vs target {t.dtype} cannot be equal")
        metrics = hash_metrics(g, t)
    elif pmode == "stats":
        assert g.stats is not None and t.stats is not None  # _pair_mode chose stats: both sides have them
        metrics = stats_metrics(g.stats, t.stats)
    else:
        try:
            metrics = computed if computed is not None else pair_metrics(
                _source(golden_dump, g), _source(target_dump, t), ws, golden_range=_range(g), target_range=_range(t))
        except (TensorDataError, DumpError) as exc:
            return _result(pair, STATUS_ERROR, pmode, err=f"data unreadable: {exc}")
    return _judged(golden_dump, target_dump, pair, pmode, metrics, floor, judge or Judge(thresholds))


def _judged(golden_dump: Dump, target_dump: Dump, pair: Pair, pmode: str, metrics: Metrics, floor: str | None,
            judge: Judge) -> PairResult:
    """A compared pair's result: its verdict (a mask judged by what it lets through), precision, bitwise
    equality and messages (compare_pair's end, once its checks held)."""
    g, t = pair.golden, pair.target
    assert g is not None and t is not None  # compared: both sides
    why_na = metrics.pop(ERR_MESSAGE, "")
    result, reason = judge(metrics, g.dtype, t.dtype, pmode, floor)
    if result != PASS and pmode == "tensor" and mask_pair(g, t):
        result, reason = _as_mask(golden_dump, target_dump, g, t, judge.thresholds, floor, (result, reason))
    precision = dtype_class(g.dtype, t.dtype, floor)[0]
    bitwise = hash_equal(g, t)
    if bitwise is None and pmode == "tensor":
        bitwise = g.dtype == t.dtype and metrics.get(M.DIFF_COUNT) == 0
    err = f"{why_na}; {reason}" if why_na and reason else why_na or reason
    return _result(pair, STATUS_COMPARED, pmode, metrics, result, bitwise, err, precision)


def _as_mask(golden_dump: Dump, target_dump: Dump, g: Record, t: Record, thresholds: Thresholds, floor: str | None,
             judged: tuple[PairVerdict, str]) -> tuple[PairVerdict, str]:
    """A pair that may be one attention mask in two encodings, judged by what it lets through (metrics/masks.py,
    the rule diagnose applies too); `judged` stands when it is no such mask or its data cannot be read."""
    try:
        view = mask_view(golden_dump.tensor(g), target_dump.tensor(t), g.dtype, t.dtype)
    except (DumpError, TensorDataError, ValueError):
        return judged
    if view.kind == "same":
        return PASS, "the same mask in another encoding: it lets the same elements through"
    if view.kind != "values" or view.metrics is None:
        return judged
    result, reason = verdict(view.metrics, g.dtype, t.dtype, "tensor", thresholds, floor)
    note = f"a mask judged on the {view.kept} elements it lets through (its fill values agree)"
    return result, f"{note}: {reason}" if reason else note


def _dump_mode(golden: Dump, target: Dump) -> str:
    """The richest mode both dumps allow, judged by their records."""
    for mode, has in (("tensor", lambda r: r.data is not None), ("stats", lambda r: r.stats is not None),
                      ("hash", lambda r: bool(r.hash))):
        if any(map(has, golden.records)) and any(map(has, target.records)):
            return mode
    return "hash"


def _as_dump(d: Dump | str | os.PathLike[str]) -> Dump:
    return d if isinstance(d, Dump) else load(d)


def _nbytes(r: Record) -> int:
    if r.data is None:
        return 0
    return math.prod(r.shape) * numpy_dtype(r.dtype).itemsize


def _batches(items: list[tuple[int, int]]) -> list[list[int]]:
    """Group (position, bytes) work items, biggest first, into batches of similar cost."""
    items = sorted(items, key=itemgetter(1), reverse=True)  # stable: equal sizes keep their order
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for pos, nb in items:
        cur.append(pos)
        size += nb
        if size >= _BATCH_BYTES or len(cur) >= _BATCH_PAIRS:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _mark_cut_off(results: list[PairResult], golden: Dump, target: Dump) -> None:
    """Unmatched records past the end of a cut-off dump are expected: say so."""
    for other, dump in (("target", target), ("golden", golden)):
        if dump.complete:
            continue
        last = max((i for i, r in enumerate(results) if r.golden is not None and r.target is not None), default=-1)
        for r in results[last + 1:]:
            if r.status == STATUS_UNMATCHED and getattr(r, other) is None:
                r.note = r.note or f"{CUT_OFF_NOTE} {other} dump"


@dataclass
class PairPlan:
    """The aligned pairs of two dumps and which of them are compared on tensor data: compare's unit
    of work, so that a distributed task runs the very same per-pair code on a subset of it."""

    pairs: list[Pair]
    floors: list[str | None]  # per pair: lowest float precision that ran before it (precision_floors)
    work: list[tuple[int, int]]  # (pair position, bytes of both sides) of the pairs read as tensors

    def cheap(self) -> list[int]:
        """Positions of the pairs that need no tensor data (stats, hash, unmatched, mismatched)."""
        heavy = {i for i, _ in self.work}
        return [i for i in range(len(self.pairs)) if i not in heavy]


def plan_pairs(golden: Dump, target: Dump, mapping: Mapping | None, mode: str) -> PairPlan:
    """Check the runs are of one model and the shards sound (tensor modes), align, size each pair's tensor work."""
    check_comparable(golden, target, mapping=mapping)
    if mode in ("auto", "tensor"):
        golden.check()
        target.check()
    pairs = align(golden, target, mapping)
    g_floor, t_floor = precision_floors(golden.records), precision_floors(target.records)
    floors: list[str | None] = []
    work: list[tuple[int, int]] = []
    tensor = mode == "auto" or mode == "tensor"  # with data on both sides: _pair_mode's "tensor"
    itemsize: dict[str, int] = {}
    for i, p in enumerate(pairs):
        g, t = p.golden, p.target
        if g is None or t is None:
            floors.append(None)
            continue
        gf, tf = g_floor[g.name], t_floor[t.name]
        floors.append(gf if gf is tf else lower_precision(gf, tf))  # one floor on both sides: that one
        if tensor and g.data is not None and t.data is not None and (
                g.shape == t.shape or tuple(g.shape) == tuple(t.shape)):
            gs = itemsize.get(g.dtype) or itemsize.setdefault(g.dtype, numpy_dtype(g.dtype).itemsize)
            ts = itemsize.get(t.dtype) or itemsize.setdefault(t.dtype, numpy_dtype(t.dtype).itemsize)
            work.append((i, math.prod(g.shape) * (gs + ts)))  # _nbytes of each: one shape, one element count
    return PairPlan(pairs, floors, work)


def compare_subset(golden: Dump, target: Dump, plan: PairPlan, positions: list[int], mode: str,
                   thresholds: Thresholds, ws: Workspace | None = None) -> list[tuple[int, PairResult]]:
    """(position, result) of the plan's pairs at `positions`, by compare_pair (the small tensor pairs'
    metrics computed together first, and their verdicts by columns where every PASS condition holds:
    small_pair_results)."""
    judge = Judge(thresholds)
    pairs, floors = plan.pairs, plan.floors
    done = small_pair_results(golden, target, plan, positions, mode, ws, judge) if ws is not None else {}
    # a pair the batch computed passed compare_pair's checks there (_batchable): only its judgement is left
    return [(i, compare_pair(golden, target, pairs[i], mode, thresholds, ws, floors[i], None, judge) if m is None
             else m if isinstance(m, PairResult) else _judged(golden, target, pairs[i], "tensor", m, floors[i], judge))
            for i, m in zip(positions, map(done.get, positions))]


def _batchable(g: Record | None, t: Record | None, mode: str) -> bool:
    """A pair compare_pair would compare on tensor data, small enough to join a batch."""
    return (g is not None and t is not None and 0 < g.numel <= SMALL_PAIR and not g.extra.get(DAMAGED)
            and not t.extra.get(DAMAGED) and not needs_counts(g, t)
            and (g.shape == t.shape or tuple(g.shape) == tuple(t.shape)) and _pair_mode(mode, g, t)[0] == "tensor")


def _small_items(golden: Dump, target: Dump, pairs: list[Pair], positions: list[int], mode: str
                 ) -> tuple[Side, Side, list[int]]:
    """The batchable pairs among `positions` as a batch's columns (one Side per side), and their positions; a pair
    whose source cannot be located is left to compare_pair, which names the problem. The common pair (both sides
    with data, no `extra`, one shape tuple) is tested inline, by _batchable's conditions, and its columns taken
    from the records by C-level maps; any other batchable pair goes by _source (`_odd_items`)."""
    tensor = mode == "auto" or mode == "tensor"  # with data on both sides: _pair_mode's "tensor"
    where: list[int] = []
    gs: list[Record] = []
    ts: list[Record] = []
    odd: list[int] = []
    for i in positions:
        p = pairs[i]
        g, t = p.golden, p.target
        if g is None or t is None:
            continue
        if (tensor and not g.extra and not t.extra and g.data is not None and t.data is not None
                and type(g.shape) is tuple and g.shape == t.shape):
            if 0 < math.prod(g.shape) <= SMALL_PAIR:
                where.append(i)
                gs.append(g)
                ts.append(t)
        elif _batchable(g, t, mode):
            odd.append(i)
    gl, tl = _located(golden, gs), _located(target, ts)
    if set(map(type, gl)) != {tuple} or set(map(type, tl)) != {tuple}:  # refused (compare_pair says why), or
        keep = [k for k, (a, b) in enumerate(zip(gl, tl)) if type(a) is tuple and type(b) is tuple]  # span() only
        odd += [where[k] for k, (a, b) in enumerate(zip(gl, tl)) if a is not False and b is not False
                and (a is None or b is None)]
        where, gs, ts = [where[k] for k in keep], [gs[k] for k in keep], [ts[k] for k in keep]
        gl, tl = [gl[k] for k in keep], [tl[k] for k in keep]
    gold, targ = _side(gs, gl), _side(ts, tl)  # type: ignore[arg-type]  # None left out above
    if odd:
        where += _odd_items(golden, target, pairs, odd, gold, targ)
    return gold, targ, where


def _located(dump: Dump, recs: list[Record]) -> list[tuple[Path, int] | None | bool]:
    """Dump.locate of each record; False for one it refuses (a DumpError or TensorDataError: compare_pair names
    it), None for one it answers by span() only."""
    try:
        return list(map(dump.locate, recs))
    except (TensorDataError, DumpError):
        pass
    out: list[tuple[Path, int] | None | bool] = []
    for r in recs:
        try:
            out.append(dump.locate(r))
        except (TensorDataError, DumpError):
            out.append(False)
    return out


def _side(recs: list[Record], located: list[tuple[Path, int]]) -> Side:
    """A batch side of located records (each as _source makes it) as columns, their ranges (`_range`) too."""
    side = Side(list(map(_DTYPE, recs)), list(map(_SHAPE, recs)), list(map(itemgetter(0), located)),
                list(map(itemgetter(1), located)), list(map(_HASH, recs)))
    stats = list(map(_STATS, recs))
    if stats and set(map(type, stats)) == {Stats}:
        lo, hi, mean = list(map(_MIN, stats)), list(map(_MAX, stats)), list(map(_MEAN, stats))
        if set(map(type, lo)) == set(map(type, hi)) == set(map(type, mean)) == {float}:
            side.floats = (lo, hi, mean)  # what _range gives of each: (min, max, mean), as columns
            return side
    side.ranges = list(map(_range, recs))
    return side


def _odd_items(golden: Dump, target: Dump, pairs: list[Pair], odd: list[int], gold: Side, targ: Side) -> list[int]:
    """Add the batchable pairs `odd` that are not the common kind to both sides by _source (a pair whose source
    cannot be made is left out), with every range per pair; their positions."""
    where: list[int] = []
    for side in (gold, targ):
        if side.array is None:
            side.array = [None] * len(side.dtype)
        if side.ranges is None:
            side.ranges = [side.range(k) for k in range(len(side.dtype))]
            side.floats = None
    for i in odd:
        g, t = pairs[i].golden, pairs[i].target
        assert g is not None and t is not None  # batchable: both sides
        try:
            srcs = _source(golden, g), _source(target, t)
        except (TensorDataError, DumpError):
            continue
        for side, src, rec in zip((gold, targ), srcs, (g, t)):
            side.dtype.append(src.dtype)
            side.shape.append(src.shape)
            side.path.append(src.path)
            side.offset.append(src.offset)
            side.hash.append(src.hash)
            side.array.append(src.array)  # type: ignore[union-attr]  # made a list above
            side.ranges.append(_range(rec))  # type: ignore[union-attr]
        where.append(i)
    return where


def small_pair_metrics(golden: Dump, target: Dump, pairs: list[Pair], positions: list[int], mode: str,
                       ws: Workspace) -> dict[int, Metrics]:
    """Position -> tensor metrics of the small pairs among `positions`, computed in one batch
    (metrics/batch.py). A pair left out (unreadable, not matching its record or hash) is compared on its
    own by compare_pair, which names the problem."""
    gold, targ, where = _small_items(golden, target, pairs, positions, mode)
    if len(where) < 2:
        return {}
    return {i: m for i, m in zip(where, side_table(gold, targ, ws).metrics) if m is not None}


def small_pair_results(golden: Dump, target: Dump, plan: PairPlan, positions: list[int], mode: str, ws: Workspace,
                       judge: Judge) -> dict[int, PairResult | Metrics]:
    """small_pair_metrics, with the pairs every PASS condition holds for already judged: their verdicts decided
    by columns over the batch (Judge.passing), their results made at once (what _judged makes of them); the
    others' metrics are left to _judged, which words the reason."""
    pairs, floors = plan.pairs, plan.floors
    gold, targ, where = _small_items(golden, target, pairs, positions, mode)
    if len(where) < 2:
        return {}
    table = side_table(gold, targ, ws)
    out: dict[int, PairResult | Metrics] = {i: m for i, m in zip(where, table.metrics) if m is not None}
    rows = np.flatnonzero(table.plain).tolist()
    if not rows:
        return out
    keys = list(zip(map(gold.dtype.__getitem__, rows), map(targ.dtype.__getitem__, rows),
                    map(floors.__getitem__, map(where.__getitem__, rows))))
    by_rule: dict[tuple[str, str, str | None], list[int]] = {}
    for k, key in zip(rows, keys):
        by_rule.setdefault(key, []).append(k)
    for (gd, td, floor), ks in by_rule.items():
        at = np.array(ks, dtype=np.int64)
        cls = judge.rules(gd, td, floor, "tensor")[0]
        at = at[judge.passing(table.columns, at, gd, td, floor, "tensor")]
        done = [where[k] for k in at.tolist()]
        same = (table.columns[M.DIFF_COUNT][at] == 0.0).tolist() if gd == td else [False] * len(done)
        plain: list[Metrics] = list(map(out.__getitem__, done))  # type: ignore[arg-type]  # plain rows: metrics
        out.update(zip(done, _passed(list(map(pairs.__getitem__, done)), plain, cls, same)))
    return out


def _passed(ps: list[Pair], metrics: list[Metrics], precision: str, same: list[bool]) -> list[PairResult]:
    """The results _judged makes of tensor pairs judged PASS with no reason and no message (plain rows); `same`:
    per pair, whether its dtypes are one and no element differs (bitwise equal where the hashes cannot say)."""
    gs, ts = list(map(_GOLDEN, ps)), list(map(_TARGET, ps))
    for m in metrics:
        m.pop(ERR_MESSAGE, None)  # "" in a plain row
    gh, th = list(map(_HASH, gs)), list(map(_HASH, ts))
    if not any(gh) or not any(th):  # hash_equal can say nothing of any pair
        bitwise: list[bool | None] = same  # type: ignore[assignment]
    else:
        bitwise = [a == b if a and b and a[:5] == "xxh3:" == b[:5] else _bitwise(g, t, m)
                   for a, b, g, t, m in zip(gh, th, gs, ts, metrics)]
    return list(map(PairResult, repeat(0), gs, ts, map(_MATCH, ps), repeat(STATUS_COMPARED), repeat("tensor"),
                    metrics, repeat(PASS), bitwise, repeat(""), map(_NOTE, ps), map(list, map(_GROUP, ps)),
                    repeat(precision)))


def _bitwise(g: Record, t: Record, metrics: Metrics) -> bool | None:
    """_judged's bitwise equality of a tensor pair whose hashes are not both opdiff's xxh3."""
    bitwise = hash_equal(g, t)
    if bitwise is None:
        bitwise = g.dtype == t.dtype and metrics.get(M.DIFF_COUNT) == 0
    return bitwise


def finish(results: list[PairResult | None], golden: Dump, target: Dump) -> list[PairResult]:
    """Number the results in order and mark the records past the end of a cut-off dump."""
    final: list[PairResult] = []
    for i, r in enumerate(results):
        assert r is not None
        r.index = i
        final.append(r)
    _mark_cut_off(final, golden, target)
    return final


def resolve_thresholds(thresholds: Thresholds | str | os.PathLike[str] | None) -> Thresholds:
    """A Thresholds from itself, a preset name or a YAML/JSON file path (None: the default preset)."""
    if thresholds is None:
        return preset("default")
    if isinstance(thresholds, str) and not Path(thresholds).suffix:
        return preset(thresholds)
    if isinstance(thresholds, (str, os.PathLike)):
        return load_thresholds(thresholds)
    return thresholds


def resolved_mode(golden: Dump, target: Dump, mode: str) -> str:
    """The mode a comparison reports: "auto" resolved to the richest both dumps allow."""
    return _dump_mode(golden, target) if mode == "auto" else mode


def compare(
    golden: Dump | str | os.PathLike[str],
    target: Dump | str | os.PathLike[str],
    *,
    mapping: Mapping | str | os.PathLike[str] | None = None,
    mode: str = "auto",
    thresholds: Thresholds | str | None = None,
    workers: int | None = None,
    progress: bool | Callable[[int, int], None] = False,
    all_steps: bool = True,
) -> Comparison:
    """Compare every record of `target` with its `golden` counterpart (docs/compare.md).

    With `all_steps`, every other step both dumps hold (at the target's rank) is compared too, into
    `other_steps`, and counts in `passed()`: a multi-step dump is never judged on its first step alone.

    `thresholds`: a Thresholds, a preset name or a YAML/JSON file path (default: the "default"
    preset). `progress`: True for a progress bar on stderr, or a callback(done_bytes, total_bytes).
    """
    t0 = time.perf_counter()
    if mode not in MODES:
        raise OpdiffError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    golden, target = _as_dump(golden), _as_dump(target)
    if isinstance(mapping, (str, os.PathLike)):
        mapping = load_mapping(mapping)
    thresholds = resolve_thresholds(thresholds)
    with gcpause.paused():  # a few objects per pair beside every record, no cycles (base/gcpause.py)
        cmp = _compare_part(golden, target, mapping, mode, thresholds, workers, progress, t0)
    if all_steps:
        for rank, step in shared_steps(golden, target):
            if (rank, step) != (target.rank, target.step):
                g, t = open_pair(golden, target, rank, step)
                cmp.other_steps[(rank, step)] = compare(g, t, mapping=mapping, mode=mode, thresholds=thresholds,
                                                        workers=workers, all_steps=False)
        cmp.elapsed = time.perf_counter() - t0
    return cmp


def _compare_part(golden: Dump, target: Dump, mapping: Mapping | None, mode: str, thresholds: Thresholds,
                  workers: int | None, progress: bool | Callable[[int, int], None], t0: float) -> Comparison:
    """compare() of the one (rank, step) part the two dumps are."""
    plan = plan_pairs(golden, target, mapping, mode)
    pairs, work = plan.pairs, plan.work
    results: list[PairResult | None] = [None] * len(pairs)
    for i, r in compare_subset(golden, target, plan, plan.cheap(), mode, thresholds):
        results[i] = r
    workers = max(1, workers or default_workers())
    total = sum(nb for _, nb in work)
    done = 0
    report = _progress(progress, total, len(work))
    local = threading.local()
    spaces: list[Workspace] = []

    def run(batch: list[int]) -> list[tuple[int, PairResult]]:
        ws = getattr(local, "ws", None)
        if ws is None:
            ws = local.ws = Workspace()
            spaces.append(ws)  # list.append is atomic: each worker thread adds its own
        return compare_subset(golden, target, plan, batch, mode, thresholds, ws)

    sizes = dict(work)
    batches = _batches(work)
    try:
        if workers == 1 or len(batches) <= 1:
            for b in batches:
                for i, r in run(b):
                    results[i] = r
                done += sum(sizes[i] for i in b)
                report(done)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="opdiff-compare") as ex:
                futures = {ex.submit(run, b): b for b in batches}
                for fut in as_completed(futures):
                    for i, r in fut.result():
                        results[i] = r
                    done += sum(sizes[i] for i in futures[fut])
                    report(done)
    finally:
        report(None)
        for ws in spaces:
            ws.close()
    final = finish(results, golden, target)
    return Comparison(golden=golden, target=target, mode=resolved_mode(golden, target, mode),
                      results=final, thresholds=thresholds, mapping=mapping, elapsed=time.perf_counter() - t0,
                      tensor_bytes=total, workers=workers)


def _progress(progress: bool | Callable[[int, int], None], total: int, pairs: int) -> Callable[[int | None], None]:
    """A done-bytes callback: a rich bar on stderr (runs long enough to need one), the caller's
    callback, or nothing."""
    if callable(progress):
        return lambda done: None if done is None else progress(done, total)
    if not progress or (total < (256 << 20) and pairs < 10_000):
        return lambda done: None
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress("compare", BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task("compare", total=total)
    bar.start()

    def update(done: int | None) -> None:
        if done is None:
            bar.stop()
        else:
            bar.update(task, completed=done)

    return update
