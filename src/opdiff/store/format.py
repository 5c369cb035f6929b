"""Record schema, dtype names and layout constants of the opdiff dump format (docs/format.md)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..base.record import Record, Stats
from .names import node_name, record_name

FORMAT_NAME = "opdiff-dump"
# 2: a record's data may lie in an earlier part of the run (`data.part`): stored once per dump;
# 3: a record may read stored bytes under another shape or order (`data.axes`): a reshape, a transpose, or a
#    strided window of them (`data.window`: an element offset and the record's strides; split, narrow, select)
FORMAT_VERSION = 3
READ_VERSIONS = (1, 2, 3)  # what the reader accepts (docs/format.md, "Versioning")
META_FILE = "meta.json"
INDEX_FILE = "index.jsonl"
SHARD_DIR = "shards"


# dtype name (as torch and the docs spell it) -> (numpy dtype, safetensors dtype code)
DTYPES: dict[str, tuple[np.dtype, str]] = {
    "float64": (np.dtype(np.float64), "F64"),
    "float32": (np.dtype(np.float32), "F32"),
    "float16": (np.dtype(np.float16), "F16"),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), "BF16"),
    "float8_e4m3fn": (np.dtype(ml_dtypes.float8_e4m3fn), "F8_E4M3"),
    "float8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), "F8_E5M2"),
    "int64": (np.dtype(np.int64), "I64"),
    "int32": (np.dtype(np.int32), "I32"),
    "int16": (np.dtype(np.int16), "I16"),
    "int8": (np.dtype(np.int8), "I8"),
    "uint64": (np.dtype(np.uint64), "U64"),
    "uint32": (np.dtype(np.uint32), "U32"),
    "uint16": (np.dtype(np.uint16), "U16"),
    "uint8": (np.dtype(np.uint8), "U8"),
    "bool": (np.dtype(np.bool_), "BOOL"),
}
SAFETENSORS_TO_NAME = {code: name for name, (_, code) in DTYPES.items()}
NUMPY_TO_NAME = {np_dtype: name for name, (np_dtype, _) in DTYPES.items()}
FLOAT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"})


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype (ml_dtypes for bf16/fp8) that holds a tensor of dtype `name`."""
    try:
        return DTYPES[name][0]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def dtype_name(arr_dtype: np.dtype) -> str:
    """The format's name for a numpy dtype."""
    try:
        return NUMPY_TO_NAME[np.dtype(arr_dtype)]
    except KeyError:
        raise ValueError(f"dtype {arr_dtype} cannot be stored in an opdiff dump") from None


def axes_base(shape: tuple[int, ...], axes: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The shape a record's stored bytes are read as when its data declares `axes` (docs/format.md, "Data"):
    base[axes[i]] = shape[i], so numpy.transpose(bytes.reshape(base), axes) has the record's own shape."""
    base = [0] * len(shape)
    for size, axis in zip(shape, axes, strict=True):
        base[axis] = size
    return tuple(base)


def axes_problem(axes: object, ndim: int) -> str | None:
    """Why `axes` is not a permutation of a record's `ndim` dimensions (None when it is)."""
    if not isinstance(axes, (list, tuple)) or any(isinstance(a, bool) or not isinstance(a, int) for a in axes):
        return f"field 'data.axes' must be a list of dimensions, not {axes!r}"
    if sorted(axes) != list(range(ndim)):
        return f"field 'data.axes' {list(axes)} is not an order of the record's {ndim} dimensions"
    return None


def window_problem(window: object, ndim: int) -> str | None:
    """Why `window` is not {"offset": n, "strides": [one per dimension]} of whole numbers >= 0 (None when it is);
    whether it lies inside the stored entry is the reader's check (it knows the entry)."""
    if not isinstance(window, dict) or set(window) != {"offset", "strides"}:
        return f"field 'data.window' must be an object with 'offset' and 'strides', not {window!r}"
    offset, strides = window["offset"], window["strides"]
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return f"field 'data.window.offset' must be a whole number >= 0, not {offset!r}"
    if not isinstance(strides, list) or len(strides) != ndim or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in strides):
        return f"field 'data.window.strides' must be {ndim} whole numbers >= 0, not {strides!r}"
    return None


def window_end(shape: tuple[int, ...], offset: int, strides: tuple[int, ...] | list[int]) -> int:
    """One past the last stored element a window reads (0 for an empty record): it must not pass the entry's
    element count."""
    if any(n == 0 for n in shape):
        return 0
    return offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a row-major array of `shape` (a window with these reads a contiguous run)."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def identity_axes(axes: tuple[int, ...] | list[int]) -> bool:
    """Axes that keep the order: the stored bytes under the record's own shape (a reshape)."""
    return all(a == i for i, a in enumerate(axes))


def part_dir(rank: int, step: int) -> str:
    """Relative directory of one (rank, step) part of a run."""
    return f"rank{rank}/step{step}"


__all__ = ["axes_base", "axes_problem", "identity_axes", "row_major_strides", "window_end", "window_problem", "DTYPES", "FLOAT_DTYPES", "FORMAT_NAME", "FORMAT_VERSION", "INDEX_FILE", "READ_VERSIONS", "META_FILE", "NUMPY_TO_NAME",
           "SAFETENSORS_TO_NAME", "SHARD_DIR", "Record", "Stats", "dtype_name", "node_name", "numpy_dtype", "part_dir",
           "record_name"]
