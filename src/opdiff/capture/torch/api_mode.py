"""level="api": every torch.*, torch.nn.functional.* and Tensor method call, via TorchFunctionMode.

Only the calls the model's code makes are seen (inside a call the mode is off, so F.layer_norm is
one record set, not the ops it is made of). Metadata queries and pure allocations are skipped
(see SKIP and docs/capture.md, "What each level records").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from .calls import Call, record_inputs, record_outputs, record_tensor, user_source

if TYPE_CHECKING:
    from .session import CaptureSession

# calls that read metadata, convert to Python, or only allocate: no tensor computation to compare
SKIP = frozenset(f"torch.Tensor.{n}" for n in (
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "is_contiguous",
    "is_floating_point", "is_complex", "is_signed", "is_inference", "is_set_to", "is_pinned", "is_shared",
    "element_size", "data_ptr", "untyped_storage", "storage", "_typed_storage", "get_device", "dim_order",
    "has_names", "_is_view", "is_nonzero", "__len__", "__repr__", "__str__", "__format__", "__hash__",
    "__bool__", "__int__", "__float__", "__index__", "__complex__", "__iter__", "__contains__", "__reversed__",
    "item", "tolist", "numpy", "__array__", "__array_wrap__", "__reduce_ex__", "__setstate__", "__deepcopy__",
    "__dlpack__", "__dlpack_device__", "requires_grad_", "retain_grad", "register_hook",
    "register_post_accumulate_grad_hook", "new_empty", "new_empty_strided", "_version", "backward",
)) | frozenset(f"torch.{n}" for n in (
    "is_tensor", "is_storage", "is_floating_point", "is_complex", "is_nonzero", "numel", "empty", "empty_like",
    "empty_strided", "is_grad_enabled", "get_default_dtype", "result_type", "can_cast", "promote_types",
))

_NAMES: dict[object, str | None] = {}


def api_name(func) -> str | None:
    """The public name of a torch API ("torch.nn.functional.gelu", "torch.Tensor.add"), None to skip it."""
    try:
        return _NAMES[func]
    except (KeyError, TypeError):
        pass
    name = resolve_name(func) or f"{getattr(func, '__module__', None) or 'torch'}.{getattr(func, '__qualname__', repr(func))}"
    if name.endswith(("__get__", "__set__", "__delete__")) or name in SKIP:
        name = None  # attribute access (t.shape, t.dtype, t.T, ...) or a metadata query
    try:
        _NAMES[func] = name
    except TypeError:
        pass
    return name


class ApiMode(TorchFunctionMode):
    """Records each top-level torch API call of the forward, attributed to the innermost module."""

    def __init__(self, session: CaptureSession):
        super().__init__()
        self.s = session

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        s = self.s
        if s.internal or not s.recording:
            return func(*args, **kwargs)
        op = api_name(func)
        if op is None or torch._C._current_autograd_node() is not None:
            return func(*args, **kwargs)  # metadata, or a custom Function's backward (not an API call)
        direction = "update" if s.phase == "update" else "backward" if s.grads_seen and not s.stack else "forward"
        module = s.update_module(args) if direction == "update" else s.stack[-1].path if s.stack else ""
        node, call = s.recorder.node(module, op)
        if not s.wanted(module, op):
            return func(*args, **kwargs)
        c = Call(node, module, op, "api", call, direction,
                 source=user_source() if s.source else None)
        record_inputs(s, c, args, kwargs, base_op=op.rsplit(".", 1)[-1])
        out = func(*args, **kwargs)
        if op == "torch.Tensor.__setitem__" and args and isinstance(args[0], torch.Tensor):
            record_tensor(s, c, args[0], "output", "0")  # in place, returns None: the result is the target
        else:
            record_outputs(s, c, out, grad_hooks=s.backward and torch.is_grad_enabled() and direction == "forward")
        return out
