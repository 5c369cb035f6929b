"""Statistics and hashes of captured tensors equal the numpy reference of opdiff.store.stats, for every dtype."""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
import torch

from capture_helpers import same_bits, to_np
from opdiff.capture import stats_kernel
from opdiff.capture.stats_kernel import CHUNK, array_stats
from opdiff.capture.torch.tensors import device_stats, dtype_name, hash_of, host_copy, stats_of
from opdiff.store.stats import content_hash, tensor_stats

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e5m2}


def _tensor(dtype, n, special: bool, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 3 + 0.5
    if dtype == torch.bool:
        return x > 0.5
    if not dtype.is_floating_point:
        return (x * 20).round().to(dtype)
    x = x.to(dtype)
    if n > 10:
        x[1] = 0
        if special and dtype in FLOATS:
            x[3], x[5], x[7] = math.nan, math.inf, -math.inf
    return x


def _check(stats, ref):
    assert (stats.numel, stats.nan, stats.posinf, stats.neginf, stats.zeros) == \
           (ref.numel, ref.nan, ref.posinf, ref.neginf, ref.zeros)
    for k in ("min", "max", "mean", "std", "norm"):
        a, b = getattr(stats, k), getattr(ref, k)
        assert (a is None) == (b is None), k
        if a is not None:
            assert a == pytest.approx(b, rel=1e-11, abs=1e-300), k


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("n", [0, 1, 1000, 3 * CHUNK + 17])
def test_stats_and_hash_equal_the_numpy_reference(dtype, n):
    t = _tensor(dtype, n, special=True)
    name = dtype_name(t)
    arr = to_np(t)
    ref = tensor_stats(arr)
    _check(stats_of(t, name), ref)
    _check(device_stats(t, name), ref)  # the path for tensors on an accelerator
    copy, stats = host_copy(t, name)
    _check(stats, ref)
    _check(array_stats(copy, name), ref)
    assert hash_of(t, name) == content_hash(arr, name, tuple(arr.shape))
    assert same_bits(copy, arr) and not np.shares_memory(copy, arr)


def test_views_scalars_and_all_nonfinite():
    base = _tensor(torch.float32, 6 * 7 * 5, special=True).reshape(6, 7, 5)
    for t in (base.transpose(0, 2), base[:, 1:5, ::2], base[0, 0, 0], base.expand(2, 6, 7, 5)[1], base.permute(2, 0, 1)):
        arr = to_np(t)
        _check(stats_of(t, "float32"), tensor_stats(arr))
        copy, stats = host_copy(t, "float32")
        _check(stats, tensor_stats(arr))
        assert same_bits(copy, arr)
        assert hash_of(t, "float32") == content_hash(arr, "float32", tuple(arr.shape))
    nonfinite = torch.tensor([math.nan, math.inf, -math.inf])
    s = stats_of(nonfinite, "float32")
    assert (s.min, s.max, s.mean, s.nan, s.posinf, s.neginf) == (None, None, None, 1, 1, 1)


def test_statistics_do_not_depend_on_the_thread_count(monkeypatch):
    x = _tensor(torch.float32, 20 * CHUNK + 3, special=False, seed=1).numpy()
    results = []
    for workers in (1, 2, 3):
        monkeypatch.setattr(stats_kernel, "WORKERS", workers)
        results.append(array_stats(x, "float32"))
    assert results[0] == results[1] == results[2]
    assert results[0].mean == pytest.approx(float(np.float64(x).mean()), rel=1e-12)


def test_unsupported_tensors_are_skipped_not_fatal():
    assert dtype_name(torch.zeros(3, dtype=torch.complex64)) is None
    assert dtype_name(torch.zeros(3).to_sparse()) is None
    assert dtype_name(torch.zeros(3, device="meta")) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates quantized tensors and warns on making nested ones
        assert dtype_name(torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.qint8)) is None
        assert dtype_name(torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])) is None
    assert dtype_name(torch.zeros(3, dtype=torch.bfloat16)) == "bfloat16"


def test_a_forked_child_measures_large_tensors():
    x = np.arange(10 * CHUNK, dtype=np.float32)
    assert array_stats(x, "float32").max == 10 * CHUNK - 1  # the parent's worker threads exist now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child must not wait for threads it does not have
        os.write(w, repr(array_stats(x, "float32").max).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and os.read(r, 100) == repr(float(10 * CHUNK - 1)).encode()
