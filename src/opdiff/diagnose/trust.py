"""What diagnose may not pass over: pairs it could not read, and records one run adds that change the
computation. Either one turns a `pass` into `inconclusive` (exit 1), with the pairs named, so that
diagnose, compare and `Comparison.passed()` agree (docs/reliability.md)."""

from __future__ import annotations

from typing import Any

from ..base.pair import PairResult
from ..compare.unmatched import carries_difference

INCONCLUSIVE = "inconclusive"
_SHOW = 5


def _names(rs: list[Any]) -> str:
    shown = ", ".join(r.name for r in rs[:_SHOW])
    return shown + (f", ... ({len(rs) - _SHOW} more)" if len(rs) > _SHOW else "")


def unreadable_warning(pairs: list[PairResult]) -> str | None:
    bad = [p for p in pairs if p.status == "error"]
    if not bad:
        return None
    return (f"{len(bad)} pair(s) could not be read and were not compared (they never count as agreement): "
            f"{_names(bad)}; first reason: {bad[0].err_message}")


def unmatched_differences(comparison: Any, pairs: list[PairResult]) -> list[Any]:
    """Records without a counterpart that carry a difference (not a cast, copy or view one side adds)."""
    keep = {id(p) for p in pairs}
    counted = {id(r) for side in ("golden", "target") for r in comparison.unmatched(side)}
    return [rec for p in comparison.results if id(p) in keep and p.status == "unmatched"
            for rec in (p.golden or p.target,) if rec is not None and id(rec) in counted and carries_difference(rec)]


def apply(diag: Any, comparison: Any, pairs: list[PairResult]) -> None:
    """Name unreadable pairs and unmatched ops that change the computation; neither is ever a pass."""
    reasons = []
    warn = unreadable_warning(pairs)
    if warn:
        diag.warnings.insert(0, warn)
        reasons.append("some pairs could not be read")
    extra = unmatched_differences(comparison, pairs)
    if extra:
        diag.warnings.insert(0, f"{len(extra)} record(s) have no counterpart and are not casts, copies or views: "
                                f"{_names(extra)}")
        reasons.append("ops one run has and the other lacks")
    if reasons and diag.verdict == "pass":
        diag.verdict = INCONCLUSIVE
        diag.summary = ("nothing wrong among the pairs compared, but " + " and ".join(reasons) +
                        ": not a pass (see warnings)")
