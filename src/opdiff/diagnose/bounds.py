"""Tight error bounds for ops whose rounding noise is known exactly, whatever the target's precision.

The calibrated noise model (local.py) must allow 32 rounding units for any op: a reduction in bf16 may
show that much. Many ops cannot: a parameter or a tensor handed over unchanged is at most one cast away
from golden's; data movement (view, cat, gather, embedding ...) copies elements; add, sub, neg and a
multiplication move absolute error by rules of arithmetic. For these the largest absolute error a correct
op can show follows from its inputs' absolute errors (MaxAbsErr) and golden's magnitudes (docs/diagnose.md,
"Tight bounds"); beyond it, the error is the op's own. This is what finds a 1 % fault in a bf16 target,
where one rounding unit is 0.4 % and the calibrated threshold 12.5 %.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from ..metrics.masks import absmax, mask_pair
from ..metrics.thresholds import unit
from .graph import Graph, Node, Tensor, identity_key

CAST = 1.5  # a parameter or a copying op is within one rounding of golden's value (1 unit), with margin
HANDOVER = 1.05  # a tensor handed over unchanged: at most one cast (1 unit), exact arithmetic
OWN = 2.0  # an arithmetic op's own rounding, golden's and the target's, in units of the output's scale
SLACK = 1.5  # margin on what the inputs bring (second-order terms, broadcasting)

# the last part of an op name (aten.view.default -> view, torch.Tensor.__mul__ -> mul); module classes never match
_MOVE = {"view", "reshape", "clone", "copy", "contiguous", "cat", "concat", "concatenate", "stack", "slice",
         "select", "index", "index_select", "gather", "embedding", "permute", "transpose", "t", "expand",
         "expand_as", "squeeze", "unsqueeze", "flatten", "unflatten", "split", "split_with_sizes", "chunk",
         "narrow", "repeat", "unbind", "alias", "detach", "to", "_to_copy", "type_as", "float", "half",
         "bfloat16", "_unsafe_view", "movedim", "unfold", "roll", "flip", "repeat_interleave", "lift_fresh"}
_SUM = {"add", "sub", "rsub", "neg", "iadd", "isub", "radd"}
_MUL = {"mul", "multiply", "rmul", "imul"}
_DIV = {"div", "truediv", "divide", "itruediv"}
_KINDS = {"move": _MOVE, "sum": _SUM, "mul": _MUL, "div": _DIV}


def _base(op: str) -> str | None:
    """The op's own name: aten.view.default -> view, torch.Tensor.__mul__ -> mul, Tensor.add_ -> add."""
    parts = op.split(".")
    if parts[0] == "aten" and len(parts) > 1:
        b = parts[1]
    elif parts[0] in ("torch", "Tensor") and len(parts) > 1:
        b = parts[-1]
    else:
        return None  # a module call: its noise is the calibrated one
    if b.startswith("__") and b.endswith("__"):
        return b[2:-2]
    return b[:-1] if b.endswith("_") and not b.startswith("_") else b


@lru_cache(maxsize=4096)
def op_kind(op: str) -> str | None:
    """'move', 'sum', 'mul', 'div' or None (an op whose noise only calibration can tell), from its name. A pure
    function of the name, cached: the per-event rules ask it for every output (a model has a few hundred op names)."""
    b = _base(op)
    return next((k for k, names in _KINDS.items() if b in names), None)


def _scale(t: Tensor) -> float | None:
    """max |golden| of a pair: the scale its absolute error is measured against."""
    return absmax(t.golden.stats) if t.golden is not None else None


def _usable(t: Tensor) -> bool:
    """A float pair with a finite absolute error and a known, finite scale, no mask fill values."""
    s = _scale(t)
    return (t.unit > 0 and t.abs_err is not None and math.isfinite(t.abs_err) and s is not None
            and math.isfinite(s) and not mask_pair(t.golden, t.target))


def _inputs(graph: Graph, node: Node, kind: str, skip: int | None = None) -> list[Tensor] | None:
    """The node's float inputs and parameters, all usable, or None. Integer inputs (indices) must agree
    exactly; a multiplication by one (a mask) is not bounded by magnitudes, so it has none."""
    ins = [graph.tensors[i] for i in node.inputs + node.params if i != skip]
    ints = [t for t in ins if t.unit == 0]
    floats = [t for t in ins if t.unit > 0]
    if any(t.err != 0 for t in ints) or ints and kind in ("mul", "div") or not floats and skip is None:
        return None
    return floats if all(_usable(t) for t in floats) else None


def _brought(kind: str, ins: list[Tensor], out_scale: float) -> float | None:
    """The absolute error the inputs can bring to the output of a correct op of this kind."""
    errs = [t.abs_err or 0.0 for t in ins]
    scales = [_scale(t) or 0.0 for t in ins]
    if not ins:  # the one float input left out: what the others explain is nothing
        return 0.0
    if kind == "move":
        return max(errs)
    if kind == "sum":
        return sum(errs)
    if len(ins) == 1 and kind in ("mul", "div"):  # times or over a scalar, which golden's magnitudes give
        return errs[0] * out_scale / scales[0] if scales[0] > 0 else None
    if len(ins) == 2 and kind == "mul":  # |(x + dx)(y + dy) - xy| <= |dx| max|y| + max|x| |dy| + |dx dy|
        (ex, ey), (sx, sy) = errs, scales
        return ex * sy + sx * ey + ex * ey
    return None  # a quotient of two tensors: small divisors make it unbounded


def output_bound(graph: Graph, t: Tensor, skip: int | None = None) -> float | None:
    """Largest absolute error a correct op of a tight kind can give its output `t` (None: not tight or
    not known). With `skip`, one input is left out: what the others alone explain."""
    node = graph.node_of(t)
    if node is None or t.role != "output":
        return None
    kind = op_kind(node.op)  # before _usable (the same answer: both must hold), a dict lookup per op name
    if kind is None or (kind in ("mul", "div") and skip is not None) or not _usable(t):
        return None
    ins = _inputs(graph, node, kind, skip)
    if ins is None:
        return None
    scale = _scale(t) or 0.0
    brought = _brought(kind, ins, scale)
    if brought is None:
        return None
    own = (CAST if kind == "move" else OWN) * graph.chain_unit(t) * scale
    return SLACK * brought + own


def _source(graph: Graph, t: Tensor, depth: int = 8) -> Tensor | None:
    """The earlier matched tensor an input is, looking back through ops golden does not have (an in-place
    op, a cast): the first input of each such op that has a producer."""
    p = graph.producer.get(t.id)
    for _ in range(depth):
        if p is None:
            return None
        src = graph.tensors[p]
        if src.err is not None:
            return src
        node = graph.node_of(src)
        if node is None:
            return None
        p = next((graph.producer[i] for i in node.inputs if i in graph.producer), None)
    return None


def handover_bound(graph: Graph, t: Tensor) -> float | None:
    """An input golden hands over unchanged from an earlier output: the target may cast it on the way, no
    more (an in-place op golden does not run changes it: a fault of that op)."""
    if t.role != "input":
        return None
    src = _source(graph, t)
    if src is None or not _usable(t) or not _usable(src):
        return None
    key = identity_key(t.golden)
    if key is None or key != identity_key(src.golden):
        return None  # golden's input is not that tensor: the two may differ legitimately
    return (src.abs_err or 0.0) + HANDOVER * graph.chain_unit(t) * (_scale(t) or 0.0)  # handed over: the same error


def parameter_jump(t: Tensor) -> float | None:
    """A parameter cast to a narrower dtype is golden's rounded once: its relative error is at most one unit
    (tensor and statistics mode alike). Same dtypes keep the calibrated rule (a training step's update
    leaves parameters a few rounding units apart)."""
    if t.role != "parameter" or t.err is None or t.unit == 0 or not math.isfinite(t.err) or \
            t.golden is None or t.target is None or t.golden.dtype == t.target.dtype:
        return None
    return t.err / (CAST * t.unit)


def _external(graph: Graph, t: Tensor, depth: int = 8) -> bool:
    """Whether the target's `t` is a tensor no recorded op computed (a buffer, a constant), possibly through
    copies and casts golden does not run."""
    p = graph.producer.get(t.id)
    for _ in range(depth):
        if p is None:
            return True
        src = graph.tensors[p]
        node = graph.node_of(src)
        if src.err is not None or node is None or op_kind(node.op) != "move":
            return False
        p = next((graph.producer[i] for i in node.inputs if i in graph.producer), None)
    return False


def leaf_jump(graph: Graph, t: Tensor) -> float | None:
    """A buffer an op reads (rotary frequencies, a position table), which golden's op reads as is and the
    target through a cast to a narrower dtype: like a parameter, one rounding away from golden's."""
    node = graph.node_of(t)
    if node is None or node.level != "aten":
        return None  # only an aten-level dump records every op: elsewhere an unrecorded op may have computed it
    if t.role != "input" or t.golden is None or t.golden.src or t.err is None \
            or t.unit == 0 or not math.isfinite(t.err) or mask_pair(t.golden, t.target) or not _external(graph, t):
        return None
    u = graph.chain_unit(t)
    return t.err / (CAST * u) if u > unit(t.golden.dtype) else None


def inplace_jump(t: Tensor) -> float | None:
    """An input the target's call changed in place while golden's call left it alone (inplace.py): a correct
    call leaves it exactly as it was handed, so a change beyond one rounding is the call's own."""
    if t.moved is None or t.unit == 0 or not math.isfinite(t.moved):
        return None
    return t.moved / (CAST * t.unit)


def unbounded_output(t: Tensor, node: Node) -> bool:
    """Whether `t` is an output that no tight rule bounds and leaf_jump does not take, without asking each rule:
    an output (not a parameter, an input or a handed-over tensor) of a call that is not an aten op (no leaf),
    not changed in place, of no tight kind (op_kind). Then tight_jump and leaf_jump are None (the events'
    common case at module level; tests/test_diagnose_events.py checks it against the rules)."""
    return node.level != "aten" and t.moved is None and t.role == "output" and op_kind(node.op) is None


BOUNDS: tuple[Callable[[Graph, Tensor], float | None], ...] = (output_bound, handover_bound)


def tight_jump(graph: Graph, t: Tensor) -> float | None:
    """How far `t`'s error exceeds the tight bound of its kind (> 1: its own), None when no bound applies."""
    for leaf in (parameter_jump(t), leaf_jump(graph, t), inplace_jump(t)):
        if leaf is not None:
            return leaf
    for bound in BOUNDS:
        b = bound(graph, t)
        if b is not None:
            return (t.abs_err or 0.0) / b if b > 0 else (math.inf if t.abs_err else 0.0)
    return None
