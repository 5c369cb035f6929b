"""Load a user's model entry point, `MODULE:FUNCTION` or `path/to/script.py:FUNCTION`, returning (model, inputs).

Used by `opdiff export-onnx` and `opdiff fusion torch`: the function builds the model and its example
inputs (a dict of keyword arguments, or a tuple of positional ones). A bad entry point is one line.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from ..base.errors import OpdiffError


def _module(where: str) -> Any:
    if where.endswith(".py"):
        p = Path(where)
        if not p.is_file():
            raise OpdiffError(f"{where}: script not found")
        spec = importlib.util.spec_from_file_location(f"opdiff_entry_{p.stem}", p)
        if spec is None or spec.loader is None:
            raise OpdiffError(f"{where}: cannot be imported as a Python module")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        return mod
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise OpdiffError(f"{where}: module not found ({exc})") from None


def load_entry(entry: str) -> tuple[Any, Any]:
    """Call the entry point and check it returned (model, inputs)."""
    where, sep, func = entry.rpartition(":")
    if not sep or not where or not func:
        raise OpdiffError(f"{entry}: expected MODULE:FUNCTION or SCRIPT.py:FUNCTION")
    fn = getattr(_module(where), func, None)
    if not callable(fn):
        raise OpdiffError(f"{entry}: {func} is not a function of {where}")
    got = fn()
    if not (isinstance(got, tuple) and len(got) == 2):
        raise OpdiffError(f"{entry}: the function must return (model, inputs), not {type(got).__name__}")
    return got
