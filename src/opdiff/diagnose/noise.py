"""What "agrees" means: each pair's error in rounding units, and the noise floor seen in the data.

A pair's error is relative to its golden tensor's scale (the larger of the relative L2 error and
the max abs error over max |golden|); its unit is the rounding unit of the lower-precision dtype
of the two sides. The floor and the amplification ops show legitimately are calibrated from the
comparison itself (docs/diagnose.md, "Noise").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter

import numpy as np

from ..base.pair import Metrics, MetricValue, PairResult
from ..base.record import Record, Stats
from ..metrics import names as M
from ..metrics.masks import absmax
from ..metrics.thresholds import ROUNDING_UNIT, SIGNIFICANT
from ..store.format import FLOAT_DTYPES

UNIT: dict[str, float] = ROUNDING_UNIT  # the largest relative error one rounding makes, per dtype

# defaults of the calibration (docs/diagnose.md): an op's own error must exceed
#   max(SIGNIFICANT * floor * unit, AMPLIFICATION * inherited error)
AMPLIFICATION = 8.0  # how much an op may legitimately amplify the relative error of its inputs
DRIFT = 16.0  # output error (in units of the run's coarsest precision) above which error has drifted
# a fresh op's own error where its pair is in a narrow float dtype (fp16, bf16, fp8): kernels accumulate in fp32 and
# round their output once, so a correct op shows a few units; 32 (SIGNIFICANT) hid a bf16 norm eps of 15 units
NARROW_SIGNIFICANT = 8.0
PEER_MIN = 2.0  # the least amplification allowed where other calls of an op type show how much it amplifies
PEERS = 2  # other calls of an op type needed before they set its amplification


def nonfinite(stats: Stats | None) -> int:
    """Count of nan and +-inf elements."""
    return (stats.nan + stats.posinf + stats.neginf) if stats is not None else 0


def _num(x: MetricValue) -> float | None:
    if x is None or isinstance(x, float):
        return x
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def stats_error(g: Stats | None, t: Stats | None) -> float | None:
    """Relative error bound from statistics alone (differences of norm, max, min, mean)."""
    if g is None or t is None or g.norm is None or t.norm is None:
        return None
    gmax, gmin = g.max, g.min  # absmax(g), inline: called per pair of a stats dump
    scale_max = (max(abs(gmax), abs(gmin)) if gmax is not None and gmin is not None else None) or 0.0
    rms = g.norm / math.sqrt(g.numel) if g.numel else 0.0
    terms = []
    if g.norm > 0:
        terms.append(abs(t.norm - g.norm) / g.norm)
    if scale_max > 0:
        terms.append(abs((t.max or 0.0) - (g.max or 0.0)) / scale_max)
        terms.append(abs((t.min or 0.0) - (g.min or 0.0)) / scale_max)
    if rms > 0 and g.mean is not None and t.mean is not None:
        terms.append(abs(t.mean - g.mean) / rms)
    if not terms:  # an all-zero golden: any non-zero target is a full error
        return 0.0 if (t.norm or 0.0) == 0 else 1.0
    return max(terms)


_GOLDEN_FIELDS = attrgetter("norm", "max", "min", "mean", "numel")
_TARGET_FIELDS = attrgetter("norm", "max", "min", "mean")
EXACT = 2.0 ** 53  # beyond this a Python int differs from its float: such a row is left to stats_error


def stats_errors(gs: list[Stats], ts: list[Stats]) -> list[float | None]:
    """stats_error of each (golden, target) statistics pair, the same floats, by numpy columns (stats_columns)."""
    return stats_columns(gs, ts, math.inf)[0]


def stats_columns(gs: list[Stats], ts: list[Stats], beyond: float) -> tuple[list[float | None], list[int]]:
    """stats_error of each (golden, target) statistics pair, the same floats, by numpy columns: a stats-mode
    dump's every pair takes this rule (100,000 pairs: docs/diagnose.md, "Speed"); and the rows whose max or
    min reach `beyond` in magnitude on either side (a mask's fill values) or that the columns could not judge.
    Rows with a value None, non-finite or an int too large for a float exactly go through stats_error itself
    (its branches and max's nan ordering); on the others every term is a finite or +inf float, and IEEE
    subtraction, division and sqrt round as Python's do."""
    if not gs:
        return [], []
    try:
        g, t = _columns(gs, _GOLDEN_FIELDS, 5), _columns(ts, _TARGET_FIELDS, 4)
    except (TypeError, ValueError, OverflowError):  # a field that is no number: the rule's own answer
        return list(map(stats_error, gs, ts)), list(range(len(gs)))
    with np.errstate(all="ignore"):
        plain = (np.abs(g) < EXACT).all(axis=1) & (np.abs(t) < EXACT).all(axis=1)  # None -> nan: not plain
        gn, gmax, gmin, gmean, numel = g.T
        plain &= numel >= 0
        tn, tmax, tmin, tmean = t.T
        scale = np.maximum(np.abs(gmax), np.abs(gmin))
        rms = np.where(numel != 0, gn / np.sqrt(numel), 0.0)
        none = -np.inf
        out = np.where(gn > 0, np.abs(tn - gn) / gn, none)
        out = np.maximum(out, np.where(scale > 0, np.abs(tmax - gmax) / scale, none))
        out = np.maximum(out, np.where(scale > 0, np.abs(tmin - gmin) / scale, none))
        out = np.maximum(out, np.where(rms > 0, np.abs(tmean - gmean) / rms, none))
        out = np.where(out == none, np.where(tn == 0, 0.0, 1.0), out)  # no terms: an all-zero golden
        large = ~plain | (scale >= beyond) | (np.maximum(np.abs(tmax), np.abs(tmin)) >= beyond)
    res: list[float | None] = out.tolist()
    if not plain.all():
        for i in np.flatnonzero(~plain).tolist():
            res[i] = stats_error(gs[i], ts[i])
    return res, np.flatnonzero(large).tolist()


def _columns(stats: list[Stats], fields: attrgetter[tuple[float | None, ...]], k: int) -> np.ndarray:
    """The `k` fields of each statistics as a float64 row, None as nan. TypeError where a field is of another
    type than float, int or None (a numpy scalar computes in its own precision in stats_error)."""
    flat = list(chain.from_iterable(map(fields, stats)))
    if not set(map(type, flat)) <= _PLAIN:
        raise TypeError("not a float")
    return np.fromiter(flat, dtype=np.float64, count=len(flat)).reshape(-1, k)


_PLAIN = {float, int, type(None)}


def pair_error(p: PairResult) -> float | None:
    """Relative error of one pair (0 = bitwise equal, inf = non-finite where golden is finite).

    None when nothing can be said (unmatched, shape mismatch, unreadable data).
    """
    g, t = p.golden, p.target
    if g is None or t is None or p.status != "compared":
        return None
    if p.mode == "counts":
        return _counts_error(p)
    if p.bitwise_equal or (g.hash and t.hash and g.hash == t.hash):
        return 0.0
    ng, nt = g.stats, t.stats
    if ng is not None and nt is not None and \
            (ng.nan != nt.nan or ng.posinf != nt.posinf or ng.neginf != nt.neginf):
        return math.inf
    m = p.metrics or {}
    if g.dtype not in FLOAT_DTYPES or t.dtype not in FLOAT_DTYPES:
        return _discrete_error(m, g, t)
    rel_v, nmae_v = m.get(M.RED), m.get(M.NORM_MAX_ABS_ERR)  # _num's work only for what is not None or a float
    rel = rel_v if rel_v is None or type(rel_v) is float else _num(rel_v)
    nmae = nmae_v if nmae_v is None or type(nmae_v) is float else _num(nmae_v)
    if nmae is None:
        mae, scale = _num(m.get(M.MAX_ABS_ERR)), absmax(g.stats)
        nmae = mae / scale if mae is not None and scale else None
    terms = [x for x in (rel, nmae) if x is not None and math.isfinite(x)]
    if terms:
        return max(terms)
    if p.mode == "hash" and g.hash and t.hash:
        se = stats_error(g.stats, t.stats)
        return se if se else math.inf  # differs bitwise, by how much is unknown
    return stats_error(g.stats, t.stats)


def _counts_error(p: PairResult) -> float | None:
    """A pair judged on counts, flags or shapes alone (tfdbg summary modes): 0 when all agree, inf for nan/inf
    that differ, else the share of elements that changed sign (1 when only the shape or count can say);
    None for a WARNING (a few elements near zero: what counts cannot tell from rounding) or nothing judged."""
    m = p.metrics or {}
    if m.get(M.NONFINITE_MISMATCH):
        return math.inf
    if p.result == "PASS":
        return 0.0
    if p.result != "FAIL":
        return None
    moved, numel = _num(m.get(M.DIFF_COUNT)), _num(m.get(M.NUMEL))
    return moved / numel if moved and numel else 1.0


def _discrete_error(m: Metrics, g: Record, t: Record) -> float:
    """Integer/bool tensors: exact or not."""
    mae = _num(m.get(M.MAX_ABS_ERR))
    if mae is not None and math.isfinite(mae):
        return 0.0 if mae == 0 else 1.0
    se = stats_error(g.stats, t.stats)
    if se is None:
        return 0.0 if (g.hash and g.hash == t.hash) else 1.0
    return 0.0 if se == 0 else 1.0


@dataclass
class Peers:
    """What the calls of one op type show (Noise.allowance): each call's largest ratio, and the two largest."""

    best: dict[int, float] = field(default_factory=dict)  # node id -> its largest ratio
    top: list[tuple[float, int]] = field(default_factory=list)  # the two largest (ratio, node), distinct nodes

    def add(self, ratio: float, node: int) -> None:
        if ratio <= self.best.get(node, -1.0):
            return
        self.best[node] = ratio
        self.top = sorted([x for x in self.top if x[1] != node] + [(ratio, node)], reverse=True)[:2]

    def others(self, node: int) -> tuple[int, float]:
        """How many other calls were measured, and the largest ratio among them."""
        n = len(self.best) - (node in self.best)
        return n, next((r for r, m in self.top if m != node), 0.0)


@dataclass
class Noise:
    """The calibrated noise model of one comparison."""

    floor: float = 1.0  # multiples of the rounding unit that fresh ops show where their inputs agree
    amplification: float = AMPLIFICATION  # default allowance for an op's amplification of input error
    # op type -> [(output error / inherited error, node id)], largest first, seen in this run
    per_op: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    run_unit: float = UNIT["float32"]  # rounding unit of the coarsest float dtype the target ran in
    run_dtype: str = "float32"
    narrow: float = NARROW_SIGNIFICANT  # units of its own a fresh op in a narrow float dtype may show
    # op type -> output error / max(inherited, floor units) of its calls in a narrow float dtype
    peers: dict[str, Peers] = field(default_factory=dict)

    def allowance(self, op: str, node: int) -> float:
        """Amplification allowed to one call: the default, or twice what other calls of its op show (where its
        inputs clearly differ; in a narrow dtype, where PEERS other calls were measured at all, which may tighten
        it: eight in every layer's LayerNorm hid an eps change when the others show 1.5). A call's own ratio never
        counts."""
        base = self.amplification
        for ratio, n in self.per_op.get(op, ()):
            if n != node:
                base = max(self.amplification, 2.0 * ratio)
                break
        peers = self.peers.get(op)
        if peers is not None:
            n, ratio = peers.others(node)
            if n >= PEERS:
                return min(base, max(PEER_MIN, 2.0 * ratio))
        return base

    def threshold(self, unit_: float, inherited: float, op: str = "", node: int = -1) -> float:
        """The error above which an op's output is its own error, not noise or inheritance."""
        sig = self.narrow if unit_ > UNIT["float32"] else SIGNIFICANT  # narrow: fp16, bf16, fp8
        return max(sig * self.floor * unit_, self.allowance(op, node) * inherited)

    def agrees(self, err: float | None, unit_: float) -> bool:
        """Whether an error is within the noise of a fresh computation (no inheritance allowed)."""
        if err is None:
            return True
        if unit_ == 0:
            return err == 0
        return err <= SIGNIFICANT * self.floor * unit_

    def to_json(self) -> dict[str, float | str]:
        return {
            "floor_units": self.floor,
            "significant_units": SIGNIFICANT,
            "narrow_significant_units": self.narrow,
            "amplification": self.amplification,
            "run_dtype": self.run_dtype,
            "run_unit": self.run_unit,
        }
