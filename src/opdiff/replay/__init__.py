"""Replay: re-execute one captured op on golden's inputs under the target's settings.

Framework-neutral front: it finds the op's call line (index lines of kind "call") and the golden
counterparts of its inputs, then hands over to the framework's replayer (torch_replay, imported
lazily). What is supported is listed in docs/diagnose.md ("Replay").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..base.errors import OpdiffError
from ..store import Dump


@dataclass
class ReplayResult:
    """What replaying one op showed."""

    status: str  # ok | unsupported | error
    node: str
    op: str = ""
    module: str = ""
    level: str = ""
    reason: str = ""  # why it could not run (status != ok)
    conclusion: str = ""
    confirmed: bool | None = None  # the op's own computation explains the target's difference
    input_dtypes: dict[str, str] = field(default_factory=dict)  # position -> dtype the inputs were cast to
    arg_differences: list[dict[str, Any]] = field(default_factory=list)  # non-tensor arguments golden vs target
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def confirm(golden: Dump, target: Dump, diagnosis, golden_inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """Replay the diagnosis's culprit when the dumps hold what that needs; say why not otherwise."""
    c = diagnosis.culprit
    node = c.get("node") if c else None
    if not node:
        return {"status": "skipped", "reason": "no culprit to replay"}
    if c.get("how") == "parameter":
        return {"status": "skipped", "reason": "the culprit's weights differ from golden's: the comparison of the parameters is the proof"}
    if not any(r.has_data for r in golden.records[:64]) or not any(r.has_data for r in target.records[:64]):
        return {"status": "skipped", "reason": "replay needs dumps captured with mode='tensor'"}
    try:
        res = replay(golden, target, node, golden_node=c.get("golden_node"), golden_inputs=golden_inputs)
    except OpdiffError as exc:
        return {"status": "skipped", "reason": str(exc)}
    out = res.to_json()
    if res.status != "ok":
        out["status"] = "skipped"
    return out


__all__ = ["ReplayResult", "replay", "confirm", "find_node", "calls_by_node"]
