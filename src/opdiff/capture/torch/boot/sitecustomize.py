"""opdiff run's bootstrap, imported by Python at start-up (this directory is on PYTHONPATH).

It imports nothing heavy: when OPDIFF_RUN_DIR is set it waits for the script to import torch (an
import hook on the top-level `torch` module) and then lets `opdiff.capture.torch.launch` find the
model, the optimizer and the ranks. A sitecustomize this one hides on sys.path still runs.
Nothing here may break the user's script: a failure prints one line and capture stays off.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Run the next sitecustomize on sys.path (the one this file hides), if any."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _started() -> None:
    """torch has just been imported: install opdiff's launcher."""
    try:
        try:
            from opdiff.capture.torch import launch
        except ImportError:  # a Python without opdiff installed: use the package this file belongs to
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))))
            from opdiff.capture.torch import launch
        launch.install_from_env()
    except Exception as exc:  # never break the user's script
        print(f"opdiff run: capture not started: {type(exc).__name__}: {exc}", file=sys.stderr)


class _TorchImportHook:
    """A meta path finder that runs `_started` right after the module `torch` has been executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def run(module: Any) -> None:
            exec_module(module)
            _started()
        spec.loader.exec_module = run
        return spec


if os.environ.get("OPDIFF_RUN_DIR"):
    if "torch" in sys.modules:
        _started()
    else:
        sys.meta_path.insert(0, _TorchImportHook())
try:
    _chain()
except Exception as exc:
    print(f"opdiff run: the next sitecustomize failed: {type(exc).__name__}: {exc}", file=sys.stderr)
