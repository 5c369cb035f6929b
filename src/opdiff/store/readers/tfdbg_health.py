"""The debug vectors of tfdbg's summary modes, decoded into what each mode really holds.

tfdbg v2 writes, per tensor, a float64 vector whose layout depends on `tensor_debug_mode`
(tensorflow/core/protobuf/debug_event.proto). Each becomes a record's dtype, shape and statistics
plus `extra["held"]` (the fields the mode measured) and `extra["counts"]`: compare judges a pair on
those fields alone (metrics/counts_mode.py). A field a mode does not hold gets a stand-in the
record needs (dtype float32, shape of its element count) that `held` says not to judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...base.errors import DumpError
from ...base.record import Stats
from .tfdbg_proto import TF_DTYPES

SUMMARY_MODES = ("FULL_HEALTH", "CONCISE_HEALTH", "CURT_HEALTH", "SHAPE", "NO_TENSOR")
STAND_IN_DTYPE = "float32"  # for modes that do not say the dtype (CONCISE_HEALTH, CURT_HEALTH, NO_TENSOR)
_SIZE = {"FULL_HEALTH": 11, "CONCISE_HEALTH": 5, "CURT_HEALTH": 2, "SHAPE": 10, "NO_TENSOR": 0}


@dataclass
class Health:
    """What one summary-mode vector says about a tensor."""

    dtype: str
    shape: tuple[int, ...]
    stats: Stats | None
    held: list[str]
    counts: dict[str, int] = field(default_factory=dict)

    def extra(self) -> dict[str, object]:
        return {"held": self.held, "counts": self.counts}


def decode(vec: np.ndarray, mode: str, path: Path) -> Health | None:
    """The vector of `mode` decoded (None: a dtype opdiff cannot hold); DumpError for an unknown mode or a short vector."""
    if mode not in _SIZE:
        raise DumpError(f"{path}: tensor_debug_mode {mode} is not one opdiff reads "
                        f"(it reads FULL_TENSOR, {', '.join(SUMMARY_MODES)})")
    if vec.size < _SIZE[mode]:
        raise DumpError(f"{path}: a {mode} debug vector has {vec.size} values, {_SIZE[mode]} expected")
    v = [int(x) for x in vec[:_SIZE[mode]]]
    if mode == "FULL_HEALTH":  # [id, device, dtype, rank, size, -inf, +inf, nan, negative, zero, positive]
        dtype = TF_DTYPES.get(v[2])
        if dtype is None:
            return None
        counts = {"numel": v[4], "neginf": v[5], "posinf": v[6], "nan": v[7], "negative": v[8], "zero": v[9],
                  "positive": v[10]}
        stats = Stats(numel=v[4], neginf=v[5], posinf=v[6], nan=v[7], zeros=v[9])
        return Health(dtype, (v[4],), stats, ["numel", "nan", "posinf", "neginf", "negative", "zero", "positive",
                                              "dtype"], counts)
    if mode == "CONCISE_HEALTH":  # [id, size, -inf, +inf, nan]
        counts = {"numel": v[1], "neginf": v[2], "posinf": v[3], "nan": v[4]}
        return Health(STAND_IN_DTYPE, (v[1],), Stats(numel=v[1], neginf=v[2], posinf=v[3], nan=v[4]),
                      ["numel", "nan", "posinf", "neginf"], counts)
    if mode == "CURT_HEALTH":  # [id, any inf or nan]
        flag = int(v[1] != 0)
        return Health(STAND_IN_DTYPE, (), Stats(numel=1, nan=flag), ["nonfinite"], {"nonfinite": flag})
    if mode == "SHAPE":  # [id, dtype, rank, size, shape (first 6 dims)]
        dtype = TF_DTYPES.get(v[1])
        if dtype is None:
            return None
        rank = v[2]
        shape = tuple(v[4:4 + rank]) if rank <= 6 else (v[3],)
        return Health(dtype, shape, Stats(numel=v[3]), ["numel", "dtype", "shape"] if rank <= 6 else ["numel", "dtype"],
                      {"numel": v[3]})
    return Health(STAND_IN_DTYPE, (), None, [])  # NO_TENSOR: the op ran, nothing was measured
