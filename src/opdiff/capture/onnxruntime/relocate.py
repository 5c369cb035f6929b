"""Original tensors the optimizer kept under another name or layout, found in the optimized run by value.

ORT's NCHWc transformer renames every tensor it touches (`reorder_token_N`) and keeps it in a blocked
layout [N, C/b, H, W, b]: a ResNet block's output is still computed, only no longer under its name; the
transpose optimizer keeps a value transposed under a new name.
The original graph is run once unoptimized; each of its tensors the optimized run lacks takes the
optimized tensor (blocked layout undone) whose values agree with it, so module records read what the
optimized graph really computed. A tensor no optimized tensor agrees with stays unobserved.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

RTOL = 1e-3  # fp32 rounding of a fused kernel against the unfused one, far below any two distinct tensors


BLOCKS = (8, 16, 4)  # channel block sizes of ORT's NCHWc kernels (MLAS: 8 with AVX2, 16 with AVX-512)


def _views(arr: np.ndarray, shape: tuple[int, ...]) -> list[np.ndarray]:
    """`arr` read as an array of `shape`: itself, its axes permuted (the transpose optimizer pushes a Transpose
    through elementwise ops: a GELU's output kept as [N, T, C] instead of [N, C, T]), or an NCHWc tensor
    (shape [N, C padded, H, W], its memory [N, C/b, H, W, b]) back in NCHW for each block size b that fits."""
    out = [arr] if arr.shape == shape else []
    if arr.size == math.prod(shape) and arr.ndim == len(shape) and sorted(arr.shape) == sorted(shape) and arr.ndim <= 5:
        out += [arr.transpose(p) for p in itertools.permutations(range(arr.ndim))
                if p != tuple(range(arr.ndim)) and tuple(arr.shape[i] for i in p) == shape]
    n, c = (shape[0], shape[1]) if len(shape) >= 3 else (0, 0)
    if arr.ndim != len(shape) or arr.ndim < 3 or arr.shape[0] != n or arr.shape[2:] != shape[2:] or arr.shape[1] < c:
        return out
    for b in BLOCKS:
        cp = arr.shape[1]
        if cp % b == 0 and cp - c < b:
            blocked = np.ascontiguousarray(arr).reshape(n, cp // b, *shape[2:], b)
            out.append(np.ascontiguousarray(np.moveaxis(blocked, -1, 2).reshape(n, cp, *shape[2:])[:, :c]))
    return out


def _agree(a: np.ndarray, ref: np.ndarray) -> bool:
    """Same non-finite values at the same places, finite ones within RTOL of ref's finite absmax."""
    fin = np.isfinite(ref)
    scale = float(np.max(np.abs(ref[fin]))) if fin.any() else 0.0
    return bool(scale > 0 and np.allclose(a, ref, rtol=RTOL, atol=RTOL * scale, equal_nan=True))


def _distance(a: np.ndarray, ref: np.ndarray) -> float:
    """Largest difference over ref's finite elements (the candidates agree on the others)."""
    fin = np.isfinite(ref)
    return float(np.max(np.abs(a[fin].astype(np.float64) - ref[fin])))


def relocate(wanted: list[str], unoptimized: dict[str, np.ndarray], values: dict[str, np.ndarray],
             original_names: set[str]) -> dict[str, np.ndarray]:
    """Original tensor name -> the optimized run's array holding its value, for each wanted tensor the optimized
    run lacks. Candidates are the optimized tensors with no name in the original graph (renamed); the closest wins."""
    pool = {k: v for k, v in values.items() if k not in original_names and isinstance(v, np.ndarray)
            and v.dtype.kind == "f" and v.size}
    out: dict[str, np.ndarray] = {}
    for t in wanted:
        ref = unoptimized.get(t)
        if t in values or not isinstance(ref, np.ndarray) or ref.dtype.kind != "f" or not ref.size:
            continue
        hits = []
        for name, arr in pool.items():
            for view in _views(arr, ref.shape) if arr.dtype == ref.dtype else []:
                if _agree(view, ref):
                    hits.append((_distance(view, ref), name, view))
        if hits:
            view = min(hits, key=lambda h: h[0])[2]
            out[t] = view
    return out
