"""Grades of one sweep case, from the ground truth and the diagnosis (no framework needed)."""

from __future__ import annotations

EXACT, NEAR, WRONG, MISSED, WRONG_STEP = "exact", "near", "wrong-module", "missed", "wrong-step"
BENIGN_OK, FALSE_FAULT, INCONCLUSIVE = "benign-ok", "false-fault", "inconclusive"
INVALID, ERROR, NOT_APPLICABLE, TIMEOUT = "invalid-injection", "error", "n/a", "timeout"
FAULT_GRADES = (EXACT, NEAR, WRONG, WRONG_STEP, MISSED, INCONCLUSIVE)
BENIGN_GRADES = (BENIGN_OK, FALSE_FAULT, INCONCLUSIVE)
OTHER = (INVALID, ERROR, TIMEOUT)
GRADED = (EXACT, NEAR, WRONG, WRONG_STEP, MISSED, BENIGN_OK, FALSE_FAULT, INCONCLUSIVE)


def related(a: str, b: str) -> bool:
    """a is b's ancestor or descendant in the module tree; the root (`""`) is near nothing: blaming it says nothing."""
    return bool(a) and bool(b) and (a.startswith(b + ".") or b.startswith(a + "."))


def grade(kind: str, culprits: tuple[str, ...], expect: tuple[str, ...], verdict: str, culprit: str | None) -> str:
    """exact / near / wrong-module / missed / inconclusive for a fault; benign-ok / false-fault / inconclusive."""
    if verdict == "inconclusive":
        return INCONCLUSIVE
    if kind == "benign":
        return BENIGN_OK if verdict in ("pass", "drift") else FALSE_FAULT
    if verdict in ("pass", "drift"):
        return MISSED
    if culprit is None:
        return WRONG
    if culprit in culprits:
        return EXACT
    if any(related(culprit, c) for c in culprits):
        return NEAR
    return WRONG


def grade_training(truth_step: int, truth_direction: str, culprits: tuple[str, ...], expect: tuple[str, ...], verdict: str,
                   step: int | None, direction: str | None, culprit: str | None) -> str:
    """A training fault: the step and direction must match, then the module (any, for an optimizer group).
    `inputs-differ`, where expected (a change outside the model), has no culprit to check."""
    if verdict == "inconclusive":
        return INCONCLUSIVE
    if verdict in ("pass", "drift"):
        return MISSED
    if verdict == "inputs-differ":
        return EXACT if verdict in expect else WRONG
    if (step, direction) != (truth_step, truth_direction):
        return WRONG_STEP
    if not culprits:
        return EXACT
    return grade("fault", culprits, ("fault",), verdict, culprit)
