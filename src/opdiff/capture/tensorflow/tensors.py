"""TensorFlow tensors and Keras variables -> what a record holds: dtype name, numpy data, statistics, hash."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ...base.record import Stats
from ...store.format import numpy_dtype
from ...store.stats import content_hash
from ..stats_kernel import array_stats, copy_with_stats

DTYPE_NAMES = {tf.float64: "float64", tf.float32: "float32", tf.float16: "float16", tf.bfloat16: "bfloat16",
               tf.int64: "int64", tf.int32: "int32", tf.int16: "int16", tf.int8: "int8", tf.uint8: "uint8",
               tf.uint16: "uint16", tf.uint32: "uint32", tf.uint64: "uint64", tf.bool: "bool"}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(tf.dtypes, _name):
        DTYPE_NAMES[getattr(tf.dtypes, _name)] = _name


def dtype_name(t) -> str | None:
    """The format's dtype name of an eager tensor or variable; None when the format cannot hold it."""
    return DTYPE_NAMES.get(tf.as_dtype(t.dtype))


def is_eager(t) -> bool:
    """A tensor with a value now (not a symbolic graph tensor or a KerasTensor)."""
    return isinstance(t, (tf.Tensor, tf.Variable)) and hasattr(t, "numpy") and \
        (not isinstance(t, tf.Tensor) or tf.executing_eagerly())


def host_array(t, name: str) -> np.ndarray:
    """A C-contiguous numpy view of the tensor's value, in the format's dtype (ml_dtypes for bf16/fp8)."""
    arr = np.ascontiguousarray(t.numpy())
    want = numpy_dtype(name)
    if arr.dtype != want:
        arr = arr.view(want)  # TensorFlow's own bfloat16 / float8 numpy types: same bits
    return arr


def measure(t, name: str, mode: str) -> tuple[np.ndarray | None, Stats, str | None]:
    """(data the writer may own or None, statistics, content hash or None) for capture mode `mode`."""
    arr = host_array(t, name)
    if mode == "tensor":
        data, stats = copy_with_stats(arr, name)
        return data, stats, content_hash(data, name, tuple(data.shape))
    stats = array_stats(arr, name)
    return None, stats, content_hash(arr, name, tuple(arr.shape)) if mode == "hash" else None
