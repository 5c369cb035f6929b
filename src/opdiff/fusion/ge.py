"""`opdiff fusion ge`: which fused NPU op is the first to break, and which golden ops it replaced.

The fused run is an Ascend GE dump whose graph JSON says, per executed op, the original ops it stands
for (`_datadump_original_op_names`); the golden is the same model with fusion off (a second GE dump)
or the framework's run on a CPU/GPU (`{op_name}.{slot}.{timestamp}.npy`). Both pair through that
provenance (match/align.py), so no mapping file is needed; this module lists the fused ops in
execution order with their verdicts and runs diagnose for the culprit. See docs/fusion.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..base.pair import PairResult
from ..base.vocab import FAIL, NA, PASS, PROVENANCE_KEY, WARNING
from ..compare import Comparison, compare
from ..diagnose import diagnose
from ..diagnose.verdict import Diagnosis
from ..store import Dump

_RANK = {NA: 0, PASS: 1, WARNING: 2, FAIL: 3}


@dataclass
class FusedOp:
    """One executed op that stands for several golden ops, and how its outputs compare."""

    node: str
    golden_ops: list[str]
    result: str = NA  # the worst verdict of its compared outputs
    outputs: list[str] = field(default_factory=list)  # its target output records that were compared
    rank: int = 0
    step: int = 0  # the iteration / token it ran in

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "golden_ops": self.golden_ops, "result": self.result, "outputs": self.outputs,
                "rank": self.rank, "step": self.step}


@dataclass
class GeFusionResult:
    """The fused ops in execution order, the first that breaks, and the diagnosis of the whole pair."""

    fused: list[FusedOp]  # every part (rank, step: iteration or token) both dumps hold, in order
    comparisons: list[Comparison]
    diagnosis: Diagnosis

    @property
    def first_broken(self) -> FusedOp | None:
        return next((f for f in self.fused if f.result == FAIL), None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_broken
        return {"fused_ops": [f.to_json() for f in self.fused], "first_broken": first.to_json() if first else None,
                "verdict": self.diagnosis.verdict, "summary": self.diagnosis.summary}


def fused_ops(results: list[PairResult], rank: int = 0, step: int = 0) -> list[FusedOp]:
    """The target's fused ops (provenance of 2 or more golden ops) in execution order, each judged by its outputs."""
    out: dict[str, FusedOp] = {}
    for r in results:
        t = r.target
        names = t.extra.get(PROVENANCE_KEY) if t is not None else None
        if t is None or not isinstance(names, list) or len(names) < 2:
            continue
        f = out.setdefault(t.node, FusedOp(t.node, [str(n) for n in names], rank=rank, step=step))
        if t.role == "output" and r.golden is not None and r.result in _RANK:
            f.outputs.append(t.name)
            if _RANK[r.result] > _RANK[f.result]:
                f.result = r.result
    return list(out.values())


def fusion_ge(golden: Dump, target: Dump, *, thresholds: str = "default") -> GeFusionResult:
    """Compare a fused GE run with its golden through the graph's provenance, part by part (iterations, TorchAir
    tokens), and diagnose it."""
    parts = sorted(set(golden.parts) & set(target.parts)) or [(target.rank, target.step)]
    fused: list[FusedOp] = []
    cmps: list[Comparison] = []
    for rank, step in parts:
        cmp = compare(golden.with_part(rank, step), target.with_part(rank, step), thresholds=thresholds)
        cmps.append(cmp)
        fused += fused_ops(cmp.results, rank, step)
    return GeFusionResult(fused, cmps, diagnose(golden, target, replay=False))
