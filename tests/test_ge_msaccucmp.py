"""opdiff's device-format conversions and metrics against msaccucmp's own numpy functions (mindstudio-probe).

msaccucmp runs in the msprobe interpreter (tests/msaccucmp_ref.py), never in the test process; its
conversions undo the layouts opdiff's test writer makes (and its NCHW/HWCN->FRACTAL_Z writes one we
compare with ours), and its ten comparison algorithms run on the pairs opdiff compared.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import opdiff
from msprobe_fixtures import need_msprobe
from opdiff.compare import compare
from opdiff.metrics import names as M
from opdiff.store.device_formats import from_logical, to_logical
from opdiff.testing import ge_dumps as gd

REF = Path(__file__).with_name("msaccucmp_ref.py")
RNG = np.random.default_rng(3)

# (name, device format, origin format, logical shape, dtype, msaccucmp module, padded axis msaccucmp keeps, c0)
CASES = [
    ("nc1hwc0_nchw", "NC1HWC0", "NCHW", (2, 19, 3, 5), np.float32, "convert_NC1HWC0_to_NCHW", 1, 16),
    ("nc1hwc0_nhwc", "NC1HWC0", "NHWC", (2, 3, 5, 19), np.float16, "convert_NC1HWC0_to_NHWC", 3, 16),
    ("nc1hwc0_hwcn", "NC1HWC0", "HWCN", (3, 5, 19, 2), np.float32, "convert_NC1HWC0_to_HWCN", 2, 16),
    ("nc1hwc0_int8", "NC1HWC0", "NCHW", (1, 40, 2, 2), np.int8, "convert_NC1HWC0_to_NCHW", 1, 32),
    ("fz_nchw", "FRACTAL_Z", "NCHW", (20, 19, 3, 3), np.float32, "convert_FRACTAL_Z_to_NCHW", None, 16),
    ("fz_hwcn", "FRACTAL_Z", "HWCN", (3, 3, 19, 20), np.float16, "convert_FRACTAL_Z_to_HWCN", None, 16),
    ("nz_3d", "FRACTAL_NZ", "ND", (3, 20, 35), np.float32, "convert_FRACTAL_NZ_to_ND", None, 16),
    ("nz_2d", "FRACTAL_NZ", "ND", (20, 35), np.float16, "convert_FRACTAL_NZ_to_ND", None, 16),
    ("nz_1d", "FRACTAL_NZ", "ND", (35,), np.float32, "convert_FRACTAL_NZ_to_ND", None, 16),
    ("ndc1hwc0", "NDC1HWC0", "NCDHW", (2, 19, 2, 3, 4), np.float32, "convert_NDC1HWC0_to_NCDHW", None, 16),
]
# msaccucmp's writers: logical -> FRACTAL_Z, compared with opdiff's test writer
WRITERS = [("w_nchw", "NCHW", (20, 19, 3, 3), "convert_NCHW_to_FRACTAL_Z"),
           ("w_hwcn", "HWCN", (3, 3, 19, 20), "convert_HWCN_to_FRACTAL_Z")]
ALG_FIELD = {"CosineSimilarity": M.COSINE, "MaxAbsoluteError": M.MAX_ABS_ERR, "AccumulatedRelativeError": M.ACC_REL_ERR,
             "RelativeEuclideanDistance": M.RED, "KullbackLeiblerDivergence": M.KL_DIV,
             "MeanAbsoluteError": M.MEAN_ABS_ERR, "RootMeanSquareError": M.RMSE, "MaxRelativeError": M.MAX_REL_ERROR,
             "MeanRelativeError": M.MEAN_REL_ERROR}


def _logical(shape, dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-100, 100, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _run_ref(job: dict, tmp: Path) -> Path:
    py = need_msprobe()
    (tmp / "job.json").write_text(json.dumps(job))
    out = tmp / "ref"
    p = subprocess.run([str(py), str(REF), str(tmp / "job.json"), str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Every conversion and metric job, run by msaccucmp in one process."""
    need_msprobe()
    tmp = tmp_path_factory.mktemp("msaccucmp")
    job: dict = {"conversions": [], "metrics": []}
    arrays: dict[str, tuple] = {}
    for name, fmt, ofmt, shape, dtype, module, _, c0 in CASES:
        x = _logical(shape, dtype)
        dev = from_logical(x, fmt, ofmt, c0=c0)
        np.save(tmp / f"{name}.npy", dev)
        to = {"FRACTAL_NZ": list(shape)}.get(fmt, list(shape))
        job["conversions"].append({"name": name, "module": module, "shape_from": list(dev.shape), "shape_to": to,
                                   "array": str(tmp / f"{name}.npy")})
        arrays[name] = (x, dev)
    for name, ofmt, shape, module in WRITERS:
        x = _logical(shape, np.float32)
        np.save(tmp / f"{name}.npy", x)
        job["conversions"].append({"name": name, "module": module, "shape_from": list(shape), "shape_to": [],
                                   "array": str(tmp / f"{name}.npy")})
        arrays[name] = (x, from_logical(x, "FRACTAL_Z", ofmt))
    pairs = _metric_pairs(tmp)
    for name, (g, t, _) in pairs.items():
        np.save(tmp / f"{name}.g.npy", g)
        np.save(tmp / f"{name}.t.npy", t)
        job["metrics"].append({"name": name, "golden": str(tmp / f"{name}.g.npy"), "target": str(tmp / f"{name}.t.npy")})
    return arrays, pairs, _run_ref(job, tmp)


def _metric_pairs(tmp: Path) -> dict[str, tuple[np.ndarray, np.ndarray, dict]]:
    """The compared pairs of two real GE comparisons (a fused CNN with a BN fault, a fused MLP with tanh GELU)."""
    out = {}
    for name, golden, target in (("cnn", gd.cnn_run(), gd.cnn_run(bn2_eps=0.5, fold_bn=True)),
                                 ("mlp", gd.mlp_run(), gd.mlp_run(tanh_gelu=True))):
        fusion = gd.CNN_FUSION if name == "cnn" else gd.MLP_FUSION
        g = opdiff.load(gd.write_tf_golden(tmp / f"{name}_g", golden))
        t = opdiff.load(gd.write_ge_dump(tmp / f"{name}_t", gd.fuse(target, fusion)))
        for k, r in enumerate(r for r in compare(g, t).results if r.result in ("PASS", "FAIL", "WARNING")):
            out[f"{name}{k}"] = (g.tensor(r.golden), t.tensor(r.target), dict(r.metrics))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conversion_equals_msaccucmp(reference, case):
    """opdiff's logical tensor of a device tensor is msaccucmp's conversion of it (msaccucmp keeps NC1HWC0's channel
    padding; opdiff cuts it to the original shape), and is the logical tensor the writer started from."""
    arrays, _, ref = reference
    name, fmt, ofmt, shape, _, _, pad_axis, _ = case
    x, dev = arrays[name]
    theirs = np.load(ref / f"{name}.npy")
    if pad_axis is not None:
        theirs = np.take(theirs, range(shape[pad_axis]), axis=pad_axis)
    if len(shape) == 1:  # msaccucmp returns a 1-D original as one row (1, n); same elements
        assert theirs.shape == (1, *shape)
        theirs = theirs.reshape(shape)
    ours = to_logical(dev.reshape(-1), fmt, dev.shape, shape, ofmt)
    assert theirs.shape == ours.shape == x.shape
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, x)


@pytest.mark.parametrize("name", [w[0] for w in WRITERS])
def test_test_writer_layout_equals_msaccucmp_writer(reference, name):
    """The test writer's FRACTAL_Z (zero-padded) is msaccucmp's own NCHW/HWCN -> FRACTAL_Z, element for element."""
    arrays, _, ref = reference
    np.testing.assert_array_equal(arrays[name][1], np.load(ref / f"{name}.npy"))


def test_metrics_equal_msaccucmp(reference):
    """On every pair compared in two real GE comparisons, opdiff's metrics are msaccucmp's algorithms' values
    (printed by msaccucmp to 6 decimals; StandardDeviation to 3)."""
    _, pairs, ref = reference
    theirs = json.loads((ref / "metrics.json").read_text())
    assert len(pairs) >= 8
    checked = 0
    for name, (_, _, ours) in pairs.items():
        row = theirs[name]
        for alg, field in ALG_FIELD.items():
            want = float(row[alg])
            assert ours[field] == pytest.approx(want, abs=1.5e-6, rel=1e-5), (name, alg, ours[field], want)
            checked += 1
        tm, ts, gm, gs = map(float, re.findall(r"-?\d+\.\d+", row["StandardDeviation"]))
        got = (ours[M.TARGET_MEAN], ours[M.TARGET_STD], ours[M.GOLDEN_MEAN], ours[M.GOLDEN_STD])
        assert got == pytest.approx((tm, ts, gm, gs), abs=1e-3), (name, got, row["StandardDeviation"])
    assert checked == 9 * len(pairs)
    assert any(float(theirs[n]["CosineSimilarity"]) < 0.999 for n in theirs)  # faulty pairs are among them
    # relu outputs: golden zeros where the target is not, where msprobe's and msaccucmp's relative errors part
    assert any(ours[M.MAX_REL_ERR] > 1e6 * ours[M.MAX_REL_ERROR] for _, _, ours in pairs.values())
