"""torch.distributed collectives as records: inputs before, outputs after, on every rank.

While a capture runs, `all_reduce`, `all_gather`, `all_gather_into_tensor`, `reduce_scatter`,
`reduce_scatter_tensor` and `broadcast` of `torch.distributed` are wrapped (and put back on exit),
so a difference that reaches a rank through a collective shows as a collective whose output
differs while this rank's inputs agree; diagnose then looks at the other ranks' inputs
(docs/diagnose.md, "Many ranks"). The wrapper calls the original with the same arguments.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .calls import Call, record_inputs, record_tensor, user_source
from .naming import flatten

if TYPE_CHECKING:
    from .session import CaptureSession

# name -> positions (in args) of the tensors the collective writes its result into
COLLECTIVES: dict[str, tuple[int, ...]] = {
    "all_reduce": (0,), "all_gather": (0,), "all_gather_into_tensor": (0,), "reduce_scatter": (0,),
    "reduce_scatter_tensor": (0,), "broadcast": (0,),
}
# positions whose old value is only overwritten, not read (not recorded as inputs)
WRITE_ONLY: dict[str, tuple[int, ...]] = {"all_gather": (0,), "all_gather_into_tensor": (0,), "reduce_scatter": (0,),
                                          "reduce_scatter_tensor": (0,)}
OUT_KEYS = {"all_reduce": "tensor", "broadcast": "tensor", "all_gather": "tensor_list",
            "all_gather_into_tensor": "output_tensor", "reduce_scatter": "output", "reduce_scatter_tensor": "output"}


def install(s: CaptureSession) -> Callable[[], None]:
    """Wrap the collectives of torch.distributed; returns the function that puts them back."""
    dist = torch.distributed
    if not dist.is_available():
        return lambda: None
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    for name, fn in originals.items():
        setattr(dist, name, _wrap(s, name, fn))

    def restore() -> None:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    return restore


def _direction(s: CaptureSession) -> str:
    st = s.state
    if st.phase == "update":
        return "update"
    if torch._C._current_autograd_node() is not None or st.grads_seen:
        return "backward"  # gradient synchronisation (after or during backward)
    return "forward"


def _group_and_op(fn: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The ranks of the collective's process group and its reduce op (what the parallel checks rebuild)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    dist = torch.distributed
    out: dict[str, Any] = {}
    try:
        out["group"] = [int(r) for r in dist.get_process_group_ranks(bound.arguments.get("group") or dist.group.WORLD)]
    except (RuntimeError, ValueError, AttributeError):
        pass
    op = bound.arguments.get("op")
    if "op" in inspect.signature(fn).parameters:
        out["reduce_op"] = (getattr(op, "name", None) or str(op).rsplit(".", 1)[-1] if op is not None else "SUM").lower()
    src = bound.arguments.get("src")
    if isinstance(src, int):
        out["src"] = src
    return out


def _wrap(s: CaptureSession, name: str, fn: Callable) -> Callable:
    op = f"torch.distributed.{name}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        st = s.state
        if st.internal or not st.recording:
            return fn(*args, **kwargs)
        module = st.module_path()
        node, call = s.recorder.node(module, op)
        if not s.wanted(module, op):
            return fn(*args, **kwargs)
        c = Call(node, module, op, s.level, call, _direction(s), source=user_source() if s.source else None,
                 extra={"collective": name, "world_size": s.world_size, **_group_and_op(fn, args, kwargs)})
        with st.own_code():  # the collective's own aten ops are this record set, not more
            skip = WRITE_ONLY.get(name, ())
            record_inputs(s, c, tuple(None if i in skip else a for i, a in enumerate(args)),
                          {k: v for k, v in kwargs.items() if k != OUT_KEYS[name] or not skip})
            work = fn(*args, **kwargs)
            if kwargs.get("async_op"):
                return work  # its result is ready only after wait(): not recorded
            out = args[0] if args else kwargs.get(OUT_KEYS[name])
            for pos, t in flatten(out):
                s.recorder.forget(t)
                record_tensor(s, c, t, "output", pos)
        return work
    wrapper.__opdiff_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper
