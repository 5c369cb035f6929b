"""PASS / WARNING / FAIL of one compared pair, from its metrics, its dtypes and the thresholds."""

from __future__ import annotations

from collections.abc import Mapping

from ..base.pair import Metrics
from ..base.vocab import FAIL, NA, PASS, WARNING, PairVerdict
from . import names as M
from .thresholds import Condition, Thresholds, dtype_class


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
