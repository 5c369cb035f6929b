"""In-place ops at aten level: the output record holds the mutated values, and later ops still link to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import opdiff


class InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.add_(1)
        torch.relu_(y)
        return y.sum()


@pytest.mark.parametrize("mode", ["tensor", "stats", "hash"])
@pytest.mark.parametrize("grad", [False, True])
def test_inplace_outputs_are_the_mutated_values(tmp_path, mode, grad):
    x = torch.tensor([1.0, -3.0, 0.5], requires_grad=grad)
    model = InPlace()
    with torch.set_grad_enabled(grad), opdiff.capture(model, tmp_path / "d", level="aten", mode=mode):
        model(x)
    d = opdiff.load(tmp_path / "d")
    add_out = d["aten.add_.Tensor#0/forward/output/0"]
    relu_in = d["aten.relu_.default#0/forward/input/0"]
    relu_out = d["aten.relu_.default#0/forward/output/0"]
    want_add = x.detach().numpy() * 2 + 1
    assert add_out.stats.max == pytest.approx(float(want_add.max()))
    assert add_out.stats.min == pytest.approx(float(want_add.min()))
    assert relu_out.stats.min == 0.0
    assert relu_in.src == add_out.name
    assert d["aten.sum.default#0/forward/input/0"].src == relu_out.name
    if mode == "tensor":
        np.testing.assert_array_equal(d.tensor(add_out), want_add)
        np.testing.assert_array_equal(d.tensor(relu_out), np.maximum(want_add, 0))
    if mode == "hash":
        assert add_out.hash != d["aten.add_.Tensor#0/forward/input/0"].hash
