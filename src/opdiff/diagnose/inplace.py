"""An input a module call changed in place, judged against what golden's caller still holds.

Module-level capture records an input again, as an output of the call (pos "inplace.<pos>",
extra["inplace_of"]), when the call moved its version counter (capture/torch/module_hooks.py). Golden's
call, leaving it alone, has no such record: its counterpart is golden's input record, whose value the
caller keeps using. Their difference is the call's own error, so the module that alters its input is
blamed, not the parent whose later code reads the altered tensor.
"""

from __future__ import annotations

import math

from ..base.errors import DumpError
from ..base.pair import PairResult
from ..base.record import Record
from ..metrics import names as M
from ..metrics.tensor import tensor_metrics
from ..store import Dump

KEY = "inplace_of"


def inplace_error(p: PairResult, golden: Dump | None, target: Dump | None) -> float | None:
    """Relative error of a target-only in-place record against golden's input record (None: not one, or no data)."""
    t = p.target
    if p.golden is not None or t is None or golden is None or target is None or not t.has_data:
        return None
    name = (t.extra or {}).get(KEY)
    g = golden.get(name) if isinstance(name, str) else None
    if g is None or not g.has_data or g.shape != t.shape:
        return None
    return _relative(golden, g, target, t)


def _relative(a_dump: Dump, a: Record, b_dump: Dump, b: Record) -> float | None:
    """max(RelativeEuclideanDistance, MaxAbsErr / max|a|) of b against a (None: unreadable)."""
    try:
        m = tensor_metrics(a_dump.tensor(a), b_dump.tensor(b))
    except (DumpError, ValueError, TypeError):
        return None
    terms = [float(x) for x in (m.get(M.RED), m.get(M.NORM_MAX_ABS_ERR))
             if isinstance(x, (int, float)) and math.isfinite(float(x))]
    return max(terms) if terms else None


def inplace_change(p: PairResult, target: Dump | None) -> float | None:
    """How much a target-only in-place record moved from the value its call was handed (the target's own input
    record), relative to that input's scale: 0 for a call that leaves it alone (golden's does: it has no such
    record). None when it is not one or the data is not at hand."""
    t = p.target
    if p.golden is not None or t is None or target is None or not t.has_data:
        return None
    name = (t.extra or {}).get(KEY)
    before = target.get(name) if isinstance(name, str) else None
    if before is None or not before.has_data or before.shape != t.shape or before.dtype != t.dtype:
        return None
    return _relative(target, before, target, t)
