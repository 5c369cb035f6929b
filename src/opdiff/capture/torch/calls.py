"""Record one call (a module call or an op): its inputs, its call line for replay, its outputs.

Shared by the module hooks and the api/aten modes, so that every level names, links and
describes calls the same way.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from .naming import call_skeleton, flatten, flatten_call

if TYPE_CHECKING:
    from .session import CaptureSession

# ops that overwrite their first argument without reading it: its old value (often uninitialised
# memory) is not recorded as an input
OVERWRITE_SELF = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                            "geometric_", "cauchy_", "log_normal_", "set_", "resize_", "resize_as_"})

_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep)


def user_source() -> str | None:
    """"file:line" of the innermost caller outside torch and opdiff (the code that made the call)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP_DIRS):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return None


@dataclass
class Call:
    """Where one call runs and how it is named."""

    node: str
    module: str
    op: str
    level: str
    call: int
    direction: str = "forward"
    source: str | None = None
    extra: dict[str, Any] | None = None


def record_tensor(s: CaptureSession, c: Call, t: torch.Tensor, role: str, pos: str, direction: str | None = None):
    return s.recorder.record(t, node=c.node, module=c.module, op=c.op, level=c.level, call=c.call,
                             direction=direction or c.direction, role=role, pos=pos, source=c.source, extra=c.extra)


def record_inputs(s: CaptureSession, c: Call, args: tuple, kwargs: dict, base_op: str = "") -> list[tuple[str, torch.Tensor]]:
    """Input records of a call, then its call line (tensors named by their input records); returns the call's
    (pos, tensor) inputs as flatten_call gives them (a caller that needs them again does not walk them twice)."""
    names: dict[str, str] = {}
    skip_self = base_op in OVERWRITE_SELF
    flat = flatten_call(args, kwargs)
    for pos, t in flat:
        if (skip_self and pos == "0") or pos == "kwargs.out" or pos.startswith("kwargs.out."):
            continue  # its old value is not an input of the op
        rec = record_tensor(s, c, t, "input", pos)
        if rec is not None:
            names[pos] = rec.name

    def ref(pos: str, t: torch.Tensor) -> dict[str, Any]:
        name = names.get(pos)
        if name is not None:
            return {"tensor": name}
        return {"tensor": None, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}

    sk_args, sk_kwargs = call_skeleton(args, kwargs, ref)
    line = {"node": c.node, "op": c.op, "module": c.module, "level": c.level, "call": c.call,
            "direction": c.direction, "args": sk_args, "kwargs": sk_kwargs}
    if c.source:
        line["source"] = c.source
    s.recorder.call(line)
    return flat


def record_outputs(s: CaptureSession, c: Call, out: Any, grad_hooks: bool) -> None:
    """Output records of a call; with `grad_hooks`, also the gradient of each output in backward."""
    for pos, t in flatten(out):
        record_tensor(s, c, t, "output", pos)
        if grad_hooks and t.requires_grad:
            t.register_hook(partial(grad_hook, s, s.state.step_index, c, "output", pos))


def grad_hook(s: CaptureSession, step: int, c: Call, role: str, pos: str, grad: torch.Tensor) -> None:
    """Record the gradient w.r.t. one input/output of a call (direction backward, same node)."""
    if grad is None or not s.state.live(step):
        return
    with s.state.own_code():
        record_tensor(s, c, grad, role, pos, direction="backward")
