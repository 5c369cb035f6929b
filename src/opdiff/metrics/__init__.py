"""Metrics of a golden/target tensor pair: real data, statistics or hashes, and their verdict.

numpy + ml_dtypes + numba only (docs/metrics.md).
"""

from ..base.jitcache import load_lean
from . import kernel
from .hash_mode import hash_equal, hash_metrics
from .names import ERR_MESSAGE
from .stats_mode import stats_metrics
from .tensor import TensorDataError, TensorSource, Workspace, pair_metrics, tensor_metrics
from .thresholds import ROUNDING_UNIT, Thresholds, dtype_class, load_thresholds, preset
from .verdict import verdict

load_lean(kernel)  # cached kernels load without numba's compiler set-up (base/jitcache.py)

__all__ = ["ERR_MESSAGE", "ROUNDING_UNIT", "TensorDataError", "TensorSource", "Thresholds", "Workspace", "dtype_class",
           "hash_equal", "hash_metrics", "load_thresholds", "pair_metrics", "preset", "stats_metrics", "tensor_metrics",
           "verdict"]
