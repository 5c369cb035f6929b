"""Re-run a model with some modules' outputs replaced by the other run's: the causal test of a culprit.

`TorchPatcher(golden_model, target_model, inputs)` records every module call's output of both runs
once (forward hooks, no_grad), then answers "what is the model-output error when the target's modules S
return golden's outputs" (and the reverse, golden given the target's), for diagnose/patch.py's search.
A unit of S is a module path, or one op of a module's own code ("path/aten.mul.Tensor#2": the third mul
the module runs outside its children, in each call), replaced through a dispatch mode (patch_ops.py).
`TorchPatcher.of_functions(golden_fn, target_fn)` re-runs hunt's functions instead (each called as
fn(capture) and running its model inside `with capture(model):`); the model output is the root module's.
Both models are left as found (preserve.py); every run starts from the same RNG state, and the RNG
state is put back after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import numpy as np
import torch

from .patch_inputs import Mutations, Seen, changed, expected, put, watch
from .patch_ops import OpHook, in_layout, is_op_key, op_scope, own_ops
from .preserve import _rng_state, _set_rng_state, preserved

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
    """`own` with each tensor replaced by `other`'s tensor at the same place (same shape), in own's dtype and
    strides."""
    theirs = iter(leaves(other))

    def swap(t: torch.Tensor) -> torch.Tensor:
        o = next(theirs, None)
        if o is None or o.shape != t.shape:
            return t
        return keep_graph(t, in_layout(t, o))
    return remap(own, swap)



def keep_graph(own: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """`value`, still attached to own's autograd graph when own has one (a training step's backward then
    runs): value + 0 * own is value exactly wherever own is finite."""
    if not (own.requires_grad and torch.is_grad_enabled()) or not own.is_floating_point():
        return value
    if not bool(torch.isfinite(own).all()):
        return value
    return value + own * 0


def output_error(golden: Any, target: Any) -> float:
    """Error of the model output the way diagnose measures a pair: the larger of the relative euclidean
    distance and the max absolute error over golden's absmax, worst over the floating outputs. Non-finite
    values must sit at the same places and be the same (nan, +inf, -inf), else the error is infinite; the
    finite ones are measured (a nan of both never hides a difference elsewhere)."""
    worst = 0.0
    for g, t in zip(leaves(golden), leaves(target)):
        if not g.is_floating_point() or g.shape != t.shape:
            continue
        a, b = g.detach().double().cpu().numpy(), t.detach().double().cpu().numpy()
        fa, fb = np.isfinite(a), np.isfinite(b)
        if (fa != fb).any() or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
            return float("inf")
        a, b = a[fa], b[fb]
        d = np.abs(a - b)
        scale, absmax = float(np.linalg.norm(a)), float(np.abs(a).max(initial=0.0))
        red = float(np.linalg.norm(d)) / scale if scale else float(d.max(initial=0.0) > 0) * float("inf")
        nmae = float(d.max(initial=0.0)) / absmax if absmax else red
        worst = max(worst, red, nmae)
    return worst


ModuleHook = Callable[[str, Any], Any]  # (module path, output) -> replacement output or None
Install = Callable[[torch.nn.Module], AbstractContextManager[Any]]  # hooks around one run of a model
Runner = Callable[[Install], None]  # runs a side once, with its model's hooks installed by `install`


@contextmanager
def _pre_hooks(model: torch.nn.Module, fn: Callable[[str, Any], None]) -> Iterator[None]:
    """Forward pre-hooks calling fn(path, (args, kwargs)) on every module but the root, before the module's
    own pre-hooks (what they change is part of the module's call, not of its inputs)."""
    handles = [m.register_forward_pre_hook(lambda _m, a, k, p=path: fn(p, (a, k)), with_kwargs=True, prepend=True)
               for path, m in model.named_modules() if path]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _hooks(model: torch.nn.Module, fn: ModuleHook, paths: set[str] | None) -> Iterator[None]:
    """Forward hooks calling fn(path, output) (its result, if not None, replaces the output)."""
    handles = [m.register_forward_hook(lambda _m, _a, o, p=path: fn(p, o))
               for path, m in model.named_modules() if paths is None or path in paths]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def model_runner(model: torch.nn.Module, inputs: Any, seed: int) -> Runner:
    """Run `model(inputs)` under no_grad from RNG state `seed`, leaving the model and the RNG as found."""
    def run(install: Install) -> None:
        with preserved(model, rng=True):
            torch.manual_seed(seed)
            with install(model):
                call(model, inputs)
    return run


class PatchBlock:
    """The `capture` a hunted function receives when hunt re-runs it to patch: `capture(model, **options)`
    installs the run's hooks on the model instead of capturing it (the options are capture's: ignored)."""

    def __init__(self, install: Install, who: str):
        self.install, self.who, self.calls = install, who, 0

    def __call__(self, model: Any, **_options: Any) -> AbstractContextManager[Any]:
        self.calls += 1
        if not isinstance(model, torch.nn.Module) or self.calls > 1:
            raise TypeError(f"{self.who}: patching needs one capture(model) of an nn.Module per run")
        stack = ExitStack()
        stack.enter_context(preserved(model, buffers=True))  # a patched re-run is opdiff's, not the user's
        stack.enter_context(self.install(model))
        return stack


def function_runner(fn: Callable[[Any], Any], seed: int, who: str) -> Runner:
    """Run hunt's `fn(capture)` from RNG state `seed`, putting the RNG state back afterwards."""
    def run(install: Install) -> None:
        rng = _rng_state()
        try:
            torch.manual_seed(seed)
            block = PatchBlock(install, who)
            fn(block)
            if block.calls == 0:
                raise TypeError(f"{who}: never called capture(model)")
        finally:
            _set_rng_state(rng)
    return run


class TorchPatcher:
    """Two runs re-runnable with module (or op) outputs exchanged (diagnose/patch.py's Patcher)."""

    def __init__(self, golden: torch.nn.Module | None = None, target: torch.nn.Module | None = None,
                 inputs: Any = None, target_inputs: Any | None = None, seed: int = 0, *,
                 runners: dict[str, Runner] | None = None):
        if runners is None:
            assert golden is not None and target is not None
            runners = {"golden": model_runner(golden, inputs, seed),
                       "target": model_runner(target, inputs if target_inputs is None else target_inputs, seed)}
        self.runners = runners
        self.order: list[str] = []  # module paths in order of first call (the target's)
        self.recorded: dict[str, Outputs] = {}
        self.ops: dict[str, Outputs] = {"golden": {}, "target": {}}  # op key -> its outputs, one per call
        self.op_scopes: set[str] = set()  # modules whose own ops are recorded
        self.outputs: dict[str, Any] = {}
        self.golden_inputs: Outputs = {}  # module path -> its (args, kwargs), one per call
        self.input_errors: dict[str, float] = {}  # per module, its inputs' error in local_errors' run
        self.mutations: dict[str, Mutations] = {"golden": {}, "target": {}}  # in-place writes to module inputs
        for side in ("golden", "target"):
            self.recorded[side], self.outputs[side] = self._record(side)

    @classmethod
    def of_functions(cls, golden_fn: Callable[[Any], Any], target_fn: Callable[[Any], Any],
                     seed: int = 0) -> TorchPatcher:
        """Patch hunt's functions: each re-run as fn(capture), the model output being its root module's."""
        return cls(runners={"golden": function_runner(golden_fn, seed, "the golden function"),
                            "target": function_runner(target_fn, seed, "the target function")})

    def _run(self, side: str, hooks: ModuleHook | None = None, paths: set[str] | None = None,
             scopes: set[str] | None = None, op_hook: OpHook | None = None,
             pre: Callable[[str, Any], None] | None = None, seen: Seen | None = None,
             watched: set[str] | None = None) -> list[Any]:
        """One run of `side` with module hooks on `paths` and op hooks in `scopes`; the root's outputs."""
        root: list[Any] = []

        @contextmanager
        def install(model: torch.nn.Module) -> Iterator[None]:
            with ExitStack() as stack:
                if pre is not None:
                    stack.enter_context(_pre_hooks(model, pre))
                if seen is not None:
                    stack.enter_context(watch(model, watched, seen))
                if hooks is not None:
                    stack.enter_context(_hooks(model, hooks, paths))
                if scopes and op_hook is not None:
                    stack.enter_context(own_ops(model, scopes, op_hook))
                stack.enter_context(_hooks(model, lambda _p, o: root.append(remap(o, _detached)), {""}))
                yield
        self.runners[side](install)
        return root

    def _record(self, side: str) -> tuple[Outputs, Any]:
        rec: Outputs = {}

        def keep(path: str, out: Any) -> None:
            if path not in rec and side == "target":
                self.order.append(path)
            rec.setdefault(path, []).append(remap(out, _detached))

        def keep_inputs(path: str, args: Any) -> None:
            self.golden_inputs.setdefault(path, []).append(remap(args, _detached))

        def writes(path: str, k: int, now: list[torch.Tensor], before: list[torch.Tensor]) -> None:
            c = changed(now, before)
            if c:
                self.mutations[side].setdefault(path, {})[k] = c
        out = self._run(side, keep, pre=keep_inputs if side == "golden" else None, seen=writes)
        return rec, out

    def record_ops(self, scopes: set[str]) -> None:
        """Record the own ops of modules `scopes` in both runs (once per module)."""
        new = set(scopes) - self.op_scopes
        if not new:
            return
        for side in ("golden", "target"):
            rec = self.ops[side]

            def keep(key: str, _call: int, out: torch.Tensor, rec: Outputs = rec) -> None:
                rec.setdefault(key, []).append(out.detach().clone())
            self._run(side, scopes=new, op_hook=keep)
        self.op_scopes |= new

    def modules(self) -> list[str]:
        """Called module paths (not the root) in the target's execution order."""
        return [p for p in self.order if p and p in self.recorded["golden"]]

    def ops_of(self, module: str) -> list[str]:
        """The op keys of `module`'s own code that both runs ran, in golden's order of first call."""
        self.record_ops({module})
        return [k for k in self.ops["golden"] if op_scope(k) == module and k in self.ops["target"]]

    def inserted_ops(self, module: str) -> list[str]:
        """Ops of the target's own code in `module` that golden's does not run (they cannot be patched)."""
        self.record_ops({module})
        return [k.partition("/")[2] for k in self.ops["target"] if op_scope(k) == module and k not in self.ops["golden"]]

    def error(self, patched: frozenset[str], into: str = "target") -> float:
        """Model-output error against golden's plain run when `into`'s modules (or ops) `patched` return the
        other side's outputs (into="target": does the repair remove it; into="golden": does the breakage make it)."""
        other = "golden" if into == "target" else "target"
        if not patched:
            return output_error(self.outputs["golden"], self.outputs["target"])
        modules = {u for u in patched if not is_op_key(u)}
        ops = {u for u in patched if is_op_key(u)}
        self.record_ops({op_scope(u) for u in ops})
        def writes(path: str, k: int, now: list[torch.Tensor], before: list[torch.Tensor]) -> None:
            theirs = self.mutations[other].get(path, {}).get(k, {})
            put(now, expected(now, before, changed(now, before), theirs))
        out = self._run(into, _replay(self.recorded[other]), modules, {op_scope(u) for u in ops},
                        _op_replay(self.ops[other], ops), seen=writes, watched=modules)
        return output_error(self.outputs["golden"], out)

    def local_errors(self, scopes: set[str] | None = None) -> dict[str, tuple[float, str | None]]:
        """One target run in which every module returns golden's output: each module's own output there is
        computed from golden's values, so its error (worst over its calls) is its own code's. With `scopes`,
        the same for each own op of those modules (each op also returns golden's output)."""
        found: dict[str, tuple[float, str | None]] = {}

        def measure(key: str, k: int, have: list[Any], out: Any) -> Any:
            if k >= len(have):
                return None
            floats = [t for t in leaves(out) if t.is_floating_point()]
            dtype = str(floats[0].dtype).removeprefix("torch.") if floats else None
            err = output_error(have[k], out)
            if err > found.get(key, (-1.0, None))[0]:
                found[key] = (err, dtype)
            return substitute(out, have[k])

        calls: dict[str, int] = {}

        def own(path: str, out: Any) -> Any:
            k = calls[path] = calls.get(path, -1) + 1
            return measure(path, k, self.recorded["golden"].get(path, []), out)

        def own_op(key: str, k: int, out: torch.Tensor) -> Any:
            return measure(key, k, self.ops["golden"].get(key, []), out)
        seen: dict[str, int] = {}

        def inputs(path: str, args: Any) -> None:
            k = seen[path] = seen.get(path, -1) + 1
            have = self.golden_inputs.get(path, [])
            if k < len(have):
                self.input_errors[path] = max(self.input_errors.get(path, 0.0), output_error(have[k], args))
        def writes(path: str, k: int, now: list[torch.Tensor], before: list[torch.Tensor]) -> None:
            theirs = self.mutations["golden"].get(path, {}).get(k, {})
            want = expected(now, before, changed(now, before), theirs)
            if want:
                err = max(output_error(v, now[i]) for i, v in want.items())
                if err > found.get(path, (-1.0, None))[0]:
                    found[path] = (err, str(now[0].dtype).removeprefix("torch.") if now else None)
                put(now, want)
        if scopes:
            self.record_ops(scopes)
        else:
            self.input_errors = {}
        self._run("target", own, set(self.modules()), scopes, own_op if scopes else None, None if scopes else inputs,
                  seen=writes)
        return {k: v for k, v in found.items() if is_op_key(k) == bool(scopes)}


def _detached(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _replay(src: Outputs) -> ModuleHook:
    """A module hook returning, for each call of a module, the other run's output of the same call."""
    calls: dict[str, int] = {}

    def swap(path: str, out: Any) -> Any:
        k = calls[path] = calls.get(path, -1) + 1
        have = src.get(path, [])
        return substitute(out, have[k]) if k < len(have) else None
    return swap


def _op_replay(src: Outputs, keys: set[str]) -> OpHook:
    """An op hook returning the other run's output of the op keys `keys`, call by call."""
    def swap(key: str, k: int, _out: torch.Tensor) -> torch.Tensor | None:
        have = src.get(key, [])
        return have[k] if key in keys and k < len(have) else None
    return swap
