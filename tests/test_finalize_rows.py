"""finalize_rows (a batch's metrics as whole columns) gives exactly what finalize gives pair by pair."""

from __future__ import annotations

import numpy as np

from opdiff.metrics import kernel as K
from opdiff.metrics.tensor import TensorSource, finalize_full, finalize_rows, pair_metrics


def _rows(n: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    rng = np.random.default_rng(7)
    acc = rng.random((n, K.N_ACC)) * rng.choice([1e-30, 1e-3, 1.0, 1e30], size=(n, 1))
    cnt = rng.integers(0, 5, (n, K.N_CNT))
    numel = rng.integers(1, 100, n).tolist()
    cnt[:, K.C_FINITE] = numel
    cnt[:, K.C_MISMATCH] = 0
    cnt[::7, K.C_DIFF] = 0  # identical pairs: cosine exactly 1
    cnt[1::11, K.C_FINITE] -= 1  # a non-finite element on both sides
    cnt[2::13, K.C_MISMATCH] = 2  # nan on one side only
    acc[3::17, K.A_SUM_G2] = 0.0  # golden all zero
    acc[4::19, K.A_SUM_T2] = 0.0
    acc[5::23, K.A_SUM_GT] = np.inf  # cosine not finite: the careful path
    acc[6::29, K.A_KL_SD] = -acc[6::29, K.A_KL_SB] * 0.9  # the log(A) - log(B) branch
    return acc, cnt, numel


def test_every_row_equals_finalize_with_its_keys_in_order() -> None:
    acc, cnt, numel = _rows(3000)
    absmax = [None if i % 31 == 0 else 0.0 if i % 37 == 0 else float(i) for i in range(len(numel))]
    shifts = [(0.25 * i, -0.5) for i in range(len(numel))]
    got = finalize_rows(acc, cnt, numel, absmax, shifts)
    for i, m in enumerate(got):
        want = finalize_full(acc[i].tolist(), cnt[i].tolist(), numel[i], absmax[i], shifts[i])
        assert list(m.items()) == list(want.items()), i


def test_a_batch_of_real_pairs_equals_pair_metrics() -> None:
    """Through the kernel: a batch of small pairs (metrics/batch.py) gives pair_metrics' numbers exactly."""
    from opdiff.metrics.batch import PairItem, batch_metrics
    from opdiff.metrics.tensor import Workspace

    rng = np.random.default_rng(3)
    gs = [rng.standard_normal(rng.integers(1, 300)).astype(np.float32) for _ in range(200)]
    ts = [g + np.float32(1e-3) * rng.standard_normal(g.size).astype(np.float32) for g in gs]
    ts[5] = gs[5].copy()
    ts[9][0] = np.nan
    with Workspace() as ws:
        got = batch_metrics([PairItem(TensorSource.of(g), TensorSource.of(t)) for g, t in zip(gs, ts)], ws)
        want = [pair_metrics(TensorSource.of(g), TensorSource.of(t), ws) for g, t in zip(gs, ts)]
    assert [list(m.items()) for m in got if m is not None] == [list(m.items()) for m in want]
