"""Replay: re-execute one captured op on golden's inputs under the target's settings.

Framework-neutral front: it finds the op's call line (index lines of kind "call") and the golden
counterparts of its inputs, then hands over to the framework's replayer (torch_replay, imported
lazily). What is supported is listed in docs/diagnose.md ("Replay").
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..base.errors import OpdiffError
from ..store import Dump
from .result import ReplayResult

if TYPE_CHECKING:
    from ..diagnose.verdict import Diagnosis


def calls_by_node(dump: Dump) -> dict[str, dict[str, Any]]:
    """The dump's call lines, by node name."""
    return {c["node"]: c for c in dump.calls if "node" in c}


def find_node(target: Dump, op: str, calls: dict[str, dict[str, Any]] | None = None) -> str:
    """The node OP names: a node name, a record name, or a regex matching exactly one node."""
    nodes = list(dict.fromkeys(r.node for r in target.records))
    if op in nodes:
        return op
    rec = target.get(op)
    if rec is not None:
        return rec.node
    try:
        pattern = re.compile(op)
    except re.error as exc:
        raise OpdiffError(f"{target.root}: {op!r} is neither a node, a record nor a valid regex ({exc})") from None
    hits = [n for n in nodes if pattern.search(n)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise OpdiffError(f"{target.root}: no op matches {op!r} (give a node name as `opdiff ls` shows it)")
    shown = ", ".join(hits[:5]) + (" ..." if len(hits) > 5 else "")
    raise OpdiffError(f"{target.root}: {op!r} matches {len(hits)} ops ({shown}); give one node name")


def replay(golden: Dump, target: Dump, op: str, *, golden_node: str | None = None,
           golden_inputs: dict[str, str] | None = None) -> ReplayResult:
    """Re-execute the target's op OP on golden's inputs (cast to the target's dtypes), compare with golden.

    `golden_node` names the op's counterpart in golden (default: the same node name);
    `golden_inputs` maps target input record names to golden ones (default: same names).
    """
    calls = calls_by_node(target)
    node = find_node(target, op, calls)
    framework = target.meta.get("framework")
    if framework not in (None, "torch"):
        return ReplayResult("unsupported", node, reason=f"replay supports torch dumps only (target is {framework})")
    try:
        from . import torch_replay
    except ImportError as exc:
        return ReplayResult("unsupported", node, reason=f"torch is not importable here ({exc.name})")
    if golden_inputs is None:
        golden_inputs = aligned_names(golden, target, node)
    if golden_node is None:
        outs = [golden_inputs.get(r.name) for r in target.records if r.node == node and r.role == "output"]
        golden_node = next((golden[n].node for n in outs if n and n in golden), node)
    return torch_replay.replay(golden, target, node, calls.get(node), calls_by_node(golden).get(golden_node),
                               golden_inputs)


def aligned_names(golden: Dump, target: Dump, node: str) -> dict[str, str]:
    """Golden record names for a target node's tensors, by compare's alignment (through producers for
    tensors golden does not have)."""
    from ..match.align import align

    pairs = {p.target.name: p.golden.name for p in align(golden, target) if p.target is not None and p.golden is not None}
    out: dict[str, str] = {}
    for r in target.records:
        if r.node != node:
            continue
        name = pairs.get(r.name) or (pairs.get(r.src) if r.src else None)
        if name:
            out[r.name] = name
    return out


def confirm(golden: Dump, target: Dump, diagnosis: Diagnosis,
            golden_inputs: dict[str, str] | None = None) -> ReplayResult:
    """Replay the diagnosis's culprit when the dumps hold what that needs; say why not otherwise
    (status "skipped": a replay that could not run is reported as skipped, with its reason)."""
    c = diagnosis.culprit
    if c is None or not c.node:
        return ReplayResult.skipped("no culprit to replay")
    if c.how == "parameter":
        return ReplayResult.skipped("the culprit's weights differ from golden's: the comparison of the parameters is the proof")
    if not any(r.has_data for r in golden.records[:64]) or not any(r.has_data for r in target.records[:64]):
        return ReplayResult.skipped("replay needs dumps captured with mode='tensor'")
    try:
        res = replay(golden, target, c.node, golden_node=c.golden_node, golden_inputs=golden_inputs)
    except OpdiffError as exc:
        return ReplayResult.skipped(str(exc))
    return res if res.status == "ok" else replace(res, status="skipped")


__all__ = ["ReplayResult", "replay", "confirm", "find_node", "calls_by_node"]
