"""The diagnosis algorithm on small synthetic dumps written with DumpWriter (no framework needed).

Each test writes a golden and a target run of a few ops whose errors are set by hand, so that
the expected culprit (or its absence) follows from the algorithm's definition alone.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from opdiff import load
from opdiff.diagnose import VERDICTS, diagnose
from opdiff.diagnose.noise import UNIT
from opdiff.testing.synthetic import OpRun

U32 = UNIT["float32"]


def chain(path, errors: dict[int, float], n: int = 6, mode: str = "tensor", seed: int = 0, amplify: dict[int, float] | None = None,
          root_input_error: float = 0.0, specials: dict[int, float] | None = None):
    """A root call around n chained ops y_k = f_k(y_{k-1}); the target adds a relative error errors[k] at op k.

    Errors are multiplicative noise of that size, so they pass on to later ops (times amplify[k]).
    """
    rng = np.random.default_rng(seed)
    noise = np.random.default_rng(1234)
    x = rng.standard_normal(256).astype(np.float32)
    run = OpRun(path, mode=mode)
    x_t = x * (1 + root_input_error * noise.standard_normal(256)).astype(np.float32) if root_input_error else x
    root = run.begin("", "Model", [x_t if "target" in str(path) else x])
    cur_g, cur_t, src = x.astype(np.float64), (x_t if "target" in str(path) else x).astype(np.float64), None
    is_target = "target" in str(path)
    for k in range(n):
        w = rng.standard_normal(256)
        y_g = np.tanh(cur_g * w) + 0.5 * cur_g
        drift = (cur_t - cur_g) * (amplify or {}).get(k, 1.0)
        y_t = np.tanh(cur_g * w) + 0.5 * cur_g + drift
        if is_target and k in errors:
            y_t = y_t * (1 + errors[k] * noise.standard_normal(256))
        out = (y_t if is_target else y_g).astype(np.float32)
        if specials and k in specials and is_target:
            out[:3] = specials[k]
        inp = (cur_t if is_target else cur_g).astype(np.float32)
        (src,) = run.op(f"layers.{k}", "aten.f.default", [(inp, src)], [out])
        cur_g, cur_t = y_g, out.astype(np.float64)
    run.end(root, [(cur_t if is_target else cur_g).astype(np.float32)])
    run.close()


def pair(tmp_path, **kw):
    chain(tmp_path / "golden", **kw)
    chain(tmp_path / "target", **kw)
    return load(tmp_path / "golden"), load(tmp_path / "target")


def test_fault_is_the_first_op_adding_its_own_error(tmp_path):
    g, t = pair(tmp_path, errors={3: 1e-4})
    d = diagnose(g, t, replay=False)
    assert d.verdict == "fault"
    assert d.culprit.module == "layers.3"
    assert d.culprit.target == "layers.3/aten.f.default#0/forward/output/0"
    assert d.candidates[0].module == "layers.3"
    assert [p["module"] for p in d.path_of_divergence][:2] == ["layers.3", "layers.4"]


def test_downstream_amplification_is_not_blamed(tmp_path):
    g, t = pair(tmp_path, errors={2: 1e-4}, amplify={3: 4.0, 4: 3.0})
    d = diagnose(g, t, replay=False)
    assert d.verdict == "fault" and d.culprit.module == "layers.2"
    assert {c.module for c in d.candidates} == {"layers.2"}


def test_rounding_noise_everywhere_passes(tmp_path):
    # every op adds a few units of fp32 rounding: what another kernel or thread count does
    g, t = pair(tmp_path, errors={k: 3 * U32 for k in range(8)}, n=8)
    d = diagnose(g, t, replay=False)
    assert d.verdict == "pass", d.summary
    assert d.culprit is None
    assert d.noise["floor_units"] >= 1


def test_subtle_fault_far_above_rounding_but_high_cosine_is_found(tmp_path):
    g, t = pair(tmp_path, errors={k: 2 * U32 for k in range(8)} | {5: 400 * U32}, n=8)
    d = diagnose(g, t, replay=False)
    out = d.evidence.outputs[0]
    assert out["cosine"] > 0.9999999  # a fixed cosine threshold would call this a pass
    assert d.verdict == "fault" and d.culprit.module == "layers.5"


def test_inputs_differ_blames_no_op(tmp_path):
    g, t = pair(tmp_path, errors={}, root_input_error=1e-3)
    d = diagnose(g, t, replay=False)
    assert d.verdict == "inputs-differ"
    assert d.culprit is None
    assert [e["target"] for e in d.evidence.inputs] == ["Model#0/forward/input/0"]


def test_overflow_names_the_op_where_inf_first_appears(tmp_path):
    g, t = pair(tmp_path, errors={}, specials={2: np.inf})
    d = diagnose(g, t, replay=False)
    assert d.verdict == "overflow"
    assert d.culprit.module == "layers.2"
    assert d.culprit.golden_overflows is False


def test_drift_without_a_single_culprit(tmp_path):
    # each op adds a little, none much more than the others, and the output ends far from golden
    g, t = pair(tmp_path, errors={k: 2e-6 for k in range(30)}, n=30)
    d = diagnose(g, t, replay=False)
    assert d.verdict == "drift", d.summary
    assert d.culprit is None
    assert d.evidence.top_contributors


@pytest.mark.parametrize("mode", ["stats", "hash"])
def test_fault_found_without_tensor_data(tmp_path, mode):
    g, t = pair(tmp_path, errors={4: 1e-3}, mode=mode)
    d = diagnose(g, t, replay=True)
    assert d.verdict == "fault" and d.culprit.module == "layers.4"
    assert any("mode only" in w for w in d.warnings)
    assert d.replay.status == "skipped"


def _module_run(path, fault: str | None):
    """Module level: Block(Linear-like child a, child b); the target's fault is where `fault` says."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(np.float32)
    tgt = "target" in str(path)
    run = OpRun(path, level="module")
    root = run.begin("", "Model", [x])
    blk = run.begin("block", "Block", [x])
    a_in = x
    a = run.begin("block.a", "A", [a_in])
    ya = np.tanh(x)
    run.end(a, [ya])
    b_in = ya * 2.0 + x  # the block's own code between its children
    if tgt and fault == "between":
        b_in = b_in * np.float32(1 + 1e-3)
    b = run.begin("block.b", "B", [b_in])
    yb = (b_in * 0.5).astype(np.float32)
    run.end(b, [yb])
    out = yb + x
    if tgt and fault == "parent":
        out = out * np.float32(1 + 1e-3)
    run.end(blk, [out.astype(np.float32)])
    run.end(root, [out.astype(np.float32)])
    run.close()


@pytest.mark.parametrize("fault", ["between", "parent"])
def test_module_level_parent_code_is_blamed(tmp_path, fault):
    _module_run(tmp_path / "golden", fault)
    _module_run(tmp_path / "target", fault)
    d = diagnose(load(tmp_path / "golden"), load(tmp_path / "target"), replay=False)
    assert d.verdict == "fault"
    assert d.culprit.module == "block", d.summary
    assert d.culprit.op == "Block"
    assert d.culprit.how == ("parent" if fault == "between" else "output")


def test_unused_extra_output_is_not_a_culprit(tmp_path):
    """An op's second output that nothing reads (like a norm's saved mean) may differ: no fault."""
    for side in ("golden", "target"):
        run = OpRun(tmp_path / side)
        x = np.linspace(-1, 1, 128, dtype=np.float32)
        root = run.begin("", "Model", [x])
        aux = np.full(4, 1e-3, dtype=np.float32) * (1.5 if side == "target" else 1.0)
        y, _ = run.op("norm", "aten.norm_like.default", [(x, None)], [np.tanh(x), aux])
        (z,) = run.op("head", "aten.g.default", [(np.tanh(x), y)], [np.tanh(x) * 2])
        run.end(root, [np.tanh(x) * 2])
        run.close()
    d = diagnose(load(tmp_path / "golden"), load(tmp_path / "target"), replay=False)
    assert d.verdict == "pass", d.summary


def test_golden_values_beyond_fp16_range_warn(tmp_path):
    for side in ("golden", "target"):
        run = OpRun(tmp_path / side)
        x = np.linspace(1, 2, 16, dtype=np.float32)
        root = run.begin("", "Model", [x])
        with np.errstate(over="ignore"):
            big = (x * 1e5).astype(np.float32 if side == "golden" else np.float16)
        run.op("scale", "aten.mul.Tensor", [(x, None)], [big])
        run.end(root, [x])
        run.close()
    d = diagnose(load(tmp_path / "golden"), load(tmp_path / "target"), replay=False)
    assert d.verdict == "overflow"
    assert d.culprit.module == "scale"
    assert any("beyond float16's range" in w for w in d.warnings)


def test_json_schema(tmp_path):
    g, t = pair(tmp_path, errors={3: 1e-4})
    d = diagnose(g, t, replay=False)
    doc = json.loads(json.dumps(d.to_json()))
    assert doc["schema_version"] == 1
    assert doc["verdict"] in VERDICTS
    assert set(doc["culprit"]) >= {"golden", "target", "module", "op", "reason", "node"}
    assert isinstance(doc["first_divergence"], dict) and doc["first_divergence"]["target"]
    assert [c["rank"] for c in doc["candidates"]] == list(range(1, len(doc["candidates"]) + 1))
    for c in doc["candidates"]:
        assert set(c) >= {"rank", "module", "op", "golden", "target", "score", "reason"}
    for key in ("path_of_divergence", "evidence", "advice", "warnings", "noise", "counts", "summary"):
        assert key in doc
    assert all(math.isfinite(p["error_units"]) for p in doc["path_of_divergence"])


@pytest.mark.parametrize("target_fill", ["finfo.min", "-inf"])
def test_fp16_mask_fill_is_no_overflow_waiting(tmp_path, target_fill):
    """An attention mask filled with fp32's finfo.min in golden and fp16's own fill (or -inf) in the target is
    no "overflow waiting to happen"; a data value beyond fp16's range in the same run still is."""
    for side in ("golden", "target"):
        run = OpRun(tmp_path / side)
        x = np.linspace(1, 2, 16, dtype=np.float32)
        dt = np.float32 if side == "golden" else np.float16
        root = run.begin("", "Model", [x])
        fill = np.finfo(dt).min if side == "golden" or target_fill == "finfo.min" else -np.inf
        mask = np.where(np.arange(16) > 7, fill, 0).astype(dt)
        run.op("mask", "aten.masked_fill.Scalar", [(x, None)], [mask])
        run.end(root, [x])
        run.close()
    d = diagnose(load(tmp_path / "golden"), load(tmp_path / "target"), replay=False)
    assert not any("waiting to happen" in w for w in d.warnings), d.warnings
