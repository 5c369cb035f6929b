"""Verdict rules: dtype-dependent defaults, presets, thresholds files, and the statistics/hash modes."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from opdiff.base.record import Stats
from opdiff.errors import OpdiffError
from opdiff.metrics import names as M
from opdiff.metrics import preset, stats_metrics, tensor_metrics, verdict
from opdiff.metrics.hash_mode import hash_equal, hash_metrics
from opdiff.metrics.thresholds import (
    ROUNDING_UNIT,
    Condition,
    dtype_class,
    load_thresholds,
    parse_expr,
    thresholds_from_dict,
)
from opdiff.store.stats import tensor_stats
from opdiff.testing.synthetic import Tensor, make_record

DEFAULT = preset("default")
RNG = np.random.default_rng(0)
X = RNG.standard_normal((64, 256)).astype(np.float32)


def judge(g, t, th=DEFAULT, mode="tensor"):
    from opdiff.store.format import dtype_name

    return verdict(tensor_metrics(g, t), dtype_name(g.dtype), dtype_name(t.dtype), mode, th)


def fp32_noise(x: np.ndarray, ulps: float, seed: int = 1) -> np.ndarray:
    """x with a relative perturbation of about `ulps` units of fp32 rounding per element."""
    r = np.random.default_rng(seed).standard_normal(x.shape)
    return (x.astype(np.float64) * (1 + r * ulps * 2.0**-24)).astype(np.float32)


def test_dtype_class_is_the_lower_precision():
    assert dtype_class("float32", "bfloat16") == ("bfloat16", 2.0**-8)
    assert dtype_class("float16", "float32") == ("float16", 2.0**-11)
    assert dtype_class("float32", "float8_e4m3fn") == ("float8_e4m3fn", 2.0**-4)
    assert dtype_class("int64", "int64")[0] == "int"
    assert dtype_class("int64", "float32") == ("float32", 2.0**-24)
    assert ROUNDING_UNIT["float8_e5m2"] == 2.0**-3


def test_fp32_rounding_noise_passes_and_real_bugs_do_not():
    assert judge(X, X.copy()) == ("PASS", "")
    assert judge(X, fp32_noise(X, 4))[0] == "PASS"
    assert judge(X, fp32_noise(X, 300))[0] == "WARNING"  # RED ~ 300u: suspicious for fp32
    row = X.copy()
    row[5] *= 1.01  # one weight row off by 1%: RED ~ 1.2e-3 >> fp32 noise
    res, why = judge(X, row)
    assert res == "FAIL" and "RelativeEuclideanDistance" in why
    gelu = X.astype(np.float64)
    exact = 0.5 * gelu * (1 + np.vectorize(__import__("math").erf)(gelu / np.sqrt(2)))
    tanh = 0.5 * gelu * (1 + np.tanh(np.sqrt(2 / np.pi) * (gelu + 0.044715 * gelu**3)))
    assert judge(exact.astype(np.float32), tanh.astype(np.float32))[0] == "FAIL"


def test_bf16_and_fp16_rounding_pass_against_fp32_but_a_bf16_bug_fails():
    assert judge(X, X.astype(ml_dtypes.bfloat16))[0] == "PASS"
    assert judge(X, X.astype(np.float16))[0] == "PASS"
    # the same bf16 rounding would be a FAIL if both were fp32
    assert judge(X, X.astype(ml_dtypes.bfloat16).astype(np.float32))[0] == "FAIL"
    bug = (X * 1.1).astype(ml_dtypes.bfloat16)
    assert judge(X, bug)[0] == "FAIL"


def test_integers_must_be_exact():
    g = np.arange(100, dtype=np.int64)
    assert judge(g, g.copy()) == ("PASS", "")
    t = g.copy()
    t[50] += 1
    assert judge(g, t)[0] == "FAIL"
    b = np.array([True, False])
    assert judge(b, ~b)[0] == "FAIL"


def test_nonfinite_on_one_side_is_fail_whatever_the_preset():
    t = X.copy()
    t[0, 0] = np.nan
    for name in ("default", "msprobe-torchair", "msaccucmp", "bitwise"):
        res, why = judge(X, t, preset(name))
        assert res == "FAIL" and "nan/inf" in why
    both = X.copy()
    both[0, 0] = np.inf
    assert judge(both, both.copy())[0] == "PASS"


def test_zero_golden_and_empty():
    z = np.zeros(10, np.float32)
    assert judge(z, z.copy())[0] == "PASS"
    t = z.copy()
    t[1] = 1e-30
    assert judge(z, t) == ("FAIL", "golden is all zero and target is not")
    e = np.zeros((0,), np.float32)
    assert judge(e, e.copy())[0] == "PASS"


def test_msprobe_torchair_preset():
    th = preset("msprobe-torchair")
    t = X * 1.005  # MaxRelativeErr 0.005 < 0.01, cosine 1
    assert judge(X, t.astype(np.float32), th)[0] == "PASS"
    t2 = X * 1.02
    res, why = judge(X, t2.astype(np.float32), th)
    assert res == "FAIL" and "MaxRelativeErr" in why and "< 0.01" in why
    assert th.band("tensor", "float32").warning is None


def test_msaccucmp_and_bitwise_presets():
    assert judge(X, X.astype(ml_dtypes.bfloat16), preset("msaccucmp"))[0] == "PASS"
    assert judge(X, fp32_noise(X, 1), preset("bitwise"))[0] == "FAIL"
    assert judge(X, X.copy(), preset("bitwise"))[0] == "PASS"
    with pytest.raises(OpdiffError, match="unknown threshold preset"):
        preset("nope")


def test_conditions_parse_units_and_directions():
    assert Condition.parse("Cosine", 0.99) == Condition("Cosine", ">=", 0.99)
    assert Condition.parse("MaxAbsErr", 1e-3) == Condition("MaxAbsErr", "<=", 1e-3)
    c = Condition.parse("RelativeEuclideanDistance", "<= 64u")
    assert c.in_u and c.bound(2.0**-24) == 64 * 2.0**-24
    assert parse_expr("MaxRelativeErr<0.01") == Condition("MaxRelativeErr", "<", 0.01)
    assert parse_expr("One Thousandth Err Ratio >= 0.99").metric == "One Thousandth Err Ratio"
    with pytest.raises(OpdiffError):
        parse_expr("Cosine is big")
    assert Condition("Cosine", ">=", 0.9).holds({"Cosine": None}, 1.0) is None


def test_thresholds_file_overrides_one_class(tmp_path):
    f = tmp_path / "th.yaml"
    f.write_text("preset: default\ntensor:\n  float32:\n    pass: {RelativeEuclideanDistance: '<=1u'}\n"
                 "    warning: {Cosine: '>=0.5'}\n")
    th = load_thresholds(f)
    t = fp32_noise(X, 4)
    assert judge(X, t, th)[0] == "WARNING"  # RED ~ 4u > 1u, cosine fine
    assert judge(X, X.astype(ml_dtypes.bfloat16), th)[0] == "PASS"  # bfloat16 class untouched
    j = tmp_path / "th.json"
    j.write_text(json.dumps({"preset": "msprobe-torchair", "tensor": {"*": {"pass": {"Cosine": 0.999999}}}}))
    assert judge(X, (X * 1.02).astype(np.float32), load_thresholds(j))[0] == "PASS"  # MaxRelativeErr no longer checked


@pytest.mark.parametrize("text,msg", [
    ("tensor: [1, 2]", "expected a mapping"),
    ("tensor:\n  float32: {warning: {Cosine: 0.9}}", "'pass'"),
    ("tensor:\n  float32: {pass: {Cosine: 'big'}}", "bad condition"),
    ("colour: red", "unknown key"),
    ("preset: nope", "unknown threshold preset"),
    ("tensor: {float32: {pass: {a: 1}}", "bad thresholds file"),
])
def test_bad_thresholds_file_is_one_line_naming_it(tmp_path, text, msg):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(OpdiffError, match=msg) as exc:
        load_thresholds(f)
    assert str(exc.value).startswith(str(f)) and "\n" not in str(exc.value)


def test_missing_thresholds_file(tmp_path):
    with pytest.raises(OpdiffError, match="cannot read thresholds file"):
        load_thresholds(tmp_path / "none.yaml")


def test_thresholds_to_json_lists_the_rules():
    d = thresholds_from_dict({"preset": "default"}).to_json()
    assert d["tensor"]["float32"]["pass"] == ["RelativeEuclideanDistance <= 64u", "NormalizedMaxAbsErr <= 256u"]


def test_stats_metrics_against_reference():
    g = tensor_stats(X)
    t = tensor_stats((X * 1.01).astype(np.float32))
    m = stats_metrics(g, t)
    for key, attr in ((M.MAX_DIFF, "max"), (M.MIN_DIFF, "min"), (M.MEAN_DIFF, "mean"), (M.NORM_DIFF, "norm")):
        assert m[key] == pytest.approx(getattr(t, attr) - getattr(g, attr), rel=1e-12)
    assert m[M.NORM_REL_DIFF] == pytest.approx(0.01, rel=1e-4)
    assert m[M.NORM_STATS_DIFF] == pytest.approx(max(abs(m[M.MAX_DIFF]), abs(m[M.MIN_DIFF]), abs(m[M.MEAN_DIFF]))
                                                 / max(abs(g.max), abs(g.min)))
    assert verdict(m, "float32", "float32", "stats", DEFAULT)[0] == "FAIL"
    same = stats_metrics(g, g)
    assert verdict(same, "float32", "float32", "stats", DEFAULT) == ("PASS", "")


def test_stats_metrics_edge_cases():
    zero = Stats(numel=4, min=0.0, max=0.0, mean=0.0, std=0.0, norm=0.0, zeros=4)
    one = Stats(numel=4, min=0.0, max=1.0, mean=0.25, std=0.4, norm=1.0, zeros=3)
    m = stats_metrics(zero, one)
    assert m[M.MAX_REL_DIFF] is None and "golden max is 0" in m[M.ERR_MESSAGE]
    assert verdict(m, "float32", "float32", "stats", DEFAULT)[0] == "FAIL"
    empty = Stats(numel=0)
    assert stats_metrics(empty, empty)[M.NORM_DIFF] is None
    nan = Stats(numel=4, min=0.0, max=1.0, mean=0.5, std=0.5, norm=1.0, nan=1)
    mm = stats_metrics(one, nan)
    assert mm[M.NONFINITE_MISMATCH] == 1 and verdict(mm, "float32", "float32", "stats", DEFAULT)[0] == "FAIL"


def test_hash_equality():
    a = make_record(Tensor("m", "Linear", "output", "0", X))
    b = make_record(Tensor("m", "Linear", "output", "0", X.copy()))
    c = make_record(Tensor("m", "Linear", "output", "0", fp32_noise(X, 1)))
    assert hash_equal(a, b) is True and hash_equal(a, c) is False
    assert verdict(hash_metrics(a, c), "float32", "float32", "hash", DEFAULT) == ("FAIL", "content hashes differ")
    c.hash = None
    assert hash_equal(a, c) is None and verdict(hash_metrics(a, c), "float32", "float32", "hash", DEFAULT)[0] == "N/A"


def test_metric_fields_and_column_names():
    from opdiff.base.pair import Metrics

    assert set(M.COLUMN) == set(Metrics.__annotations__)  # every field has its column name
    assert len(set(M.COLUMN.values())) == len(M.COLUMN)
    assert Condition("max_rel_err", "<", 0.01) == Condition("MaxRelativeErr", "<", 0.01)
    assert Condition("max_rel_err", "<", 0.01).key == M.MAX_REL_ERR
    assert parse_expr("rel_euclid_dist <= 64u") == parse_expr("RelativeEuclideanDistance<=64u")
    with pytest.raises(OpdiffError, match="unknown metric 'Cosin'"):
        parse_expr("Cosin >= 0.9")


def _judge_cases():
    """Metrics a Judge must judge as verdict() does: passing, warning, failing, N/A metrics, nan/inf on one
    side, an all-zero golden, nothing compared, stats mode, hash mode."""
    import itertools

    base = {M.RED: 1e-8, M.NORM_MAX_ABS_ERR: 1e-8, M.COSINE: 1.0, M.MAX_REL_ERR: 0.0, M.KL_DIV: 0.0,
            M.DIFF_COUNT: 0, M.COMPARED: 64, M.NUMEL: 64, M.GOLDEN_ABS_MAX: 2.0, M.NONFINITE_MISMATCH: 0,
            M.NORM_REL_DIFF: 1e-8, M.NORM_STATS_DIFF: 1e-8, M.NORM_DIFF: 1e-7}
    tweaks = [{}, {M.RED: 3e-5}, {M.RED: 1.0}, {M.NORM_MAX_ABS_ERR: None}, {M.RED: float("nan")},
              {M.NONFINITE_MISMATCH: 2}, {M.GOLDEN_ABS_MAX: 0.0}, {M.GOLDEN_ABS_MAX: 0.0, M.MAX_ABS_ERR: 0.0},
              {M.COMPARED: 0}, {M.COMPARED: 0, M.NUMEL: 0}, {M.DIFF_COUNT: 3}, {M.COSINE: 0.5, M.MAX_REL_ERR: 0.5},
              {M.NORM_REL_DIFF: 0.5}, {M.RED: True}, {M.GOLDEN_ABS_MAX: None}]
    dtypes = [("float32", "float32"), ("float32", "bfloat16"), ("float16", "float16"), ("int64", "int64"),
              ("bool", "float32")]
    for tweak, (gd, td), mode, floor in itertools.product(tweaks, dtypes, ("tensor", "stats"), (None, "bfloat16")):
        yield {**base, **tweak}, gd, td, mode, floor
    yield {M.HASH_EQUAL: True}, "float32", "float32", "hash", None
    yield {M.HASH_EQUAL: False}, "float32", "float32", "hash", None
    yield {M.HASH_EQUAL: None}, "float32", "float32", "hash", None


@pytest.mark.parametrize("preset_name", ["default", "msprobe-torchair", "msaccucmp", "bitwise"])
def test_judge_gives_what_verdict_gives(preset_name):
    """compare's Judge (rules looked up once per dtypes and floor, PASS decided at once) answers exactly as
    verdict() for every case, with every preset and with a custom band whose class has no rule."""
    from opdiff.metrics.thresholds import preset, thresholds_from_dict
    from opdiff.metrics.verdict import Judge

    th = preset(preset_name)
    custom = thresholds_from_dict({"preset": preset_name, "tensor": {"float16": {"pass": {"Cosine": ">=0.999"}}}})
    for thresholds in (th, custom):
        judge = Judge(thresholds)
        seen = set()
        for metrics, gd, td, mode, floor in _judge_cases():
            got = judge(dict(metrics), gd, td, mode, floor)
            assert got == verdict(dict(metrics), gd, td, mode, thresholds, floor)
            seen.add(got[0])
        assert {"PASS", "FAIL"} <= seen
