"""`opdiff.diagnose_models(golden_model, target_model, inputs, out)`: capture, diagnose, prove by patching.

When both models are at hand the verdict need not rest on statistics: both are captured into
out/golden and out/target, diagnosed, and the verdict is confirmed (or corrected) by re-running them
with module outputs exchanged (diagnose/patch.py, docs/diagnose.md "Patch confirmation"). Both models
are left as found (training flags, hooks, parameters, RNG).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base.outdir import claim_dir
from ..capture.torch import capture
from ..capture.torch.patching import TorchPatcher, call
from ..capture.torch.preserve import preserved
from ..diagnose import Diagnosis
from ..diagnose.run import confirm_or_say_why
from ..diagnose.run import diagnose as diagnose_dumps


def diagnose_models(golden: Any, target: Any, inputs: Any, out: str | os.PathLike[str], *, level: str = "module",
                    mode: str = "tensor", target_inputs: Any | None = None, patch: bool = True, replay: bool = True,
                    force: bool = False, seed: int = 0) -> Diagnosis:
    """Capture `golden(inputs)` and `target(target_inputs or inputs)` at `level`, diagnose them, and with
    `patch` confirm the verdict by patching (Diagnosis.confirmation says how, with the errors before and after).

    `inputs`: a dict of keyword arguments, a tuple of positional ones, or one tensor."""
    import torch

    root = Path(out)
    claim_dir(root, force)
    root.mkdir(parents=True, exist_ok=True)
    runs = {"golden": (golden, inputs), "target": (target, inputs if target_inputs is None else target_inputs)}
    for side, (model, args) in runs.items():
        with preserved(model, rng=True):
            torch.manual_seed(seed)
            with capture(model, root / side, level=level, mode=mode, overwrite=force):
                call(model, args)
    diag = diagnose_dumps(root / "golden", root / "target", replay=replay)
    if patch:
        confirm_or_say_why(diag, lambda: TorchPatcher(golden, target, inputs, target_inputs, seed=seed), "models")
    return diag
