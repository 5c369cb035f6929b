"""Re-run a model with some modules' outputs replaced by the other run's: the causal test of a culprit.

`TorchPatcher(golden_model, target_model, inputs)` records every module call's output of both runs
once (forward hooks, no_grad), then answers "what is the model-output error when the target's modules S
return golden's outputs" (and the reverse, golden given the target's), for diagnose/patch.py's search.
Both models are left as found (preserve.py); every run starts from the same RNG state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from .preserve import preserved

Outputs = dict[str, list[Any]]  # module path -> its outputs, one per call


def call(model: Any, inputs: Any) -> Any:
    """Call `model` with `inputs`: a dict of keyword arguments, a tuple of positional ones, or one tensor."""
    with torch.no_grad():
        if isinstance(inputs, dict):
            return model(**inputs)
        if isinstance(inputs, (tuple, list)):
            return model(*inputs)
        return model(inputs)


def leaves(obj: Any) -> list[torch.Tensor]:
    """The tensors of a nested output (tensor, tuple, list, dict, ModelOutput), in a fixed order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in leaves(x)]
    if isinstance(obj, dict):
        return [t for k in obj for t in leaves(obj[k])]
    return []


def remap(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`obj` with each tensor replaced by fn(tensor), containers rebuilt as their own types."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(remap(x, fn) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(remap(x, fn) for x in obj)
    if isinstance(obj, dict):
        out = obj.copy()
        for k in obj:
            out[k] = remap(obj[k], fn)
        return out
    return obj


def substitute(own: Any, other: Any) -> Any:
    """`own` with each tensor replaced by `other`'s tensor at the same place (same shape), in own's dtype."""
    theirs = iter(leaves(other))

    def swap(t: torch.Tensor) -> torch.Tensor:
        o = next(theirs, None)
        if o is None or o.shape != t.shape:
            return t
        return o.to(dtype=t.dtype, device=t.device)
    return remap(own, swap)


def output_error(golden: Any, target: Any) -> float:
    """Error of the model output the way diagnose measures a pair: the larger of the relative euclidean
    distance and the max absolute error over golden's absmax, worst over the floating outputs."""
    worst = 0.0
    for g, t in zip(leaves(golden), leaves(target)):
        if not g.is_floating_point() or g.shape != t.shape:
            continue
        a, b = g.detach().double().cpu().numpy(), t.detach().double().cpu().numpy()
        if not np.isfinite(b).all() and np.isfinite(a).all():
            return float("inf")
        d = np.abs(a - b)
        scale, absmax = float(np.linalg.norm(a)), float(np.abs(a).max(initial=0.0))
        red = float(np.linalg.norm(d)) / scale if scale else float(d.max(initial=0.0) > 0) * float("inf")
        nmae = float(d.max(initial=0.0)) / absmax if absmax else red
        worst = max(worst, red, nmae)
    return worst


@contextmanager
def _hooks(model: torch.nn.Module, fn: Callable[[str, Any], Any], paths: set[str] | None) -> Iterator[None]:
    """Forward hooks calling fn(path, output) (its result, if not None, replaces the output)."""
    handles = [m.register_forward_hook(lambda _m, _a, o, p=path: fn(p, o))
               for path, m in model.named_modules() if paths is None or path in paths]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class TorchPatcher:
    """Two models and their inputs, re-runnable with module outputs exchanged (diagnose/patch.py's Patcher)."""

    def __init__(self, golden: torch.nn.Module, target: torch.nn.Module, inputs: Any,
                 target_inputs: Any | None = None, seed: int = 0):
        self.models = {"golden": golden, "target": target}
        self.inputs = {"golden": inputs, "target": inputs if target_inputs is None else target_inputs}
        self.seed = seed
        self.order: list[str] = []  # module paths in order of first call (the target's)
        self.recorded: dict[str, Outputs] = {}
        self.outputs: dict[str, Any] = {}
        for side in ("golden", "target"):
            self.recorded[side], self.outputs[side] = self._record(side)

    def _run(self, side: str, hooks: Callable[[str, Any], Any] | None = None, paths: set[str] | None = None) -> Any:
        model = self.models[side]
        with preserved(model, rng=True):
            torch.manual_seed(self.seed)
            if hooks is None:
                return call(model, self.inputs[side])
            with _hooks(model, hooks, paths):
                return call(model, self.inputs[side])

    def _record(self, side: str) -> tuple[Outputs, Any]:
        rec: Outputs = {}

        def keep(path: str, out: Any) -> None:
            if path not in rec and side == "target":
                self.order.append(path)
            rec.setdefault(path, []).append(remap(out, lambda t: t.detach().clone()))
        out = self._run(side, keep)
        return rec, out

    def modules(self) -> list[str]:
        """Called module paths (not the root) in the target's execution order."""
        return [p for p in self.order if p and p in self.recorded["golden"]]

    def error(self, patched: frozenset[str], into: str = "target") -> float:
        """Model-output error against golden's plain run when `into`'s modules `patched` return the other
        side's outputs (into="target": does the repair remove it; into="golden": does the breakage make it)."""
        other = "golden" if into == "target" else "target"
        if not patched:
            return output_error(self.outputs["golden"], self.outputs["target"])
        calls: dict[str, int] = {}
        src = self.recorded[other]

        def swap(path: str, out: Any) -> Any:
            k = calls[path] = calls.get(path, -1) + 1
            have = src.get(path, [])
            return substitute(out, have[k]) if k < len(have) else None
        return output_error(self.outputs["golden"], self._run(into, swap, set(patched)))

    def local_errors(self) -> dict[str, tuple[float, str | None]]:
        """One target run in which every module returns golden's output: each module's own output there is
        computed from golden's values, so its error (worst over its calls) is its own code's."""
        src = self.recorded["golden"]
        calls: dict[str, int] = {}
        found: dict[str, tuple[float, str | None]] = {}

        def own(path: str, out: Any) -> Any:
            k = calls[path] = calls.get(path, -1) + 1
            have = src.get(path, [])
            if k >= len(have):
                return None
            floats = [t for t in leaves(out) if t.is_floating_point()]
            dtype = str(floats[0].dtype).removeprefix("torch.") if floats else None
            err = output_error(have[k], out)
            if err > found.get(path, (-1.0, None))[0]:
                found[path] = (err, dtype)
            return substitute(out, have[k])
        self._run("target", own, set(self.modules()))
        return found
