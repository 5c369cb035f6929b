"""TensorFlow / Keras capture (opdiff[tf]); TensorFlow is imported only when a capture starts."""

from __future__ import annotations

import os
from typing import Any

from ..backend import defined_in, lazy

# Top-level packages whose classes (Keras layers and models, tf.function, tf.Module) this backend captures.
PACKAGES = ("keras", "tensorflow", "tf_keras")


def handles(model: object) -> bool:
    """A Keras layer or model, a tf.function, or a tf.Module (by type names: TensorFlow is not imported)."""
    return defined_in(model, *PACKAGES)


def capture(model: Any, path: str | os.PathLike[str], **options: Any) -> Any:
    """See opdiff.capture.tensorflow.session.capture."""
    return lazy(".session", "capture", __name__)(model, path, **options)


__all__ = ["PACKAGES", "capture", "handles"]
