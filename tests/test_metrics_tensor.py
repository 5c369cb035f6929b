"""Every real-data metric against a plain float64 numpy reference, on random data and edge cases."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from opdiff.metrics import names as M
from opdiff.metrics.tensor import ERR_MESSAGE, Workspace, tensor_metrics

EPS = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps


def reference(golden: np.ndarray, target: np.ndarray) -> dict:
    """The metrics written the plain way: whole arrays in float64, one numpy expression each."""
    g = golden.astype(np.float64).reshape(-1)
    t = target.astype(np.float64).reshape(-1)
    ok = np.isfinite(g) & np.isfinite(t)
    g, t = g[ok], t[ok]
    d = t - g
    ad = np.abs(d)
    rel = ad / np.where(g == 0, EPS, np.abs(g))
    out = {
        M.COSINE: float(g @ t / (np.linalg.norm(g) * np.linalg.norm(t))),
        M.MAX_ABS_ERR: float(ad.max()),
        M.MAX_REL_ERR: float(rel.max()),
        M.MEAN_ABS_ERR: float(ad.mean()),
        M.MEAN_REL_ERR: float(rel.mean()),
        M.RMSE: float(np.sqrt(np.mean(d * d))),
        M.ACC_REL_ERR: float(np.where(np.abs(g) > EPS, rel, 0.0).sum()),
        M.RED: float(np.linalg.norm(d) / np.linalg.norm(g)),
        M.EUC_DIST: float(np.linalg.norm(d)),
        M.GOLDEN_STD: float(g.std()),
        M.TARGET_STD: float(t.std()),
        M.GOLDEN_MEAN: float(g.mean()),
        M.TARGET_MEAN: float(t.mean()),
        M.ONE_THOUSANDTH: float(np.mean(rel < 0.001)),
        M.FIVE_THOUSANDTH: float(np.mean(rel < 0.005)),
        M.WORST_INDEX: int(np.flatnonzero(ok)[np.argmax(ad)]),
        M.KL_DIV: kl_msaccucmp(t, g),
    }
    gf = golden.astype(np.float64)[np.isfinite(golden.astype(np.float64))]
    out[M.NORM_MAX_ABS_ERR] = float(ad.max() / np.abs(gf).max())
    return out


def kl_msaccucmp(my_output: np.ndarray, ground_truth: np.ndarray) -> float:
    """msaccucmp's KullbackLeiblerDivergence: min-max normalize, floor at fp32 eps, sum p*log(p/q)."""
    def norm(x):
        lo, hi = x.min(), x.max()
        y = (x - lo) / (hi - lo) if hi > lo else x
        return np.maximum(y, EPS32)
    p, q = norm(my_output), norm(ground_truth)
    p, q = p / p.sum(), q / q.sum()
    kl = float((p * np.log(p / q)).sum())
    return 0.0 if abs(kl) < EPS else kl


F32_RTOL = 1e-6  # the float32 kernel's documented tolerance on sums-based metrics (docs/metrics.md, "Precision")
EXACT = (M.WORST_INDEX, M.MAX_ABS_ERR, M.NORM_MAX_ABS_ERR)  # the largest |t - g| is re-taken in float64


def assert_matches(m: dict, ref: dict, rtol: float = F32_RTOL) -> None:
    """m within the kernel's tolerance of the float64 reference: maxima exact, sums to rtol, means to rtol of
    the spread, 1 - cosine to rtol of itself, the 1/1000 and 5/1000 shares to one element per 10^6 (an
    element's relative error within rounding of the threshold may fall either side)."""
    for k, v in ref.items():
        if k in EXACT:
            assert m[k] == v, k
        elif k == M.KL_DIV:  # rtol of itself, rtol of RED^2 (the size of its Bregman terms: KL ~0 by rescaling)
            assert m[k] == pytest.approx(v, rel=rtol, abs=rtol * ref[M.RED] ** 2 + 1e-15), k
        elif k == M.COSINE:  # 1 - cos: rtol of itself, 10 rtol of RED^2 (differences that are mostly a rescaling)
            assert 1.0 - m[k] == pytest.approx(1.0 - v, rel=rtol, abs=10 * rtol * ref[M.RED] ** 2 + 1e-15), k
        elif k in (M.GOLDEN_MEAN, M.TARGET_MEAN):
            spread = ref[M.GOLDEN_STD if k == M.GOLDEN_MEAN else M.TARGET_STD]
            assert m[k] == pytest.approx(v, rel=rtol, abs=rtol * spread + 1e-300), k
        elif k == M.MAX_REL_ERR:  # float32's r: two roundings (2^-23) of the float64 one
            assert m[k] == pytest.approx(v, rel=2.0 ** -22, abs=1e-300), k
        elif k in (M.ONE_THOUSANDTH, M.FIVE_THOUSANDTH):
            assert m[k] == pytest.approx(v, abs=1e-6), k
        else:
            assert m[k] == pytest.approx(v, rel=rtol, abs=1e-300), k


@pytest.mark.parametrize("n", [1, 7, 1000, 300_001])  # 300,001 spans three chunks of 131,072
def test_random_float32_against_reference(n):
    rng = np.random.default_rng(n)
    g = (rng.standard_normal(n) * 3 + 0.5).astype(np.float32)
    t = (g + rng.standard_normal(n).astype(np.float32) * 1e-3).astype(np.float32)
    m = tensor_metrics(g, t)
    assert_matches(m, reference(g, t))
    assert m[M.NUMEL] == m[M.COMPARED] == n
    assert m[M.WORST_GOLDEN] == g[m[M.WORST_INDEX]] and m[M.WORST_TARGET] == t[m[M.WORST_INDEX]]
    assert m[ERR_MESSAGE] == ""


def test_float64_and_multidimensional():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((3, 50, 7))
    t = g * (1 + rng.standard_normal(g.shape) * 1e-7)
    assert_matches(tensor_metrics(g, t), reference(g, t))


def test_worst_element_in_a_later_chunk_and_its_first_occurrence():
    g = np.zeros(400_000, np.float32) + 1.0
    t = g.copy()
    t[350_000] = 3.0  # in the third chunk
    t[390_000] = 3.0  # same error later: the first one is reported
    m = tensor_metrics(g, t)
    assert (m[M.WORST_INDEX], m[M.WORST_GOLDEN], m[M.WORST_TARGET], m[M.MAX_ABS_ERR]) == (350_000, 1.0, 3.0, 2.0)
    assert m[M.DIFF_COUNT] == 2


def test_identical_tensors():
    g = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    m = tensor_metrics(g, g.copy())
    assert m[M.COSINE] == pytest.approx(1.0, abs=1e-15)
    assert m[M.MAX_ABS_ERR] == 0.0 and m[M.RED] == 0.0 and m[M.KL_DIV] == 0.0 and m[M.DIFF_COUNT] == 0
    assert m[M.ONE_THOUSANDTH] == 1.0


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_low_precision_target_against_float32_golden(dtype):
    rng = np.random.default_rng(3)
    g = rng.standard_normal(5000).astype(np.float32)
    t = g.astype(dtype)
    m = tensor_metrics(g, t)
    assert_matches(m, reference(g, t.astype(np.float32)))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
def test_integers(dtype):
    rng = np.random.default_rng(4)
    g = rng.integers(1, 100, 3000).astype(dtype)
    t = g.copy()
    t[::7] += 1
    m = tensor_metrics(g, t)
    assert_matches(m, reference(g, t))
    assert m[M.DIFF_COUNT] == len(range(0, 3000, 7))


def test_int64_beyond_float32_precision_is_exact():
    g = np.array([2**40 + 1, 5], np.int64)
    t = np.array([2**40 + 2, 5], np.int64)
    m = tensor_metrics(g, t)
    assert m[M.MAX_ABS_ERR] == 1.0 and m[M.DIFF_COUNT] == 1


def test_bool():
    g = np.array([True, False, True, True])
    t = np.array([True, True, True, False])
    m = tensor_metrics(g, t)
    assert_matches(m, reference(g, t))
    assert m[M.DIFF_COUNT] == 2


def test_nan_and_inf_counted_per_side_and_excluded():
    g = np.array([1.0, np.nan, np.inf, -np.inf, 2.0, 3.0, 0.5], np.float32)
    t = np.array([1.1, np.nan, np.inf, np.inf, np.nan, 3.0, 0.5], np.float32)
    m = tensor_metrics(g, t)
    assert (m[M.GOLDEN_NAN], m[M.GOLDEN_POSINF], m[M.GOLDEN_NEGINF]) == (1, 1, 1)
    assert (m[M.TARGET_NAN], m[M.TARGET_POSINF], m[M.TARGET_NEGINF]) == (2, 2, 0)
    assert m[M.NONFINITE_MISMATCH] == 2  # -inf vs inf at 3, 2.0 vs nan at 4
    assert m[M.FIRST_NONFINITE_MISMATCH] == 3
    assert m[M.COMPARED] == 3 and m[M.DIFF_COUNT] == 3
    assert_matches(m, reference(g, t))
    assert "one side only" in m[ERR_MESSAGE]


def test_nan_in_a_later_chunk_keeps_every_metric_exact():
    rng = np.random.default_rng(5)
    g = rng.standard_normal(300_000).astype(np.float32)
    t = (g * 1.001).astype(np.float32)
    g[200_000] = np.nan
    t[200_000] = np.nan  # same position: not a mismatch
    m = tensor_metrics(g, t)
    assert m[M.NONFINITE_MISMATCH] == 0 and m[M.COMPARED] == 299_999
    assert_matches(m, reference(g, t))


def test_everything_non_finite():
    g = np.array([np.nan, np.inf], np.float32)
    m = tensor_metrics(g, g.copy())
    assert m[M.COMPARED] == 0 and m[M.NONFINITE_MISMATCH] == 0 and m[M.COSINE] is None
    assert "no element is finite" in m[ERR_MESSAGE]


def test_empty_tensor():
    m = tensor_metrics(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    assert m[M.NUMEL] == 0 and m[M.COSINE] is None and "empty" in m[ERR_MESSAGE]


@pytest.mark.parametrize("g,t,cos", [(2.0, 2.5, 1.0), (2.0, -1.0, -1.0)])
def test_scalars(g, t, cos):
    m = tensor_metrics(np.array(g, np.float32), np.array(t, np.float32))
    assert m[M.NUMEL] == 1 and m[M.COSINE] == cos
    assert m[M.MAX_ABS_ERR] == abs(t - g) and m[M.MAX_REL_ERR] == pytest.approx(abs(t - g) / abs(g))


def test_all_zero_golden_never_crashes():
    g = np.zeros(100, np.float32)
    t = np.zeros(100, np.float32)
    t[3] = 1e-3
    m = tensor_metrics(g, t)
    assert m[M.COSINE] is None and m[M.RED] is None and m[M.NORM_MAX_ABS_ERR] is None
    assert m[M.MAX_ABS_ERR] == pytest.approx(1e-3) and m[M.GOLDEN_ABS_MAX] == 0.0
    assert m[M.MAX_REL_ERR] == pytest.approx(1e-3 / EPS)  # msprobe's guard: golden 0 -> divide by eps
    assert m[M.ACC_REL_ERR] == 0.0  # msaccucmp skips |golden| <= eps
    assert "golden is all zero" in m[ERR_MESSAGE]
    both = tensor_metrics(g, np.zeros(100, np.float32))
    assert both[M.COSINE] == 1.0 and both[M.RED] == 0.0 and both[M.KL_DIV] == 0.0


def test_all_zero_target():
    g = np.ones(10, np.float32)
    m = tensor_metrics(g, np.zeros(10, np.float32))
    assert m[M.COSINE] is None and m[M.RED] == 1.0 and "target is all zero" in m[ERR_MESSAGE]


def test_shape_mismatch_is_na_not_a_crash():
    m = tensor_metrics(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert m[M.COSINE] is None and "shape mismatch" in m[ERR_MESSAGE]


def test_constant_tensors_kl_uses_raw_values():
    g = np.full(10, 2.0, np.float32)
    t = np.full(10, 2.0, np.float32)
    t[0] = 3.0
    m = tensor_metrics(g, t)
    assert m[M.KL_DIV] == pytest.approx(kl_msaccucmp(t.astype(float), g.astype(float)), rel=F32_RTOL)


def test_large_offset_mean_and_std_without_cancellation():
    rng = np.random.default_rng(6)
    g = (1e6 + rng.standard_normal(10_000)).astype(np.float64)
    t = g + 1e-3
    m = tensor_metrics(g, t)
    assert m[M.GOLDEN_STD] == pytest.approx(g.std(), rel=1e-9)
    assert m[M.TARGET_MEAN] == pytest.approx(t.mean(), rel=1e-12)


def test_workspace_reuse_across_dtypes_gives_the_same_numbers():
    rng = np.random.default_rng(7)
    ws = Workspace(chunk=1000)
    a = rng.standard_normal(4321).astype(np.float32)
    b = (a * 1.01).astype(np.float32)
    first = tensor_metrics(a, b, ws)
    tensor_metrics(a.astype(np.float64), b.astype(np.float16), ws)
    again = tensor_metrics(a, b, ws)
    assert first == again
    assert_matches(first, reference(a, b))


def test_non_contiguous_input():
    rng = np.random.default_rng(8)
    g = rng.standard_normal((64, 64)).astype(np.float32)
    t = g * 1.5
    m = tensor_metrics(g.T, t.T)
    assert_matches(m, reference(g.T, t.T))
    assert math.isclose(m[M.RED], 0.5, rel_tol=1e-6)
