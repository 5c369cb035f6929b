"""One rule for attention masks, which compare and diagnose share: a mask is judged by what it lets through.

Two encodings of one mask agree: a boolean mask and an additive float one keeping the same elements
(eager attention vs SDPA), fp32's finfo.min fill and bf16's (or a constant -inf: no overflow). A mask
that lets other elements through is a full error; the elements it lets through are judged as data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.pair import Metrics
from ..base.record import Record, Stats
from . import names as M
from .tensor import tensor_metrics

# largest finite value of each float dtype: beyond it a cast overflows
RANGE: dict[str, float] = {
    "float64": 1.7976931348623157e308,
    "float32": 3.4028234663852886e38,
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
}
FILL = 0.5  # |x| beyond this share of the dtype's range is a mask fill value (finfo.min), not data


def _range(dtype: str) -> float:
    """The dtype's largest finite value; infinite for a dtype the table lacks (only its infinities are fills)."""
    return RANGE.get(dtype, float("inf"))


def absmax(stats: Stats | None) -> float | None:
    """max |x| over the finite elements."""
    if stats is None or stats.max is None or stats.min is None:
        return None
    return max(abs(stats.max), abs(stats.min))


def has_fill(rec: Record | None) -> bool:
    """Whether a tensor holds mask fill values (the dtype's finfo.min/max, as attention masks do)."""
    if rec is None or rec.dtype not in RANGE:
        return False
    m = absmax(rec.stats)
    return m is not None and m >= FILL * RANGE[rec.dtype]


def mask_pair(g: Record | None, t: Record | None) -> bool:
    """Whether a pair may be one attention mask in two encodings: golden holds fill values, the target holds
    them where golden holds -inf, or one side is a boolean mask and the other an additive float one (eager
    attention vs SDPA)."""
    if g is None or t is None:
        return False
    golden_neginf = g.stats is not None and g.stats.neginf > 0
    return has_fill(g) or has_fill(t) and golden_neginf or \
        (g.dtype == "bool") != (t.dtype == "bool") and (g.dtype in RANGE or t.dtype in RANGE)


def _fill(a: np.ndarray, dtype: str) -> np.ndarray:
    """Which elements are fill values: beyond half the dtype's range, or of a narrower dtype's range when the
    tensor holds that dtype's finfo.min exactly (an fp16 mask's -65504 cast up to fp32 is still its fill)."""
    lim = _range(dtype)
    low = float(a.min()) if a.size else 0.0
    for r in RANGE.values():
        if r < lim and low == -r:
            lim = r
    out: np.ndarray = np.abs(a) >= FILL * lim
    return out


def _kept(a: np.ndarray, dtype: str) -> np.ndarray | None:
    """Which elements a mask lets through: a boolean mask's True, an additive one's 0 (None: not a mask)."""
    if dtype == "bool":
        return np.asarray(a, dtype=bool)
    a = np.asarray(a, dtype=np.float64)
    fill: np.ndarray = np.abs(a) >= FILL * _range(dtype)
    if not ((a == 0) | (fill & (a < 0))).all():
        return None  # values other than 0 and a negative fill: an additive bias, not a mask
    kept: np.ndarray = ~fill
    return kept


@dataclass(frozen=True)
class MaskView:
    """A mask-like pair seen by what it lets through: `same` (the same mask, another encoding), `differs`
    (other elements let through: a full error), or `values` (the same elements masked; `metrics` of the
    elements let through, `kept` of them)."""

    kind: str  # same | differs | values
    metrics: Metrics | None = None
    kept: int = 0


def mask_view(g: np.ndarray, t: np.ndarray, g_dtype: str, t_dtype: str) -> MaskView:
    """The pair (a mask in golden's and the target's encoding) judged by what it lets through."""
    if (g_dtype == "bool") != (t_dtype == "bool"):
        kg, kt = _kept(g, g_dtype), _kept(t, t_dtype)
        same = kg is not None and kt is not None and kg.shape == kt.shape and bool((kg == kt).all())
        return MaskView("same" if same else "differs")
    g = np.asarray(g, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    if g.shape != t.shape:
        return MaskView("differs")
    fill_g = _fill(g, g_dtype)
    fill_t = _fill(t, t_dtype if t_dtype in RANGE else g_dtype)
    if (fill_g != fill_t).any() or (np.sign(g[fill_g]) != np.sign(t[fill_t])).any():
        return MaskView("differs")
    keep = ~fill_g
    if not keep.any():
        return MaskView("same")
    return MaskView("values", tensor_metrics(g[keep], t[keep]), int(keep.sum()))


def masked_error(g: np.ndarray, t: np.ndarray, g_dtype: str, t_dtype: str) -> float:
    """Relative error of a mask-like pair over the elements it lets through (0: the same mask, 1: other
    elements let through). -3.40e38 (fp32's finfo.min) and -3.39e38 (bf16's) both mean "masked"."""
    return masked_errors(g, t, g_dtype, t_dtype)[0]


def masked_errors(g: np.ndarray, t: np.ndarray, g_dtype: str, t_dtype: str) -> tuple[float, float | None]:
    """Relative and absolute error (MaxAbsErr) of a mask-like pair over the elements it lets through. The
    absolute error is None when other elements are let through: no size of it means anything then. The
    fill values' own difference (1.3e36 between fp32's and bf16's finfo.min) is no error of the data."""
    v = mask_view(g, t, g_dtype, t_dtype)
    if v.kind != "values" or v.metrics is None:
        return (0.0, 0.0) if v.kind == "same" else (1.0, None)
    terms = [float(x) for x in (v.metrics.get(M.RED), v.metrics.get(M.NORM_MAX_ABS_ERR))
             if isinstance(x, (int, float)) and np.isfinite(x)]
    mae = v.metrics.get(M.MAX_ABS_ERR)
    return (max(terms) if terms else 0.0,
            float(mae) if isinstance(mae, (int, float)) and np.isfinite(mae) else None)
