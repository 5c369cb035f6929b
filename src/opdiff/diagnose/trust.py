"""What diagnose may not pass over: pairs it could not read, and records without counterpart that may
carry a difference no compared pair shows (compare/unmatched.py, the rule compare applies too). Either
one turns a `pass` into `inconclusive` (exit 1), with the records named, so that diagnose, compare and
`Comparison.passed()` agree (docs/reliability.md)."""

from __future__ import annotations

from typing import Any

from ..base.pair import PairResult
from ..base.vocab import STATUS_DTYPE_MISMATCH, STATUS_ERROR, STATUS_SHAPE_MISMATCH
from ..compare.unmatched import Failing, describe, is_model_output, name_list

INCONCLUSIVE = "inconclusive"


def unreadable_warning(pairs: list[PairResult]) -> str | None:
    bad = [p for p in pairs if p.status == STATUS_ERROR]
    if not bad:
        return None
    return (f"{len(bad)} pair(s) could not be read and were not compared (they never count as agreement): "
            f"{name_list([p.name for p in bad])}; first reason: {bad[0].err_message}")


def unmatched_differences(comparison: Any, pairs: list[PairResult]) -> list[Failing]:
    """The comparison's failing unmatched records (Comparison.failing_unmatched) that lie among `pairs`."""
    failing = comparison.failing_unmatched()
    if not failing:
        return []
    keep = {id(p.record) for p in pairs}
    return [f for f in failing if id(f.record) in keep]


def apply(diag: Any, comparison: Any, pairs: list[PairResult], odd: list[PairResult] | None = None) -> None:
    """Name unreadable pairs and unmatched records that fail the run (compare/unmatched.py); neither is a pass.
    `odd`: those of `pairs` that are not compared or miss a side, in order (tally.py), when already known:
    the status scans look at them only."""
    reasons = []
    scan = pairs if odd is None else odd
    warn = unreadable_warning(scan)
    if warn:
        diag.warnings.insert(0, warn)
        reasons.append("some pairs could not be read")
    outputs = [p for p in scan if p.status in (STATUS_SHAPE_MISMATCH, STATUS_DTYPE_MISMATCH)
               and p.target is not None and is_model_output(p.target)]
    if outputs:  # nothing after the model's output can show what it holds: a mismatch there is never looked through
        diag.warnings.insert(0, f"the model's output cannot be compared: {outputs[0].name}: {outputs[0].err_message}")
        reasons.append("the model's output is a shape or dtype mismatch")
    extra = unmatched_differences(comparison, pairs)
    if extra:
        diag.warnings.insert(0, describe(extra))
        reasons.append("records without counterpart that no compared pair vouches for")
    if reasons and diag.verdict == "pass":
        diag.verdict = INCONCLUSIVE
        diag.summary = ("nothing wrong among the pairs compared, but " + " and ".join(reasons) +
                        ": not a pass (see warnings)")
        diag.advice = ("Check the records the warnings name: make the data readable, capture both runs so "
                       "that what those records feed is recorded too, or (compare) accept unmatched records "
                       "with --allow-unmatched when the runs differ there on purpose.")
