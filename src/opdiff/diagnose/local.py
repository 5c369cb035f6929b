"""Local vs inherited error: which ops add an error of their own, beyond what their inputs carry.

For every tensor, the error it inherits is the largest error among the tensors it was computed
from (graph.sources). An op's output is its own error when it exceeds both the calibrated
noise of a fresh computation and the amplification ops of its type show elsewhere in the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

import numpy as np

from ..metrics.thresholds import SIGNIFICANT
from .bounds import leaf_jump, op_kind, output_bound, tight_jump, unbounded_output
from .columns import ROLE_OUTPUT
from .graph import Graph, Node, Tensor
from .noise import AMPLIFICATION, UNIT, Noise, Peers

MAX_FLOOR = 8.0
REACH = 0.125  # an error already judged an op's own reaches a reader showing 1/8 of a fresh event's threshold
PROPAGATION_HOPS = 12  # how far an error entering through ops golden does not have is followed downstream


@dataclass
class Event:
    """A tensor whose error is its op's own: where an error enters the run."""

    tensor: int
    node: int  # the node blamed for it
    how: str  # output | parameter | inserted | parent | input (see Graph.blame)
    err: float
    inherited: float
    threshold: float
    jump: float  # err / threshold (> 1)
    propagates: bool = True  # whether the error reaches what the ops reading the tensor compute


def inherited(graph: Graph, t: Tensor) -> float:
    """Largest relative error among the tensors `t` was computed from (0 when none is known): Graph.columns
    computes it for every tensor at once."""
    return graph.inherited(t)


def abs_jump(graph: Graph, noise: Noise, t: Tensor, op: str, node: int) -> float:
    """The same test on absolute errors (MaxAbsErr): an op like cos or a scaling multiplies relative
    error without adding any of its own; its absolute error stays that of its inputs."""
    errs = [_abs_error(s) for s in graph.known_sources(t)]
    known = [e for e in errs if e is not None]
    if t.abs_err is None or not errs or len(known) < len(errs):
        return math.inf
    inh = max(known)
    if inh == 0:
        return math.inf
    return t.abs_err / (noise.allowance(op, node) * inh)


def _abs_error(t: Tensor) -> float | None:
    """A source's absolute error for the abs test: none when its pair agrees (err 0). A mask agrees on its
    unmasked elements while its fill values differ by ~1e36 (fp32's finfo.min against bf16's): that MaxAbsErr
    is no error it brings, and taken as one it excused any output (a bf16 block adding its residual twice)."""
    return 0.0 if t.err == 0 else t.abs_err


def _root_inputs(graph: Graph) -> set[int]:
    if graph.root is None:
        return set()
    return set(graph.nodes[graph.root].inputs)


def _target_dtypes(graph: Graph) -> list[str]:
    """The target's dtypes in first-seen order: from the dtype pairs build counted while the graph still holds
    the tensors it built (the first pair with a target dtype is where that dtype is first seen), else a walk."""
    pairs = graph.dtype_pairs
    if graph.columns_seeded() and pairs:
        return list(dict.fromkeys(t for _, t in pairs if t is not None))
    return list(dict.fromkeys(t.target.dtype for t in graph.tensors if t.target is not None))


def calibrate(graph: Graph) -> Noise:
    """The noise model of this run: rounding floor of fresh ops, amplification per op type."""
    run_dtype, run_unit = "float32", UNIT["float32"]
    for d in _target_dtypes(graph):  # first-seen order
        if d in UNIT and UNIT[d] > run_unit:
            run_dtype, run_unit = d, UNIT[d]
    cols = graph.columns()
    usable = cols.has_target & cols.known & np.isfinite(cols.err) & (cols.unit != 0)
    usable[list(_root_inputs(graph))] = False
    err, unit_, inh = cols.err, cols.unit, cols.inherited
    fresh_at = usable & (inh <= unit_)
    fresh = (err[fresh_at] / unit_[fresh_at]).tolist()
    outputs = cols.role == ROLE_OUTPUT
    measured_at = usable & ~fresh_at & outputs & (err > 0)  # (output, its error, the error it inherits)
    floor = min(max(median(fresh), 1.0), MAX_FLOOR) if fresh else 1.0
    # an op's amplification is measured where its inputs carry a clear error: on inputs that agree to
    # within noise a large ratio is an error of its own, and calls of one faulty op must not excuse each other
    ratios: dict[str, list[tuple[float, int]]] = {}
    nodes = graph.nodes
    at = np.flatnonzero(measured_at & (inh > SIGNIFICANT * floor * unit_))
    for e, i, n in zip(err[at].tolist(), inh[at].tolist(), cols.node[at].tolist()):
        ratios.setdefault(nodes[n].op, []).append((e / i, n))
    for rs in ratios.values():
        rs.sort(reverse=True)
    # _peers reads only calls in a narrow float dtype: only those are handed over, as tensors, in the same order
    narrow = unit_ > UNIT["float32"]
    ts = graph.tensors
    measured = [(ts[i], e, h) for i, e, h in zip(*(x.tolist() for x in _at(measured_at & narrow, err, inh)))]
    fresh_outputs = [(ts[i], h) for i, _, h in zip(*(x.tolist() for x in _at(fresh_at & outputs & narrow, err, inh)))]
    return Noise(floor=floor, amplification=AMPLIFICATION, per_op=ratios, run_unit=run_unit, run_dtype=run_dtype,
                 peers=_peers(graph, fresh_outputs, measured, floor))


def _at(mask: np.ndarray, err: np.ndarray, inh: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tensor ids where `mask` holds, with their errors and inherited errors."""
    at = np.flatnonzero(mask)
    return at, err[at], inh[at]


def _peers(graph: Graph, fresh: list[tuple[Tensor, float]], measured: list[tuple[Tensor, float, float]],
           floor: float) -> dict[str, Peers]:
    """What each op type's calls in a narrow float dtype show: output error over the larger of the inherited
    error and the floor (Noise.allowance)."""
    peers: dict[str, Peers] = {}
    for t, err, inh in measured + [(t, t.err or 0.0, inh) for t, inh in fresh]:
        if t.unit > UNIT["float32"]:
            peers.setdefault(graph.nodes[t.node].op, Peers()).add(err / max(inh, floor * t.unit), t.node)
    return peers


def events(graph: Graph, noise: Noise) -> list[Event]:
    """Every tensor whose error is its op's own, in the target's execution order.

    Every tensor with an error is judged (the count of events is part of the diagnosis); what each costs is
    kept small: the inherited errors read from one list, an output no tight rule bounds (bounds.unbounded_output)
    judged without asking each rule (module-level runs: every output)."""
    skip = _root_inputs(graph)
    out: list[Event] = []
    inh_of = graph.columns().inherited.tolist()  # inherited(graph, t) of every tensor, as Python floats
    nodes = graph.nodes
    for t in graph.in_order():
        if t.err is None or t.err == 0 or t.id in skip:
            continue
        inh = inh_of[t.id]
        node = nodes[t.node]
        plain = unbounded_output(t, node)
        if t.unit == 0:  # integers and bools: exact, so only an exact input can make it the op's own
            if inh > 0:
                continue
            thr, jump = 0.0, math.inf
        else:
            thr = noise.threshold(graph.chain_unit(t), inh, node.op, node.id)
            jump = t.err / thr if thr > 0 else math.inf
            if jump > 1 and inh > 0:
                jump = min(jump, abs_jump(graph, noise, t, node.op, node.id))
            tight = None if plain else tight_jump(graph, t)
            if tight is not None:  # an op whose noise is known exactly: its bound decides (bounds.py)
                jump, thr = tight, t.err / tight if tight > 0 else thr
        if jump > 1:
            if plain:
                blamed, how = node.id, "output"  # graph.blame of an output
            else:
                blamed, how = (node.id, "input") if leaf_jump(graph, t) is not None else graph.blame(t)
            out.append(Event(t.id, blamed, how, t.err, inh, thr, jump, propagates(graph, noise, t, judged=True)))
    return out


def propagates(graph: Graph, noise: Noise, t: Tensor, judged: bool = False) -> bool:
    """Whether `t`'s error shows in what its readers compute, beyond what their other inputs explain.

    `judged`: `t`'s error is already an event (its op's own beyond noise); its readers then only have
    to show it (_shows), not prove it again.

    A difference nothing reads (an op's unused extra output, like a norm's saved mean) or that its
    readers wash out is no culprit. Without producer links (module-level dumps) readers are not
    always known, nor in a dump of op outputs only (no link at all, e.g. a TF golden as .npy files):
    there it is assumed to propagate.
    """
    if graph.is_model_output(t):
        return True
    module_level, role = graph.module_level, t.role
    if judged and module_level and t.moved is not None:
        return True  # changed in place: its caller goes on using it, in code a module-level dump does not record
    # consumer_nodes: an input is read by its own call; anything else by the inputs that are it (none: no call)
    readers = graph.consumer_nodes(t) if role == "input" or graph.consumers.get(t.id) else []
    if not readers:  # the update's results are what the next step reads: they always matter
        return module_level or role == "parameter" or graph.direction == "update" or not graph.producer
    siblings = set(graph.nodes[t.node].outputs) if role == "output" and t.node >= 0 else {t.id}
    for node, via in readers:
        outs = [graph.tensors[i] for i in node.outputs if graph.tensors[i].err is not None]
        if not outs:
            return True  # an op golden does not have, or outputs not recorded: cannot tell
        same = {i for i in node.inputs + node.params if i == via or graph.producer.get(i) in siblings}
        if any(_shows(graph, noise, node, o, via, judged or role == "input", same) for o in outs):
            return True
    return False


def _shows(graph: Graph, noise: Noise, node: Node, out: Tensor, via: int, carried: bool,
           same: set[int] | None = None) -> bool:
    """Whether a reader's output carries more error than its inputs other than `via` explain (nor `same`: its
    other inputs made by the same call as `via`, as rotary cos and sin are): a sum carries an event's error
    or a changed input (`carried`) into its output (only an equal and opposite error cancels it); a reader of a
    tight kind must exceed its bound without `via` (bounds.py); any other must show REACH of a fresh event's
    threshold beyond what its other inputs bring."""
    if out.err is None:
        return False
    if carried and op_kind(node.op) == "sum" and out.abs_err:
        return True
    bound = output_bound(graph, out, skip=via)
    if bound is not None and out.abs_err is not None:
        return out.abs_err > bound
    same = same or {via}
    others = [graph.tensors[s] for s in node.inputs + node.params if s not in same]
    inh = max((_background(graph, noise, o) for o in others), default=0.0)
    return out.err > max(noise.threshold(out.unit, inh, node.op, node.id) * REACH, noise.allowance(node.op, node.id) * inh)


def _background(graph: Graph, noise: Noise, t: Tensor) -> float:
    """The error a tensor brings along from upstream: its own if inherited, its sources' if fresh."""
    if t.err is None:
        return 0.0
    inh = inherited(graph, t)
    node = graph.nodes[t.node]
    return inh if t.err > noise.threshold(t.unit, inh, node.op, node.id) else t.err


def contributions(graph: Graph, noise: Noise, top: int = 5) -> list[tuple[int, float]]:
    """Nodes adding the most error of their own (ratio of output error to inherited), for drift."""
    best: dict[int, float] = {}
    for t in graph.tensors:
        if t.target is None or t.err is None or t.role != "output" or not math.isfinite(t.err) or t.unit == 0:
            continue
        inh = max(inherited(graph, t), noise.floor * t.unit)
        gain = t.err / inh
        if gain > best.get(t.node, 0.0):
            best[t.node] = gain
    return sorted(best.items(), key=lambda kv: -kv[1])[:top]
