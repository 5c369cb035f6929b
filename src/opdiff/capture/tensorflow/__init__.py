"""TensorFlow / Keras capture (opdiff[tf]); TensorFlow is imported only when a capture starts."""

from __future__ import annotations

import os
from typing import Any


def handles(model: object) -> bool:
    """A Keras layer or model, a tf.function, or a tf.Module (by type names: TensorFlow is not imported)."""
    for cls in type(model).__mro__:
        mod = cls.__module__ or ""
        if mod.startswith(("keras", "tensorflow", "tf_keras")):
            return True
    return False


def capture(model: Any, path: str | os.PathLike, **options):
    """See opdiff.capture.tensorflow.session.capture."""
    from .session import capture as _capture

    return _capture(model, path, **options)


class TensorflowBackend:
    """The capture backend of the contract (opdiff.capture.BACKENDS)."""

    framework = "tensorflow"

    def handles(self, model: object) -> bool:
        return handles(model)

    def capture(self, model: Any, path: str | os.PathLike, **options):
        return capture(model, path, **options)


BACKEND = TensorflowBackend()

__all__ = ["capture", "handles", "BACKEND", "TensorflowBackend"]
