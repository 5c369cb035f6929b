"""Low-precision targets (issue 20): a 1 % fault in a bf16 model is found by the tight bounds of
diagnose/bounds.py, and benign bf16/fp16 targets still pass. Real small transformers models, real dumps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from opdiff.diagnose.bounds import op_kind
from opdiff.testing.sweep import grade
from opdiff.testing.sweep.case import Case, run

# each a fault of about 2.5-13 bf16 rounding units, far inside the calibrated 32-unit threshold
FAULTS = [
    ("gpt2", "embedding", "aten", "transformer.wte", "parameter"),  # the table x1.01: a parameter cast once
    ("mistral", "inplace", "aten", "model.layers.1.input_layernorm", "inserted"),  # x.mul_(0.99) on the residual
    ("qwen3", "attention_scale", "aten", "model.layers.1.self_attn", "output"),  # scores x1.05: a scalar product
]
PHRASE = {"parameter": "its parameter", "inserted": "an op golden does not have", "output": "the error is its own"}
BENIGN = [("gpt2", "identical", "aten", "bf16"), ("llama", "fp16_model", "aten", "fp32"),
          ("deberta_v2", "autocast", "aten", "fp32"),  # a norm reads a bf16 branch added into the fp32 stream
          ("bart", "fp16_model", "aten", "fp32")]  # `if not isfinite(x).all()`: a predicate only Python reads


@pytest.mark.parametrize("arch,klass,level,culprit,how", FAULTS, ids=[f"{a}-{k}" for a, k, *_ in FAULTS])
def test_small_fault_in_a_bf16_target_is_found(arch, klass, level, culprit, how, tmp_path):
    rec = run(Case(arch, klass, level, "bf16"), tmp_path)
    assert rec["oracle"]["valid"], rec["oracle"]
    assert rec["oracle"]["effect_units"] < 32  # within the calibrated threshold: only the tight bound sees it
    assert (rec["verdict"], rec["culprit"], rec["grade"]) == ("fault", culprit, grade.EXACT), rec
    assert PHRASE[how] in rec["summary"], rec


@pytest.mark.parametrize("arch,klass,level,precision", BENIGN)
def test_benign_low_precision_target_passes(arch, klass, level, precision, tmp_path):
    rec = run(Case(arch, klass, level, precision), tmp_path)
    assert rec["grade"] == grade.BENIGN_OK, rec
    assert rec["verdict"] in ("pass", "drift")


@pytest.mark.parametrize("op,kind", [
    ("aten.view.default", "move"), ("aten._to_copy.default", "move"), ("aten.embedding.default", "move"),
    ("torch.Tensor.__add__", "sum"), ("aten.add_.Tensor", "sum"), ("aten.mul.Tensor", "mul"),
    ("torch.Tensor.__truediv__", "div"), ("aten.softmax.int", None), ("aten.mm.default", None),
    ("LayerNorm", None), ("torch.nn.functional.linear", None)])
def test_op_kinds(op, kind):
    assert op_kind(op) == kind
