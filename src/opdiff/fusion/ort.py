"""`opdiff fusion onnx`: ONNX Runtime with graph optimization off (golden) against on (target).

When the optimized run diverges, bisect over the graph transformers that fired in it (names taken
from ORT's own verbose log, so they match the installed release) and the numerics-changing session
options the user turned on; name the pass, the fused nodes it made, and write a switch file that
turns off just that pass (docs/fusion.md).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.outdir import claim_dir
from ..capture.onnxruntime import capture_onnx, load_model
from ..capture.onnxruntime.inputs import load_npz
from ..compare.run import Comparison, compare
from .bisect import Bisection, bisect_switches
from .switchfile import switch_doc, write_switches

# session options that change numerics: switching one "off" sets it to "0"
NUMERIC_OPTIONS = ("optimization.enable_gelu_approximation", "session.set_denormal_as_zero",
                   "mlas.enable_gemm_fastmath_arm64_bfloat16")
SWITCH_FILE = "switches.json"
RESULT_FILE = "fusion.json"


@dataclass
class FusionResult:
    """What `opdiff fusion` found: whether the fused run agrees, and if not, which pass is at fault."""

    engine: str
    agrees: bool
    out: Path
    first_fail: str | None = None
    bisection: Bisection | None = None
    culprits: list[str] = field(default_factory=list)
    fused_nodes: dict[str, list[str]] = field(default_factory=dict)  # culprit's fused node -> original nodes
    restored: bool = False  # turning off the culprits makes the run agree
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "agrees": self.agrees, "first_fail": self.first_fail,
                "culprits": self.culprits, "fused_nodes": self.fused_nodes, "restored": self.restored,
                "counts": self.counts, "seconds": round(self.seconds, 3),
                "bisection": self.bisection.to_json() if self.bisection else None, **self.extra}


def _agrees(cmp: Comparison) -> bool:
    """Every shared cut point passes (one-side-only tensors are expected under fusion)."""
    return cmp.passed(allow_unmatched=True)


def _settings_for(off: frozenset[str], config: dict[str, str], disabled: list[str]) -> tuple[list[str], dict[str, str]]:
    cfg = dict(config)
    names = list(disabled)
    for s in sorted(off):
        if s in NUMERIC_OPTIONS:
            cfg[s] = "0"
        else:
            names.append(s)
    return names, cfg


def fusion_onnx(model: str | Path, inputs: str | Path | dict[str, Any], out: str | Path, *, opt_level: str = "all",
                disabled: list[str] | tuple[str, ...] = (), session_config: dict[str, str] | None = None,
                thresholds: Any = None, force: bool = False, workers: int | None = 1) -> FusionResult:
    """Golden: `model` with optimization off; target: with `opt_level`; compare; bisect if they differ."""
    t0 = time.perf_counter()
    load_model(model)  # a bad model or inputs file is reported before any work
    feeds = load_npz(inputs) if not isinstance(inputs, dict) else inputs
    out = Path(out)
    claim_dir(out, force, hint="use --force to write into it")
    if out.exists() and force:
        for sub in ("golden", "target", "fixed", "bisect"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    config = dict(session_config or {})
    disabled = list(disabled)
    capture_onnx(model, feeds, out / "golden", opt_level="disable", session_config=config)
    tmeta = capture_onnx(model, feeds, out / "target", opt_level=opt_level, disabled_optimizers=disabled,
                         session_config=config)
    cmp = compare(out / "golden", out / "target", thresholds=thresholds, workers=workers)
    _write_reports(cmp, out)
    ff = cmp.first_fail()
    res = FusionResult("onnxruntime", _agrees(cmp), out, ff.name if ff else None, counts=cmp.counts())
    res.extra["transformers_fired"] = tmeta["transformers_fired"]
    res.extra["observed"] = tmeta["observed"]
    if res.agrees:
        res.seconds = time.perf_counter() - t0
        _finish(res)
        return res
    switches = [k for k in NUMERIC_OPTIONS if config.get(k, "0") not in ("0", "")]
    switches += [s for s in tmeta["transformers_fired"] if s not in disabled]
    runs = [0]

    def passes(off: frozenset[str]) -> bool:
        names, cfg = _settings_for(off, config, disabled)
        runs[0] += 1
        run_dir = out / "bisect" / f"run{runs[0]:03d}"
        capture_onnx(model, feeds, run_dir, opt_level=opt_level, disabled_optimizers=names, session_config=cfg)
        ok = _agrees(compare(out / "golden", run_dir, thresholds=thresholds, workers=workers))
        shutil.rmtree(run_dir)
        return ok

    # latest first: a pass that rewrites what an earlier fusion made (GeluApproximation after GeluFusion)
    # is the more specific culprit, and turning it off keeps the earlier fusion
    res.bisection = bisect_switches(switches[::-1], passes, known={frozenset(): False})
    shutil.rmtree(out / "bisect", ignore_errors=True)
    if res.bisection.culprits:
        res.culprits = res.bisection.culprits
        names, cfg = _settings_for(frozenset(res.culprits), config, disabled)
        fmeta = capture_onnx(model, feeds, out / "fixed", opt_level=opt_level, disabled_optimizers=names,
                             session_config=cfg)
        fixed = compare(out / "golden", out / "fixed", thresholds=thresholds, workers=workers)
        res.restored = _agrees(fixed)
        res.fused_nodes = _made_by_culprit(tmeta["provenance"], fmeta["provenance"])
        sw = switch_doc("onnxruntime", switches, res.culprits, onnxruntime=tmeta["framework_version"],
                        opt_level=opt_level, disabled_optimizers=names,
                        session_config={**cfg, **({"optimization.disable_specified_optimizers": ",".join(names)}
                                                  if names else {})})
        write_switches(out / SWITCH_FILE, sw)
    res.seconds = time.perf_counter() - t0
    _finish(res)
    return res


def _made_by_culprit(target: dict[str, list[str]], fixed: dict[str, list[str]]) -> dict[str, list[str]]:
    """Fused nodes of the target that the run with the culprits off does not have (same node, same originals)."""
    have = {(k, tuple(v)) for k, v in fixed.items()}
    return {k: v for k, v in target.items() if (k, tuple(v)) not in have}


def _write_reports(cmp: Comparison, out: Path) -> None:
    from .. import report

    for fmt in ("csv", "json"):
        report.write(cmp, fmt, out / f"compare.{fmt}")


def _finish(res: FusionResult) -> None:
    from .. import report

    report.write(res, "json", res.out / RESULT_FILE)
