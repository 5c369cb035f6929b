"""Forward hooks on every nn.Module: records at level="module", and the module stack of every level.

Each module call pushes a frame (its path, its call node) that api/aten ops use to name the
innermost module they ran in. The root model's own inputs and outputs are recorded at every level.
With backward, each output gets a tensor hook, and the autograd nodes of the call that consume an
input get node hooks whose contributions add up to the gradient through this call alone; neither
changes the graph, so gradients stay bitwise the same (docs/capture.md, "Backward").
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from ...store.names import record_name
from .calls import Call, grad_hook, record_inputs, record_outputs, record_tensor, user_source
from .layout import holds_dtensor, planned_inputs
from .naming import flatten
from .recorder import _version

if TYPE_CHECKING:
    from .session import CaptureSession

INPLACE = "inplace."  # pos prefix of an input recorded again after the call changed it in place
NODE_KEY = "opdiff.module"  # autograd Node.metadata key: module path whose forward made the node

try:
    _next_sequence_nr = torch._C._autograd._get_sequence_nr
except AttributeError:  # pragma: no cover - older torch: tag without the bound (see docs/capture.md)
    def _next_sequence_nr() -> int:
        return 0


@dataclass
class Frame:
    """One module call in progress."""

    module: torch.nn.Module
    path: str
    call: Call | None  # None when the call itself is not recorded (api/aten level, filtered out)
    seq0: int  # first autograd sequence number this call could create
    grad_inputs: list | None = None  # (pos, tensor) of inputs whose gradient is wanted
    versions: list | None = None  # (pos, tensor, version counter) of its inputs when the call began


def install(s: CaptureSession) -> list:
    """Hook every module of the model; returns the handles to remove."""
    handles = []
    for path, m in s.model.named_modules():
        if not s.hooks_module(path):
            continue
        op = type(m).__name__
        is_root = m is s.model
        # first of the module's pre-hooks: ops the user's own pre-hooks run (a mask rewritten on the way in)
        # belong to this module's call, not to its parent, and its inputs are what the caller passed; after a
        # parallel plan's input hooks, whose DTensors carry the layout that merging ranks needs
        handles.append(m.register_forward_pre_hook(partial(_pre, s, path, op, is_root), with_kwargs=True,
                                                   prepend=not planned_inputs(m)))
        handles.append(m.register_forward_hook(partial(_post, s, path, op, is_root), with_kwargs=True, always_call=True,
                                               prepend=holds_dtensor(m)))
    return handles


def _plain(s: CaptureSession) -> AbstractContextManager[Any]:
    """At api level, the hooks' own tensor work outside the TorchFunctionMode: with the mode on, every
    attribute read of a tensor (shape, dtype, device ...) goes through the mode's Python handler, ~10x
    slower (the root's inputs and the parameters are recorded from these hooks)."""
    return torch._C.DisableTorchFunction() if s.level == "api" else nullcontext()


def _pre(s: CaptureSession, path: str, op: str, is_root: bool, module, args: tuple, kwargs: dict):
    st = s.state
    if not st.recording:
        return None
    with st.own_code(), _plain(s):
        if is_root:
            s.record_parameters()
        node, call = s.recorder.node(path, op)
        c = None
        if is_root or (s.level == "module" and s.wanted(path, op)):
            c = Call(node, path, op, "module", call, source=user_source() if s.source else None)
        want_grads = c is not None and s.backward and torch.is_grad_enabled()
        frame = Frame(module, path, c, _next_sequence_nr() if s.tag_graph or want_grads else 0)
        st.enter_module(frame)
        if c is None:
            return None
        flat = record_inputs(s, c, args, kwargs)
        if s.level == "module":
            frame.versions = [(pos, t, _version(t)) for pos, t in flat]
        if want_grads:
            frame.grad_inputs = [(pos, t) for pos, t in flat if t.requires_grad]
        return None


def _post(s: CaptureSession, path: str, op: str, is_root: bool, module, args: tuple, kwargs: dict, output: Any):
    st = s.state
    frame = st.leave_module(module)
    if frame is None:
        return None
    if not st.recording or (output is None and sys.exc_info()[1] is not None):
        return None  # not capturing, or the forward raised (this hook runs anyway to keep the stack right)
    with st.own_code(), _plain(s):
        if frame.call is not None:
            record_outputs(s, frame.call, output, grad_hooks=s.backward and torch.is_grad_enabled())
            if frame.versions:
                record_mutated_inputs(s, frame.call, frame.versions)
        if frame.grad_inputs and frame.call is not None:
            watch_input_grads(s, frame.call, frame.grad_inputs, output, frame.seq0)
        if s.tag_graph:
            tag_autograd_nodes(output, path, frame.seq0)
        return None


def record_mutated_inputs(s: CaptureSession, c: Call, versions: list) -> None:
    """Inputs the call changed in place (their version counter moved): recorded again, as outputs of the call
    (pos "inplace.<input pos>", extra["inplace_of"] its input record), so that a module which alters the tensor
    its caller goes on using is seen doing it; the input record keeps the value the call was handed."""
    for pos, t, version in versions:
        if version is None or _version(t) == version:
            continue
        extra = {**(c.extra or {}), "inplace_of": record_name(c.node, c.direction, "input", pos)}
        s.recorder.record(t, node=c.node, module=c.module, op=c.op, level=c.level, call=c.call, direction=c.direction,
                          role="output", pos=f"{INPLACE}{pos}", source=c.source, extra=extra)


def node_metadata(fn: Any) -> dict[str, Any]:
    """An autograd node's metadata dict (torch's typing declares a method; its C++ nodes hold a dict attribute)."""
    return fn.metadata


def tag_autograd_nodes(output: Any, path: str, seq0: int) -> None:
    """Mark the autograd nodes this module call created (not yet marked by a submodule) with its path.

    Walks back from the outputs through the nodes made during the call (sequence number >= seq0);
    the aten capture reads the mark of the node running in backward to name a backward op's module.
    """
    todo = [t.grad_fn for _, t in flatten(output) if t.grad_fn is not None]
    visited: set[int] = set()
    while todo:
        fn = todo.pop()
        seq = fn._sequence_nr()
        if seq < seq0 or seq in visited:
            continue  # made before this call (an earlier module's), or already walked
        visited.add(seq)
        md = node_metadata(fn)
        if NODE_KEY not in md:
            md[NODE_KEY] = path
        todo.extend(n for n, _ in fn.next_functions if n is not None)


class _InputGrad:
    """The gradient w.r.t. one input of one call: the sum of what the call's consumer nodes send it."""

    __slots__ = ("pos", "pending", "total")

    def __init__(self, pos: str):
        self.pos, self.pending, self.total = pos, 0, None


def watch_input_grads(s: CaptureSession, c: Call, inputs: list, output: Any, seq0: int) -> None:
    """Hook the autograd nodes made by this call that consume its inputs (no node is added to the graph)."""
    targets: dict[tuple[int, int], str] = {}
    leaves: dict[int, str] = {}
    passed_through = {id(t) for _, t in flatten(output)}
    for pos, t in inputs:
        if id(t) in passed_through:  # returned as is (e.g. Dropout in eval): its gradient is the output's
            t.register_hook(partial(grad_hook, s, s.state.step_index, c, "input", pos))
        elif t.grad_fn is not None:
            targets[(id(t.grad_fn), t.output_nr)] = pos
        else:
            leaves[id(t)] = pos
    held = [t.grad_fn for _, t in inputs]  # keeps the ids above valid during the walk
    consumers: list[tuple[Any, list[tuple[int, str]]]] = []
    todo = [t.grad_fn for _, t in flatten(output) if t.grad_fn is not None]
    visited: set[int] = set()
    while todo:
        fn = todo.pop()
        if id(fn) in visited or fn._sequence_nr() < seq0:
            continue
        visited.add(id(fn))
        held.append(fn)
        edges = []
        for k, (nxt, nr) in enumerate(fn.next_functions):
            if nxt is None:
                continue
            pos = targets.get((id(nxt), nr))
            if pos is None and leaves:
                pos = leaves.get(id(getattr(nxt, "variable", None)))
            if pos is not None:
                edges.append((k, pos))
            else:
                todo.append(nxt)
        if edges:
            consumers.append((fn, edges))
    accs = {pos: _InputGrad(pos) for _, edges in consumers for _, pos in edges}
    for fn, edges in consumers:
        for pos in {pos for _, pos in edges}:
            accs[pos].pending += 1
        fn.register_hook(partial(_consumer_hook, s, s.state.step_index, c, edges, accs))


def _consumer_hook(s: CaptureSession, step: int, c: Call, edges: list, accs: dict, grad_inputs, grad_outputs) -> None:
    if not s.state.live(step):
        return
    with s.state.own_code():
        for k, pos in edges:
            g = grad_inputs[k]
            if g is not None:
                acc = accs[pos]
                acc.total = g if acc.total is None else acc.total + g  # our own sum: the graph's grads are untouched
        for pos in {pos for _, pos in edges}:
            acc = accs[pos]
            acc.pending -= 1
            if acc.pending == 0 and acc.total is not None:
                total, acc.total = acc.total, None
                record_tensor(s, c, total, "input", pos, direction="backward")
