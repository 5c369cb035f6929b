"""Parameter statistics across captures and steps of one process: always the numbers a fresh measurement gives,
whenever and however the bytes changed (with or without a version bump, or a new tensor in the Parameter)."""

from __future__ import annotations

import pytest
import torch

import opdiff
from capture_helpers import build
from opdiff.capture.torch.tensors import dtype_name, stats_of


def _param_stats(path, step: int = 0) -> dict[str, dict]:
    d = opdiff.load(path, step=step)
    return {r.name: r.stats.to_json() for r in d if r.role == "parameter" and r.direction == "forward"}


def _expected(model: torch.nn.Module) -> dict[str, dict]:
    """Statistics of every parameter measured afresh now, under the names capture gives them."""
    out, seen = {}, set()
    for m, mod in model.named_modules():
        for n, p in mod.named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                out[f"{m}/parameter#0/forward/parameter/{n}"] = stats_of(p, dtype_name(p)).to_json()
    return out


def _capture(model, inputs, path, mode: str = "stats", level: str = "module") -> None:
    with torch.no_grad(), opdiff.capture(model, path, level=level, mode=mode):
        model(**inputs)


@pytest.mark.parametrize("mode", ["stats", "hash", "tensor"])
def test_reused_statistics_follow_every_change_of_the_bytes(tmp_path, mode):
    model, inputs = build("gpt2", vocab=512, width=64)
    model.eval()
    for k in range(3):  # the same process captures the same model again
        _capture(model, inputs, tmp_path / f"a{k}", mode)
        assert _param_stats(tmp_path / f"a{k}") == _expected(model)

    p = max(model.parameters(), key=lambda q: q.numel())
    version = p._version
    p.data.mul_(2.0)  # bytes changed behind the version counter: only the hash sees it
    assert p._version == version
    _capture(model, inputs, tmp_path / "b", mode)
    assert _param_stats(tmp_path / "b") == _expected(model)

    with torch.no_grad():
        p.add_(1.0)  # changed with a version bump
    _capture(model, inputs, tmp_path / "c", mode)
    assert _param_stats(tmp_path / "c") == _expected(model)

    p.data = p.data.clone().sub_(3.0)  # another tensor in the same Parameter object
    _capture(model, inputs, tmp_path / "d", mode)
    assert _param_stats(tmp_path / "d") == _expected(model)


def test_steps_of_one_block_follow_an_optimizer(tmp_path):
    model, inputs = build("gpt2", vocab=512, width=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    with opdiff.capture(model, tmp_path / "d", level="api", mode="stats") as cap:
        for step in range(4):
            expected.append(_expected(model))
            out = model(**inputs, labels=inputs["input_ids"])
            if step % 2:  # steps 0 and 2 leave the parameters as they were; steps 1 and 3 change them
                out.loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            cap.step()
    got = [_param_stats(tmp_path / "d", step) for step in range(4)]
    assert got == expected
    assert got[0] == got[1] and got[1] != got[2] and got[2] == got[3]


def test_steps_of_one_block_follow_a_change_behind_the_version_counter(tmp_path):
    model, inputs = build("gpt2", vocab=512, width=64)
    model.eval()
    p = max(model.parameters(), key=lambda q: q.numel())
    expected = []
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="module", mode="stats") as cap:
        for _ in range(2):
            expected.append(_expected(model))
            model(**inputs)
            p.data.mul_(2.0)  # no version bump
            cap.step()
    got = [_param_stats(tmp_path / "d", step) for step in range(2)]
    assert got == expected and got[0] != got[1]
