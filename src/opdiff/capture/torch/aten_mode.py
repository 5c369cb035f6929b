"""level="aten": every aten op, forward and backward, via TorchDispatchMode.

Forward ops are named after the innermost module running; backward ops after the module whose
forward created the autograd node that runs them (module_hooks.tag_autograd_nodes), "" when none
did. Views and metadata-only ops are skipped; in-place ops are kept (docs/capture.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from .calls import Call, record_outputs
from .dispatch import CallDispatch, Site
from .module_hooks import NODE_KEY, node_metadata

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


class AtenMode(CallDispatch[OpOverload], TorchDispatchMode):
    """Records each aten op of forward (and, with backward=True, of backward)."""

    LEVEL = "aten"
    op_name = staticmethod(aten_name)
    __torch_dispatch__ = CallDispatch.intercept

    def run_unnamed(self, func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        if func in _VIEWS and args and isinstance(args[0], torch.Tensor):
            self.s.recorder.link_view(out, args[0])  # src of a later op looks through the view
        return out

    def site(self, func: OpOverload, op: str, args: tuple[Any, ...]) -> Site | None:
        node = torch._C._current_autograd_node()
        if node is None:  # the optimizer's update; gradient processing outside any module; the forward
            return super().site(func, op, args)
        if not self.s.backward:
            return None
        grad_fn = node.name()
        if grad_fn == ACCUMULATE_GRAD:  # a parameter's gradient accumulation: its owner module
            module = self.state.param_names.get(id(getattr(node, "variable", None)), ("", ""))[0]
        else:
            module = node_metadata(node).get(NODE_KEY, "")
        return module, "backward", {"grad_fn": grad_fn}

    def base_op(self, func: OpOverload, op: str) -> str:
        return func._schema.name.removeprefix("aten::")

    def wants_source(self, direction: str) -> bool:
        return direction == "forward"

    def record_result(self, func: OpOverload, c: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
                      out: Any) -> None:
        s = self.s
        if not func._schema.is_mutable:
            record_outputs(s, c, out, grad_hooks=False)
            return
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
