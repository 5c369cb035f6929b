"""Statistics of a CUDA tensor in two fused Triton kernels, written into a slot of a device buffer.

The torch-op version (tensors.device_stats_values) launches about twenty kernels per tensor, and
on a GPU the launches, not the arithmetic, are what a stats-mode capture costs. Here one kernel
reads the tensor once (upcast to float64 in registers) and writes per-program partials, a second
folds them in a fixed order (deterministic: the same tensor always gives the same bits) into the
eight numbers DeferredStats reads back in one copy per batch. Used only where Triton is importable;
anything it cannot take falls back to the torch ops.
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of torch; without it the torch-op path is used
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only torch
    triton = None

BLOCK = 1024
MAX_PROGRAMS = 1024  # partials per tensor (the fold kernel reads them in one block)
SLOT = 8  # min, max, sum, sum of squares, nan, +inf, -inf, zeros

_FLOATS_VIA_32 = {torch.float32, torch.float16, torch.bfloat16}  # fp8 (rare in captures) takes the torch ops
_INTS = {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool}

if triton is not None:

    @triton.jit
    def _partials(x_ptr, part_ptr, n, chunk, BLOCK: tl.constexpr, IS_FLOAT: tl.constexpr, VIA32: tl.constexpr):
        pid = tl.program_id(0)
        start = pid.to(tl.int64) * chunk  # this program's contiguous range: [start, start + chunk) within n
        mn = tl.full([BLOCK], float("inf"), tl.float64)
        mx = tl.full([BLOCK], float("-inf"), tl.float64)
        s1 = tl.zeros([BLOCK], tl.float64)
        s2 = tl.zeros([BLOCK], tl.float64)
        nan = tl.zeros([BLOCK], tl.float64)
        pinf = tl.zeros([BLOCK], tl.float64)
        ninf = tl.zeros([BLOCK], tl.float64)
        zeros = tl.zeros([BLOCK], tl.float64)
        i = start
        end = start + chunk
        while i < end:  # a while loop: Triton's CPU interpreter (TRITON_INTERPRET=1) runs it too
            offs = i + tl.arange(0, BLOCK)
            m = offs < n
            i += BLOCK
            raw = tl.load(x_ptr + offs, mask=m)  # masked-off lanes are ignored below (every sum is masked by m)
            if VIA32:
                v = raw.to(tl.float32).to(tl.float64)
            else:
                v = raw.to(tl.float64)
            if IS_FLOAT:
                is_nan = v != v
                is_pinf = v == float("inf")
                is_ninf = v == float("-inf")
                fin = m & (~is_nan) & (~is_pinf) & (~is_ninf)
                nan += (m & is_nan).to(tl.float64)
                pinf += (m & is_pinf).to(tl.float64)
                ninf += (m & is_ninf).to(tl.float64)
            else:
                fin = m
            zeros += (m & (v == 0)).to(tl.float64)
            vf = tl.where(fin, v, 0.0)
            s1 += vf
            s2 += vf * vf
            mn = tl.minimum(mn, tl.where(fin, v, float("inf")))
            mx = tl.maximum(mx, tl.where(fin, v, float("-inf")))
        out = part_ptr + pid * 8
        tl.store(out + 0, tl.min(mn, axis=0))
        tl.store(out + 1, tl.max(mx, axis=0))
        tl.store(out + 2, tl.sum(s1, axis=0))
        tl.store(out + 3, tl.sum(s2, axis=0))
        tl.store(out + 4, tl.sum(nan, axis=0))
        tl.store(out + 5, tl.sum(pinf, axis=0))
        tl.store(out + 6, tl.sum(ninf, axis=0))
        tl.store(out + 7, tl.sum(zeros, axis=0))

    @triton.jit
    def _fold(part_ptr, out_ptr, programs, PB: tl.constexpr):
        i = tl.arange(0, PB)
        m = i < programs
        row = part_ptr + i * 8
        tl.store(out_ptr + 0, tl.min(tl.load(row + 0, mask=m, other=float("inf")), axis=0))
        tl.store(out_ptr + 1, tl.max(tl.load(row + 1, mask=m, other=float("-inf")), axis=0))
        for k in tl.static_range(2, 8):
            tl.store(out_ptr + k, tl.sum(tl.load(row + k, mask=m, other=0.0), axis=0))


def available(t: torch.Tensor) -> bool:
    """Whether the fused kernels take this tensor (CUDA, Triton present, a dtype they read)."""
    return triton is not None and t.is_cuda and (t.dtype in _FLOATS_VIA_32 or t.dtype in _INTS
                                                 or t.dtype == torch.float64)


def stats_into(t: torch.Tensor, flat: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Queue the eight numbers of `t` (its elements as the 1-D `flat`) into `out` (8 float64 on its device).

    `scratch` holds MAX_PROGRAMS * 8 float64 partials; reusing it between tensors is safe because
    both kernels run in stream order."""
    n = flat.numel()
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    programs = min(triton.cdiv(n, BLOCK), MAX_PROGRAMS)
    chunk = triton.cdiv(triton.cdiv(n, programs), BLOCK) * BLOCK
    programs = triton.cdiv(n, chunk)
    is_float = t.dtype in _FLOATS_VIA_32 or t.dtype == torch.float64
    _partials[(programs,)](flat, scratch, n, chunk, BLOCK=BLOCK, IS_FLOAT=is_float, VIA32=t.dtype in _FLOATS_VIA_32,
                           num_warps=4)
    _fold[(1,)](scratch, out, programs, PB=MAX_PROGRAMS, num_warps=4)


__all__ = ["available", "stats_into", "SLOT", "MAX_PROGRAMS"]
