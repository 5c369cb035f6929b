"""Console report of `opdiff fusion`: fused against unfused at shared cut points, the pass at fault, the cost."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from ..base.termsafe import plain
from ..diagnose.verdict import Diagnosis


class BisectionLike(Protocol):
    """opdiff.fusion.bisect.Bisection (report sits below fusion's layer)."""

    switches: list[str]
    runs: list[tuple[list[str], bool, float]]

    @property
    def seconds(self) -> float: ...


class FusionLike(Protocol):
    """What the console shows of opdiff.fusion.ort.FusionResult."""

    agrees: bool
    out: Path
    first_fail: str | None
    bisection: BisectionLike | None
    culprits: list[str]
    fused_nodes: dict[str, list[str]]
    restored: bool
    counts: dict[str, int]
    seconds: float
    extra: dict[str, Any]


def _regions(extra: dict[str, Any]) -> list[str]:
    """torch.compile only: which regions compiled, graph breaks, the region at fault."""
    obs = extra.get("observed") or {}
    if "compiled_regions" not in obs:
        return []
    ran = ", ".join(f"{r} ({v['graphs']} graph, {v['compiled_calls']} calls)" for r, v in obs["compiled_regions"].items())
    lines = [f"compiled regions: {ran}; graph breaks: {len(obs['graph_breaks'])}"]
    if extra.get("culprit_regions"):
        lines.append(f"region at fault: {', '.join(extra['culprit_regions'])}")
    return lines


def _verdict(res: FusionLike) -> list[str]:
    c = res.counts
    lines = [f"fused vs unfused at shared cut points: {c.get('PASS', 0)} pass, {c.get('WARNING', 0)} warning, "
             f"{c.get('FAIL', 0)} fail"]
    if res.agrees:
        return lines + ["fusion OK: the fused run agrees with the unfused one"]
    lines.append(f"diverges first at {res.first_fail}")
    b = res.bisection
    if b is not None and res.culprits:
        lines.append(f"pass at fault: {', '.join(res.culprits)}" + (" (turning it off restores agreement)" if res.restored
                                                                    else " (turning it off does not restore agreement)"))
        lines += [f"  made {node} from {', '.join(orig)}" for node, orig in res.fused_nodes.items()]
        lines.append(f"switch file: {res.out / 'switches.json'}")
    elif b is not None:
        lines.append("turning off every pass that fired does not restore agreement: not a fusion problem")
    if b is not None:
        lines.append(f"bisection: {len(b.switches)} switches, {len(b.runs)} runs, {b.seconds:.1f} s")
    return lines


class FusedOpLike(Protocol):
    """opdiff.fusion.ge.FusedOp: one fused NPU op and the golden ops it stands for."""

    node: str
    golden_ops: list[str]
    result: str
    rank: int
    step: int


class GeFusionLike(Protocol):
    """What the console shows of opdiff.fusion.ge.GeFusionResult."""

    @property
    def fused(self) -> Sequence[FusedOpLike]: ...

    @property
    def first_broken(self) -> FusedOpLike | None: ...

    @property
    def diagnosis(self) -> Diagnosis: ...


def render_ge(res: GeFusionLike, console: Console | None = None) -> None:
    """`opdiff fusion ge`: the fused ops by verdict, the first to break and what it replaced, the diagnosis."""
    c = console or Console()
    counts: dict[str, int] = {}
    for f in res.fused:
        counts[f.result] = counts.get(f.result, 0) + 1
    lines = [f"{len(res.fused)} fused ops: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))]
    first = res.first_broken
    if first is not None:
        lines.append(f"first fused op to break: {first.node} (rank {first.rank}, step {first.step}), standing for "
                     f"{', '.join(first.golden_ops)}")
    lines.append(f"diagnosis: {res.diagnosis.verdict}: {res.diagnosis.summary}")
    for line in lines:
        c.print(plain(line), markup=False, highlight=False, soft_wrap=True)


def render(res: FusionLike, console: Console | None = None) -> None:
    """Print what fusion found, one plain line each (names come from the model: no markup, no control characters)."""
    c = console or Console()
    lines = _regions(res.extra) + _verdict(res)
    if "cost" in res.extra:
        lines.append(f"total bisection cost: {res.extra['cost']['runs']} runs, {res.extra['cost']['seconds']:.1f} s")
    lines.append(f"total {res.seconds:.1f} s; reports in {res.out}")
    for line in lines:
        c.print(plain(line), markup=False, highlight=False, soft_wrap=True)


__all__ = ["render", "render_ge"]
