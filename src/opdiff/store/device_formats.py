"""Ascend device formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, NDC1HWC0, FRACTAL_Z_3D) to logical tensors and back.

An NPU keeps a tensor in the layout its cube unit wants: the channel axis cut in blocks of C0 (16 for
16/32-bit types) and zero-padded, matrices in 16x16 fractals. A GE dump records the device shape and
format and the original shape (and, for outputs, the original format); these functions undo the
layout so a dumped tensor compares element by element with a golden. `from_logical` is the inverse,
used by the test writer. Plain formats (ND, NCHW, NHWC, HWCN ...) are logical as they are. Checked
against msaccucmp's own numpy conversions in tests/test_ge_formats.py (docs/readers.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

PLAIN = frozenset({"ND", "NCHW", "NHWC", "HWCN", "CHWN", "NCDHW", "NDHWC", "DHWCN", "DHWNC", "NC", "CN", "NCL", "MD"})
# origin formats a 4-D / 5-D tensor is brought back to, after going through NCHW / NCDHW
_FROM_NCHW: dict[str, tuple[int, ...]] = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1), "HWCN": (2, 3, 1, 0), "CHWN": (1, 2, 3, 0)}
_FROM_NCDHW: dict[str, tuple[int, ...]] = {"NCDHW": (0, 1, 2, 3, 4), "NDHWC": (0, 2, 3, 4, 1), "DHWCN": (2, 3, 4, 1, 0), "DHWNC": (2, 3, 4, 0, 1)}


class FormatError(ValueError):
    """A device tensor whose shapes do not fit its format: compared by statistics only."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _as_nchw(orig_shape: tuple[int, ...], orig_format: str | None, table: dict[str, tuple[int, ...]],
             fits: Callable[[tuple[int, ...]], bool]) -> tuple[tuple[int, ...], str]:
    """The origin shape in NCHW (NCDHW) order and the origin format: the recorded one, else the first
    plain format whose reading of `orig_shape` fits the device shape."""
    names = ([orig_format] if orig_format in table else []) + [n for n in table if n != orig_format]
    for name in names:
        perm = table[name]
        canon = tuple(orig_shape[perm.index(i)] for i in range(len(perm)))
        if fits(canon):
            return canon, name
    raise FormatError(f"original shape {list(orig_shape)} does not fit the device shape")


def _restore(arr: np.ndarray, fmt: str, table: dict[str, tuple[int, ...]]) -> np.ndarray:
    return np.ascontiguousarray(arr.transpose(table[fmt]))


def _nc1hwc0(raw: np.ndarray | None, shape: tuple[int, ...], orig: tuple[int, ...], ofmt: str | None
          ) -> np.ndarray | None:
    if len(shape) != 5 or len(orig) != 4:
        raise FormatError(f"NC1HWC0 needs a 5-D device shape and a 4-D original shape, not {list(shape)} / {list(orig)}")
    n, c1, h, w, c0 = shape
    canon, name = _as_nchw(orig, ofmt, _FROM_NCHW,
                           lambda s: s[0] == n and s[2:] == (h, w) and _ceil(s[1], c0) == c1)
    if raw is None:
        return None
    x = raw.reshape(shape).transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :canon[1]]
    return _restore(x, name, _FROM_NCHW)


def _ndc1hwc0(raw: np.ndarray | None, shape: tuple[int, ...], orig: tuple[int, ...], ofmt: str | None
          ) -> np.ndarray | None:
    if len(shape) != 6 or len(orig) != 5:
        raise FormatError(f"NDC1HWC0 needs a 6-D device shape and a 5-D original shape, not {list(shape)} / {list(orig)}")
    n, d, c1, h, w, c0 = shape
    canon, name = _as_nchw(orig, ofmt, _FROM_NCDHW,
                           lambda s: s[0] == n and s[2:] == (d, h, w) and _ceil(s[1], c0) == c1)
    if raw is None:
        return None
    x = raw.reshape(shape).transpose(0, 2, 5, 1, 3, 4).reshape(n, c1 * c0, d, h, w)[:, :canon[1]]
    return _restore(x, name, _FROM_NCDHW)


def _fractal_z(raw: np.ndarray | None, shape: tuple[int, ...], orig: tuple[int, ...], ofmt: str | None
          ) -> np.ndarray | None:
    """(C1*H*W, N1, N0, C0) -> the 4-D origin (a conv weight: NCHW, HWCN, NHWC ...)."""
    if len(shape) != 4 or len(orig) != 4:
        raise FormatError(f"FRACTAL_Z needs 4-D device and original shapes, not {list(shape)} / {list(orig)}")
    chw, n1, n0, c0 = shape
    canon, name = _as_nchw(orig, ofmt, _FROM_NCHW,
                           lambda s: _ceil(s[1], c0) * s[2] * s[3] == chw and _ceil(s[0], n0) == n1)
    n, c, h, w = canon
    c1 = chw // (h * w)
    if raw is None:
        return None
    x = raw.reshape(c1, h, w, n1, n0, c0).transpose(3, 4, 0, 5, 1, 2).reshape(n1 * n0, c1 * c0, h, w)[:n, :c]
    return _restore(x, name, _FROM_NCHW)


def _fractal_z_3d(raw: np.ndarray | None, shape: tuple[int, ...], orig: tuple[int, ...], ofmt: str | None
          ) -> np.ndarray | None:
    """(D*C1*H*W, N1, N0, C0) -> the 5-D origin (a 3-D conv weight: NCDHW, DHWCN ...)."""
    if len(shape) != 4 or len(orig) != 5:
        raise FormatError(f"FRACTAL_Z_3D needs a 4-D device and a 5-D original shape, not {list(shape)} / {list(orig)}")
    dchw, n1, n0, c0 = shape
    canon, name = _as_nchw(orig, ofmt, _FROM_NCDHW,
                           lambda s: s[2] * _ceil(s[1], c0) * s[3] * s[4] == dchw and _ceil(s[0], n0) == n1)
    n, c, d, h, w = canon
    c1 = _ceil(c, c0)
    if raw is None:
        return None
    x = raw.reshape(d, c1, h, w, n1, n0, c0).transpose(4, 5, 1, 6, 0, 2, 3)
    x = x.reshape(n1 * n0, c1 * c0, d, h, w)[:n, :c]
    return _restore(x, name, _FROM_NCDHW)


def _fractal_nz(raw: np.ndarray | None, shape: tuple[int, ...], orig: tuple[int, ...], ofmt: str | None
          ) -> np.ndarray | None:
    """(..., C1, N1, N0, C0) -> (..., N, C): a matrix in 16x16 fractals, the last axis blocked outermost."""
    if len(shape) < 4 or not orig:
        raise FormatError(f"FRACTAL_NZ needs a device shape of 4 or more axes, not {list(shape)}")
    *_, c1, n1, n0, c0 = shape
    rows, cols = (1, orig[0]) if len(orig) == 1 else orig[-2:]
    batch = math.prod(orig[:-2])
    if _ceil(cols, c0) != c1 or _ceil(rows, n0) != n1 or batch * c1 * n1 * n0 * c0 != math.prod(shape):
        raise FormatError(f"original shape {list(orig)} does not fit the device shape {list(shape)}")
    if raw is None:
        return None
    x = raw.reshape(batch, c1, n1, n0, c0).transpose(0, 2, 3, 1, 4).reshape(batch, n1 * n0, c1 * c0)
    return np.ascontiguousarray(x[:, :rows, :cols]).reshape(orig)


# each takes the flat elements (None: only check that the shapes fit) and returns the tensor in the original shape
CONVERT: dict[str, Callable[[np.ndarray | None, tuple[int, ...], tuple[int, ...], str | None], np.ndarray | None]] = {
    "NC1HWC0": _nc1hwc0, "NC1HWC0_C04": _nc1hwc0, "NDC1HWC0": _ndc1hwc0, "FRACTAL_Z": _fractal_z,
    "FRACTAL_Z_3D": _fractal_z_3d, "FRACTAL_NZ": _fractal_nz,
}


def convertible(fmt: str) -> bool:
    """Whether a tensor in device format `fmt` can be brought back to its logical layout."""
    return fmt in PLAIN or fmt in CONVERT


def to_logical(raw: np.ndarray, fmt: str, shape: tuple[int, ...], orig_shape: tuple[int, ...],
               orig_format: str | None = None) -> np.ndarray:
    """The logical tensor (original shape and format) of a device tensor's flat elements; FormatError when
    the format is not known or the shapes do not fit it."""
    if fmt in PLAIN:
        return raw.reshape(shape)
    conv = CONVERT.get(fmt)
    if conv is None:
        raise FormatError(f"device format {fmt} is not converted")
    if raw.size != math.prod(shape):
        raise FormatError(f"{raw.size} elements for a device shape {list(shape)}")
    out = conv(raw, tuple(shape), tuple(orig_shape), orig_format)
    assert out is not None
    return out


def logical_shape(fmt: str, shape: tuple[int, ...], orig_shape: tuple[int, ...], orig_format: str | None = None
                  ) -> tuple[int, ...]:
    """The shape to_logical returns (the original shape, once the shapes are checked to fit), without data."""
    if fmt in PLAIN:
        return tuple(shape)
    conv = CONVERT.get(fmt)
    if conv is None:
        raise FormatError(f"device format {fmt} is not converted")
    conv(None, tuple(shape), tuple(orig_shape), orig_format)
    return tuple(orig_shape)


# -- the inverse, for the test writer ------------------------------------------------------------------

def _pad(x: np.ndarray, axis: int, to: int) -> np.ndarray:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, to - x.shape[axis])
    return np.pad(x, widths)


def from_logical(x: np.ndarray, fmt: str, orig_format: str, c0: int = 16, n0: int = 16) -> np.ndarray:
    """The device tensor (zero-padded) that holds logical tensor `x` of `orig_format` in format `fmt`."""
    if fmt in PLAIN:
        return np.ascontiguousarray(x)
    if fmt in ("NC1HWC0", "NC1HWC0_C04", "FRACTAL_Z"):
        nchw = x.transpose(np.argsort(_FROM_NCHW[orig_format]))
        n, c, h, w = nchw.shape
        c1 = _ceil(c, c0)
        p = _pad(nchw, 1, c1 * c0).reshape(n, c1, c0, h, w)
        if fmt != "FRACTAL_Z":
            return np.ascontiguousarray(p.transpose(0, 1, 3, 4, 2))
        n1 = _ceil(n, n0)
        p = _pad(p, 0, n1 * n0).reshape(n1, n0, c1, c0, h, w)
        return np.ascontiguousarray(p.transpose(2, 4, 5, 0, 1, 3)).reshape(c1 * h * w, n1, n0, c0)
    if fmt in ("NDC1HWC0", "FRACTAL_Z_3D"):
        ncdhw = x.transpose(np.argsort(_FROM_NCDHW[orig_format]))
        n, c, d, h, w = ncdhw.shape
        c1 = _ceil(c, c0)
        p = _pad(ncdhw, 1, c1 * c0).reshape(n, c1, c0, d, h, w)
        if fmt == "NDC1HWC0":
            return np.ascontiguousarray(p.transpose(0, 3, 1, 4, 5, 2))
        n1 = _ceil(n, n0)
        p = _pad(p, 0, n1 * n0).reshape(n1, n0, c1, c0, d, h, w)
        return np.ascontiguousarray(p.transpose(4, 2, 5, 6, 0, 1, 3)).reshape(d * c1 * h * w, n1, n0, c0)
    if fmt == "FRACTAL_NZ":
        m = x.reshape(1, -1) if x.ndim == 1 else x
        *batch, rows, cols = m.shape
        c1, n1 = _ceil(cols, c0), _ceil(rows, n0)
        p = _pad(_pad(m.reshape(-1, rows, cols), 1, n1 * n0), 2, c1 * c0).reshape(-1, n1, n0, c1, c0)
        return np.ascontiguousarray(p.transpose(0, 3, 1, 2, 4)).reshape(*batch, c1, n1, n0, c0)
    raise FormatError(f"device format {fmt} is not written")
