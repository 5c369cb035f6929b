"""level="api": every torch.*, torch.nn.functional.* and Tensor method call, via TorchFunctionMode.

Only the calls the model's code makes are seen (inside a call the mode is off, so F.layer_norm is
one record set, not the ops it is made of). Metadata queries and pure allocations are skipped
(see SKIP and docs/capture.md, "What each level records").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from .calls import Call, record_outputs, record_tensor
from .dispatch import CallDispatch, Site

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


class ApiMode(CallDispatch[Callable[..., Any]], TorchFunctionMode):
    """Records each top-level torch API call of the forward, attributed to the innermost module."""

    LEVEL = "api"
    op_name = staticmethod(api_name)
    __torch_function__ = CallDispatch.intercept

    def site(self, func: Callable[..., Any], op: str, args: tuple[Any, ...]) -> Site | None:
        if torch._C._current_autograd_node() is not None:
            return None  # a custom Function's backward (not an API call)
        return super().site(func, op, args)

    def base_op(self, func: Callable[..., Any], op: str) -> str:
        return op.rsplit(".", 1)[-1]

    def record_result(self, func: Callable[..., Any], c: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
                      out: Any) -> None:
        s = self.s
        if c.op == "torch.Tensor.__setitem__" and args and isinstance(args[0], torch.Tensor):
            record_tensor(s, c, args[0], "output", "0")  # in place, returns None: the result is the target
        else:
            record_outputs(s, c, out, grad_hooks=s.backward and torch.is_grad_enabled() and c.direction == "forward")
