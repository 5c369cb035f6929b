"""bf16 targets whose fault used to read as `drift` or was blamed downstream (issue 20).

Two mechanisms: the fill values of an attention mask (fp32's finfo.min against bf16's differ by 1.3e36) counted
as the mask's absolute error, which excused every op reading the mask; and compare's fail rule blamed the op
where an amplified error crossed compare's line, not the op where it jumped. Real small models, real dumps.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from opdiff.metrics.masks import masked_errors

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
ml_dtypes = pytest.importorskip("ml_dtypes")

from opdiff import capture
from opdiff.diagnose import diagnose
from opdiff.testing import zoo
from opdiff.testing.sweep import grade
from opdiff.testing.sweep.case import Case, run


def _causal(n: int, fill: float) -> np.ndarray:
    return np.triu(np.full((n, n), fill), 1)


def test_a_mask_fill_is_no_absolute_error():
    golden = _causal(6, float(np.finfo(np.float32).min))
    target = _causal(6, float(ml_dtypes.finfo(ml_dtypes.bfloat16).min))
    assert masked_errors(golden, target, "float32", "bfloat16") == (0.0, 0.0)
    shifted = np.roll(target, 1, axis=-1)
    assert masked_errors(golden, shifted, "float32", "bfloat16") == (1.0, None)  # other keys let through


# (arch, class, level, culprit, what the summary says): before, the module-level ones were `drift`, the aten-level
# ones blamed the attention (aten.bmm of the scores) that reads the LayerNorm's output
ATTN = ("its own code between its children",)
NORM = ("it enters at", "the error is its own")  # walked back from compare's failure, or found by the bf16 allowance
CASES = [
    ("gemma2", "mask_ignored", "module", "model.layers.1.self_attn", ATTN),
    ("gemma2", "mask_shifted", "module", "model.layers.1.self_attn", ATTN),
    ("granite", "gqa_mapping", "module", "model.layers.1.self_attn", ATTN),
    ("cohere", "causal_flag", "module", "model.layers.1.self_attn", ATTN),
    ("phi", "norm_eps", "aten", "model.layers.1.input_layernorm", NORM),
    ("gpt_neox", "norm_eps", "aten", "gpt_neox.layers.1.input_layernorm", NORM),
]


@pytest.mark.parametrize("arch,klass,level,culprit,phrase", CASES, ids=[f"{a}-{k}-{lv}" for a, k, lv, *_ in CASES])
def test_bf16_fault_is_named_where_it_enters(arch, klass, level, culprit, phrase, tmp_path):
    rec = run(Case(arch, klass, level, "bf16"), tmp_path)
    assert rec["oracle"]["valid"], rec["oracle"]
    assert (rec["verdict"], rec["culprit"], rec["grade"]) == ("fault", culprit, grade.EXACT), rec
    assert any(p in rec["summary"] for p in phrase), rec["summary"]


def _eager_llama():
    model, inputs = zoo.build("llama", layers=3)
    for m in model.modules():
        if hasattr(m, "config"):
            m.config._attn_implementation = "eager"  # an additive float mask (finfo.min) reaches each attention
    return model, inputs


def _window(mod, args, kwargs):
    """A sliding window golden does not have: keys more than 3 positions back are masked."""
    mask = kwargs["attention_mask"]
    far = torch.arange(mask.shape[-2])[:, None] - torch.arange(mask.shape[-1])[None, :] > 3
    return args, {**kwargs, "attention_mask": mask.masked_fill(far, torch.finfo(mask.dtype).min)}


def _diagnose(tmp_path, golden, target, inputs, level):
    with torch.no_grad():
        for name, model in (("golden", golden), ("target", target)):
            with capture(model, tmp_path / name, level=level, mode="tensor"):
                model(**inputs)
    return diagnose(tmp_path / "golden", tmp_path / "target", replay=False)


def test_an_attention_reading_a_bf16_mask_is_judged_on_its_own_error(tmp_path):
    golden, inputs = _eager_llama()
    target = copy.deepcopy(golden).to(torch.bfloat16)
    target.model.layers[1].self_attn.register_forward_pre_hook(_window, with_kwargs=True)
    d = _diagnose(tmp_path, golden, target, inputs, "module")
    assert (d.verdict, d.culprit.module, d.culprit.how) == ("fault", "model.layers.1.self_attn", "parent"), d.summary
    # the calibrated rule names it (before, only compare's fallback did: the mask's fill excused it)
    assert "its own code between its children changed it" in d.culprit.reason, d.culprit.reason


def test_benign_bf16_attention_with_a_mask_passes(tmp_path):
    golden, inputs = _eager_llama()
    target = copy.deepcopy(golden).to(torch.bfloat16)
    d = _diagnose(tmp_path, golden, target, inputs, "module")
    assert d.verdict in ("pass", "drift"), d.summary
