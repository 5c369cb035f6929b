"""The ONNX Runtime capture backend (CONTRACT: CaptureBackend): `with capture(model, path) as cap: cap.run(inputs)`."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any


class OrtCapture(AbstractContextManager["OrtCapture"]):
    """Context manager: each `run(inputs)` captures one ORT run of the model into `path` (one run per capture)."""

    def __init__(self, model: Any, path: str | os.PathLike[str], **options: Any):
        self.model, self.path, self.options = model, path, options
        self.meta: dict[str, Any] | None = None

    def __enter__(self) -> OrtCapture:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def run(self, inputs: Any) -> dict[str, Any]:
        """Capture the run on `inputs` (dict of arrays or .npz path); returns the dump's meta."""
        from .capture import capture_onnx

        self.meta = capture_onnx(self.model, inputs, self.path, **self.options)
        return self.meta


class OnnxRuntimeBackend:
    framework = "onnxruntime"

    def handles(self, model: object) -> bool:
        """An onnx.ModelProto, or a path to an .onnx file (no framework import)."""
        if isinstance(model, (str, os.PathLike)):
            return Path(model).suffix.lower() == ".onnx"
        return type(model).__name__ == "ModelProto" and (type(model).__module__ or "").startswith("onnx")

    def capture(self, model: object, path: str | os.PathLike[str], **options: Any) -> OrtCapture:
        return OrtCapture(model, path, **options)


BACKEND = OnnxRuntimeBackend()
