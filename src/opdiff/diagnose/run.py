"""diagnose(): compare (or reuse a comparison), build the graph, calibrate, and decide."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import gcpause
from ..base.errors import OpdiffError
from ..base.pair import PairResult
from ..metrics.counts_mode import HELD
from ..store import Dump, load
from . import backward, gcage, patch, trust
from .graph import Graph, build
from .inputs import differing_inputs
from .local import calibrate, events
from .overflow import first_overflow, fit_warnings, golden_overflows
from .patch import Patcher
from .tally import Tally, tally_of
from .verdict import Diagnosis, decide

if TYPE_CHECKING:
    from ..compare.run import Comparison
    from ..match.mapping import Mapping

# meta.json keys whose difference between the runs is worth saying (settings, not bookkeeping)
SETTINGS = ("framework", "framework_version", "device", "default_dtype", "num_threads", "seed", "level", "mode",
            "world_size")


def _as_dump(d: Dump | str | os.PathLike[str]) -> Dump:
    return d if isinstance(d, Dump) else load(d)


def _keep(level: str | None) -> Callable[[PairResult], bool]:
    """Which pairs a --level filter keeps: that level, the root model's records and parameters."""
    def keep(p: PairResult) -> bool:
        rec = p.record
        return level is None or rec.level in (level, "param") or rec.module == "" or rec.role == "parameter"
    return keep


def settings_diff(golden: Dump, target: Dump) -> dict[str, Any]:
    """Run settings (meta.json) that differ between golden and target."""
    out = {}
    for k in SETTINGS:
        g, t = golden.meta.get(k), target.meta.get(k)
        if g != t and (g is not None or t is not None):
            out[k] = {"golden": g, "target": t}
    return out


def _warnings(golden: Dump, target: Dump, graph: Graph, tally: Tally, run_dtype: str) -> list[str]:
    out: list[str] = []
    for dump, side in ((golden, "golden"), (target, "target")):
        out.extend(f"{side}: {p}" for p in dump.problems[:2])
    n_g, n_t = tally.unmatched("golden"), tally.unmatched("target")
    if n_g or n_t:
        out.append(f"{n_g} golden and {n_t} target records have no counterpart (ops added, removed or fused); "
                   "diagnose looks through them")
    modes = set(tally.modes)
    if "counts" in modes:
        out.append(counts_warning(golden, target))
        modes.discard("counts")
    if modes and "tensor" not in modes:
        out.append(f"compared in {'/'.join(sorted(modes))} mode only: errors are estimated from statistics "
                   "(capture with mode='tensor' for exact metrics and replay)")
    if graph.root is None:
        out.append("no record of the root model call: inputs cannot be checked and the path ends at the last op")
    g = golden_overflows(graph)
    if g is not None:
        out.append(f"golden itself has inf/nan at {g.name}")
    out.extend(fit_warnings(graph, run_dtype))
    return out


def _tally(graph: Graph, pairs: list[PairResult]) -> Tally:
    """What build counted over `pairs` (tally.py); counted here when the graph was built from other pairs."""
    t = graph.tally
    if t is not None and t.total == len(pairs):
        return t
    return tally_of(pairs, graph.direction)


def counts_warning(golden: Dump, target: Dump) -> str:
    """What a diagnosis from counts, flags or shapes (tfdbg summary modes) could not judge."""
    held = {f for d in (golden, target) for r in d.records[:200] for f in r.extra.get(HELD, ())}
    modes = sorted({str(r.extra.get("tfdbg_mode")) for d in (golden, target) for r in d.records[:200]
                    if "tfdbg_mode" in r.extra})
    return (f"judged on {', '.join(sorted(held)) or 'nothing'} only ({'/'.join(modes) or 'counts'} holds no values): "
            "a value that changed without changing these passes unseen (dump with FULL_TENSOR to judge values)")


def golden_names(graph: Graph, node_name: str) -> dict[str, str]:
    """Golden record names of a node's tensors (for an op golden lacks: of the tensors its inputs are)."""
    node = next((n for n in graph.nodes if n.name == node_name), None)
    out: dict[str, str] = {}
    for i in node.inputs + node.params + node.outputs if node else []:
        t = graph.tensors[i]
        src = t if t.golden is not None else graph.tensors[graph.producer[i]] if i in graph.producer else None
        if src is not None and src.golden is not None and t.target is not None:
            out[t.target.name] = src.golden.name
    return out


def diagnose(golden: Dump | str | os.PathLike[str], target: Dump | str | os.PathLike[str], *,
             mapping: Mapping | str | os.PathLike[str] | None = None,
             comparison: Comparison | dict[tuple[int, int], Comparison] | None = None,
             replay: bool = True, level: str | None = None, direction: str | None = None, workers: int | None = None,
             progress: bool = False, rank: int | None = None, step: int | None = None,
             patcher: Patcher | None = None) -> Diagnosis:
    """Where does the target first go wrong, and what kind of problem is it? (docs/diagnose.md)

    Every (rank, step) part both runs captured is diagnosed, each pass in turn (forward, backward,
    the optimizer's update); the first step where anything diverges is reported, with its culprit.
    `rank` / `step` narrow the parts, `direction` the passes. `comparison` reuses an
    `opdiff.compare.compare` result for one part, or takes {(rank, step): Comparison} (e.g. computed
    on Dask) for those parts; otherwise each part is compared here with `mapping`.
    With `replay`, the culprit is re-executed on golden inputs when the dumps hold what that needs.
    With a `patcher` (the two runs re-executable, e.g. capture.torch.patching.TorchPatcher), the verdict is
    confirmed or corrected by patching module outputs (patch.py); `diagnose_models` sets that up.
    """
    from .steps import diagnose_run

    with gcpause.paused():  # a million live objects of the comparison: no full collections over them (base/gcpause.py)
        diag = diagnose_run(_as_dump(golden), _as_dump(target), mapping=mapping, comparison=comparison, replay=replay,
                            level=level, direction=direction, workers=workers, progress=progress, rank=rank, step=step)
        gcage.age_all()  # the graph it holds: no young-generation walk over it after the pause (gcage.py)
    if patcher is not None:
        confirm_by_patching(diag, patcher)
    return diag


def confirm_by_patching(diag: Diagnosis, patcher: Patcher) -> None:
    """Run the causal test of patch.py and fold its answer into `diag`."""
    stat = diag.culprit.module if diag.culprit is not None and diag.culprit.direction == "forward" else None
    patch.apply(diag, patch.prove(patcher, diag.noise, stat), diag.graph)


def confirm_or_say_why(diag: Diagnosis, make: Callable[[], Patcher], what: str) -> None:
    """`confirm_by_patching` with the patcher `make` builds. Patching re-runs the user's code with hooks: a
    failure there leaves the statistics' verdict, its reason in the confirmation (status error), never a traceback."""
    try:
        confirm_by_patching(diag, make())
    except Exception as exc:  # the user's code, re-run patched: any failure is reported, not raised
        diag.patch = patch.PatchProof("error", reason=f"re-running the {what} to patch them failed: "
                                                      f"{type(exc).__name__}: {exc}")


def _own_records(pairs: list[PairResult], direction: str, tally: Tally | None = None) -> list[PairResult]:
    """The pairs a pass answers for: its own direction's (a backward-only record does not make the forward pass
    inconclusive); the forward pass also those of a pass where nothing pairs, which is not diagnosed itself.
    All of them when every pair is of that direction (one walk, not two; none with build's `tally` of them)."""
    if tally.other == 0 if tally is not None else all(p.record.direction == direction for p in pairs):
        return pairs
    paired = {p.record.direction for p in pairs if p.golden is not None and p.target is not None}
    return [p for p in pairs if p.record.direction == direction or direction == "forward" and p.record.direction not in paired]


def diagnose_pass(golden: Dump, target: Dump, comparison: Comparison, *, level: str | None = None, direction: str = "forward",
                  replay: bool = False) -> Diagnosis:
    """One pass (`direction`) of one (rank, step) part, from its comparison."""
    keep = _keep(level)
    pairs = list(comparison.results) if level is None else [p for p in comparison.results if keep(p)]
    if level is not None and not any(p.record.level == level for p in pairs):
        have = sorted({p.record.level for p in comparison.results})
        raise OpdiffError(f"{target.root}: no {level}-level records (the dumps hold {', '.join(have)}): nothing to diagnose")
    if direction == "backward":
        pairs = backward.prepare(pairs)
    graph = build(pairs, direction, golden, target)
    if direction == "backward":
        backward.attach_param_grads(graph)
        backward.wire_output_grads(graph, pairs)
    if not any(t.golden is not None and t.target is not None for t in graph.tensors):
        what = f" at level {level!r}" if level else ""
        raise OpdiffError(f"{target.root}: no {direction} record{what} pairs with one of {golden.root}: nothing to diagnose")
    noise = calibrate(graph)
    evs = events(graph, noise)
    tally = _tally(graph, pairs)
    warnings = _warnings(golden, target, graph, tally, noise.run_dtype)
    diag = decide(graph, noise, evs, first_overflow(graph), differing_inputs(graph, noise), warnings,
                  replayable=replay)
    own = _own_records(pairs, direction, tally)
    trust.apply(diag, comparison, own, odd=tally.odd if own is pairs else None)
    settings = settings_diff(golden, target)
    if settings:
        diag.evidence.settings = settings
    diag.counts = {
        "pairs": len(pairs),
        "compared": tally.compared(),
        "unmatched_golden": tally.one_sided("golden"),
        "unmatched_target": tally.one_sided("target"),
        "nodes": len(graph.nodes),
        "levels": sorted(graph.levels),
        "events": len(evs),
    }
    diag.graph = graph
    return diag


def confirm_culprit(golden: Dump, target: Dump, diag: Diagnosis) -> None:
    """Replay the culprit (forward and backward ops) on golden's inputs, when there is one."""
    if diag.culprit is None or diag.culprit.direction == "update" and diag.culprit.how == "update":
        return
    from ..replay import confirm

    names = golden_names(diag.graph, diag.culprit.node) if diag.graph is not None else {}
    diag.replay = confirm(golden, target, diag, names)
