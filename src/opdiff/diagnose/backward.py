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
from .graph import Graph, Node, Tensor

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


def wire_output_grads(graph: Graph, pairs: list[PairResult]) -> None:
    """api level: backward records hold only the gradient of each call's outputs (what its backward reads).
    The forward dataflow says who computes each one: the gradient of X's output is made by the backward of
    the calls that read X's output. So each such gradient becomes an output of (the first of) its readers'
    backward, whose inputs are the gradients of that reader's own outputs; a reader whose backward the target
    did not record (a custom autograd Function running it under no_grad) gets a node of its own. Then "the
    gradients a call's backward reads agree, the one it computes does not" blames that call, as at aten level.
    A graph whose backward calls record inputs (aten level, real backward ops) is left as it is."""
    if graph.module_level or any(n.inputs for n in graph.nodes if n.id != graph.root and n.op != "parameter"):
        return
    fwd = {p.target.name: p.target for p in pairs if p.target is not None and p.target.direction == "forward"}
    readers = _forward_readers(fwd)
    grads_of: dict[str, list[int]] = {}  # forward node -> its backward tensors (gradients of its outputs)
    counterpart: dict[int, str] = {}  # backward tensor id -> forward record name it is the gradient of
    for t in graph.tensors:
        r = t.target
        if r is None or graph.nodes[t.node].id == graph.root:
            continue
        if graph.nodes[t.node].op == "parameter":  # a parameter's gradient
            counterpart[t.id] = f"{r.node}/forward/parameter/{r.pos}"
        elif r.role == "output":
            counterpart[t.id] = f"{r.node}/forward/output/{r.pos}"
            grads_of.setdefault(r.node, []).append(t.id)
    made: dict[str, int] = {}
    float_out = {r.node for r in fwd.values() if r.role == "output" and "float" in r.dtype}  # calls backward can run
    first_rec: dict[str, Record] = {}
    for r in fwd.values():
        first_rec.setdefault(r.node, r)
    ids = {n.name: n.id for n in graph.nodes}
    for tid, fname in counterpart.items():
        reads = [n for n in readers.get(fname, []) if n != graph.tensors[tid].rec.node]
        if not reads:
            continue
        missing = [n for n in reads if n not in grads_of and n in float_out]
        options = missing or [n for n in reads if n in grads_of]
        if not options:
            continue
        chosen = options[0]
        nid = _backward_node(graph, chosen, first_rec[chosen], ids, made)
        _move_output(graph, tid, nid)
        for reader in reads:
            for g in grads_of.get(reader, []):
                _add_input(graph, nid, g)
    graph.changed()


def _forward_readers(fwd: dict[str, Record]) -> dict[str, list[str]]:
    """Forward output / parameter record name -> the calls reading it (in forward order), through aliases."""
    def resolve(name: str | None) -> str | None:
        for _ in range(16):
            r = fwd.get(name) if name else None
            if r is None or r.role != "input":
                return name
            name = r.src
        return name

    out: dict[str, list[str]] = {}
    for r in sorted(fwd.values(), key=lambda r: r.index):
        if r.role == "input" and r.src:
            src = resolve(r.src)
            if src is not None and r.node not in out.setdefault(src, []):
                out[src].append(r.node)
    return out


def _backward_node(graph: Graph, fnode: str, rec: Record, ids: dict[str, int], made: dict[str, int]) -> int:
    """The backward graph node of forward call `fnode` (`rec` one of its records); one is made when the target
    recorded none."""
    if fnode in made:
        return made[fnode]
    nid = ids.get(fnode)
    if nid is None:
        nid = len(graph.nodes)
        graph.nodes.append(Node(nid, fnode, rec.module, rec.op, rec.level, -1, -1))
    made[fnode] = nid
    node = graph.nodes[nid]
    for tid in list(node.outputs):  # the gradients of its own outputs are what its backward reads
        node.outputs.remove(tid)
        _add_input(graph, nid, tid)
    return nid


def _move_output(graph: Graph, tid: int, nid: int) -> None:
    """Make tensor `tid` an output of node `nid` (role output)."""
    t = graph.tensors[tid]
    old = graph.nodes[t.node]
    for lst in (old.inputs, old.outputs, old.params):
        if tid in lst:
            lst.remove(tid)
    t.node = nid
    t.golden = replace(t.golden, role="output") if t.golden is not None else None
    t.target = replace(t.target, role="output") if t.target is not None else None
    graph.nodes[nid].outputs.append(tid)


def _add_input(graph: Graph, nid: int, src: int) -> None:
    """Node `nid` reads tensor `src`: an input that is `src` (not a record of its own: calibration and events
    skip it, the error it carries is `src`'s)."""
    node = graph.nodes[nid]
    if any(graph.producer.get(i) == src for i in node.inputs):
        return
    s = graph.tensors[src]
    rec = replace(s.rec, role="input")
    t = Tensor(len(graph.tensors), s.pair, rec, None, s.err, s.unit, node=nid, abs_err=s.abs_err)
    graph.tensors.append(t)
    node.inputs.append(t.id)
    graph.producer[t.id] = src
    graph.consumers.setdefault(src, []).append(t.id)
