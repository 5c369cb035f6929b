"""The ONNX graph as capture sees it: execution order, module scopes, and fusion provenance.

Works on `onnx.ModelProto`s only (no session). Provenance: an optimizer that fuses or rewrites
nodes keeps the names of the tensors at the boundary of what it replaced, so a node of the
optimized graph stands for the original nodes between its inputs and its outputs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

SCOPE_KEYS = ("pkg.torch.onnx.name_scopes", "namespace")  # node metadata the torch exporters write


@dataclass
class GNode:
    """One node of a graph, in execution order."""

    index: int
    name: str
    op: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    module: str = ""
    fused_from: list[str] = field(default_factory=list)  # ONNX names of the original nodes it replaces


def _scope_from_metadata(node) -> str | None:
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(scopes, (list, tuple)) and scopes:
                return ".".join(s for s in scopes if s) if not any("." in s for s in scopes) else scopes[-1]
    return None


def scope_of(node) -> str:
    """Module path a node belongs to: exporter metadata, else the TorchScript exporter's "/a/b.0/Op" name."""
    meta = _scope_from_metadata(node)
    if meta is not None:
        return meta
    name = node.name
    if name.startswith("/") and name.count("/") >= 2:
        return ".".join(p for p in name.split("/")[1:-1] if p)
    return ""


def ordered_nodes(graph) -> list[GNode]:
    """The graph's nodes in a topological order, stable with respect to the file order."""
    nodes = list(graph.node)
    produced = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = [{produced[x] for x in n.input if x in produced and produced[x] != i} for i, n in enumerate(nodes)]
    done: set[int] = set()
    order: list[int] = []
    for start in range(len(nodes)):
        stack = [start]
        while stack:
            i = stack[-1]
            if i in done:
                stack.pop()
                continue
            todo = sorted(d for d in deps[i] if d not in done)
            if todo:
                stack.extend(reversed(todo))
                continue
            done.add(i)
            order.append(i)
            stack.pop()
    out = []
    for k, i in enumerate(order):
        n = nodes[i]
        out.append(GNode(k, n.name or f"{n.op_type}_{i}", n.op_type, n.domain, list(n.input), list(n.output), scope_of(n)))
    return out


def _common_scope(scopes: list[str]) -> str:
    parts = [s.split(".") if s else [] for s in scopes]
    if not parts:
        return ""
    common = parts[0]
    for p in parts[1:]:
        k = 0
        while k < min(len(common), len(p)) and common[k] == p[k]:
            k += 1
        common = common[:k]
    return ".".join(common)


def provenance(optimized: list[GNode], original: list[GNode]) -> None:
    """Fill `fused_from` and `module` of each optimized node from the original graph.

    From each output the node shares with the original graph, walk the original graph backwards
    until a tensor the optimized graph also has (a cut point both runs share, an initializer that
    constant folding made, a graph input).
    """
    produced_by = {o: n for n in original for o in n.outputs if o}
    opt_values = {t for n in optimized for t in n.inputs + n.outputs if t}
    for node in optimized:
        seen: dict[str, GNode] = {}
        stack = [o for o in node.outputs if o in produced_by]
        while stack:
            src = produced_by.get(stack.pop())
            if src is None or src.name in seen:
                continue
            seen[src.name] = src
            stack.extend(x for x in src.inputs if x and x not in opt_values)
        group = sorted((n for n in seen.values() if n.op != "Constant"), key=lambda n: n.index)
        node.fused_from = [n.name for n in group]
        if len(group) == 1 and group[0].op == node.op and group[0].name == node.name:
            node.module = group[0].module
        elif group:
            node.module = _common_scope([n.module for n in group])


def is_rewritten(node: GNode) -> bool:
    """True when the optimizer fused or replaced this node (it is not one original node, unchanged)."""
    return len(node.fused_from) != 1 or node.fused_from[0] != node.name
