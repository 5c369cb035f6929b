"""Op-level patching: each op of a module's *own* code (outside its children) is named and may have its
output replaced by the other run's, through a dispatch mode active while the module runs.

An op is keyed "module/aten.mul.Tensor#2" (the third aten.mul.Tensor the module's own code runs in one
call; "" is the root), so an op inserted or removed elsewhere in the module does not shift the others.
Views and metadata ops are not units (aten_mode.aten_name); an in-place op on a parameter or buffer is
left alone, so patching never writes into the user's model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .aten_mode import aten_name


def in_layout(own: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A new tensor holding `value` in own's dtype, device and strides (what the code after the op expects)."""
    out = torch.empty_like(own, requires_grad=False)
    with torch.no_grad():
        out.copy_(value)
    return out


OpHook = Callable[[str, int, torch.Tensor], "torch.Tensor | None"]  # (key, call index, output) -> replacement


def is_op_key(unit: str) -> bool:
    """Whether a patch unit names an op ("module/aten.x#k") rather than a module path."""
    return "/" in unit


def op_scope(unit: str) -> str:
    """The module whose own code runs the op a key names."""
    return unit.partition("/")[0]


def _storages(model: torch.nn.Module) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}


class OwnOps(TorchDispatchMode):
    """Calls hook(key, call, output) for each op the scope modules run in their own code; a tensor it
    returns (same shape) replaces the op's output (written into it for an in-place op)."""

    def __init__(self, model: torch.nn.Module, scopes: set[str], hook: OpHook):
        super().__init__()
        self.model, self.scopes, self.hook = model, scopes, hook
        self.stack: list[tuple[str, dict[str, int]] | None] = []
        self.calls: dict[str, int] = {}
        self.protected = _storages(model)

    def _enter_module(self, path: str) -> None:
        if path in self.scopes:
            self.calls[path] = self.calls.get(path, 0) + 1
            self.stack.append((path, {}))
        else:
            self.stack.append(None)

    def _leave_module(self) -> None:
        if self.stack:
            self.stack.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        top = self.stack[-1] if self.stack else None
        if top is None:
            return out
        name = aten_name(func)
        first = out[0] if isinstance(out, tuple) and out else out
        if name is None or not isinstance(first, torch.Tensor) or not first.is_floating_point():
            return out
        mutable = func._schema.is_mutable
        if mutable and first.untyped_storage().data_ptr() in self.protected:
            return out
        scope, counts = top
        k = counts[name] = counts.get(name, -1) + 1
        new = self.hook(f"{scope}/{name}#{k}", self.calls[scope] - 1, first)
        if new is None or new.shape != first.shape:
            return out
        if mutable:
            first.copy_(new)
            return out
        new = in_layout(first, new)
        return (new, *out[1:]) if isinstance(out, tuple) else new


@contextmanager
def own_ops(model: torch.nn.Module, scopes: set[str], hook: OpHook) -> Iterator[None]:
    """Run the block with OwnOps active over `model`'s modules `scopes`."""
    mode = OwnOps(model, scopes, hook)
    handles = []
    for path, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(lambda _m, _a, p=path: mode._enter_module(p)))
        handles.append(m.register_forward_hook(lambda _m, _a, _o: mode._leave_module(), always_call=True))
    try:
        with mode:
            yield
    finally:
        for h in handles:
            h.remove()
