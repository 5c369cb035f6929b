"""level="aten": every aten op, forward and backward, via TorchDispatchMode.

Forward ops are named after the innermost module running; backward ops after the module whose
forward created the autograd node that runs them (module_hooks.tag_autograd_nodes), "" when none
did. Views and metadata-only ops are skipped; in-place ops are kept (docs/capture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .calls import Call, record_inputs, record_outputs, user_source
from .module_hooks import NODE_KEY

if TYPE_CHECKING:
    from .session import CaptureSession

# no computation worth comparing: metadata, identity/aliasing, or memory allocation only
SKIP_OPS = frozenset({
    "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset", "aten::size", "aten::stride",
    "aten::numel", "aten::dim", "aten::is_contiguous", "aten::is_same_size", "aten::is_nonzero", "aten::_local_scalar_dense",
    "aten::lift_fresh", "aten::lift", "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
    "aten::new_empty_strided", "aten::_has_compatible_shallow_copy_type", "aten::record_stream", "aten::set_",
})

ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"

_NAMES: dict[object, str | None] = {}
_VIEWS: set[object] = set()


def aten_name(func) -> str | None:
    """"aten.mm.default" for an op to record, None for a view or metadata-only op."""
    try:
        return _NAMES[func]
    except KeyError:
        pass
    is_view = bool(getattr(func, "is_view", False))
    if is_view:
        _VIEWS.add(func)
    name = _NAMES[func] = None if is_view or func._schema.name in SKIP_OPS else str(func)
    return name


class AtenMode(TorchDispatchMode):
    """Records each aten op of forward (and, with backward=True, of backward)."""

    def __init__(self, session: CaptureSession):
        super().__init__()
        self.s = session

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        s = self.s
        if s.internal or not s.recording:
            return func(*args, **kwargs)
        op = aten_name(func)
        if op is None:
            out = func(*args, **kwargs)
            if func in _VIEWS and args and isinstance(args[0], torch.Tensor):
                s.recorder.link_view(out, args[0])  # src of a later op looks through the view
            return out
        node = torch._C._current_autograd_node()
        extra = None
        if node is None and s.phase == "update":
            direction = "update"
            module = s.update_module(args)
        elif node is None:  # outside any module after the gradients arrived: gradient processing (averaging, clipping)
            direction = "backward" if s.grads_seen and not s.stack else "forward"
            module = s.stack[-1].path if s.stack else ""
        elif not s.backward:
            return func(*args, **kwargs)
        else:
            direction = "backward"
            grad_fn = node.name()
            if grad_fn == ACCUMULATE_GRAD:  # a parameter's gradient accumulation: its owner module
                module = s.param_owner.get(id(getattr(node, "variable", None)), "")
            else:
                module = node.metadata.get(NODE_KEY, "")
            extra = {"grad_fn": grad_fn}
        node_id, call = s.recorder.node(module, op)
        if not s.wanted(module, op):
            return func(*args, **kwargs)
        c = Call(node_id, module, op, "aten", call, direction,
                 source=user_source() if s.source and direction == "forward" else None, extra=extra)
        record_inputs(s, c, args, kwargs, base_op=func._schema.name.removeprefix("aten::"))
        out = func(*args, **kwargs)
        if not func._schema.is_mutable:
            record_outputs(s, c, out, grad_hooks=False)
            return out
        # In-place and out= ops: autograd bumps the mutated tensors' version counters only after
        # this mode returns, so forget what was recorded for them before recording the outputs, and
        # expect the bump afterwards so that later ops still link to these outputs.
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        for t in (*args, *kwargs.values(), *outs):
            if isinstance(t, torch.Tensor):
                s.recorder.forget(t)
        record_outputs(s, c, out, grad_hooks=False)
        for t in outs:
            s.recorder.expect_bump(t)
        return out
