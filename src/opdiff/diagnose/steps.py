"""Training runs: diagnose every captured (rank, step) part and pass, and report where it starts.

Parts are visited step by step; within a step every rank is diagnosed, pass by pass (forward,
backward, the optimizer's update). The first step where any pass of any rank diverges is the
answer: its earliest pass wins, then the lowest rank whose divergence is its own (one that only
arrived through a collective from another rank is traced to that rank). Parameters that differ at
a step after the first captured one, while everything before agreed, are blamed on the update in
between; at the first captured step they are a checkpoint / loading finding (docs/diagnose.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.errors import OpdiffError
from ..base.vocab import DIRECTIONS  # forward, backward, update: the order passes run in a step
from ..compare.parts import open_pair, shared_steps
from ..compare.parts import shift as _shift
from ..compare.sameness import check_comparable
from ..store import Dump
from . import update as upd
from .verdict import Diagnosis

if TYPE_CHECKING:
    from ..compare.run import Comparison
    from ..match.mapping import Mapping

COLLECTIVE_PREFIXES = ("torch.distributed.", "c10d.")


@dataclass
class Part:
    """One pass of one (rank, step) part and its diagnosis."""

    rank: int
    step: int
    direction: str
    golden: Dump
    target: Dump
    comparison: Comparison
    diag: Diagnosis
    arrived_from: dict[str, Any] | None = None

    @property
    def diverges(self) -> bool:
        return self.diag.verdict != "pass"

    def summary(self) -> dict[str, Any]:
        out = {"rank": self.rank, "step": self.step, "direction": self.direction, "verdict": self.diag.verdict}
        if self.arrived_from:
            out["arrived_from_rank"] = self.arrived_from["rank"]
        return out


def _parts(golden: Dump, target: Dump, rank: int | None, step: int | None) -> list[tuple[int, int]]:
    dr, ds = _shift(golden, target)
    common = sorted({(r, s) for r, s in target.parts if (r + dr, s + ds) in golden.parts}, key=lambda p: (p[1], p[0]))
    if rank is None and step is None and len(golden.parts) == 1 and len(target.parts) == 1:
        return [(target.rank, target.step)]  # one part each (e.g. two separate single-step runs)
    picked = [p for p in common if (rank is None or p[0] == rank) and (step is None or p[1] == step)]
    if not picked:
        what = " and ".join(x for x in (f"rank {rank}" if rank is not None else "",
                                        f"step {step}" if step is not None else "") if x) or "any part"
        raise OpdiffError(f"{target.root}: golden and target have no {what} in common "
                          f"(golden has {golden.parts}, target has {target.parts})")
    return picked


def _directions(comparison: Comparison, direction: str | None) -> list[str]:
    have = {(p.target if p.target is not None else p.golden).direction for p in comparison.results}  # type: ignore[union-attr]
    return [d for d in DIRECTIONS if d in have and (direction is None or d == direction)]


def diagnose_run(golden: Dump, target: Dump, *, mapping: Mapping | str | os.PathLike[str] | None = None,
                 comparison: Comparison | dict[tuple[int, int], Comparison] | None = None, replay: bool = True,
                 level: str | None = None, direction: str | None = None, workers: int | None = None,
                 progress: bool = False, rank: int | None = None, step: int | None = None) -> Diagnosis:
    """The diagnosis of a whole run (see the module docstring)."""
    from ..compare import compare
    from .run import confirm_culprit, diagnose_pass

    per_part = comparison if isinstance(comparison, dict) else None  # {(rank, step): Comparison}, e.g. from Dask
    if comparison is not None and not isinstance(comparison, dict):  # one compare() result: every step it and
        per_part = comparison.by_step()  # the dumps cover
        if rank is None and step is None:  # never a pass about steps nobody looked at: compare the rest here
            keys = sorted(set(per_part) | set(shared_steps(golden, target)), key=lambda p: (p[1], p[0]))
        else:
            keys = sorted(k for k in per_part if (rank is None or k[0] == rank) and (step is None or k[1] == step))
    else:
        keys = sorted(per_part) if per_part is not None else _parts(golden, target, rank, step)
    done: list[Part] = []
    steps = sorted({s for _, s in keys})
    for s in steps:
        at_step: list[Part] = []
        for r in sorted({r for r, s2 in keys if s2 == s}):
            handed = per_part.get((r, s)) if per_part is not None else None
            g, t = (handed.golden, handed.target) if handed is not None else open_pair(golden, target, r, s)
            comp = handed if handed is not None else compare(g, t, mapping=mapping, workers=workers, progress=progress,
                                                              all_steps=False)
            if handed is not None:  # compare() checked its own; a handed-in one was not
                check_comparable(g, t, mapping=comp.mapping)
            dirs = _directions(comp, direction)
            if not dirs:
                raise OpdiffError(f"{t.root}: no {direction} records to diagnose (rank {r}, step {s})")
            for d in dirs:
                try:
                    diag = diagnose_pass(g, t, comp, level=level, direction=d)
                except OpdiffError:
                    if d == "forward" or len(dirs) == 1:
                        raise
                    continue  # a pass with nothing that pairs (e.g. only the root's gradient) says nothing
                at_step.append(Part(r, s, d, g, t, comp, diag))
        done.extend(at_step)
        _trace_collectives(at_step)
        if any(p.diverges for p in at_step):
            break
    chosen = _choose(done)
    final = _finish(chosen, done, steps)
    if replay and final.culprit is not None and chosen is not None and chosen.diag is final:
        confirm_culprit(chosen.golden, chosen.target, final)
    return final


def _choose(parts: list[Part]) -> Part | None:
    """The part where divergence starts: earliest step, then pass, then a rank whose error is its own."""
    bad = [p for p in parts if p.diverges]
    if not bad:
        return None
    key = lambda p: (p.step, DIRECTIONS.index(p.direction), p.arrived_from is not None, p.rank)
    return min(bad, key=key)


def _trace_collectives(parts: list[Part]) -> None:
    """A culprit that is a collective whose inputs agree on its rank got its difference from another rank."""
    for p in parts:
        c = p.diag.culprit
        if c is None or not c.op.startswith(COLLECTIVE_PREFIXES):
            continue
        for other in parts:
            if other.rank == p.rank or other.direction != p.direction:
                continue
            rec = _differing_input(other, c.node)
            if rec is not None:
                p.arrived_from = {"rank": other.rank, "record": rec}
                break


def _differing_input(part: Part, node: str) -> str | None:
    """The first input record of `node` in this part whose golden and target disagree."""
    from ..metrics.thresholds import SIGNIFICANT, unit
    from .noise import pair_error

    floor = part.diag.noise.get("floor_units", 1.0)
    for pr in part.comparison.results:
        t = pr.target
        if t is None or t.node != node or t.role != "input":
            continue
        err = pair_error(pr)
        u = unit(pr.golden.dtype if pr.golden else None, t.dtype)
        if err is not None and (err > SIGNIFICANT * floor * u if u else err > 0):
            return t.name
    return None


def _stamp(info: dict[str, Any] | None, part: Part) -> dict[str, Any] | None:
    if info is None:
        return None
    return {**info, "step": part.step, "direction": part.direction, "rank": part.rank}


def _finish(chosen: Part | None, parts: list[Part], steps: list[int]) -> Diagnosis:
    """The run's diagnosis: the chosen part's, with step, pass and rank said everywhere."""
    if chosen is None:
        last = parts[-1]
        d = last.diag
        d.first_divergence = None
        if len(parts) > 1:
            d.summary = f"{d.summary} (all {len(parts)} passes of {len(steps)} step(s) diagnosed)"
    else:
        d = chosen.diag
        if chosen.direction == "forward" and chosen.step != min(steps) and d.culprit is not None \
                and d.culprit.how == "parameter":
            upd.from_parameters(chosen, parts, steps)
        if d.culprit is not None:
            if d.culprit.step is None:
                d.culprit.step = chosen.step
            d.culprit.rank = chosen.rank
            if chosen.direction == "update" or d.culprit.direction == "update":
                upd.describe(chosen, d)
        firsts = [p for p in parts if p.diag.first_divergence is not None]
        first = min(firsts, key=lambda p: (p.step, DIRECTIONS.index(p.direction), p.arrived_from is not None,
                                           p.rank)) if firsts else None
        d.first_divergence = _stamp(first.diag.first_divergence, first) if first is not None else None
        if chosen.arrived_from:
            d.evidence.arrived_from = chosen.arrived_from
        d.summary = f"{where(chosen.step if d.culprit is None else d.culprit.step, d.culprit.direction if d.culprit else chosen.direction, chosen.rank, parts)}: {d.summary}"
    if len(parts) > 1:
        d.evidence.parts = [p.summary() for p in parts]
    return d


def where(step: int | None, direction: str, rank: int, parts: list[Part]) -> str:
    """"at step 2, in the backward pass (rank 1)" in words."""
    ranks = {p.rank for p in parts}
    pass_ = {"forward": "the forward pass", "backward": "the backward pass", "update": "the optimizer's update"}[direction]
    s = f"at step {step}, in {pass_}" if step is not None else f"in {pass_}"
    return s + (f", on rank {rank}" if len(ranks) > 1 else "")
