"""The ONNX Runtime capture backend, a LazyBackend like the others: `with capture(model, path) as cap: cap.run(inputs)`."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..backend import LazyBackend, lazy


class OrtCapture(AbstractContextManager["OrtCapture"]):
    """Context manager: each `run(inputs)` captures one ORT run of the model into `path` (one run per capture)."""

    def __init__(self, model: object, path: str | os.PathLike[str], **options: Any):
        self.model, self.path, self.options = model, path, options
        self.meta: dict[str, Any] | None = None

    def __enter__(self) -> OrtCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, inputs: Any) -> dict[str, Any]:
        """Capture the run on `inputs` (dict of arrays or .npz path); returns the dump's meta."""
        capture_onnx: Callable[..., dict[str, Any]] = lazy(".capture", "capture_onnx", __package__)
        self.meta = capture_onnx(self.model, inputs, self.path, **self.options)
        return self.meta

    __call__ = run  # as the other backends' sessions run their model: cap(inputs)


def handles(model: object) -> bool:
    """An onnx.ModelProto, or a path to an .onnx file (no framework import)."""
    if isinstance(model, (str, os.PathLike)):
        return Path(model).suffix.lower() == ".onnx"
    return type(model).__name__ == "ModelProto" and (type(model).__module__ or "").startswith("onnx")


def capture(model: object, path: str | os.PathLike[str], **options: Any) -> OrtCapture:
    """`with capture(model, path) as cap: cap.run(inputs)` (or `cap(inputs)`): one ORT run per capture."""
    return OrtCapture(model, path, **options)


BACKEND = LazyBackend("onnxruntime", __name__, accepts=handles)
