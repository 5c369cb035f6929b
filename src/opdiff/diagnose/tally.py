"""What a diagnosis counts over all its pairs, gathered in graph.build's one pass over them.

A pass over 100,000 pairs costs several milliseconds; the counts of the diagnosis, its warnings and the
trust rules (trust.py) each took one. Build's loop keeps instead the few pairs that are not an ordinary
compared pair (`odd`: unmatched, mismatched, unreadable), in order, and the modes compared: every count
and every scan for a status is then over those few (docs/diagnose.md, "Speed").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.pair import PairResult
from ..base.vocab import STATUS_COMPARED, STATUS_UNMATCHED


@dataclass(slots=True)
class Tally:
    """The pairs build was handed, summed up."""

    total: int = 0  # pairs handed to build, of every pass
    other: int = 0  # of them, pairs of another pass than the graph's (build skips them)
    odd: list[PairResult] = field(default_factory=list)  # pairs not compared or missing a side, in their order
    modes: set[str] = field(default_factory=set)  # modes of the compared pairs

    def compared(self) -> int:
        """Pairs whose status is `compared`."""
        return self.total - sum(1 for p in self.odd if p.status != STATUS_COMPARED)

    def one_sided(self, side: str) -> int:
        """Pairs with only the golden (side "golden") or only the target record."""
        return sum(1 for p in self.odd if (p.target if side == "golden" else p.golden) is None)

    def unmatched(self, side: str) -> int:
        """Unmatched records of one side ("golden": records golden has and the target lacks)."""
        return sum(1 for p in self.odd if p.status == STATUS_UNMATCHED
                   and (p.target if side == "golden" else p.golden) is None)


def tally_of(pairs: list[PairResult], direction: str | None = None) -> Tally:
    """The Tally of `pairs` counted on its own (graph.build counts it in its loop)."""
    out = Tally(len(pairs))
    for p in pairs:
        if p.status != STATUS_COMPARED or p.golden is None or p.target is None:
            out.odd.append(p)
        if p.status == STATUS_COMPARED:
            out.modes.add(p.mode)
        if direction is not None and p.record.direction != direction:
            out.other += 1
    return out
