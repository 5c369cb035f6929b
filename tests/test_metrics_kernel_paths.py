"""The kernel's two KL paths (near: a/b within sqrt2; general: exponent split) and the switch between them,
against KL computed in extended precision from the same normalized values."""

from __future__ import annotations

import numpy as np
import pytest

from opdiff.metrics import kernel as K
from opdiff.metrics import names as M
from opdiff.metrics.tensor import TensorSource, pair_metrics, tensor_metrics

EPS32 = np.finfo(np.float32).eps


def kl_extended(g: np.ndarray, t: np.ndarray) -> float:
    """msaccucmp's KL with the kernel's own normalized values (float64 a, b), summed in long double: a
    reference whose rounding is far below the kernel's, also where KL is tiny beside its terms."""
    def norm(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        lo, hi = x.min(), x.max()
        y = (x - lo) * (1.0 / (hi - lo)) if hi > lo else x
        return np.maximum(y, EPS32).astype(np.longdouble)
    a, b = norm(t), norm(g)
    p, q = a / a.sum(), b / b.sum()
    return float((p * np.log(p / q)).sum())


def blocks(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts).astype(np.float32)


@pytest.mark.parametrize("kdtype", [np.float32, np.float64])
@pytest.mark.parametrize("noise", [0.0, "ulp", 1e-6, 1e-4, 1e-2])
def test_near_path_kl_equals_extended_precision(noise, kdtype):
    """Similar tensors take the near path in every block: KL to 1e-9 of the long-double value in the float64
    kernel (1e-6 in the float32 one: docs/metrics.md, "Precision"), down to KL ~1e-13 (1e-6 apart), where
    the terms S/A and log(B/A) cancel to 1e-7 of their size; 1 ulp apart everywhere, KL is below float64
    eps and reported 0."""
    rng = np.random.default_rng(11)
    g = rng.standard_normal(3 * K.BLOCK + 77).astype(np.float32)
    if noise == "ulp":
        t = np.nextafter(g, np.float32(np.inf))
    else:
        t = (g + np.abs(g) * noise * rng.standard_normal(g.size)).astype(np.float32)
    m = tensor_metrics(g.astype(kdtype), t.astype(kdtype))
    ref = kl_extended(g, t)
    if noise in (0.0, "ulp"):
        assert ref < K.EPS64 and m[M.KL_DIV] == 0.0
    else:
        assert ref > K.EPS64 and m[M.KL_DIV] == pytest.approx(ref, rel=1e-9 if kdtype is np.float64 else 1e-6)


def test_switching_between_paths_block_by_block():
    """Similar blocks, then blocks far apart (general path, the near one refused), then similar again
    (back to the near path), and blocks with a single far element among similar ones, inside the probe
    (the general path at once) and after it (the block's S redone): KL equals the long-double value
    whatever path each block took."""
    rng = np.random.default_rng(12)
    n = K.BLOCK
    g = rng.standard_normal(9 * n).astype(np.float32)
    t = g.copy()
    t[:2 * n] += (1e-3 * rng.standard_normal(2 * n)).astype(np.float32)  # near
    t[2 * n:4 * n] = rng.standard_normal(2 * n).astype(np.float32)  # far: independent values
    t[4 * n:] += (1e-3 * rng.standard_normal(5 * n)).astype(np.float32)  # near again
    t[6 * n + 100] = 3.0  # one element far off inside the probe of a near block
    t[8 * n + K.PROBE + 1000] = 3.0  # and one after the probe of another
    assert tensor_metrics(g, t)[M.KL_DIV] == pytest.approx(kl_extended(g, t), rel=1e-6)  # float32 blocks
    assert tensor_metrics(g.astype(np.float64), t.astype(np.float64))[M.KL_DIV] == pytest.approx(kl_extended(g, t),
                                                                                                 rel=1e-9)


def test_block_status_says_which_path_the_next_block_takes():
    """_chunk_fast returns 1 (try near next) for a similar block, 0 for one with any ratio beyond sqrt2
    (within the probe or after it), -1 for a block holding nan; the sums it folds are the same from
    either path."""
    rng = np.random.default_rng(13)
    g = rng.standard_normal(K.BLOCK).astype(np.float32)
    near_t = (g * np.float32(1.0001)).astype(np.float32)
    far_t = rng.standard_normal(K.BLOCK).astype(np.float32)
    late_t = near_t.copy()
    late_t[K.PROBE + 7] = g.max()  # similar but for one element after the probe: S redone
    p = np.zeros(K.N_PARAM)
    p[K.P_GMIN], p[K.P_GINV] = g.min(), 1 / (float(g.max()) - float(g.min()))
    p[K.P_TMIN], p[K.P_TINV] = g.min(), 1 / (float(g.max()) - float(g.min()))
    o = np.zeros(K.N_ACC)
    for t, want in ((near_t, 1), (far_t, 0), (late_t, 0)):
        got = []
        for near in (True, False):
            acc, cnt = K.new_state()
            assert K._chunk_fast(g, t, p, acc, cnt, o, 0, near) == want
            got.append(acc.copy())
        kl = [K.A_KL_SA, K.A_KL_SB, K.A_KL_SL, K.A_KL_SD]  # summed in another order by each path's loop
        assert got[0][kl] == pytest.approx(got[1][kl], rel=1e-13)
        assert np.array_equal(np.delete(got[0], kl), np.delete(got[1], kl))
    bad = near_t.copy()
    bad[5] = np.nan
    acc, cnt = K.new_state()
    assert K._chunk_fast(g, bad, p, acc, cnt, o, 0, True) == -1 and not acc.any()


def test_ranges_far_off_the_data_fall_back_like_before():
    """Statistics whose range is far narrower than the data overflow a = (t - min) / (max - min) to inf:
    the block-level check sends the KL sum to the careful log (a non-finite KL, as the formula gives),
    and every other metric is unaffected."""
    g = np.array([1.0, 2.0, 3.0, 1e150], np.float64)
    t = g * 1.5
    ok = pair_metrics(TensorSource.of(g), TensorSource.of(t))
    tight = pair_metrics(TensorSource.of(g), TensorSource.of(t), golden_range=(1.0, 3.0, 0.0),
                         target_range=(0.0, 1e-200, 0.0))
    assert not np.isfinite(tight[M.KL_DIV])
    for k in (M.COSINE, M.MAX_ABS_ERR, M.RED, M.MEAN_REL_ERR, M.ONE_THOUSANDTH):
        assert tight[k] == ok[k], k
