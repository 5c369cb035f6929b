"""Capture a torch.compile (Inductor) run at module boundaries without changing what runs.

A dispatch-mode capture makes a compiled model run eagerly, and hooks inside a compiled model make
dynamo break the graph. Here the model is compiled per region instead: each chosen submodule's
`forward` becomes a `torch.compile`d function (fullgraph by default, so a graph break is an error),
and opdiff's module hooks go only on modules outside the regions and on the regions themselves,
whose hooks run in eager code around the compiled forward. A counting wrapper around Inductor's
`compile_fx` proves the compiled code ran (graphs compiled and calls of them per region); dynamo's
counters say whether anything broke or recompiled. meta["observed"] says all of it (docs/fusion.md).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ...base.errors import OpdiffError
from .session import CaptureSession

CHILDREN = "children"


def region_paths(model: torch.nn.Module, regions: str | Iterable[str] | None) -> list[str]:
    """The submodule paths to compile: "children" (every direct child), or the given paths (not nested)."""
    if regions is None or regions == CHILDREN:
        return [name for name, _ in model.named_children()]
    paths = [regions] if isinstance(regions, str) else list(regions)
    known = dict(model.named_modules())
    for p in paths:
        if p not in known:
            raise OpdiffError(f"opdiff.capture: compile region {p!r} is not a submodule path of the model")
    for p in paths:
        outer = [q for q in paths if q != p and (q == "" or p.startswith(q + "."))]
        if outer:
            raise OpdiffError(f"opdiff.capture: compile region {p!r} lies inside region {outer[0]!r}")
    return paths


def inside(path: str, regions: Iterable[str]) -> bool:
    """True when module `path` lies strictly inside one of `regions` (its hooks would be compiled)."""
    return any(r == "" and path != "" or path.startswith(r + ".") for r in regions)


class RegionStats:
    """Graphs Inductor compiled and calls of compiled code, per region (the proof compiled code ran)."""

    def __init__(self) -> None:
        self.graphs: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def backend(self, region: str, options: dict[str, Any] | None) -> Callable:
        """A dynamo backend: Inductor's compile_fx with `options` as config patches, counting."""

        def compile_region(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            from torch._inductor.compile_fx import compile_fx

            self.graphs[region] = self.graphs.get(region, 0) + 1
            compiled = compile_fx(gm, example_inputs, config_patches=dict(options or {}))
            assert callable(compiled)  # a GraphModule compiles to a callable (str, list, Weights: AOT modes only)

            def run(*args: Any) -> Any:
                self.calls[region] = self.calls.get(region, 0) + 1
                return compiled(*args)

            return run

        return compile_region


class CompiledRegions:
    """Context manager: each region's `forward` is a torch.compile'd function inside, restored after."""

    def __init__(self, model: torch.nn.Module, regions: list[str], *, options: dict[str, Any] | None = None,
                 fullgraph: bool = True, dynamic: bool | None = False):
        self.model, self.regions, self.options = model, regions, dict(options or {})
        self.fullgraph, self.dynamic = fullgraph, dynamic
        self.stats = RegionStats()
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> CompiledRegions:
        for path in self.regions:
            m = self.model.get_submodule(path)
            self._saved[path] = m.__dict__.get("forward")
            m.forward = torch.compile(m.forward, backend=self.stats.backend(path, self.options),
                                      fullgraph=self.fullgraph, dynamic=self.dynamic)
        return self

    def __exit__(self, *exc: Any) -> None:
        for path, saved in self._saved.items():
            m = self.model.get_submodule(path)
            if saved is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = saved
        self._saved.clear()


def dynamo_counters() -> dict[str, dict[str, int]]:
    """A copy of dynamo's counters (frames, stats, graph_break, recompiles ...)."""
    from torch._dynamo.utils import counters

    return {k: {str(n): int(c) for n, c in v.items()} for k, v in copy.deepcopy(dict(counters)).items()}


def counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What changed in dynamo's counters between two snapshots."""
    out: dict[str, dict[str, int]] = {}
    for cat, vals in after.items():
        diff = {k: v - before.get(cat, {}).get(k, 0) for k, v in vals.items()}
        diff = {k: v for k, v in diff.items() if v}
        if diff:
            out[cat] = diff
    return out


class CompiledCaptureSession(CaptureSession):
    """`capture(model, path, compile=...)`: regions compiled with Inductor, observed at their boundaries."""

    def __init__(self, model: torch.nn.Module, path: str | os.PathLike, *, compile: str | Iterable[str] | None = CHILDREN,
                 options: dict[str, Any] | None = None, fullgraph: bool = True, level: str = "module", **kw: Any):
        if level != "module":
            raise OpdiffError("opdiff.capture: a compiled model is observed at level 'module' only "
                              "(api/aten capture would run the compiled regions eagerly)")
        super().__init__(model, path, level="module", **kw)
        self.regions = region_paths(model, compile)
        self.compiled = CompiledRegions(model, self.regions, options=options, fullgraph=fullgraph)
        self._before: dict[str, dict[str, int]] = {}

    def hooks_module(self, path: str) -> bool:
        return not inside(path, self.regions)

    def meta(self) -> dict[str, Any]:
        m = super().meta()
        m.update(capture_backend="torch.compile",
                 compile={"backend": "inductor", "regions": self.regions, "options": _jsonable(self.compiled.options),
                          "fullgraph": self.compiled.fullgraph, "torch": torch.__version__})
        return m

    def __enter__(self) -> CompiledCaptureSession:
        self._before = dynamo_counters()
        self.compiled.__enter__()
        try:
            super().__enter__()
        except BaseException:
            self.compiled.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self.writer is not None:
                self.writer.update_meta(observed=self.observed())
            super().__exit__(exc_type, exc, tb)
        finally:
            self.compiled.__exit__(None, None, None)

    def observed(self) -> dict[str, Any]:
        """Which regions ran compiled code, what could be observed, and dynamo's account of it."""
        delta = counter_delta(self._before, dynamo_counters())
        stats = self.compiled.stats
        breaks = delta.get("graph_break", {})
        limits = {k: v for cat in delta.values() for k, v in cat.items() if "limit" in k.lower()}
        hooked = [p for p, _ in self.model.named_modules() if self.hooks_module(p)]
        return {
            "compiled_regions": {r: {"graphs": stats.graphs.get(r, 0), "compiled_calls": stats.calls.get(r, 0)}
                                 for r in self.regions},
            "compiled_code_ran": all(stats.calls.get(r, 0) > 0 for r in self.regions) and not breaks and not limits,
            "graph_breaks": breaks,
            "recompile_limit_hits": limits,
            "dynamo_counters": delta,
            "observed_modules": hooked,
            "not_observed": "modules inside a compiled region (their calls are compiled code)",
        }


def _jsonable(options: dict[str, Any]) -> dict[str, Any]:
    """Config options for meta.json: callables (custom passes) by their qualified name."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        if v is None or isinstance(v, (bool, int, float, str)):
            out[k] = v
        else:
            out[k] = f"{type(v).__module__}.{type(v).__qualname__}"
    return out


def capture(model: torch.nn.Module, path: str | os.PathLike, *, compile: str | Iterable[str] | None = CHILDREN,
            options: dict[str, Any] | None = None, fullgraph: bool = True, **kw: Any) -> CompiledCaptureSession:
    """Run `model` with its `compile` regions compiled by Inductor (with config `options`) and capture it at
    module boundaries outside the compiled code: ``with capture(model, path, compile=["encoder"]) as cap: model(x)``."""
    return CompiledCaptureSession(model, path, compile=compile, options=options, fullgraph=fullgraph, **kw)
