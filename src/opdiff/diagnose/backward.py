"""The backward pass as a dataflow graph diagnose can reason on.

At api and aten level backward records are real ops (their inputs are gradients and saved forward
tensors, their outputs gradients), recorded in the order the autograd engine runs them: the
graph is built from them as for forward. At module level a module call's backward records hold
the gradient w.r.t. its outputs (what its backward reads) and w.r.t. its inputs (what its backward
computes): their roles are swapped, so that "output gradient agrees but input gradient does not"
is an op adding an error of its own, and each parameter's gradient becomes an output of its
owning module's backward. The records keep the order the hooks fired in, which is the autograd
engine's execution order (the graph's order), not the order of the Python calls in forward.
"""

from __future__ import annotations

from dataclasses import replace

from ..base.pair import PairResult
from ..base.record import Record
from .graph import Graph

SWAP = {"input": "output", "output": "input"}


def _swap(rec: Record | None, module_nodes: set[str]) -> Record | None:
    if rec is None or rec.direction != "backward":
        return rec
    if rec.role == "gradient":
        return replace(rec, role="output")  # a parameter's gradient: computed by its module's backward
    if rec.node in module_nodes and rec.role in SWAP:
        return replace(rec, role=SWAP[rec.role])
    return rec


def prepare(pairs: list[PairResult]) -> list[PairResult]:
    """Module-level backward records with their roles as backward computes them (see module docstring)."""
    module_nodes = {r.node for p in pairs for r in (p.golden, p.target)
                    if r is not None and r.direction == "forward" and r.level == "module"}
    if not module_nodes:
        return [p if not _is_grad(p) else replace(p, golden=_grad_input(p.golden), target=_grad_input(p.target))
                for p in pairs]
    return [replace(p, golden=_swap(p.golden, module_nodes), target=_swap(p.target, module_nodes))
            if p.record.direction == "backward" else p for p in pairs]


def _is_grad(p: PairResult) -> bool:
    return p.record.role == "gradient"


def _grad_input(rec: Record | None) -> Record | None:
    """At op level a parameter's gradient record reads the tensor the accumulation op produced."""
    return replace(rec, role="input") if rec is not None and rec.role == "gradient" else rec


def attach_param_grads(graph: Graph) -> None:
    """Module level: each parameter gradient becomes an output of its module's (first) backward call."""
    if not graph.module_level:
        return
    for node in graph.nodes:
        if node.op != "parameter" or not node.outputs:
            continue
        owner = graph.owner.get(node.module)
        if owner is None or owner == node.id:
            continue
        for tid in node.outputs:
            graph.tensors[tid].node = owner
            graph.nodes[owner].outputs.append(tid)
        node.outputs = []
    graph.changed()
