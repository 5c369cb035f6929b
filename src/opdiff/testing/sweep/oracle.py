"""The sweep's oracle, independent of opdiff: plain torch forward hooks prove each planted claim before grading.

A fault is valid when each culprit module's own effect changes given identical inputs: the clean module's
first call is recorded (inputs and output), the faulty module is called on a copy of the same inputs, and its
output (or, for an in-place bug, its inputs after the call) differs beyond the target dtype's rounding; and when
the model output changes too (a fault that never reaches it is no fault to find). A benign
change is valid when the model output stays within `BENIGN_UNITS` rounding units of the target's precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAULT_UNITS = 2.0  # a culprit's own change must exceed this many rounding units of the target dtype
BENIGN_UNITS = 256.0  # a benign change may move the model output by at most this many units


@dataclass
class Proof:
    valid: bool
    effect: float  # fault: smallest culprit change; benign: model output change - in rounding units
    detail: str


def unit(dtype) -> float:
    """The rounding unit u of a torch float dtype."""
    import torch

    return {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}.get(dtype, 2.0 ** -24)


def _clone(x):
    import torch

    if torch.is_tensor(x):
        return x.detach().clone()
    if isinstance(x, tuple):
        return tuple(_clone(v) for v in x)
    if isinstance(x, list):
        return [_clone(v) for v in x]
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _floats(x) -> list[Any]:
    import torch

    if torch.is_tensor(x):
        return [x] if x.is_floating_point() else []
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _floats(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _floats(v)]
    vals = getattr(x, "to_tuple", None)
    return _floats(vals()) if callable(vals) else []


def rel(a, b) -> float:
    """max|a-b| / max|a| over float tensors (inf when shapes differ or non-finite values appear)."""
    import torch

    fa, fb = _floats(a), _floats(b)
    if len(fa) != len(fb):
        return float("inf")
    worst = 0.0
    for x, y in zip(fa, fb):
        if x.shape != y.shape:
            return float("inf")
        x, y = x.double(), y.double()
        if not torch.isfinite(y).all() and torch.isfinite(x).all():
            return float("inf")
        scale = float(x.abs().max()) if x.numel() else 0.0
        d = float((x - y).abs().nan_to_num(0.0).max()) if x.numel() else 0.0
        worst = max(worst, d / scale if scale else d)
    return worst


def _first_call(model, path: str, run) -> tuple[Any, Any, Any]:
    """(args, kwargs, output) of the first call of module `path` while `run()` runs `model`."""
    mod = model.get_submodule(path)
    seen: dict[str, Any] = {}

    def pre(m, args, kwargs):
        if "args" not in seen:
            seen["args"], seen["kwargs"] = _clone(args), _clone(kwargs)

    def post(m, args, kwargs, out):
        if "out" not in seen:
            seen["out"] = _clone(out)

    h1 = mod.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = mod.register_forward_hook(post, with_kwargs=True)
    try:
        run()
    finally:
        h1.remove()
        h2.remove()
    if "out" not in seen:
        raise ValueError(f"{path} is never called")
    return seen["args"], seen["kwargs"], seen["out"]


def prove_fault(clean, faulty, culprits: tuple[str, ...], inputs: dict[str, Any], dtype) -> Proof:
    """Each culprit of `faulty` changes its own output (or its inputs in place) given the clean module's inputs."""
    import torch

    effects = []
    for path in culprits:
        with torch.no_grad():
            args, kwargs, out = _first_call(clean, path, lambda: clean(**inputs))
            a2, k2 = _clone(args), _clone(kwargs)
            try:
                got = faulty.get_submodule(path)(*a2, **k2)
            except (RuntimeError, TypeError) as exc:  # the planted change breaks the module: not a fault to diagnose
                raise ValueError(f"{path} cannot run with the change: {type(exc).__name__}: {str(exc)[:150]}") from None
        effects.append(max(rel(out, got), rel((args, kwargs), (a2, k2))) / unit(dtype))
    worst = min(effects) if effects else 0.0
    with torch.no_grad():  # and it must reach the model output (an in-place change of a dead tensor does not)
        reach = rel(clean(**inputs), faulty(**inputs)) / unit(dtype)
    ok = worst > FAULT_UNITS and reach > FAULT_UNITS
    return Proof(ok, worst, f"culprit change {', '.join(f'{e:.3g}' for e in effects)} u, model output change {reach:.3g} u "
                 f"(both need > {FAULT_UNITS:g})")


def prove_benign(golden_out, target_out, dtype) -> Proof:
    """The benign target's model output stays within BENIGN_UNITS units of its precision."""
    units = rel(golden_out, target_out) / unit(dtype)
    return Proof(units <= BENIGN_UNITS, units, f"model output change {units:.3g} u (allowed {BENIGN_UNITS:g})")
