"""Which (rank, step) parts two dumps share: compare and diagnose look at the same ones (issue 20)."""

from __future__ import annotations

from ..store import Dump


def shift(golden: Dump, target: Dump) -> tuple[int, int]:
    """(rank, step) to add to a target part to get its golden part: two step (or rank) folders of one run
    pair step with step (rank with rank) as two runs would; otherwise 0, 0."""
    (gr, gs), (tr, ts) = golden.scope, target.scope
    return (gr - tr if gr is not None and tr is not None else 0), (gs - ts if gs is not None and ts is not None else 0)


def shared_steps(golden: Dump, target: Dump) -> list[tuple[int, int]]:
    """The target's (rank, step) parts at its own rank that golden has too, by step: the steps one
    comparison must cover so that a multi-step dump is never judged on its first step alone."""
    dr, ds = shift(golden, target)
    return sorted(((r, s) for r, s in target.parts if r == target.rank and (r + dr, s + ds) in golden.parts),
                  key=lambda p: p[1])


def open_pair(golden: Dump, target: Dump, rank: int, step: int) -> tuple[Dump, Dump]:
    """The golden and target dumps of target part (rank, step)."""
    dr, ds = shift(golden, target)
    return part_of(golden, rank + dr, step + ds), part_of(target, rank, step)


def part_of(dump: Dump, rank: int, step: int) -> Dump:
    """The dump's (rank, step) part; a dump that names one part is that part."""
    return dump if (dump.rank, dump.step) == (rank, step) or len(dump.parts) == 1 else dump.with_part(rank, step)
