"""A module that changes its input in place: the blame lands on it, not on the parent whose later code reads
the altered tensor (issue 20, the sweep's `inplace` class was `near` at module level). Module-level capture
records an input the call changed again, as `inplace.<pos>` (docs/capture.md); golden's untouched input is its
counterpart."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import opdiff
from opdiff.capture import capture
from opdiff.diagnose import diagnose


class Block(torch.nn.Module):
    """Pre-norm residual block; its ReLU works in place on the block's own intermediate (benign in both runs)."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.norm, self.fc, self.act = torch.nn.LayerNorm(d), torch.nn.Linear(d, d), torch.nn.ReLU(inplace=True)

    def forward(self, x):
        return x + self.act(self.fc(self.norm(x)))


class Net(torch.nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(3))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _mutating(module, change) -> None:
    """`module` returns what it did, then alters the tensor it was handed (plain torch, knows nothing of opdiff)."""
    forward = module.forward

    def bad(x):
        y = forward(x)
        change(x)
        return y

    module.forward = bad


def _doubled_residual(block) -> None:
    block.forward = lambda x: x + 2 * block.act(block.fc(block.norm(x)))


FAULTS = {
    "norm_scales_input": ("blocks.1.norm", lambda m: _mutating(m.blocks[1].norm, lambda x: x.mul_(0.99))),
    "norm_shifts_input": ("blocks.2.norm", lambda m: _mutating(m.blocks[2].norm, lambda x: x.add_(0.01))),
    "residual_doubled": ("blocks.1", lambda m: _doubled_residual(m.blocks[1])),  # the parent's own code: still it
}


def _run(model, path, level: str) -> None:
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), capture(model, path, level=level, mode="tensor"):
        model(x)


@pytest.mark.parametrize("level", ["module", "aten"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_module_that_changes_its_input_is_blamed(tmp_path, fault, level):
    culprit, plant = FAULTS[fault]
    target = Net()
    plant(target)
    _run(Net(), tmp_path / "g", level)
    _run(target, tmp_path / "t", level)
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    assert d.verdict == "fault", d.summary
    assert d.culprit is not None and d.culprit.module == culprit, d.summary
    if fault != "residual_doubled" and level == "module":
        assert "in place" in d.culprit.reason, d.culprit.reason


def test_an_in_place_child_in_both_runs_is_recorded_and_passes(tmp_path):
    """ReLU(inplace=True) changes its input in both runs: recorded as `inplace.0` on both sides, paired, a pass."""
    _run(Net(), tmp_path / "g", "module")
    _run(Net(), tmp_path / "t", "module")
    names = {r.name for r in opdiff.load(tmp_path / "t").records}
    assert "blocks.0.act/ReLU#0/forward/output/inplace.0" in names
    rec = opdiff.load(tmp_path / "t").get("blocks.0.act/ReLU#0/forward/output/inplace.0")
    assert rec is not None and rec.extra["inplace_of"] == "blocks.0.act/ReLU#0/forward/input/0"
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    assert d.verdict == "pass", d.summary


def test_capture_of_a_mutating_module_leaves_results_bitwise_equal(tmp_path):
    """Recording the changed input reads it only: the model's output is bitwise what it is without capture."""
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    model = Net()
    FAULTS["norm_scales_input"][1](model)
    with torch.no_grad():
        plain = model(x.clone())
        with capture(model, tmp_path / "c", level="module", mode="tensor"):
            captured = model(x.clone())
    assert torch.equal(plain, captured)
