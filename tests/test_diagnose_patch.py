"""Causal proof by patching (opdiff.diagnose_models, diagnose/patch.py): with both models at hand, the verdict
is confirmed by re-running the target with the culprits' outputs replaced by golden's — and corrected where
the dumps' statistics alone miss it: two faults, a swapped pair, a shared producer, a low-precision target."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import opdiff
from opdiff.diagnose import diagnose
from opdiff.testing import zoo


def _pair(arch: str, fault, dtype=None):
    golden, inputs = zoo.build(arch)
    target = copy.deepcopy(golden)
    if dtype is not None:
        target = target.to(dtype)
    fault(target)
    return golden, target, inputs


def _two_faults(t):
    t.transformer.h[0].ln_1.eps = 1e-2
    t.transformer.h[2].mlp.act = torch.nn.ReLU()


def _rope(t):
    t.model.rotary_emb.inv_freq.mul_(1.1)  # the one producer every layer's attention reads


def _swap_qk(t):
    a = t.encoder.layer[1].attention.self
    with torch.no_grad():
        q = a.query.weight.clone()
        a.query.weight.copy_(a.key.weight)
        a.key.weight.copy_(q)


def _silu_gelu(t):
    t.model.layers[1].mlp.act_fn = torch.nn.GELU()


def _clean(t):
    pass


CASES = [
    ("two-faults", "gpt2", _two_faults, None, "module", ["transformer.h.0.ln_1", "transformer.h.2.mlp.act"]),
    ("shared-producer", "llama", _rope, None, "module", ["model.rotary_emb"]),
    ("swapped-qk", "bert", _swap_qk, None, "aten", ["encoder.layer.1.attention.self.query",
                                                    "encoder.layer.1.attention.self.key"]),
    ("bf16-silu-gelu", "llama", _silu_gelu, torch.bfloat16, "module", ["model.layers.1.mlp.act_fn"]),
]


@pytest.mark.parametrize("name,arch,fault,dtype,level,culprits", CASES, ids=[c[0] for c in CASES])
def test_patching_names_every_culprit_needed(tmp_path, name, arch, fault, dtype, level, culprits):
    golden, target, inputs = _pair(arch, fault, dtype)
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "run", level=level)
    assert d.verdict == "fault", d.summary
    assert d.culprit.module == culprits[0], d.summary
    proof = d.to_json()["confirmation"]
    assert proof["method"] == "patch"
    assert proof["status"] in ("confirmed", "found")
    assert [c["module"] for c in proof["culprits"]] == culprits
    assert proof["error_after"] < proof["error_before"]
    for c in proof["culprits"]:
        assert c["error_golden_broken"] > 0, "golden given the culprit's target output diverges"
        if len(culprits) > 1:
            assert c["error_without"] > proof["error_after"], f"{c['module']} is needed for the repair"
    if dtype is None:
        assert proof["error_after"] <= proof["tolerance"] < proof["error_before"]


def test_benign_bf16_target_passes_and_patching_agrees(tmp_path):
    golden, target, inputs = _pair("llama", _clean, torch.bfloat16)
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "run")
    assert d.verdict == "pass", d.summary
    assert d.to_json()["confirmation"]["status"] == "agrees"


def test_offline_dumps_say_statistics_only_and_models_are_left_as_found(tmp_path):
    golden, target, inputs = _pair("gpt2", _two_faults)
    target.train()
    target.transformer.eval()
    modes = {n: m.training for n, m in target.named_modules()}
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "run", patch=False)
    assert {n: m.training for n, m in target.named_modules()} == modes
    assert d.to_json()["confirmation"]["method"] in ("statistics", "replay")
    offline = diagnose(tmp_path / "run" / "golden", tmp_path / "run" / "target", replay=False)
    assert offline.to_json()["confirmation"] == {"method": "statistics", "status": "statistics-only"}
