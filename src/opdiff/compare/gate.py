"""The run's pass/fail: one judgement of a whole comparison that `opdiff compare` and `opdiff diagnose` share.

Per-pair PASS / WARNING / FAIL (metrics/verdict.py) stays what each row of the reports says. Whether
the *run* passes is judged once, by one of two rules (docs/compare.md, "Exit status"):

- `noise` (the default): diagnose's verdict on the same comparison (diagnose/gate.py `judge`): a pair
  over the fixed thresholds whose error is explained by noise propagated from its inputs does not fail
  the run, and a small error of an op's own below them does;
- `thresholds`: msprobe's semantics, every pair against the fixed per-pair rules (`thresholds_judgement`).

This module holds the judgement's type and the fixed-threshold rule; the noise rule lives above diagnose,
which compare cannot import (layers go one way).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal

from ..base.vocab import FAIL, STATUS_DTYPE_MISMATCH, STATUS_ERROR, STATUS_SHAPE_MISMATCH

if TYPE_CHECKING:
    from .run import Comparison

Rule = Literal["noise", "thresholds"]
RULES: tuple[Rule, ...] = ("noise", "thresholds")
GATES = ("auto", *RULES)  # auto: noise, unless the user chose per-pair rules (a preset, a file, --pass-if)


@dataclass(frozen=True)
class Judgement:
    """Whether a comparison passes, by which rule, and why in one line."""

    passed: bool
    rule: Rule
    verdict: str  # diagnose's verdict (noise rule), or "pass" / "fail" (thresholds rule)
    summary: str  # one line: why the run passes or fails
    culprit: str | None = None  # the module diagnose blames, when it names one
    step: int | None = None  # the step where the run first diverges (multi-step runs)
    unmatched_only: bool = False  # fails only for records without counterpart: --allow-unmatched accepts it

    def passes(self, allow_unmatched: bool = False) -> bool:
        """The judgement, with records without counterpart accepted when `allow_unmatched`."""
        return self.passed or (allow_unmatched and self.unmatched_only)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "passed": self.passed, "verdict": self.verdict, "summary": self.summary,
                "culprit": self.culprit, "step": self.step, "unmatched_only": self.unmatched_only}


def over_thresholds(cmp: Comparison) -> int:
    """Pairs of every step compared that FAIL the fixed per-pair rules."""
    return sum(list(map(_RESULT, c.results)).count(FAIL) for c in cmp.by_step().values())  # C-level: 100k pairs


_RESULT = attrgetter("result")


def _pair_problems(cmp: Comparison) -> int:
    return sum(1 for c in cmp.by_step().values() for r in c.results
               if r.status in (STATUS_SHAPE_MISMATCH, STATUS_DTYPE_MISMATCH, STATUS_ERROR))


def thresholds_judgement(cmp: Comparison, allow_unmatched: bool = False) -> Judgement:
    """msprobe's rule: the run passes when every pair of every step passes the fixed per-pair rules
    (and the structural checks of `Comparison.passed_thresholds`)."""
    ok = cmp.passed_thresholds(allow_unmatched)
    fails, problems = over_thresholds(cmp), _pair_problems(cmp)
    unmatched_only = not ok and not fails and not problems and cmp.compared_any() and cmp.passed_thresholds(True)
    if ok:
        summary = "every pair passes the fixed per-pair thresholds"
    else:
        why = [f"{fails} pair(s) FAIL the fixed per-pair thresholds"] if fails else []
        why += [f"{problems} pair(s) mismatched or unreadable"] if problems else []
        why += ["nothing compared"] if not cmp.compared_any() else []
        why += ["records without counterpart may carry a difference"] if unmatched_only else []
        summary = "; ".join(why) or "some step fails the fixed per-pair thresholds"
    return Judgement(passed=ok, rule="thresholds", verdict="pass" if ok else "fail", summary=summary,
                     unmatched_only=unmatched_only)
