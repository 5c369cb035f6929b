"""`opdiff.tf`: capture TensorFlow / Keras runs (needs the `opdiff[tf]` extra). See docs/tensorflow.md.

    with opdiff.tf.capture(model, "runs/keras") as cap:       # every Keras layer call
        model(x)
    with opdiff.tf.capture(fn, "runs/ops", level="op"):        # every op, through tfdbg
        fn(x)
"""

from __future__ import annotations

from .capture.tensorflow import capture, handles

__all__ = ["capture", "handles"]
