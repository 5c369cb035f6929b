"""bf16 targets at module level (issue 20): faults a few bf16 units large inside a module call, which the
calibrated 32-unit allowance passed, are found; the clean bf16 target of the same model still passes.
Real small transformers models, real dumps (the sweep's own cases: golden fp32, target bf16)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from opdiff.diagnose.noise import NARROW_SIGNIFICANT, Noise, Peers
from opdiff.testing.sweep import grade
from opdiff.testing.sweep.case import Case, run

FAULTS = [
    ("phi", "norm_eps", "model.layers.1.input_layernorm"),  # 15 units at the norm: the narrow-dtype allowance
    ("gpt_neox", "inplace", "gpt_neox.layers.1.input_layernorm"),  # x.mul_(0.99): the in-place change itself
    ("qwen3", "rope_base", "model.rotary_emb"),  # 22 units at cos/sin, read by every layer: peer amplification
]


@pytest.mark.parametrize("arch,klass,culprit", FAULTS, ids=[f"{a}-{k}" for a, k, _ in FAULTS])
def test_small_fault_in_a_bf16_module_dump_is_found(arch, klass, culprit, tmp_path):
    rec = run(Case(arch, klass, "module", "bf16"), tmp_path)
    assert rec["oracle"]["valid"], rec["oracle"]
    assert rec["oracle"]["effect_units"] < 32  # inside the 32-unit allowance these cases passed with
    assert (rec["verdict"], rec["culprit"], rec["grade"]) == ("fault", culprit, grade.EXACT), rec
    assert not rec["disagree"], rec  # compare's gate says the same


@pytest.mark.parametrize("arch", ["qwen3", "gpt_neox"])
def test_clean_bf16_module_dump_passes(arch, tmp_path):
    rec = run(Case(arch, "identical", "module", "bf16"), tmp_path)
    assert (rec["grade"], rec["verdict"]) == (grade.BENIGN_OK, "pass"), rec


def test_peer_amplification_tightens_only_with_enough_other_calls():
    bf16 = 2.0 ** -8
    layer_norms = Peers()
    for ratio, node in [(1.5, 1), (1.2, 2), (9.0, 3), (1.1, 1)]:
        layer_norms.add(ratio, node)
    noise = Noise(floor=1.0, peers={"LayerNorm": layer_norms})
    assert noise.allowance("LayerNorm", 3) == 3.0  # twice the others' 1.5; its own 9 does not count
    assert noise.allowance("LayerNorm", 1) == 8.0  # the faulty call among its others: no tighter than the default
    assert noise.allowance("Linear", 1) == 8.0  # no peers: the default
    rotary = Peers()
    rotary.add(0.5, 1)
    one = Noise(floor=1.0, peers={"Rotary": rotary})
    assert one.allowance("Rotary", 2) == 8.0  # one other call is not enough
    assert noise.threshold(bf16, 0.0) == NARROW_SIGNIFICANT * bf16
    assert noise.threshold(2.0 ** -24, 0.0) == 32 * 2.0 ** -24  # fp32 pairs keep SIGNIFICANT
