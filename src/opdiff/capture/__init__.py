"""Capture a run into a dump. One backend per framework (capture/<framework>/), imported only when used."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import Any

from . import tensorflow
from .backend import CaptureBackend, LazyBackend
from .onnxruntime.backend import BACKEND as ONNXRUNTIME

# The first backend whose handles(model) is true captures it. Add a framework with one line here: every
# backend is a LazyBackend naming the module whose capture(model, path, **options) it calls.
BACKENDS: tuple[CaptureBackend, ...] = (
    LazyBackend("torch", "opdiff.capture.torch", ("torch",)),
    LazyBackend("tensorflow", "opdiff.capture.tensorflow", tensorflow.PACKAGES),
    ONNXRUNTIME,
)


def capture(model: Any, path: str | os.PathLike[str], **options: Any) -> AbstractContextManager[Any]:
    """Capture every module / API / op call of `model` into a dump at `path` (a context manager).

    Dispatches on the model's framework; see each backend's capture() for its options
    (opdiff.capture.torch.capture for PyTorch)."""
    for backend in BACKENDS:
        if backend.handles(model):
            return backend.capture(model, path, **options)
    kind = f"{type(model).__module__}.{type(model).__name__}"
    known = ", ".join(b.framework for b in BACKENDS)
    raise TypeError(f"opdiff.capture: no capture for a model of type {kind} (backends: {known})")
