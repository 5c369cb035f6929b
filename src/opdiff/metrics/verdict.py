"""PASS / WARNING / FAIL of one compared pair, from its metrics, its dtypes and the thresholds."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..base.pair import Metrics
from ..base.vocab import FAIL, NA, PASS, WARNING, PairVerdict
from . import names as M
from .thresholds import Bound, Condition, Thresholds, all_hold, dtype_class


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
    early = _before_band(metrics, mode)
    if early is not None:
        return early
    cls, u = dtype_class(golden_dtype, target_dtype, floor)
    return _by_band(metrics, mode, cls, u, thresholds)


def _before_band(metrics: Metrics, mode: str) -> tuple[PairVerdict, str] | None:
    """The verdicts no threshold band decides (hash mode, nan/inf on one side, nothing compared, an all-zero
    golden); None when the band decides."""
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
    if metrics.get(M.GOLDEN_ABS_MAX) == 0.0:  # errors relative to golden are undefined: only an all-zero target agrees
        diff = metrics.get(M.MAX_ABS_ERR) if mode == "tensor" else metrics.get(M.NORM_STATS_DIFF)
        if diff == 0.0 and (mode == "tensor" or not metrics.get(M.NORM_DIFF)):
            return PASS, ""
        return FAIL, "golden is all zero and target is not"
    return None


def _by_band(metrics: Metrics, mode: str, cls: str, u: float, thresholds: Thresholds) -> tuple[PairVerdict, str]:
    """The verdict of the thresholds' band for the pair's dtype class `cls` (rounding unit u), with the reason."""
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


class Judge:
    """verdict() for many pairs under one `thresholds`: each (dtypes, floor, mode)'s class, unit and PASS
    bounds are looked up once; a pair every PASS condition holds for (the common case) is PASS at once, any
    other is judged by the band as verdict() judges it, which words the reason."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._rules: dict[tuple[str, str, str | None, str], tuple[str, float, list[Bound] | None]] = {}

    def rules(self, golden_dtype: str, target_dtype: str, floor: str | None, mode: str
              ) -> tuple[str, float, list[Bound] | None]:
        """(dtype class, its rounding unit u, the band's PASS conditions at u), None for the conditions
        without a band."""
        key = (golden_dtype, target_dtype, floor, mode)
        got = self._rules.get(key)
        if got is None:
            cls, u = dtype_class(golden_dtype, target_dtype, floor)
            band = self.thresholds.band(mode, cls)
            got = self._rules[key] = (cls, u, None if band is None else [c.at(u) for c in band.passing])
        return got

    def __call__(self, metrics: Metrics, golden_dtype: str, target_dtype: str, mode: str,
                 floor: str | None = None) -> tuple[PairVerdict, str]:
        """What verdict() gives."""
        early = _before_band(metrics, mode)
        if early is not None:
            return early
        cls, u, conds = self.rules(golden_dtype, target_dtype, floor, mode)
        if conds is not None and all_hold(conds, metrics):
            return PASS, ""
        return _by_band(metrics, mode, cls, u, self.thresholds)

    def passing(self, columns: Mapping[str, np.ndarray], rows: np.ndarray, golden_dtype: str, target_dtype: str,
                floor: str | None, mode: str) -> np.ndarray:
        """Which of `rows` (positions in `columns`: float64 metric columns, nan where N/A, of pairs with every
        element finite on both sides, as a batch's MetricTable holds them) this judge gives PASS with no reason,
        decided by columns: each PASS condition as all_hold tests it (nan holds none, as N/A holds none). False
        where a row is to be judged pair by pair: an all-zero golden, a condition on a metric not in the columns,
        no band."""
        no = np.zeros(len(rows), dtype=bool)
        if mode != "tensor" or any(k not in columns for k in _EARLY):
            return no
        _cls, _u, conds = self.rules(golden_dtype, target_dtype, floor, mode)
        if conds is None or any(key not in columns for key, _op, _bound in conds):
            return no
        # what _before_band decides: nan/inf on one side, nothing compared, an all-zero golden (nan: not plain)
        ok: np.ndarray = (columns[M.NONFINITE_MISMATCH][rows] == 0.0) & (columns[M.COMPARED][rows] > 0.0) \
            & (columns[M.GOLDEN_ABS_MAX][rows] != 0.0)
        with np.errstate(invalid="ignore"):
            for key, op, bound in conds:
                ok &= op(columns[key][rows], bound)  # the comparison, element-wise
        return ok


_EARLY = (M.NONFINITE_MISMATCH, M.COMPARED, M.GOLDEN_ABS_MAX)  # the columns _before_band reads in tensor mode
