"""Bisection over an engine's switches: the smallest set to turn off that restores agreement.

Framework-free: the oracle `passes(off)` runs the target with the switches in `off` turned off and
says whether it agrees with the golden run. Results are memoised, so each set runs once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Bisection:
    """What the search found and what it cost."""

    switches: list[str]  # the candidates, in the order they were searched
    culprits: list[str] | None  # switches to turn off (None: turning everything off does not help)
    runs: list[tuple[list[str], bool, float]] = field(default_factory=list)  # (turned off, passed, seconds)

    @property
    def seconds(self) -> float:
        return sum(s for _, _, s in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {"switches": self.switches, "culprits": self.culprits, "runs": len(self.runs),
                "seconds": round(self.seconds, 3),
                "tried": [{"off": off, "passed": ok, "seconds": round(s, 3)} for off, ok, s in self.runs]}


def bisect_switches(switches: list[str], passes: Callable[[frozenset[str]], bool],
                    known: dict[frozenset[str], bool] | None = None) -> Bisection:
    """Find culprits c1, c2, ... such that turning off just those makes `passes` true.

    Each round binary-searches the shortest prefix of the remaining switches whose turning-off
    (with the culprits found so far) passes; its last switch is the next culprit. One culprit costs
    about log2(n) + 1 runs. `known`: outcomes already measured (e.g. {frozenset(): False}, the target).
    """
    result = Bisection(list(switches), None)
    memo: dict[frozenset[str], bool] = dict(known or {})

    def run(off: frozenset[str]) -> bool:
        if off not in memo:
            t0 = time.perf_counter()
            memo[off] = bool(passes(off))
            result.runs.append(([s for s in switches if s in off], memo[off], time.perf_counter() - t0))
        return memo[off]

    if not switches or not run(frozenset(switches)):
        return result
    culprits: list[str] = []
    while not run(frozenset(culprits)):
        cands = [s for s in switches if s not in culprits]
        lo, hi = 1, len(cands)
        while lo < hi:
            mid = (lo + hi) // 2
            if run(frozenset(culprits) | frozenset(cands[:mid])):
                hi = mid
            else:
                lo = mid + 1
        culprits.append(cands[lo - 1])
    result.culprits = culprits
    return result
