"""The noise rule of the one run gate (compare/gate.py): a comparison passes exactly when diagnose says `pass`.

`opdiff compare` calls `judge` on its comparison, `opdiff diagnose` exits on the same verdict: the two
commands cannot give opposite pass/fail on the same dumps. Each pair's error is held against the noise
propagated from its inputs (docs/diagnose.md, "Noise"), not against a fixed per-pair bound: accumulated
fp16/bf16 rounding or another attention kernel passes, a small error of an op's own fails.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from ..base.errors import OpdiffError
from ..base.pair import PairResult
from ..base.vocab import STATUS_DTYPE_MISMATCH, STATUS_ERROR, STATUS_SHAPE_MISMATCH
from ..compare.gate import Judgement, Rule, over_thresholds, thresholds_judgement
from ..compare.unmatched import is_model_output
from .trust import INCONCLUSIVE

MISMATCH = (STATUS_SHAPE_MISMATCH, STATUS_DTYPE_MISMATCH)

if TYPE_CHECKING:
    from ..compare.run import Comparison
    from .verdict import Diagnosis


def judge(cmp: Comparison, *, rule: Rule = "noise", allow_unmatched: bool = False) -> Judgement:
    """Judge the whole comparison (every step it covers) by `rule`, keep the judgement on it
    (`cmp.judgement`, which `cmp.passed()` and the reports then use) and return it.

    The noise rule diagnoses the comparison (no replay); where diagnose cannot judge it (nothing pairs at
    a level it reads), the fixed per-pair rules decide and the summary says so."""
    if rule == "thresholds":
        j = thresholds_judgement(cmp, allow_unmatched)
    else:
        from .run import diagnose

        try:
            d = diagnose(cmp.golden, cmp.target, mapping=cmp.mapping, comparison=dict(cmp.by_step()), replay=False,
                         workers=cmp.workers)
        except OpdiffError as exc:
            fixed = thresholds_judgement(cmp, allow_unmatched)
            j = Judgement(passed=fixed.passed, rule="thresholds", verdict=fixed.verdict,
                          summary=f"{fixed.summary} (diagnose cannot judge these dumps: {exc}; the fixed thresholds "
                                  "decide)", unmatched_only=fixed.unmatched_only)
        else:
            j = from_diagnosis(d, cmp)
    cmp.judgement = j
    return j


def from_diagnosis(d: Diagnosis, cmp: Comparison) -> Judgement:
    """The judgement a diagnosis of `cmp` makes, its summary counting the pairs over the fixed thresholds."""
    n = over_thresholds(cmp)
    head = f"{n} pair(s) exceed the fixed per-pair thresholds" if n else "no pair exceeds the fixed per-pair thresholds"
    run_dtype = str(d.noise.get("run_dtype", "float32"))
    if d.verdict == "pass":
        why = "; all explained by noise propagated from their inputs" if n else ""
        summary = f"{head}{why} ({run_dtype} rounding): diagnose says pass"
    else:
        summary = f"{head}; diagnose says {d.verdict}: {d.summary}"
    unreadable = any(_unreadable(c.results) for c in cmp.by_step().values())  # what --allow-unmatched does not accept
    step = d.culprit.step if d.culprit is not None else None
    if step is None and d.first_divergence is not None:
        step = d.first_divergence.get("step")
    return Judgement(passed=d.exit_code == 0, rule="noise", verdict=d.verdict, summary=summary,
                     culprit=d.culprit.module if d.culprit is not None else None, step=step,
                     unmatched_only=d.verdict == INCONCLUSIVE and not unreadable)


def _unreadable(results: list[PairResult]) -> bool:
    """Whether a pair could not be read, or the model's output is a shape or dtype mismatch; the statuses
    taken first by a C-level map (100,000 pairs), the pairs looked at only where one of those statuses is."""
    if not {STATUS_ERROR, *MISMATCH} & set(map(_STATUS, results)):
        return False
    return any(r.status == STATUS_ERROR or r.status in MISMATCH and r.target is not None and is_model_output(r.target)
               for r in results)


_STATUS = attrgetter("status")
