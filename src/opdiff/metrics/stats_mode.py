"""Statistics mode: compare two records by their summaries when one side holds no tensor data."""

from __future__ import annotations

from ..base.pair import Metrics
from ..base.record import Stats
from . import names as M
from .names import ERR_MESSAGE


def _diff(g: float | None, t: float | None) -> tuple[float | None, float | None]:
    """target - golden, and |target - golden| / |golden| (None when golden is 0 and they differ)."""
    if g is None or t is None:
        return None, None
    d = t - g
    if g != 0.0:
        return d, abs(d) / abs(g)
    return d, (0.0 if d == 0.0 else None)


def stats_metrics(g: Stats, t: Stats) -> Metrics:
    """Differences and relative differences of max, min, mean and L2 norm, plus both sides' nan/inf counts.

    Statistics are over finite elements (docs/format.md), so nan/inf are compared by their counts.
    """
    out: Metrics = {}
    msgs: list[str] = []
    diffs: list[float] = []  # of max, min and mean, where both sides have them
    found = {attr: _diff(getattr(g, attr), getattr(t, attr)) for attr in ("max", "min", "mean", "norm")}
    (out[M.MAX_DIFF], out[M.MAX_REL_DIFF]), (out[M.MIN_DIFF], out[M.MIN_REL_DIFF]) = found["max"], found["min"]
    (out[M.MEAN_DIFF], out[M.MEAN_REL_DIFF]), (out[M.NORM_DIFF], out[M.NORM_REL_DIFF]) = found["mean"], found["norm"]
    for (attr, (d, r)), rk in zip(found.items(), (M.MAX_REL_DIFF, M.MIN_REL_DIFF, M.MEAN_REL_DIFF, M.NORM_REL_DIFF)):
        if d is not None and r is None:
            msgs.append(f"{M.COLUMN[rk]} N/A: golden {attr} is 0")
        if d is not None and attr != "norm":
            diffs.append(d)
    absmax = None if g.max is None or g.min is None else max(abs(g.max), abs(g.min))
    # over the statistics both sides hold (msprobe keeps no mean of an integer tensor): an absent one never fails
    if absmax and diffs:
        out[M.NORM_STATS_DIFF] = max(abs(d) for d in diffs) / absmax
    elif absmax == 0.0 and diffs:
        out[M.NORM_STATS_DIFF] = 0.0 if not any(diffs) else None
    else:
        out[M.NORM_STATS_DIFF] = None
    if g.max is None or t.max is None:
        msgs.append(f"no finite element on the {'golden' if g.max is None else 'target'} side")
    out.update({
        M.NUMEL: t.numel,
        M.GOLDEN_STD: g.std, M.TARGET_STD: t.std, M.GOLDEN_MEAN: g.mean, M.TARGET_MEAN: t.mean,
        M.GOLDEN_ABS_MAX: absmax,
        M.GOLDEN_NAN: g.nan, M.GOLDEN_POSINF: g.posinf, M.GOLDEN_NEGINF: g.neginf,
        M.TARGET_NAN: t.nan, M.TARGET_POSINF: t.posinf, M.TARGET_NEGINF: t.neginf,
    })
    mism = abs(g.nan - t.nan) + abs(g.posinf - t.posinf) + abs(g.neginf - t.neginf)
    out[M.NONFINITE_MISMATCH] = mism
    if mism:
        msgs.append(f"nan/inf counts differ: golden nan={g.nan} +inf={g.posinf} -inf={g.neginf}, "
                    f"target nan={t.nan} +inf={t.posinf} -inf={t.neginf}")
    out[ERR_MESSAGE] = "; ".join(msgs)
    return out
