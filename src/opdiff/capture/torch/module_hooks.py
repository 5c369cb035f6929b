"""Forward hooks on every nn.Module: records at level="module", and the module stack of every level.

Each module call pushes a frame (its path, its call node) that api/aten ops use to name the
innermost module they ran in. The root model's own inputs and outputs are recorded at every level.
With backward, each recorded call's inputs get an identity "tap" whose gradient is the gradient
through this call alone, and each output a tensor hook (docs/capture.md, "Backward").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from ...store.format import node_name
from .calls import Call, grad_tap, record_inputs, record_outputs, user_source
from .naming import flatten

if TYPE_CHECKING:
    from .session import CaptureSession

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


def install(s: "CaptureSession") -> list:
    """Hook every module of the model; returns the handles to remove."""
    handles = []
    for path, m in s.model.named_modules():
        op = type(m).__name__
        is_root = m is s.model
        handles.append(m.register_forward_pre_hook(partial(_pre, s, path, op, is_root), with_kwargs=True))
        handles.append(m.register_forward_hook(partial(_post, s, path, op, is_root), with_kwargs=True, always_call=True))
    return handles


def _tap_inputs(s: "CaptureSession", c: Call, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Replace the call's top-level tensor arguments that require grad by gradient taps."""
    if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values())):
        return None
    new_args = tuple(grad_tap(s, c, a, str(i)) if isinstance(a, torch.Tensor) and a.requires_grad else a
                     for i, a in enumerate(args))
    new_kwargs = {k: grad_tap(s, c, v, f"kwargs.{k}") if isinstance(v, torch.Tensor) and v.requires_grad else v
                  for k, v in kwargs.items()}
    return new_args, new_kwargs


def _pre(s: "CaptureSession", path: str, op: str, is_root: bool, module, args: tuple, kwargs: dict):
    if not s.recording:
        return None
    s.internal += 1
    try:
        if is_root:
            s.record_parameters()
        call = s.recorder.counters.next(path, op)
        c = None
        if is_root or (s.level == "module" and s.wanted(path, op)):
            c = Call(node_name(path, op, call), path, op, "module", call, source=user_source() if s.source else None)
        s.stack.append(Frame(module, path, c, _next_sequence_nr() if s.tag_graph else 0))
        if c is None:
            return None
        record_inputs(s, c, args, kwargs)
        if s.backward and torch.is_grad_enabled():
            return _tap_inputs(s, c, args, kwargs)
        return None
    finally:
        s.internal -= 1


def _post(s: "CaptureSession", path: str, op: str, is_root: bool, module, args: tuple, kwargs: dict, output: Any):
    stack = s.stack
    if not stack or stack[-1].module is not module:
        return None
    frame = stack.pop()
    if not s.recording or (output is None and sys.exc_info()[1] is not None):
        return None  # not capturing, or the forward raised (this hook runs anyway to keep the stack right)
    s.internal += 1
    try:
        if frame.call is not None:
            record_outputs(s, frame.call, output, grad_hooks=s.backward and torch.is_grad_enabled())
        if s.tag_graph:
            tag_autograd_nodes(output, path, frame.seq0)
        return None
    finally:
        s.internal -= 1


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
        md = fn.metadata
        if NODE_KEY not in md:
            md[NODE_KEY] = path
        todo.extend(n for n, _ in fn.next_functions if n is not None)
