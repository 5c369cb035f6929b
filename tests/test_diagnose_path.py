"""The path of divergence in one unit and under each op's own module: a bf16 target whose RMSNorms
compute in fp32 (the issue's 34.9 -> 434,000 "units" where the fp32 steps began), built as real dumps."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from opdiff.diagnose import diagnose
from opdiff.store import load
from opdiff.testing.synthetic import OpRun

BF16 = ml_dtypes.bfloat16


def _norm_steps(run: OpRun, module: str, x: np.ndarray, target: bool, src: str | None) -> tuple[np.ndarray, str | None]:
    """An RMSNorm as its aten steps: up-cast, pow, mean, rsqrt, mul in fp32, down-cast (target only)."""
    x32 = x.astype(np.float32)
    (src,) = run.op(module, "aten._to_copy.default", [(x, src)], [x32])
    sq = x32 * x32
    (s2,) = run.op(module, "aten.pow.Tensor_Scalar", [(x32, src)], [sq])
    ms = np.array([sq.mean()], dtype=np.float32)
    (s3,) = run.op(module, "aten.mean.dim", [(sq, s2)], [ms])
    r = (1.0 / np.sqrt(ms + 1e-6)).astype(np.float32)
    (s4,) = run.op(module, "aten.rsqrt.default", [(ms, s3)], [r])
    y = (x32 * r).astype(np.float32)
    (src,) = run.op(module, "aten.mul.Tensor", [(x32, src), (r, s4)], [y])
    out = y.astype(BF16) if target else y
    (src,) = run.op(module, "aten._to_copy.default", [(y, src)], [out])
    return out, src


def _run(path, target: bool, blocks: int, fault_block: int, fault: float) -> None:
    rng = np.random.default_rng(0)
    noise = np.random.default_rng(7)
    dt = BF16 if target else np.float32
    x = rng.standard_normal(512).astype(np.float32).astype(dt)
    run = OpRun(path)
    src = None
    for k in range(blocks):
        w = rng.standard_normal(512).astype(np.float32)
        y = np.tanh(x.astype(np.float64) * w) + 0.5 * x.astype(np.float64)
        if target and k == fault_block:
            y = y * (1 + fault * noise.standard_normal(512))
        y = y.astype(np.float32).astype(dt)
        (src,) = run.op(f"layers.{k}.mlp", "aten.mul.Tensor", [(x, src)], [y])
        last = k == blocks - 1  # the final norm hands its fp32 result on (as a model's logits head would)
        x, src = _norm_steps(run, f"layers.{k}.norm", y, target and not last, src)
    run.close()


@pytest.mark.parametrize("fault_block", [1, 2])
def test_path_in_one_unit_named_by_each_ops_module(tmp_path, fault_block):
    for side in ("golden", "target"):
        _run(tmp_path / side, side == "target", blocks=5, fault_block=fault_block, fault=0.3)
    d = diagnose(load(tmp_path / "golden"), load(tmp_path / "target"), replay=False)
    assert d.verdict == "fault", d.summary
    assert d.culprit.module == f"layers.{fault_block}.mlp"
    path = d.path_of_divergence
    assert len(path) >= 3
    errs = [p["error_units"] for p in path]
    assert all(e is not None and math.isfinite(e) and e > 0 for e in errs), errs
    # one unit (bfloat16's, the run's coarsest): the fp32 steps of the norms stay on the same scale
    # (counted in float32 units they would be 65,536 times larger)
    assert max(errs) / min(errs) < 100, errs
    assert d.noise["run_dtype"] == "bfloat16"
    # every entry names the module its op ran in, not the block that holds it
    for p in path:
        assert p["node"].startswith(p["module"] + "/"), p
    assert any(p["module"].endswith(".norm") for p in path)
