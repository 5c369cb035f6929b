"""Metrics of a golden/target tensor pair: real data, statistics or hashes, and their verdict.

numpy + ml_dtypes + numba only (docs/metrics.md). The real-data names load lazily, so reading
a thresholds file or judging metrics does not pay for loading the numba kernels.
"""

from importlib import import_module

from .hash_mode import hash_equal, hash_metrics
from .names import ERR_MESSAGE
from .stats_mode import stats_metrics
from .thresholds import ROUNDING_UNIT, Thresholds, dtype_class, load_thresholds, preset
from .verdict import verdict

_LAZY = ("TensorDataError", "TensorSource", "Workspace", "pair_metrics", "tensor_metrics")
__all__ = sorted(["ERR_MESSAGE", "ROUNDING_UNIT", "Thresholds", "dtype_class", "hash_equal", "hash_metrics",
                  "load_thresholds", "preset", "stats_metrics", "verdict", *_LAZY])


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.tensor"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
