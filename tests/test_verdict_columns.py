"""Verdicts by columns (Judge.passing over a batch's MetricTable): a pair is PASS by columns exactly when the
per-pair judge gives it PASS with no reason, on every preset, custom rules, floors and dtypes; compare() with
them gives the same results as pair by pair."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from opdiff.base.vocab import PASS
from opdiff.compare import compare
from opdiff.compare import run as R
from opdiff.metrics import names as M
from opdiff.metrics.batch import PairItem, batch_table
from opdiff.metrics.tensor import TensorSource, Workspace
from opdiff.metrics.thresholds import PRESETS, preset, thresholds_from_dict
from opdiff.metrics.verdict import Judge
from opdiff.store.format import dtype_name
from opdiff.testing.synthetic import Tensor, write_dump

RNG = np.random.default_rng(11)
# relative noise from none to gross: each preset's PASS / WARNING / FAIL boundaries fall in between
NOISE = (0.0, 1e-9, 1e-7, 3e-7, 1e-6, 1e-5, 1e-4, 1e-3, 4e-3, 1e-2, 0.05, 0.3)
CUSTOM = {"tensor": {"float32": {"pass": {"Cosine": "> 0.9999", "MaxAbsErr": "< 1e-3", "DiffCount": "== 0"}},
                     "float16": {"pass": {"worst_index": ">= 0"}},  # a metric the columns do not hold
                     "bfloat16": {"pass": {"RelativeEuclideanDistance": "<= 64u", "golden_abs_max": "> 0"}}}}


def _pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for dt in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32):
        for rel in NOISE:
            g = (3 * RNG.standard_normal(int(RNG.integers(1, 200)))).astype(dt)
            gf = g.astype(np.float64)
            out.append((g, (gf + rel * np.abs(gf).max() * RNG.standard_normal(g.size)).astype(dt)))
    g = RNG.standard_normal(50).astype(np.float32)
    t = g.copy()
    t[4] = np.nan  # not plain: left to the judge pair by pair
    out += [(g, t), (np.zeros(8, np.float32), np.ones(8, np.float32)), (np.ones(1, np.float32),) * 2]
    return out


def _table(pairs: list[tuple[np.ndarray, np.ndarray]]):
    items = [PairItem(TensorSource.of(g), TensorSource.of(t)) for g, t in pairs]
    items[3].golden_range = (0.0, 0.0, 0.0)  # statistics saying golden is all zero: decided before the band
    with Workspace() as ws:
        return items, batch_table(items, ws)


@pytest.mark.parametrize("name", [*PRESETS, "custom"])
@pytest.mark.parametrize("floor", [None, "bfloat16", "float16"])
def test_pass_by_columns_is_the_judges_pass_without_reason(name, floor):
    thresholds = thresholds_from_dict(CUSTOM) if name == "custom" else preset(name)
    pairs = _pairs()
    items, table = _table(pairs)
    judge = Judge(thresholds)
    rows = np.arange(len(items))
    got: dict[int, bool] = {}
    for k, it in enumerate(items):
        got[k] = bool(judge.passing(table.columns, rows[k:k + 1], it.golden.dtype, it.target.dtype, floor,
                                    "tensor")[0])
    assert table.plain.sum() >= len(items) - 3 and not table.plain[-3]  # the nan pair is not plain
    for k, it in enumerate(items):
        m = table.metrics[k]
        assert m is not None
        want = judge(dict(m), it.golden.dtype, it.target.dtype, "tensor", floor) == (PASS, "")
        if name == "custom" and judge.rules(it.golden.dtype, it.target.dtype, floor, "tensor")[0] == "float16":
            assert not got[k]  # a condition the columns cannot decide: pair by pair
        else:
            assert got[k] == want, (k, it.golden.dtype, m)
    if name == "default" and floor is None:
        assert 0 < sum(got.values()) < len(items) - 5  # both outcomes met


def test_columns_hold_the_dicts_numbers():
    items, table = _table(_pairs())
    for k in np.flatnonzero(table.plain).tolist():
        m = table.metrics[k]
        assert m is not None
        for key, col in table.columns.items():
            v = m[key]
            assert (math.isnan(col[k]) if v is None else col[k] == float(v)), (k, key)
    assert all(math.isnan(col[k]) for col in table.columns.values() for k in np.flatnonzero(~table.plain))
    assert {M.RED, M.NORM_MAX_ABS_ERR, M.COSINE, M.DIFF_COUNT, M.GOLDEN_ABS_MAX} <= set(table.columns)


@pytest.mark.parametrize("name", [*PRESETS, "custom"])
def test_compare_with_columns_equals_pair_by_pair(tmp_path, monkeypatch, name):
    pairs = _pairs()
    write_dump(tmp_path / "g", [Tensor(f"m.{i}", "Op", "output", "0", g) for i, (g, _) in enumerate(pairs)])
    write_dump(tmp_path / "t", [Tensor(f"m.{i}", "Op", "output", "0", t) for i, (_, t) in enumerate(pairs)])
    thresholds = thresholds_from_dict(CUSTOM) if name == "custom" else preset(name)
    fields = ("status", "mode", "result", "metrics", "err_message", "bitwise_equal", "precision", "match", "note")
    batched = compare(tmp_path / "g", tmp_path / "t", workers=1, thresholds=thresholds)
    monkeypatch.setattr(R, "SMALL_PAIR", 0)  # nothing batched: compare_pair and the judge, one pair at a time
    alone = compare(tmp_path / "g", tmp_path / "t", workers=1, thresholds=thresholds)
    got = [[getattr(r, f) for f in fields] for r in batched.results]
    assert got == [[getattr(r, f) for f in fields] for r in alone.results]
    assert [list(r.metrics) for r in batched.results] == [list(r.metrics) for r in alone.results]  # key order
    assert {r.result for r in batched.results} >= {PASS}
    assert {dtype_name(g.dtype) for g, _ in pairs} >= {"float32", "float16", "bfloat16"}


def test_tallies_counted_in_c_equal_the_loop(tmp_path):
    """Comparison.counts / status_counts (Counter over the results) give the loop's numbers and key order."""
    pairs = _pairs()
    write_dump(tmp_path / "g", [Tensor(f"m.{i}", "Op", "output", "0", g) for i, (g, _) in enumerate(pairs)])
    write_dump(tmp_path / "t", [Tensor(f"m.{i}", "Op", "output", "0", t) for i, (_, t) in enumerate(pairs[:-4])]
               + [Tensor("extra", "Op", "output", "0", np.ones(2, np.float32))])
    cmp = compare(tmp_path / "g", tmp_path / "t", workers=1)
    want: dict[str, int] = {"PASS": 0, "WARNING": 0, "FAIL": 0, "N/A": 0}
    status: dict[str, int] = {}
    for r in cmp.results:
        want[r.result] = want.get(r.result, 0) + 1
        status[r.status] = status.get(r.status, 0) + 1
    assert list(cmp.counts().items()) == list(want.items())
    assert list(cmp.status_counts().items()) == list(status.items()) and len(status) >= 2
