"""Deferred device statistics: the numbers equal numpy's on the same data, in every dtype, with
non-finite values, views and in-place changes after recording; on CUDA through the fused Triton
kernels (those tests skip without a GPU: run this file on a machine with one)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from opdiff.capture.torch import cuda_stats
from opdiff.capture.torch.tensors import DeferredStats, dtype_name, host_copy
from opdiff.store.stats import tensor_stats

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]
SIZES = [1, 7, 1023, 1024, 1025, 300_001]


def sample(dtype: torch.dtype, n: int, device: str, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, generator=gen) * 3
    if dtype.is_floating_point and n > 4:
        x[1], x[2], x[3] = math.nan, math.inf, -math.inf  # non-finite values are counted, not summed
    if n > 5:
        x[5] = 0.0
    if dtype == torch.bool:
        return (x > 0).to(device)
    if not dtype.is_floating_point:
        x = torch.nan_to_num(x, nan=0.0, posinf=100, neginf=-100) * 20
    return x.to(dtype).to(device)


def same(a, b) -> None:
    assert (a.numel, a.nan, a.posinf, a.neginf, a.zeros) == (b.numel, b.nan, b.posinf, b.neginf, b.zeros)
    for f in ("min", "max", "mean", "std", "norm"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (f, x, y)


def check(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    d = DeferredStats()
    cases = []
    for dtype in DTYPES:
        for n in SIZES:
            t = sample(dtype, n, device, gen)
            cases.append((t, d.add(t, dtype_name(t))))
    base = sample(torch.float32, 64 * 48, device, gen).reshape(64, 48)
    for view in (base.t(), base[:, ::3], base[5:9]):  # permuted (no copy), strided, offset
        cases.append((view, d.add(view, "float32")))
    d.resolve()
    for t, got in cases:
        same(got, tensor_stats(host_copy(t, dtype_name(t))[0]))


def test_torch_op_path_on_the_cpu():
    check("cpu")


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or cuda_stats.triton is None,
                                reason="needs a CUDA device and Triton")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_a_change_after_recording_does_not_reach_the_statistics(device):
    t = torch.arange(10, dtype=torch.float32, device=device)
    d = DeferredStats()
    st = d.add(t, "float32")
    t.mul_(100)
    d.resolve()
    assert st.max == 9.0 and st.mean == 4.5


@needs_cuda
def test_fused_kernels_equal_numpy():
    check("cuda")


@needs_cuda
def test_fused_kernels_are_deterministic_and_ordered_before_in_place_changes():
    x = torch.randn(5_000_000, device="cuda")
    d = DeferredStats()
    a, b = d.add(x, "float32"), d.add(x, "float32")
    x.mul_(-2)
    c = d.add(x, "float32")
    d.resolve()
    assert (a.mean, a.norm, a.max) == (b.mean, b.norm, b.max)
    assert math.isclose(c.max, -2 * a.min, rel_tol=1e-12)


@needs_cuda
def test_a_full_buffer_is_read_back_early():
    d = DeferredStats()
    d.CAPACITY = 3
    xs = [torch.full((10,), float(i), device="cuda") for i in range(8)]
    got = [d.add(x, "float32") for x in xs]
    d.resolve()
    assert [s.max for s in got] == [float(i) for i in range(8)]
    assert np.allclose([s.mean for s in got], range(8))
