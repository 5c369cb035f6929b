"""The optimizer's step as records (direction "update"): each parameter before and after, its
gradient, and its state tensors (exp_avg, exp_avg_sq, momentum_buffer, ...), per owning module.

`opdiff.capture(..., optimizer=opt)` installs a step pre-hook and post-hook; neither changes what
the step computes. While the step runs, api and aten ops are recorded with direction "update" and
named after the module owning the parameter (or state) they touch (docs/capture.md, "Optimizer").
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from .calls import Call, record_tensor

if TYPE_CHECKING:
    from .session import CaptureSession

LEVEL = "param"  # optimizer records are per parameter, like the parameter records


def install(s: CaptureSession, optimizer: torch.optim.Optimizer) -> list:
    """Hook the optimizer's step; returns the handles to remove."""
    calls: dict[str, Call] = {}  # module path -> its update call, while one step runs
    return [optimizer.register_step_pre_hook(partial(_pre, s, calls)),
            optimizer.register_step_post_hook(partial(_post, s, calls))]


def install_phase(s: CaptureSession) -> list:
    """Without `optimizer=`: any optimizer stepping the model's parameters still marks its ops as the update
    (direction "update", named after the parameters' modules) instead of gradient processing in the backward
    pass; nothing of its own is recorded (global step hooks; an attached optimizer's own hooks take over)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def pre(optimizer, args, kwargs) -> None:
        if s.optimizer is None and s.state.phase != "update":
            owners = {id(p): mpath for mpath, _, p, _ in _calls(s, optimizer)}
            if owners:
                for mpath, _, p, _ in _calls(s, optimizer):
                    owners.update({id(v): mpath for _, v in _tensor_states(optimizer, p)})
                s.state.begin_update(owners)
                s._phase_from = optimizer

    def post(optimizer, args, kwargs) -> None:
        if s._phase_from is optimizer:
            s._phase_from = None
            s.state.end_update()
    return [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]


def hyperparameters(group: dict[str, Any]) -> dict[str, Any]:
    """The numeric settings of a param group (lr, betas, eps, weight_decay, momentum, ...)."""
    out: dict[str, Any] = {}
    for k, v in group.items():
        if k == "params":
            continue
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, bool) or v is None or isinstance(v, str):
            out[k] = v
        elif isinstance(v, (int, float)):
            out[k] = v if math.isfinite(v) else repr(v)
        elif isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v):
            out[k] = list(v)
    return out


def _tensor_states(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    st = optimizer.state.get(p, {})
    return [(k, v) for k, v in st.items() if isinstance(v, torch.Tensor)]


def _calls(s: CaptureSession, optimizer: torch.optim.Optimizer):
    """(module path, local name, parameter, its group) of every parameter the step can update, in order."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            owner = s.state.param_names.get(id(p))
            if owner is not None:
                yield owner[0], owner[1], p, group


def _pre(s: CaptureSession, calls: dict[str, Call], optimizer, args, kwargs) -> None:
    st = s.state
    owners: dict[int, str] = {}
    for mpath, _, p, _ in _calls(s, optimizer):
        owners[id(p)] = mpath
        for _, v in _tensor_states(optimizer, p):
            owners[id(v)] = mpath
    st.begin_update(owners)
    calls.clear()
    if not st.recording:
        return
    with st.own_code():
        op = type(optimizer).__name__
        for mpath, pname, p, _group in _calls(s, optimizer):
            if p.grad is None or not s.wanted(mpath, op):
                continue
            c = calls.get(mpath)
            if c is None:
                node, call = s.recorder.node(mpath, op)
                c = calls[mpath] = Call(node, mpath, op, LEVEL, call, "update")
            record_tensor(s, c, p, "input", pname)
            record_tensor(s, c, p.grad, "input", f"{pname}.grad")
            for k, v in _tensor_states(optimizer, p):
                record_tensor(s, c, v, "input", f"{pname}.{k}")


def _post(s: CaptureSession, calls: dict[str, Call], optimizer, args, kwargs) -> None:
    st = s.state
    try:
        if not st.recording:
            return
        with st.own_code():
            for mpath, pname, p, group in _calls(s, optimizer):
                c = calls.get(mpath)
                if c is None or p.grad is None:
                    continue
                out = Call(c.node, c.module, c.op, c.level, c.call, "update", extra={"hyper": hyperparameters(group)})
                s.recorder.forget(p)  # changed in place by the step
                record_tensor(s, out, p, "output", pname)
                for k, v in _tensor_states(optimizer, p):
                    s.recorder.forget(v)
                    record_tensor(s, out, v, "output", f"{pname}.{k}")
    finally:
        st.end_update()
        calls.clear()
