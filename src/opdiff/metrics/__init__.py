"""Metrics of a golden/target tensor pair: real data, statistics or hashes, and their verdict.

numpy + ml_dtypes + numba only (docs/metrics.md). Names load lazily, so reading a thresholds
file does not pay for compiling the kernels.
"""

from importlib import import_module

_WHERE = {
    "hash_equal": "hash_mode", "hash_metrics": "hash_mode",
    "stats_metrics": "stats_mode",
    "ERR_MESSAGE": "tensor", "TensorDataError": "tensor", "TensorSource": "tensor", "Workspace": "tensor",
    "pair_metrics": "tensor", "tensor_metrics": "tensor",
    "ROUNDING_UNIT": "thresholds", "Thresholds": "thresholds", "dtype_class": "thresholds",
    "load_thresholds": "thresholds", "preset": "thresholds",
    "verdict": "verdict",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
