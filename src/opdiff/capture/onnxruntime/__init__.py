"""ONNX Runtime capture: `capture_onnx(model, inputs, path, ...)` (docs/fusion.md). Needs `opdiff[onnx]`.

Names are imported on first use, so that `capture/__init__.py` can list this package's BACKEND
(backend.py) without importing onnx or onnxruntime.
"""

from __future__ import annotations

from typing import Any

from ..backend import lazy

_WHERE = {"capture_onnx": ".capture", "load_model": ".capture", "OPT_LEVELS": ".session", "Settings": ".session",
          "parse_config": ".session"}

__all__ = ["capture_onnx", "load_model", "OPT_LEVELS", "Settings", "parse_config"]


def __getattr__(name: str) -> Any:
    """Import the module that defines `name` (onnxruntime is imported here, not at package import)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lazy(_WHERE[name], name, __name__)
