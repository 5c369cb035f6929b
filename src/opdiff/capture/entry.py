"""Load a user's entry point, `MODULE:FUNCTION` or `path/to/script.py:FUNCTION`: the one loader of user code.

`load_function` returns the function (opdiff hunt calls it with a capture block); `load_entry` calls it and
checks it returned (model, inputs) (opdiff export-onnx, opdiff fusion torch). One rule for both: a source
ending in .py or holding a "/" is a script, loaded once per resolved path (golden and target may live in
one script); anything else is an importable module. A bad entry point is one line naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from ..base.errors import OpdiffError


def _script(source: str) -> ModuleType:
    """The script at `source`, executed once: a second entry point in the same file reuses the module."""
    path = Path(source)
    if not path.is_file():
        raise OpdiffError(f"{source}: script not found")
    key = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"opdiff_entry_{path.stem if path.stem.isidentifier() else 'script'}_{key}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise OpdiffError(f"{source}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def _module(source: str) -> ModuleType:
    if source.endswith(".py") or "/" in source:
        return _script(source)
    try:
        return importlib.import_module(source)
    except ModuleNotFoundError as exc:
        raise OpdiffError(f"{source}: cannot import module ({exc})") from None


def load_function(spec: str) -> Callable[..., Any]:
    """The function `spec` names (`MODULE:FUNCTION` or `SCRIPT.py:FUNCTION`); importing runs the module."""
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name.isidentifier():
        raise OpdiffError(f"{spec}: expected MODULE:FUNCTION or SCRIPT.py:FUNCTION")
    fn = getattr(_module(source), name, None)
    if not callable(fn):
        raise OpdiffError(f"{source}: has no function {name!r}")
    return cast(Callable[..., Any], fn)


def load_entry(entry: str) -> tuple[Any, Any]:
    """Call the entry point and check it returned (model, inputs)."""
    got = load_function(entry)()
    if not (isinstance(got, tuple) and len(got) == 2):
        raise OpdiffError(f"{entry}: the function must return (model, inputs), not {type(got).__name__}")
    return got[0], got[1]


__all__ = ["load_entry", "load_function"]
