"""Diagnose: name the op where the target goes wrong, and why (docs/diagnose.md).

`diagnose(golden, target) -> Diagnosis` reuses compare's alignment and metrics, calibrates the
noise from the data, separates each op's own error from the error it inherits, and picks one
verdict: pass | inputs-differ | overflow | fault | drift. numpy only; replay (which needs the
framework) is imported lazily and skipped when unavailable.
"""

from ..base.vocab import VERDICTS
from .run import diagnose
from .verdict import Diagnosis

__all__ = ["VERDICTS", "Diagnosis", "diagnose"]
