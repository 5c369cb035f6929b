"""`opdiff fusion torch`: eager (golden) against torch.compile/Inductor (target); find the region, then the switch.

1. golden: the model run eagerly, captured at module level; target: its regions compiled by Inductor
   (capture/torch/compiled.py), captured at their boundaries;
2. compare; when they disagree, bisect which regions' compilation causes it (a region "off" runs eagerly);
3. inside the culprit regions (only they are compiled), bisect Inductor's switches that are on: each
   "off" sets the config value that disables it (pattern_matcher=False, max_fusion_size=1, a custom
   pass None, ...);
4. name the kernels and post-grad FX nodes that exist only with the culprit on, from Inductor's
   provenance tracking (`trace.provenance_tracking_level`), write the switch file and the cost.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..base.errors import OpdiffError
from ..base.outdir import claim_dir
from ..capture.torch import capture as eager_capture
from ..capture.torch.compiled import CHILDREN, CompiledRegions, region_paths
from ..capture.torch.compiled import capture as compiled_capture
from ..capture.torch.patching import call as call_model  # model(**inputs) / (*inputs) / (inputs), no autograd
from ..capture.torch.preserve import preserved
from ..compare.run import compare
from .bisect import bisect_switches
from .ort import SWITCH_FILE, FusionResult, _agrees, _finish, _write_reports
from .switchfile import switch_doc, write_switches

# Inductor config switches and the value that turns each one off (only those that are on are searched)
SWITCHES: dict[str, Any] = {
    "pre_grad_custom_pass": None,
    "joint_custom_pre_pass": None,
    "joint_custom_post_pass": None,
    "post_grad_custom_pre_pass": None,
    "post_grad_custom_post_pass": None,
    "pre_grad_fusion_options": {},
    "post_grad_fusion_options": {},
    "pattern_matcher": False,
    "epilogue_fusion": False,
    "prologue_fusion": False,
    "max_fusion_size": 1,
    "split_reductions": False,
    "online_softmax": False,
    "use_fast_math": False,
    "emulate_precision_casts": True,
}


def active_switches(options: dict[str, Any]) -> list[str]:
    """The switches that are on: `options` over Inductor's current config, differing from the off value."""
    from torch._inductor import config

    on = []
    for name, off in SWITCHES.items():
        if not hasattr(config, name):
            continue
        value = options[name] if name in options else getattr(config, name)
        if value != off and not (off is None and value in ({}, [], None)):
            on.append(name)
    return on


def _options_with_off(options: dict[str, Any], off: frozenset[str]) -> dict[str, Any]:
    return {**options, **{s: SWITCHES[s] for s in off}}


def _run_compiled(model: torch.nn.Module, inputs: Any, path: Path, regions: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """One compiled capture from a clean dynamo state; returns its meta["observed"]."""
    import json

    torch._dynamo.reset()
    with compiled_capture(model, path, compile=regions, options=options):
        call_model(model, inputs)
    observed: dict[str, Any] = json.loads((path / "meta.json").read_text())["observed"]
    if regions and not observed["compiled_code_ran"]:
        raise OpdiffError(f"{path}: the compiled regions did not run compiled code (graph breaks or recompile limit: "
                          f"{observed['graph_breaks'] or observed['recompile_limit_hits']})")
    return observed


def kernel_provenance(model: torch.nn.Module, inputs: Any, regions: list[str], options: dict[str, Any]) -> dict[str, list[str]]:
    """Kernel name -> post-grad FX nodes it computes, from Inductor's provenance tracking (no caches).

    Inductor keeps the mapping only while it compiles a graph; it is read when Inductor dumps it (a
    debugging hook: what is compiled and run does not change)."""
    from torch._inductor import debug

    found: dict[str, list[str]] = {}
    dump = debug.dump_inductor_provenance_info

    def read_and_dump() -> dict[str, Any]:
        info = getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", {})
        found.update({str(k): [str(n) for n in v] for k, v in dict(info).items()})
        return dump()

    torch._dynamo.reset()
    opts = {**options, "trace.provenance_tracking_level": 1, "fx_graph_cache": False}
    debug.dump_inductor_provenance_info = read_and_dump
    try:
        with CompiledRegions(model, regions, options=opts):
            call_model(model, inputs)
    finally:
        debug.dump_inductor_provenance_info = dump
    return found


def _strip_handle(kernel: str) -> str:
    return kernel.rsplit(":", 1)[0]


def made_by_culprit(on: dict[str, list[str]], off: dict[str, list[str]]) -> dict[str, list[str]]:
    """Kernels (with their FX nodes) of the run with the culprit on that the run without it lacks."""
    have = {(_strip_handle(k), tuple(v)) for k, v in off.items()}
    return {_strip_handle(k): v for k, v in on.items() if (_strip_handle(k), tuple(v)) not in have}


def fusion_torch(model: torch.nn.Module, inputs: Any, out: str | Path, *, regions: str | list[str] | None = CHILDREN,
                 options: dict[str, Any] | None = None, thresholds: Any = None, force: bool = False,
                 workers: int | None = 1) -> FusionResult:
    """Golden: `model` eager; target: its `regions` compiled with Inductor `options`; bisect if they differ."""
    with preserved(model, rng=True):  # each run starts from the model and RNG as the user left them
        return _fusion_torch(model, inputs, Path(out), regions=regions, options=options, thresholds=thresholds,
                             force=force, workers=workers)


def _fusion_torch(model: torch.nn.Module, inputs: Any, out: Path, *, regions: str | list[str] | None,
                  options: dict[str, Any] | None, thresholds: Any, force: bool, workers: int | None) -> FusionResult:
    t0 = time.perf_counter()
    out = Path(out)
    options = dict(options or {})
    paths = region_paths(model, regions)  # a bad region is reported before any work
    claim_dir(out, force, hint="use --force to write into it")
    for sub in ("golden", "target", "fixed", "bisect"):
        shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    with eager_capture(model, out / "golden", level="module"):
        call_model(model, inputs)
    observed = _run_compiled(model, inputs, out / "target", paths, options)
    cmp = compare(out / "golden", out / "target", thresholds=thresholds, workers=workers)
    _write_reports(cmp, out)
    ff = cmp.first_fail()
    res = FusionResult("torch.inductor", _agrees(cmp), out, ff.name if ff else None, counts=cmp.counts())
    res.extra.update(observed=observed, regions=paths)
    if res.agrees:
        res.seconds = time.perf_counter() - t0
        _finish(res)
        return res
    runs = [0]

    def oracle(compiled: Callable[[frozenset[str]], tuple[list[str], dict[str, Any]]]) -> Callable[[frozenset[str]], bool]:
        def passes(off: frozenset[str]) -> bool:
            rs, opts = compiled(off)
            runs[0] += 1
            run_dir = out / "bisect" / f"run{runs[0]:03d}"
            _run_compiled(model, inputs, run_dir, rs, opts)
            ok = _agrees(compare(out / "golden", run_dir, thresholds=thresholds, workers=workers))
            shutil.rmtree(run_dir)
            return ok
        return passes

    # which regions: a region "off" runs eagerly
    by_region = bisect_switches(paths, oracle(lambda off: ([p for p in paths if p not in off], options)),
                                known={frozenset(): False})
    res.extra["region_bisection"] = by_region.to_json()
    culprit_regions = by_region.culprits or []
    res.extra["culprit_regions"] = culprit_regions
    switches = active_switches(options)
    if culprit_regions:
        # which switch, compiling only the culprit regions
        res.bisection = bisect_switches(switches, oracle(lambda off: (culprit_regions, _options_with_off(options, off))),
                                        known={frozenset(): False})
    shutil.rmtree(out / "bisect", ignore_errors=True)
    if res.bisection is not None and res.bisection.culprits:
        res.culprits = res.bisection.culprits
        fixed_opts = _options_with_off(options, frozenset(res.culprits))
        _run_compiled(model, inputs, out / "fixed", paths, fixed_opts)
        res.restored = _agrees(compare(out / "golden", out / "fixed", thresholds=thresholds, workers=workers))
        res.fused_nodes = made_by_culprit(kernel_provenance(model, inputs, culprit_regions, options),
                                          kernel_provenance(model, inputs, culprit_regions, fixed_opts))
        off_values = {s: SWITCHES[s] for s in res.culprits}
        write_switches(out / SWITCH_FILE, switch_doc("torch.inductor", switches, res.culprits, torch=torch.__version__,
                                                     regions=paths, culprit_regions=culprit_regions,
                                                     inductor_config=off_values))
    torch._dynamo.reset()
    res.extra["cost"] = {"runs": len(by_region.runs) + (len(res.bisection.runs) if res.bisection else 0),
                         "seconds": round(by_region.seconds + (res.bisection.seconds if res.bisection else 0), 3)}
    res.seconds = time.perf_counter() - t0
    _finish(res)
    return res
