"""opdiff: find where and why two runs of the same model stop agreeing.

capture -> store -> match -> metrics -> compare -> diagnose -> report. The core reads dumps
with numpy alone; framework captures (torch, onnxruntime, ...) are imported only when used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base.errors import DumpError, OpdiffError
from .base.version import __version__
from .capture import capture
from .store import Dump, Record, load

if TYPE_CHECKING:
    from .diagnose import Diagnosis
    from .hunting import HuntResult

__all__ = ["__version__", "capture", "load", "hunt", "diagnose_models", "Dump", "Record", "OpdiffError", "DumpError"]


def hunt(golden_fn: Callable[..., Any], target_fn: Callable[..., Any], out: str | os.PathLike[str],
         **options: Any) -> HuntResult:
    """Tiered capture: find where target departs from golden with a tensor dump of the suspect region only.

    See opdiff.hunting.hunt for the options and docs/scale.md; imported on first use (it needs torch)."""
    from .hunting import hunt as run

    return run(golden_fn, target_fn, os.fspath(out), **options)


def diagnose_models(golden: Any, target: Any, inputs: Any, out: str | os.PathLike[str], **options: Any) -> Diagnosis:
    """Capture two models on the same inputs, diagnose them, and confirm the verdict by patching module outputs.

    See opdiff.hunting.models.diagnose_models for the options and docs/diagnose.md; imported on first use (torch)."""
    from .hunting.models import diagnose_models as run

    return run(golden, target, inputs, out, **options)
