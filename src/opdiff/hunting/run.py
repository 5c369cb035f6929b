"""hunt(): statistics over the whole model, then tensors of the suspect region only, then diagnose."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import OpdiffError
from ..base.outdir import prepare_outputs
from ..base.vocab import Verdict
from ..store import Dump, load
from .capture_fn import CaptureBlock, run_with_capture
from .volume import PassInfo

if TYPE_CHECKING:
    from ..diagnose.types import Culprit
    from ..diagnose.verdict import Diagnosis

OUTPUTS = ("pass1-golden", "pass1-target", "pass2-golden", "pass2-target", "hunt.json", "diagnosis.json")
STATS_MODES = ("stats", "hash")


class NotDeterministic(OpdiffError):
    """A run re-executed for pass 2 does not reproduce its pass-1 statistics."""


@dataclass
class HuntResult:
    """What hunt found and what each pass cost."""

    out: Path
    verdict: Verdict
    culprit: Culprit | None
    region: str | None  # module path pass 2 captured (None: no pass 2)
    include: str | None  # the include regex of pass 2
    passes: list[PassInfo] = field(default_factory=list)
    full_tensor_bytes: int = 0  # estimate of a full tensor dump of both runs, from pass 1's records
    hunt_tensor_bytes: int = 0  # tensor data pass 2 actually stored, both runs
    seconds: dict[str, float] = field(default_factory=dict)
    diagnosis: Diagnosis | None = None  # the final diagnosis (pass 2, or pass 1 when no pass 2 ran)
    stats_diagnosis: Diagnosis | None = None  # pass 1's

    @property
    def ratio(self) -> float | None:
        """How many times smaller the hunt's tensor dump is than a full one."""
        return self.full_tensor_bytes / self.hunt_tensor_bytes if self.hunt_tensor_bytes else None

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "pass" else 1

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "culprit": self.culprit.to_json() if self.culprit else None, "region": self.region, "include": self.include,
                "passes": [asdict(p) for p in self.passes], "full_tensor_bytes": self.full_tensor_bytes,
                "hunt_tensor_bytes": self.hunt_tensor_bytes, "ratio": self.ratio, "seconds": self.seconds,
                "stats_verdict": self.stats_diagnosis.verdict if self.stats_diagnosis else None,
                "stats_culprit": (self.stats_diagnosis.culprit.to_json()
                                  if self.stats_diagnosis and self.stats_diagnosis.culprit else None),
                "confirmation": self.diagnosis.confirmation() if self.diagnosis else None}


def region_regex(module: str) -> str:
    """The include regex of a module and everything inside it (capture searches it in module paths)."""
    return f"^{re.escape(module)}(\\.|$)" if module else ".*"


def suspect(diag: Diagnosis) -> str | None:
    """The module pass 1 blames: the culprit's, else the first divergence's (None: nothing to narrow)."""
    if diag.verdict in ("pass", "inputs-differ"):
        return None
    if diag.culprit is not None:
        return diag.culprit.module
    module = (diag.first_divergence or {}).get("module")
    return module if isinstance(module, str) else None


def widen(module: str, levels: int) -> str:
    """The module `levels` parents up ("" is the whole model)."""
    for _ in range(levels):
        if not module:
            break
        module = module.rpartition(".")[0]
    return module


def check_rerun(first: Dump, second: Dump, who: str) -> None:
    """Refuse when a record both passes captured has other statistics the second time."""
    differ = [r.name for r in second.records
              if (f := first.get(r.name)) is not None and f.stats is not None and r.stats is not None and f.stats != r.stats]
    if differ:
        raise NotDeterministic(f"{second.root}: {who} is not deterministic enough to re-run: {len(differ)} records "
                               f"have other statistics than in pass 1 (first: {differ[0]}); seed it and fix its inputs")


def _prepare(out: Path, force: bool) -> None:
    prepare_outputs(out, force, OUTPUTS, hint="use --force to replace hunt's outputs")


def _capture_pass(fns: dict[str, Callable[[CaptureBlock], Any]], out: Path, tag: str, mode: str, level: str,
                  include: str | None) -> dict[str, Dump]:
    dumps = {}
    for side, fn in fns.items():
        block = CaptureBlock(out / f"{tag}-{side}", mode=mode, level=level, include=include, who=f"{side} function")
        run_with_capture(fn, block)
        dumps[side] = load(block.path)
    return dumps


def _confirm(diag: Diagnosis, golden_fn: Callable[[Any], Any], target_fn: Callable[[Any], Any], seed: int) -> None:
    """Patch confirmation of hunt's verdict; a function that cannot be re-run patched leaves the statistics'
    verdict, with the reason in the confirmation."""
    from ..capture.torch.patching import TorchPatcher
    from ..diagnose.run import confirm_or_say_why

    confirm_or_say_why(diag, lambda: TorchPatcher.of_functions(golden_fn, target_fn, seed=seed), "functions")


def hunt(golden_fn: Callable[[CaptureBlock], Any], target_fn: Callable[[CaptureBlock], Any], out: str | Path, *,
         level: str = "module", detail_level: str | None = None, stats_mode: str = "stats", widen_by: int = 0,
         replay: bool = True, patch: bool = True, force: bool = False, seed: int = 0) -> HuntResult:
    """Find where target departs from golden with a tensor dump of the suspect region only (docs/scale.md).

    Each function builds and runs its model (inference or a training step) as
    ``def run(capture): ...; with capture(model): model(**inputs)`` and must compute the same thing
    each time it is called. Pass 1 captures `stats_mode` over everything at `level`; pass 2 captures
    tensors at `detail_level` (default: `level`) of the suspect module (`widen_by` parents up).
    With `patch`, both functions are re-run (from RNG seed `seed`) with module and op outputs exchanged
    to confirm or correct the verdict (HuntResult.to_json()["confirmation"], docs/diagnose.md).
    """
    from .. import report
    from ..diagnose import diagnose

    if stats_mode not in STATS_MODES:
        raise OpdiffError(f"hunt: stats_mode must be one of {', '.join(STATS_MODES)}, not {stats_mode!r}")
    out = Path(out)
    _prepare(out, force)
    fns = {"golden": golden_fn, "target": target_fn}
    secs: dict[str, float] = {}
    t0 = time.perf_counter()
    p1 = _capture_pass(fns, out, "pass1", stats_mode, level, None)
    secs["pass1"] = time.perf_counter() - t0
    diag1 = diagnose(p1["golden"], p1["target"], replay=False)
    res = HuntResult(out, diag1.verdict, diag1.culprit, None, None, stats_diagnosis=diag1, diagnosis=diag1)
    res.passes = [PassInfo.of(f"pass1-{s}", d, stats_mode, level, None) for s, d in p1.items()]
    res.full_tensor_bytes = sum(p.full_tensor_bytes for p in res.passes)
    module = suspect(diag1)
    if module is not None:
        res.region = widen(module, widen_by)
        res.include = region_regex(res.region)
        t1 = time.perf_counter()
        lvl2 = detail_level or level
        p2 = _capture_pass(fns, out, "pass2", "tensor", lvl2, res.include)
        secs["pass2"] = time.perf_counter() - t1
        for side in fns:
            check_rerun(p1[side], p2[side], f"the {side} function")
        res.passes += [PassInfo.of(f"pass2-{s}", d, "tensor", lvl2, res.include) for s, d in p2.items()]
        res.hunt_tensor_bytes = sum(p.tensor_bytes for p in res.passes[2:])
        res.diagnosis = diagnose(p2["golden"], p2["target"], replay=replay)
    assert res.diagnosis is not None
    if patch:
        t2 = time.perf_counter()
        _confirm(res.diagnosis, golden_fn, target_fn, seed)
        secs["patch"] = time.perf_counter() - t2
    res.verdict, res.culprit = res.diagnosis.verdict, res.diagnosis.culprit
    report.write(res.diagnosis, "json", out / "diagnosis.json")
    secs["total"] = time.perf_counter() - t0
    res.seconds = secs
    report.write(res, "json", out / "hunt.json")
    return res
