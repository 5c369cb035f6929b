"""Patch confirmation beyond modules (diagnose/patch.py, capture/torch/patch_ops.py): the search goes down to
the op of a module's own code, blames a parent's code between its children, names every culprit needed, and
`opdiff hunt` confirms by patching by default; a benign change is never "confirmed" as a fault."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import opdiff
from opdiff.testing import zoo

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _eager_gpt2():
    golden, inputs = zoo.build("gpt2")
    golden.set_attn_implementation("eager")  # attention written inline in the module's own code
    return golden, copy.deepcopy(golden), inputs


def _proof(d) -> dict:
    doc = d.to_json()["confirmation"]
    assert doc["method"] == "patch", doc
    return doc


def test_op_inside_a_leaf_norm_is_found_by_op_bisection(tmp_path):
    golden, inputs = zoo.build("llama")
    target = copy.deepcopy(golden)
    norm = target.model.layers[1].post_attention_layernorm
    norm.variance_epsilon = 1e-2  # RMSNorm's own code: pow, mean, add(eps), rsqrt, mul, mul
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r", replay=False)
    proof = _proof(d)
    assert d.verdict == "fault" and proof["status"] == "confirmed"
    [c] = proof["culprits"]
    assert c["module"] == "model.layers.1.post_attention_layernorm"
    assert c["ops"] == ["aten.add.Tensor#0"], "the variance + eps add, of the norm's several ops"
    assert c["error_after_ops"] <= proof["tolerance"] < proof["error_before"]


def test_parent_code_between_children_is_blamed_not_the_child_reading_it(tmp_path):
    golden, target, inputs = _eager_gpt2()
    mlp = target.transformer.h[2].mlp
    mlp.forward = lambda x: mlp.dropout(mlp.c_proj(mlp.act(mlp.c_fc(x)) * 1.01))  # a bug in the parent's own code
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r")
    [c] = _proof(d)["culprits"]
    assert c["module"] == "transformer.h.2.mlp", "c_proj only reads the wrong value"
    assert c["inserted_ops"] == ["aten.mul.Tensor#0"], "golden's MLP runs no op of its own: the mul is inserted"
    assert d.culprit.module == "transformer.h.2.mlp"


def test_swapped_pair_at_module_level_needs_both(tmp_path):
    golden, inputs = zoo.build("bert")
    target = copy.deepcopy(golden)
    a = target.encoder.layer[0].attention.self
    with torch.no_grad():
        q = a.query.weight.clone()
        a.query.weight.copy_(a.key.weight)
        a.key.weight.copy_(q)
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r", replay=False)
    proof = _proof(d)
    names = [c["module"] for c in proof["culprits"]]
    assert names == ["encoder.layer.0.attention.self.query", "encoder.layer.0.attention.self.key"]
    assert all(c["error_without"] > proof["tolerance"] >= proof["error_after"] for c in proof["culprits"])
    assert all(c["op"] == "aten.addmm.default#0" for c in proof["culprits"])


def test_shared_embedding_producer_is_confirmed(tmp_path):
    golden, inputs = zoo.build("gpt2")
    target = copy.deepcopy(golden)
    with torch.no_grad():
        target.transformer.wpe.weight.mul_(1.02)  # position embedding: every layer reads what it feeds
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r", replay=False)
    proof = _proof(d)
    assert [c["module"] for c in proof["culprits"]] == ["transformer.wpe"]
    assert proof["error_after"] == 0.0 < proof["error_before"]


def test_benign_sdpa_target_is_not_confirmed_as_a_fault(tmp_path):
    golden, target, inputs = _eager_gpt2()
    target.set_attn_implementation("sdpa")  # the same attention through another kernel: rounding only
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r", replay=False)
    proof = _proof(d)
    assert d.verdict in ("pass", "drift"), d.summary
    assert proof["status"] == "agrees" and proof["culprits"] == []


def _readme_pair() -> str:
    """README's pair.py (the `<!-- file: pair.py -->` block): a GPT-2 whose inline attention scale is 5 % off."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    return text.split("<!-- file: pair.py -->\n```python\n", 1)[1].split("```", 1)[0]


def test_hunt_cli_confirms_by_patching_down_to_the_op_in_its_json(tmp_path):
    script = tmp_path / "pair.py"
    script.write_text(_readme_pair())
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.run([sys.executable, "-m", "opdiff", "hunt", f"{script}:golden", f"{script}:target", "-o",
                        str(tmp_path / "o"), "--no-replay", "--json"], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    proof = doc["confirmation"]
    assert proof["method"] == "patch" and proof["status"] == "confirmed"
    assert [(c["module"], c["op"]) for c in proof["culprits"]] == [("transformer.h.1.attn", "aten.mul.Tensor#0")]
    assert doc["culprit"]["module"] == "transformer.h.1.attn"
    assert proof["error_after"] <= proof["tolerance"] < proof["error_before"]
    assert json.loads((tmp_path / "o" / "diagnosis.json").read_text())["confirmation"] == proof
    assert json.loads((tmp_path / "o" / "hunt.json").read_text())["confirmation"] == proof


def test_a_module_writing_into_its_input_is_the_culprit_not_its_parent(tmp_path):
    golden, inputs = zoo.build("gpt2")
    target = copy.deepcopy(golden)
    ln = target.transformer.h[1].ln_1
    forward = ln.forward

    def bad(x):
        y = forward(x)
        x.mul_(0.99)  # the in-place bug: scales the residual stream it was handed; its own output is right
        return y
    ln.forward = bad
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r", replay=False)
    proof = _proof(d)
    [c] = proof["culprits"]
    assert c["module"] == "transformer.h.1.ln_1" == d.culprit.module
    assert c["inserted_ops"] == ["aten.mul_.Tensor#0"]
    assert proof["error_after"] <= proof["tolerance"] < proof["error_before"]


def _tiny(capture, autocast: bool) -> None:
    model, inputs = zoo.build("gpt2", seed=0, layers=2, width=32, heads=2, seq=8, batch=2, vocab=64)
    with capture(model), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(**inputs)


def test_benign_bf16_autocast_in_hunt_is_not_turned_into_a_fault_by_patching(tmp_path):
    res = opdiff.hunt(lambda c: _tiny(c, False), lambda c: _tiny(c, True), tmp_path / "h", replay=False)
    proof = res.to_json()["confirmation"]
    assert proof["method"] == "patch" and proof["status"] == "agrees", proof
    assert res.verdict in ("pass", "drift")


def test_a_pre_hook_of_the_module_is_its_own_call_not_its_parents_code(tmp_path):
    from opdiff.testing.sweep import archs, catalog

    golden, inputs = archs.build("bert")  # padded inputs: a shifted mask changes something
    target, _ = archs.build("bert")
    planted = catalog.plant("mask_shifted", target, inputs)  # a forward pre-hook rolls the mask of one attention
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "r", replay=False)
    proof = _proof(d)
    assert [c["module"] for c in proof["culprits"]] == list(planted.culprits) == [d.culprit.module]


def test_output_error_never_lets_a_nan_hide_a_difference():
    """The model-output error patching measures: nan, +inf, -inf at the same places of both outputs are the
    same; anywhere else, or of another kind, the error is infinite; the finite elements are still measured
    where both hold a nan elsewhere (a nan used to make the error 0 and a repair look complete)."""
    from opdiff.capture.torch.patching import output_error

    nan, inf = float("nan"), float("inf")
    g = torch.tensor([1.0, 2.0, nan, -inf])
    assert output_error(g, g.clone()) == 0.0
    assert output_error(g, torch.tensor([1.0, 4.0, nan, -inf])) == pytest.approx(1.0)  # |2 - 4| / max|g| = 1
    for t in ([1.0, 2.0, 3.0, -inf], [1.0, 2.0, nan, inf], [1.0, 2.0, inf, -inf], [nan, 2.0, nan, -inf]):
        assert output_error(g, torch.tensor(t)) == inf, t
    assert output_error(torch.tensor([1.0, nan]), torch.tensor([1.0, 5.0])) == inf  # golden's nan, target finite
    assert output_error(torch.zeros(0), torch.zeros(0)) == 0.0


class _ConvNet(torch.nn.Module):
    """A conv whose output the parent flattens with `.view` (contiguous only) or `.reshape`."""

    def __init__(self, reshape: bool = False):
        super().__init__()
        self.conv, self.act, self.head = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Linear(256, 2)
        self.reshape = reshape

    def forward(self, x):
        y = self.act(self.conv(x))
        return self.head(y.reshape(y.shape[0], -1) if self.reshape else y.view(y.shape[0], -1))


def test_golden_output_in_another_memory_format_is_patched_in_the_targets_layout(tmp_path):
    """Golden runs channels-last (flattening with reshape), the target contiguous (with view): golden's output
    handed to the target's code takes the target's strides (it used to raise from the target's view)."""
    torch.manual_seed(0)
    target = _ConvNet().eval()
    golden = _ConvNet(reshape=True).eval()
    golden.load_state_dict(target.state_dict())
    golden = golden.to(memory_format=torch.channels_last)
    with torch.no_grad():
        target.conv.weight[0].mul_(1.1)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    d = opdiff.diagnose_models(golden, target, x.contiguous(memory_format=torch.channels_last), tmp_path / "dm",
                               target_inputs=x, replay=False)
    proof = _proof(d)
    assert proof["status"] == "confirmed" and [c["module"] for c in proof["culprits"]] == ["conv"], proof


def test_a_model_failing_when_re_run_leaves_the_statistics_verdict_with_the_reason(tmp_path):
    """diagnose_models re-runs the models to patch them; a model whose code fails then is no traceback: the
    dumps' verdict stands and the confirmation says what failed (hunt did so already)."""
    torch.manual_seed(0)
    golden, target = _ConvNet(reshape=True).eval(), _ConvNet(reshape=True).eval()
    target.load_state_dict(golden.state_dict())
    with torch.no_grad():
        target.conv.weight[0].mul_(1.1)
    calls = []

    def only_twice(_m, _a):
        calls.append(1)
        if len(calls) > 2:  # the capture and the patcher's recording run; the patched runs fail
            raise RuntimeError("this model runs twice only")
    target.register_forward_pre_hook(only_twice)
    d = opdiff.diagnose_models(golden, target, torch.randn(2, 3, 8, 8), tmp_path / "dm", replay=False)
    assert d.verdict == "fault" and d.culprit is not None and d.culprit.module == "conv"
    proof = d.to_json()["confirmation"]["patch"]
    assert proof["status"] == "error" and "this model runs twice only" in proof["reason"], proof
