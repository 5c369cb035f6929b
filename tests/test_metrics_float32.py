"""The float32 kernel (metrics/kernel.py, its float32 blocks) against the float64 one on inputs built to hurt float32 sums:
every metric within the documented tolerance (docs/metrics.md, "Precision"), maxima exact, blocks that
float32 cannot hold folded in float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opdiff.metrics import kernel as K
from opdiff.metrics import names as M
from opdiff.metrics.tensor import tensor_metrics

RTOL = 1e-6
COS_ABS = 1e-7  # cosine's absolute tolerance, whatever the sides (docs/metrics.md)
EXACT = (M.MAX_ABS_ERR, M.NORM_MAX_ABS_ERR, M.WORST_INDEX, M.WORST_GOLDEN,
         M.WORST_TARGET, M.DIFF_COUNT, M.COMPARED, M.GOLDEN_NAN, M.TARGET_NAN, M.GOLDEN_POSINF, M.TARGET_NEGINF,
         M.NONFINITE_MISMATCH)


def check(g: np.ndarray, t: np.ndarray, rtol: float = RTOL) -> dict:
    """The float32 kernel's metrics of (g, t) against the float64 kernel's of the same values (itself
    tested to 1e-9 against numpy, tests/test_metrics_tensor.py); returns the float32 ones."""
    m = tensor_metrics(g, t)
    r = tensor_metrics(g.astype(np.float64), t.astype(np.float64))
    red2 = (r[M.RED] or 0.0) ** 2
    for k in EXACT:
        assert m[k] == r[k], k
    for k in (M.MAX_REL_ERR, M.MAX_REL_ERROR):  # float32's r: two roundings (2^-23) of the float64 one
        assert m[k] == pytest.approx(r[k], rel=2.0 ** -22 if rtol == RTOL else rtol, abs=1e-300), k
    for k in (M.MEAN_ABS_ERR, M.MEAN_REL_ERR, M.RMSE, M.ACC_REL_ERR, M.MEAN_REL_ERROR, M.RED, M.EUC_DIST,
              M.GOLDEN_STD, M.TARGET_STD):
        assert m[k] == pytest.approx(r[k], rel=rtol, abs=1e-300), k
    for k, s in ((M.GOLDEN_MEAN, M.GOLDEN_STD), (M.TARGET_MEAN, M.TARGET_STD)):
        assert m[k] == pytest.approx(r[k], rel=rtol, abs=rtol * r[s] + 1e-300), k
    assert 1.0 - m[M.COSINE] == pytest.approx(1.0 - r[M.COSINE], rel=rtol, abs=min(10 * rtol * red2, COS_ABS) + 1e-300)
    assert m[M.KL_DIV] == pytest.approx(r[M.KL_DIV], rel=rtol, abs=rtol * red2 + 1e-300)
    for k in (M.ONE_THOUSANDTH, M.FIVE_THOUSANDTH):
        assert m[k] == pytest.approx(r[k], abs=1e-6), k
    return m


def rng_of(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_large_dynamic_range():
    """Magnitudes from 1e-30 to 1e17 in every block, both signs."""
    rng = rng_of(1)
    g = (rng.choice([-1, 1], 50_000) * 10.0 ** rng.uniform(-30, 17, 50_000)).astype(np.float32)
    t = (g * (1 + 1e-4 * rng.standard_normal(g.size))).astype(np.float32)
    check(g, t)


def test_mean_far_above_spread():
    """mean 1e4 times the std: the shifted sums keep mean and std."""
    rng = rng_of(2)
    g = (1e4 + rng.standard_normal(20_000)).astype(np.float32)
    t = (g + 1e-3 * rng.standard_normal(g.size)).astype(np.float32)
    m = check(g, t)
    assert m[M.GOLDEN_STD] == pytest.approx(float(g.astype(np.float64).std()), rel=RTOL)


@pytest.mark.parametrize("kind", ["ulp", "1e-7", "one element"])
def test_near_identical(kind):
    """b = a (1 + 1e-7), a + 1 ulp, one element changed: 1 - cosine, RMSE and KL keep their precision."""
    rng = rng_of(3)
    g = rng.standard_normal(30_000).astype(np.float32)
    if kind == "ulp":
        t = np.nextafter(g, np.float32(np.inf))
    elif kind == "1e-7":
        t = (g.astype(np.float64) * (1 + 1e-7)).astype(np.float32)
    else:
        t = g.copy()
        t[12_345] = np.nextafter(t[12_345], np.float32(np.inf))
    m = check(g, t)
    assert 0.0 <= 1.0 - m[M.COSINE] < 1e-12 and m[M.DIFF_COUNT] > 0


def test_bitwise_equal_is_exact():
    rng = rng_of(4)
    g = rng.standard_normal(10_000).astype(np.float32)
    m = tensor_metrics(g, g.copy())
    assert m[M.COSINE] == 1.0 and m[M.KL_DIV] == 0.0 and m[M.MAX_ABS_ERR] == 0.0 and m[M.RMSE] == 0.0
    assert m[M.MEAN_REL_ERR] == 0.0 and m[M.ONE_THOUSANDTH] == 1.0


def test_sparse():
    """99 % zeros: whole zero blocks and scattered values."""
    rng = rng_of(5)
    g = np.zeros(40_000, np.float32)
    idx = rng.choice(g.size, 400, replace=False)
    g[idx] = rng.standard_normal(idx.size)
    t = g.copy()
    t[idx[::2]] *= np.float32(1.01)
    check(g, t)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e20, 1e30])
def test_magnitudes_float32_cannot_square_fall_back_to_float64(scale):
    """Squares under- or overflowing float32: the block goes the float64 way, as a float64 input does
    (the same sums in another block order: 1e-12)."""
    rng = rng_of(6)
    g = (rng.standard_normal(5000) * scale).astype(np.float32)
    t = (g * (1 + 1e-3 * rng.standard_normal(g.size))).astype(np.float32)
    m = check(g, t, rtol=1e-12)
    assert m[M.RMSE] > 0.0 and m[M.COSINE] < 1.0


@pytest.mark.parametrize("scale", [1e-30, 1e-10])
def test_tiny_differences_fall_back_to_float64(scale):
    """Values 1 ulp apart whose differences are all below 2^-52 (values ~1e-10), or whose values are below
    2^-40 too (~1e-30): sum (t - g)^2 would underflow in float32."""
    g = np.linspace(1, 2, 3000, dtype=np.float32) * np.float32(scale)
    t = g.copy()
    t[::3] = np.nextafter(g[::3], np.float32(np.inf))
    m = check(g, t, rtol=1e-9)  # float64's own rounding of 1 - cos ~1e-13 (block order differs)
    assert m[M.RMSE] > 0.0


def test_ulp_differences_of_small_values_stay_float32():
    """Gradient-like values ~1e-6, 1 ulp apart (differences ~1e-13, above 2^-52): the float32 way, within
    its tolerance."""
    rng = rng_of(12)
    g = (rng.standard_normal(20_000) * 1e-6).astype(np.float32)
    t = g.copy()
    t[::7] = np.nextafter(g[::7], np.float32(np.inf))
    check(g, t)


def test_block_status_refuses_what_float32_cannot_hold():
    """_chunk32: 1 for an ordinary block, -1 with nan, -2 with squares out of float32's range."""
    rng = rng_of(7)
    g = rng.standard_normal(K.BLOCK32).astype(np.float32)
    p = np.zeros(K.N_PARAM)
    p[K.P_GMIN], p[K.P_GINV] = float(g.min()), 1.0 / (float(g.max()) - float(g.min()))
    p[K.P_TMIN], p[K.P_TINV] = p[K.P_GMIN], p[K.P_GINV]
    o = np.zeros(K.N_ACC)

    def status(gg: np.ndarray, tt: np.ndarray) -> int:
        acc, cnt = K.new_state()
        return K._chunk32(gg, tt, p, acc, cnt, o, 0, True)

    assert status(g, (g * np.float32(1.0001)).astype(np.float32)) == 1
    t = g.copy()
    t[5] = np.nan
    assert status(g, t) == -1
    assert status(g * np.float32(1e20), g * np.float32(1e20)) == -2
    assert status(g * np.float32(1e-25), g * np.float32(1e-25)) == -2
    small = g * np.float32(1e-10)
    assert status(small, np.nextafter(small, np.float32(np.inf))) == -2  # differences ~1e-16 < 2^-52
    small = g * np.float32(1e-6)
    assert status(small, np.nextafter(small, np.float32(np.inf))) == 1  # ~1e-13: float32 holds them


def test_nan_inf_mixes():
    rng = rng_of(8)
    g = rng.standard_normal(20_000).astype(np.float32)
    t = (g * (1 + 1e-3 * rng.standard_normal(g.size))).astype(np.float32)
    for arr, vals in ((g, (np.nan, np.inf)), (t, (np.nan, -np.inf))):
        idx = rng.choice(g.size, 30, replace=False)
        arr[idx] = rng.choice(vals, idx.size)
    t[100], g[100] = np.inf, np.inf  # the same inf on both sides: no mismatch
    check(g, t)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_low_precision_roundings_of_float32(dtype):
    """fp32 against its bf16 / fp16 rounding, and a GELU-like output (flat minimum: the general KL path)."""
    rng = rng_of(9)
    x = rng.standard_normal(20_000).astype(np.float32)
    gelu = (x * 0.5 * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))).astype(np.float32)
    for g in (x, gelu):
        check(g, g.astype(dtype).astype(np.float32))
        check(g, g.astype(dtype))


def test_far_apart_general_kl_path():
    """Independent tensors: every block's KL by the exponent split."""
    rng = rng_of(10)
    check(rng.standard_normal(20_000).astype(np.float32), rng.standard_normal(20_000).astype(np.float32))


def test_long_tensor_2_24():
    """2^24 elements (16,384 blocks): the float64 totals keep the per-block rounding from adding up."""
    rng = rng_of(11)
    g = (rng.standard_normal(1 << 24, dtype=np.float32) * 3 + 1).astype(np.float32)
    t = (g + g * np.float32(1e-3) * rng.standard_normal(g.size, dtype=np.float32)).astype(np.float32)
    check(g, t)


@pytest.mark.parametrize("kind", ["power", "exp", "scaled noise"])
def test_kl_of_sides_far_apart_in_value(kind):
    """Sides whose normalized values differ by 10-40 % (t = g^0.6, exp(0.6 g), g (1 - 0.4 u)): a - b from the
    rounded a, b there (the t - g form would cancel), ratios beyond sqrt2 by the exponent split: KL to 1e-6."""
    rng = rng_of(13)
    g = rng.uniform(0.01, 1, 50_000).astype(np.float32)
    t = {"power": g ** 0.6, "exp": np.exp(0.6 * g), "scaled noise": g * (1 - 0.4 * rng.uniform(0, 1, g.size))}[kind]
    m = check(g, t.astype(np.float32))
    assert m[M.KL_DIV] > 1e-3


@pytest.mark.parametrize("c", [2.0, 8.0, 1e3, 1e5, 1e-3, -4.0])
@pytest.mark.parametrize("independent", [False, True])
def test_cosine_of_sides_whose_norms_differ(c, independent):
    """Target a rescaled golden, or another tensor, with a norm up to 1e5 times golden's: the cosine from
    differences would lose c/2 float32 roundings (1.5e-5 at c = 1e4, independent sides); far sides take the dot
    product, within COS_ABS of the exact cosine."""
    rng = np.random.default_rng(11)
    g = rng.standard_normal(50_000).astype(np.float32)
    base = rng.standard_normal(g.size).astype(np.float32) if independent else g
    t = (base * np.float32(c)).astype(np.float32)
    m = check(g, t)
    gl, tl = g.astype(np.longdouble), t.astype(np.longdouble)
    exact = float(np.sum(gl * tl) / np.sqrt(np.sum(gl * gl) * np.sum(tl * tl)))
    assert abs(m[M.COSINE] - exact) <= COS_ABS


@pytest.mark.parametrize("z", [5.0, 40.0, -300.0])
@pytest.mark.parametrize("n", [4096, 100_000])
def test_std_where_the_first_element_is_far_from_the_mean(z, n):
    """The class kernel_audit found on real gradients (gpt2's wpe gradient: its first element 5 std from
    the mean): the mean/std sums were shifted by the first element, and var = sum (x - k)^2/n - (mean - k)^2
    cancelled by 1 + z^2 in float32 (std 6e-6 off); the shift is now the data's mean, std within 1e-6."""
    rng = np.random.default_rng(int(abs(z)) + n)
    g = rng.normal(2e-4, 5e-4, n).astype(np.float32)
    g[0] = np.float32(2e-4 + z * 5e-4)
    t = (g + rng.normal(0, 1e-6, n)).astype(np.float32)
    t[0] = g[0]
    check(g, t)
    m = tensor_metrics(g, t)
    for k, x in ((M.GOLDEN_STD, g), (M.TARGET_STD, t)):
        ref = float(np.std(x.astype(np.longdouble)))
        assert m[k] == pytest.approx(ref, rel=1e-6), k


@pytest.mark.parametrize("scale", [1e-22, 1e-25, -1e-33])
def test_blocks_of_zeros_beside_a_tiny_mean(scale):
    """Optimizer states on real dumps (Adam's exp_avg_sq of unused embedding rows: one block of values near
    1e-19, the rest zeros): the blocks of zeros took the float32 path and squared (0 - mean)^2 ~ 1e-42,
    subnormal in float32 (std 2.4e-6 off there, 5 % at 1e-25). A shift below 2^-40 is now 0 in float32 blocks."""
    rng = np.random.default_rng(7)
    g = np.zeros(4096, np.float32)
    g[:768] = (np.abs(rng.standard_normal(768)) * scale * 50).astype(np.float32)
    t = g.copy()
    t[:768] = (g[:768] * (1 + rng.normal(0, 1e-3, 768))).astype(np.float32)
    check(g, t)


CONSTANT_PAIRS = [(0.0, 1.0, 1), (2.31, 2.35, 3000), (1e-3, 7.0, 5), (-4.0, 3.0, 1), (0.5, 0.5000001, 2048)]


@pytest.mark.parametrize("ranged", [False, True])
def test_kl_of_constant_sides_is_zero(ranged):
    """Seen on a real pair (bart, aten.eq output: a float32 0 against a bool True): KL came out -5.5e-7, not 0.
    Two constant sides have p = q (both uniform), KL exactly 0; the float32 terms a log(a/b) against
    finalize's float64 log(A/B) left about 6e-8 |log(t/g)| of either sign. Both ways: one pair, and a batch
    (with and without the records' ranges)."""
    from opdiff.metrics.batch import PairItem, batch_metrics
    from opdiff.metrics.tensor import TensorSource, Workspace

    arrays = [(np.full(n, g, np.float32), np.full(n, t, np.float32)) for g, t, n in CONSTANT_PAIRS]
    varied = (np.linspace(-1, 1, 64, dtype=np.float32), np.linspace(-1, 1, 64, dtype=np.float32) ** 3)
    for g, t in arrays:
        assert tensor_metrics(g, t)[M.KL_DIV] == 0.0
    rng = (lambda x: (float(x.min()), float(x.max()), float(x.mean()))) if ranged else (lambda x: None)
    items = [PairItem(TensorSource.of(g), TensorSource.of(t), rng(g), rng(t)) for g, t in [*arrays, varied]]
    with Workspace() as ws:
        got = batch_metrics(items, ws)
    assert [m[M.KL_DIV] for m in got[:-1]] == [0.0] * len(arrays)
    assert got[-1][M.KL_DIV] > 1e-4  # a side that varies keeps its KL


@pytest.mark.parametrize("n,k", [(4096, 1), (4096, 8), (100_000, 3), (1024, 1)])
@pytest.mark.parametrize("swap", [False, True])
def test_kl_of_sides_whose_masses_differ(n, k, swap):
    """A one-hot side against a spread one (labels, masks, argmax outputs): the normalized sums A and B differ
    by 1,000x. B = A - D missed every floored b (the float32 a - b rounds it away: KL 1.2e-5 off), and where
    A << B the Bregman terms (about b each) cancelled in S (1.3e-5 off); such blocks now sum B and a log(a/b)
    directly. Also: constant sides -4 vs 3 gave B = 0 (ZeroDivisionError)."""
    rng = np.random.default_rng(n + k)
    g = np.zeros(n, np.float32)
    g[rng.choice(n, k, replace=False)] = 1.0
    t = rng.random(n).astype(np.float32)
    g, t = (t, g) if swap else (g, t)
    check(g, t)
    assert tensor_metrics(np.full(3, -4.0, np.float32), np.full(3, 3.0, np.float32))[M.KL_DIV] == 0.0
