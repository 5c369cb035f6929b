"""PASS / WARNING / FAIL of one compared pair, from its metrics, its dtypes and the thresholds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..base.pair import Metrics
from ..base.vocab import FAIL, NA, PASS, WARNING, PairVerdict
from . import names as M
from .thresholds import _OPS, Condition, Thresholds, dtype_class


def _violations(conds: list[Condition], metrics: Mapping[str, object], u: float, cls: str) -> list[str]:
    out = []
    for c in conds:
        ok = c.holds(metrics, u)
        if ok:
            continue
        v = metrics.get(c.key)
        shown = f"{float(v):.6g}" if isinstance(v, (int, float)) else "N/A" if v is None else str(v)
        bound = f" ({c.bound(u):.3g} at {cls})" if c.in_u else ""
        out.append(f"{c.metric}={shown} fails {c.text()}{bound}")
    return out


def verdict(metrics: Metrics, golden_dtype: str, target_dtype: str, mode: str,
            thresholds: Thresholds, floor: str | None = None) -> tuple[PairVerdict, str]:
    """(result, reason): the reason names what failed; nan/inf on one side only is always FAIL.

    `floor`: the lowest float precision that ran before this pair in either run; the pair is
    judged at it when it is lower than the pair's own dtypes (docs/compare.md, "Verdicts")."""
    if mode == "hash":
        eq = metrics.get(M.HASH_EQUAL)
        if eq is None:
            return NA, "no content hash on both sides"
        return (PASS, "") if eq else (FAIL, "content hashes differ")
    if metrics.get(M.NONFINITE_MISMATCH):
        return FAIL, "nan/inf where the other side has none (or a different one)"
    if mode == "tensor" and not metrics.get(M.COMPARED):
        if metrics.get(M.NUMEL) == 0:
            return PASS, ""
        return PASS, "every element is nan/inf, identically on both sides"
    cls, u = dtype_class(golden_dtype, target_dtype, floor)
    absmax = metrics.get(M.GOLDEN_ABS_MAX)
    if absmax == 0.0:  # errors relative to golden are undefined: only an all-zero target agrees
        diff = metrics.get(M.MAX_ABS_ERR) if mode == "tensor" else metrics.get(M.NORM_STATS_DIFF)
        if diff == 0.0 and (mode == "tensor" or not metrics.get(M.NORM_DIFF)):
            return PASS, ""
        return FAIL, "golden is all zero and target is not"
    band = thresholds.band(mode, cls)
    if band is None:
        return NA, f"no {mode}-mode rule for dtype class {cls!r} in thresholds {thresholds.name!r}"
    failed = _violations(band.passing, metrics, u, cls)
    if not failed:
        return PASS, ""
    if band.warning is not None and not _violations(band.warning, metrics, u, cls):
        return WARNING, "; ".join(failed)
    worse = _violations(band.warning, metrics, u, cls) if band.warning is not None else failed
    return FAIL, "; ".join(worse)


_Bound = tuple[str, Callable[[Any, Any], Any], float]  # a PASS condition at one u: field, comparison, bound


class Judge:
    """verdict() for many pairs under one `thresholds`: each (dtypes, floor, mode)'s class, band and bounds
    are looked up once; a pair that every PASS condition holds for (the common case) is PASS at once, any
    other goes through verdict(), which gives the same answer and words the reason."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._rules: dict[tuple[str, str, str | None, str], tuple[str, list[_Bound] | None]] = {}

    def rules(self, golden_dtype: str, target_dtype: str, floor: str | None, mode: str
              ) -> tuple[str, list[_Bound] | None]:
        """(dtype class, the band's PASS conditions as (field, comparison, bound)), None without a band."""
        key = (golden_dtype, target_dtype, floor, mode)
        got = self._rules.get(key)
        if got is None:
            cls, u = dtype_class(golden_dtype, target_dtype, floor)
            band = self.thresholds.band(mode, cls)
            conds = None if band is None else [(c.key, _OPS[c.op], c.bound(u)) for c in band.passing]
            got = self._rules[key] = (cls, conds)
        return got

    def __call__(self, metrics: Metrics, golden_dtype: str, target_dtype: str, mode: str,
                 floor: str | None = None) -> tuple[PairVerdict, str]:
        """What verdict() gives."""
        if mode != "hash" and not metrics.get(M.NONFINITE_MISMATCH) and metrics.get(M.GOLDEN_ABS_MAX) != 0.0:
            conds = self.rules(golden_dtype, target_dtype, floor, mode)[1]
            if conds is not None and (mode != "tensor" or metrics.get(M.COMPARED)) and _all_hold(conds, metrics):
                return PASS, ""
        return verdict(metrics, golden_dtype, target_dtype, mode, self.thresholds, floor)


def _all_hold(conds: list[_Bound], metrics: Mapping[str, object]) -> bool:
    """Condition.holds of each condition, True for all (an N/A metric holds no condition)."""
    get = metrics.get
    for key, op, bound in conds:
        v = get(key)
        if not isinstance(v, (int, float)) or not op(float(v), bound):
            return False
    return True
