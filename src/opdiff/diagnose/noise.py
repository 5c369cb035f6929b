"""What "agrees" means: each pair's error in rounding units, and the noise floor seen in the data.

A pair's error is relative to its golden tensor's scale (the larger of the relative L2 error and
the max abs error over max |golden|); its unit is the rounding unit of the lower-precision dtype
of the two sides. The floor and the amplification ops show legitimately are calibrated from the
comparison itself (docs/diagnose.md, "Noise").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..base.pair import Metrics, MetricValue, PairResult
from ..base.record import Record, Stats
from ..metrics import names as M
from ..metrics.tensor import tensor_metrics
from ..metrics.thresholds import ROUNDING_UNIT, SIGNIFICANT
from ..store.format import FLOAT_DTYPES

UNIT: dict[str, float] = ROUNDING_UNIT  # the largest relative error one rounding makes, per dtype
# largest finite value of each float dtype: beyond it a cast overflows
RANGE: dict[str, float] = {
    "float64": 1.7976931348623157e308,
    "float32": 3.4028234663852886e38,
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
}

# defaults of the calibration (docs/diagnose.md): an op's own error must exceed
#   max(SIGNIFICANT * floor * unit, AMPLIFICATION * inherited error)
AMPLIFICATION = 8.0  # how much an op may legitimately amplify the relative error of its inputs
DRIFT = 16.0
FILL = 0.5  # |x| beyond this share of the dtype's range is a mask fill value (finfo.min), not data  # output error (in units of the run's coarsest precision) above which error has drifted


def is_float(dtype: str | None) -> bool:
    return dtype in FLOAT_DTYPES


def nonfinite(stats: Stats | None) -> int:
    """Count of nan and +-inf elements."""
    return (stats.nan + stats.posinf + stats.neginf) if stats is not None else 0


def absmax(stats: Stats | None) -> float | None:
    """max |x| over the finite elements."""
    if stats is None or stats.max is None or stats.min is None:
        return None
    return max(abs(stats.max), abs(stats.min))


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
    scale_max = absmax(g) or 0.0
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


def has_fill(rec: Record | None) -> bool:
    """Whether a tensor holds mask fill values (the dtype's finfo.min/max, as attention masks do)."""
    if rec is None or rec.dtype not in RANGE:
        return False
    m = absmax(rec.stats)
    return m is not None and m >= FILL * RANGE[rec.dtype]


def mask_pair(g: Record | None, t: Record | None) -> bool:
    """Whether a pair may be one attention mask in two encodings: golden holds fill values, or one side is
    a boolean mask and the other an additive float one (eager attention vs SDPA)."""
    if g is None or t is None:
        return False
    return has_fill(g) or (g.dtype == "bool") != (t.dtype == "bool") and (g.dtype in RANGE or t.dtype in RANGE)


def _kept(a: np.ndarray, dtype: str) -> np.ndarray | None:
    """Which elements a mask lets through: a boolean mask's True, an additive one's 0 (None: not a mask)."""
    if dtype == "bool":
        return np.asarray(a, dtype=bool)
    a = np.asarray(a, dtype=np.float64)
    fill: np.ndarray = np.abs(a) >= FILL * RANGE[dtype]
    if not ((a == 0) | (fill & (a < 0))).all():
        return None  # values other than 0 and a negative fill: an additive bias, not a mask
    kept: np.ndarray = ~fill
    return kept


def masked_error(g: np.ndarray, t: np.ndarray, g_dtype: str, t_dtype: str) -> float:
    """Error of a mask-like pair over the elements that are not fill values on either side.

    -3.40e38 (fp32's finfo.min) and -3.39e38 (bf16's) both mean "masked": that difference is no
    error; a different set of masked elements is a full one. A boolean mask and an additive one
    that let the same elements through are the same mask (error 0).
    """
    if (g_dtype == "bool") != (t_dtype == "bool"):
        kg, kt = _kept(g, g_dtype), _kept(t, t_dtype)
        return 0.0 if kg is not None and kt is not None and kg.shape == kt.shape and (kg == kt).all() else 1.0
    g = np.asarray(g, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    fill_g = np.abs(g) >= FILL * RANGE[g_dtype]
    fill_t = np.abs(t) >= FILL * RANGE.get(t_dtype, RANGE[g_dtype])
    if g.shape != t.shape or (fill_g != fill_t).any() or (np.sign(g[fill_g]) != np.sign(t[fill_t])).any():
        return 1.0
    keep = ~fill_g
    if not keep.any():
        return 0.0
    m = tensor_metrics(g[keep], t[keep])
    terms = [x for x in (_num(m.get(M.RED)), _num(m.get(M.NORM_MAX_ABS_ERR)))
             if x is not None and math.isfinite(x)]
    return max(terms) if terms else 0.0


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
    if g.stats is not None and t.stats is not None:
        ng, nt = g.stats, t.stats
        if (ng.nan, ng.posinf, ng.neginf) != (nt.nan, nt.posinf, nt.neginf):
            return math.inf
    m = p.metrics or {}
    if not is_float(g.dtype) or not is_float(t.dtype):
        return _discrete_error(m, g, t)
    rel = _num(m.get(M.RED))
    nmae = _num(m.get(M.NORM_MAX_ABS_ERR))
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
class Noise:
    """The calibrated noise model of one comparison."""

    floor: float = 1.0  # multiples of the rounding unit that fresh ops show where their inputs agree
    amplification: float = AMPLIFICATION  # default allowance for an op's amplification of input error
    # op type -> [(output error / inherited error, node id)], largest first, seen in this run
    per_op: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    run_unit: float = UNIT["float32"]  # rounding unit of the coarsest float dtype the target ran in
    run_dtype: str = "float32"

    def allowance(self, op: str, node: int) -> float:
        """Amplification allowed to one call: the default, or twice what other calls of its op show."""
        for ratio, n in self.per_op.get(op, ()):
            if n != node:  # a call's own ratio must not excuse itself
                return max(self.amplification, 2.0 * ratio)
        return self.amplification

    def threshold(self, unit_: float, inherited: float, op: str = "", node: int = -1) -> float:
        """The error above which an op's output is its own error, not noise or inheritance."""
        return max(SIGNIFICANT * self.floor * unit_, self.allowance(op, node) * inherited)

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
            "amplification": self.amplification,
            "run_dtype": self.run_dtype,
            "run_unit": self.run_unit,
        }
