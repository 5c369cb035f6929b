"""In-place writes to a module's inputs, for patching: a module can be wrong without its output being wrong
(`x.mul_(0.99)` on the residual stream it was handed), so each call's floating inputs are compared before
and after it. What a call changed is recorded per run; a patched call has its writes undone and the other
run's applied (the inputs then hold what the other run's module left in them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

Changes = dict[int, torch.Tensor]  # input leaf position -> its value after the call, for the leaves it changed
Mutations = dict[str, dict[int, Changes]]  # module path -> call index -> what that call changed
Seen = Callable[[str, int, list[torch.Tensor], list[torch.Tensor]], None]  # (path, call, inputs now, before)


def float_leaves(obj: Any) -> list[torch.Tensor]:
    """The floating tensors of nested call arguments, in a fixed order."""
    from .patching import leaves

    return [t for t in leaves(obj) if t.is_floating_point()]


def changed(now: list[torch.Tensor], before: list[torch.Tensor]) -> Changes:
    """The leaves whose values the call changed, with their new values."""
    return {i: t.detach().clone() for i, (t, b) in enumerate(zip(now, before))
            if t.shape == b.shape and not torch.equal(t.detach(), b)}


@contextmanager
def watch(model: torch.nn.Module, paths: set[str] | None, seen: Seen) -> Iterator[None]:
    """Calls seen(path, call, inputs, inputs_before) after each call of the modules `paths` (None: all but the
    root): the floating tensors its caller handed it, and copies of them taken before the call (and before
    the module's own pre-hooks, which belong to its call)."""
    calls: dict[str, int] = {}
    stack: dict[str, list[tuple[int, list[torch.Tensor], list[torch.Tensor]]]] = {}

    def pre(path: str, args: Any) -> None:
        k = calls[path] = calls.get(path, -1) + 1
        handed = float_leaves(args)
        stack.setdefault(path, []).append((k, handed, [t.detach().clone() for t in handed]))

    def post(path: str) -> None:
        if stack.get(path):
            k, handed, before = stack[path].pop()
            seen(path, k, handed, before)
    handles = []
    for path, m in model.named_modules():
        if path and (paths is None or path in paths):
            handles.append(m.register_forward_pre_hook(lambda _m, a, kw, p=path: pre(p, (a, kw)), with_kwargs=True,
                                                       prepend=True))
            handles.append(m.register_forward_hook(lambda _m, _a, _o, p=path: post(p)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def expected(now: list[torch.Tensor], before: list[torch.Tensor], mine: Changes,
             theirs: Changes) -> dict[int, torch.Tensor]:
    """Per input leaf either run wrote to, the value it should hold after the call had it been the other
    run's module: the other's write, or (it wrote none there) the value before this call."""
    return {i: theirs[i] if i in theirs else before[i] for i in set(mine) | set(theirs) if i < len(now)}


def put(now: list[torch.Tensor], values: dict[int, torch.Tensor]) -> None:
    """Write `values` into the call's inputs (never into a parameter, nor into a tensor autograd tracks)."""
    with torch.no_grad():
        for i, v in values.items():
            t = now[i]
            if isinstance(t, torch.nn.Parameter) or t.requires_grad or t.shape != v.shape:
                continue
            t.copy_(v.to(dtype=t.dtype, device=t.device))
