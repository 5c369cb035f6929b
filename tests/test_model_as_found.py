"""Every entry point that touches a user's model leaves it as it found it: training flag of each module,
requires_grad and values of each parameter, the hooks, the instance forwards, and the RNG state a plain run
of the same code leaves (issue 20: export_pair used to leave the model in train mode)."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import opdiff


class Block(torch.nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.fc, self.drop, self.ln = torch.nn.Linear(16, 16), torch.nn.Dropout(p), torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.ln(x + self.drop(torch.relu(self.fc(x))))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b0, self.b1, self.head = Block(0.3), Block(0.5), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.b1(self.b0(x)))


def _user_model() -> tuple[Net, dict, list]:
    """A model as a user leaves it mid-work: mixed train/eval, a frozen weight, a hook of their own."""
    torch.manual_seed(0)
    model = Net()
    model.train()
    model.b1.eval()  # b0's dropout runs (consumes RNG), b1's does not
    model.head.bias.requires_grad_(False)
    seen: list = []
    model.b0.register_forward_hook(lambda m, a, o: seen.append(o.shape))
    return model, {"x": torch.randn(3, 16, generator=torch.Generator().manual_seed(1))}, seen


def _state(model: torch.nn.Module) -> dict:
    hooks = {name: {k: sorted(getattr(m, k)) for k in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")}
             for name, m in model.named_modules()}
    return {
        "training": {name: m.training for name, m in model.named_modules()},
        "requires_grad": {name: p.requires_grad for name, p in model.named_parameters()},
        "values": {name: p.detach().clone() for name, p in model.named_parameters()},
        "ids": {name: id(p) for name, p in model.named_parameters()},
        "hooks": hooks,
        "forward": {name: "forward" in m.__dict__ for name, m in model.named_modules()},
    }


def _rng() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def _assert_same(before: dict, after: dict, what: str) -> None:
    for key in ("training", "requires_grad", "ids", "hooks", "forward"):
        assert after[key] == before[key], f"{what}: {key} changed"
    for name, v in before["values"].items():
        assert torch.equal(after["values"][name], v), f"{what}: parameter {name} changed"


def _assert_rng(a: tuple, b: tuple, what: str) -> None:
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and np.array_equal(a[2], b[2]), f"{what}: RNG state differs"


def _forward(model, inputs):
    return model(**inputs)


def _train_step(model, inputs):
    out = model(**inputs)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out, grads


CAPTURES = [
    ("module-tensor", dict(level="module", mode="tensor"), _forward),
    ("api-stats", dict(level="api", mode="stats"), _forward),
    ("aten-hash-backward", dict(level="aten", mode="hash", backward=True), _train_step),
    ("module-backward", dict(level="module", mode="stats", backward=True), _train_step),
]


@pytest.mark.parametrize("name,options,body", CAPTURES, ids=[c[0] for c in CAPTURES])
def test_capture_leaves_the_model_and_rng_as_a_plain_run_does(tmp_path, name, options, body):
    model, inputs, seen = _user_model()
    before = _state(model)
    torch.manual_seed(5)
    plain = body(model, inputs)
    rng_plain = _rng()
    torch.manual_seed(5)
    with opdiff.capture(model, tmp_path / name, **options):
        captured = body(model, inputs)
    _assert_same(before, _state(model), name)
    _assert_rng(rng_plain, _rng(), name)  # capture draws no random numbers of its own
    flat = lambda r: [r] if isinstance(r, torch.Tensor) else [r[0], *r[1]]
    assert all(torch.equal(a, b) for a, b in zip(flat(plain), flat(captured)))
    assert len(seen) == 2  # the user's hook ran in both runs, and still runs
    model(**inputs)
    assert len(seen) == 3


def test_capture_with_an_optimizer_leaves_hooks_and_flags(tmp_path):
    model, inputs, _ = _user_model()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    before = _state(model)
    opt_hooks = (dict(opt._optimizer_step_pre_hooks), dict(opt._optimizer_step_post_hooks))
    with opdiff.capture(model, tmp_path / "opt", level="module", mode="stats", optimizer=opt):
        model(**inputs).sum().backward()
        opt.step()
    after = _state(model)
    assert after["values"]["b0.fc.weight"].ne(before["values"]["b0.fc.weight"]).any()  # the step did run
    before["values"] = after["values"]
    _assert_same(before, after, "optimizer capture")
    assert (dict(opt._optimizer_step_pre_hooks), dict(opt._optimizer_step_post_hooks)) == opt_hooks


def test_export_pair_leaves_the_model_in_its_modes_and_rng(tmp_path):
    pytest.importorskip("onnx")
    from opdiff.capture.onnxruntime.export import export_pair

    model, inputs, _ = _user_model()
    model.eval()  # the ORT recipe: an eval model, exported, then its golden captured
    before = _state(model)
    torch.manual_seed(7)
    rng = _rng()
    export_pair(model, inputs, tmp_path / "ex")
    _assert_same(before, _state(model), "export_pair")
    _assert_rng(rng, _rng(), "export_pair")
    model.train()
    model.b1.eval()
    mixed = _state(model)
    export_pair(model, inputs, tmp_path / "ex2", golden=False)
    _assert_same(mixed, _state(model), "export_pair on a model in mixed modes")


@pytest.mark.slow
def test_compiled_capture_and_fusion_torch_leave_the_model_as_found(tmp_path):
    from opdiff.fusion.inductor import fusion_torch

    model, inputs, _ = _user_model()
    before = _state(model)
    with opdiff.capture(model, tmp_path / "compiled", level="module", mode="stats", compile=["b1"]):
        model(**inputs)
    _assert_same(before, _state(model), "compiled capture")
    torch.manual_seed(3)
    rng = _rng()
    fusion_torch(model, inputs, tmp_path / "fusion", regions=["b1"])
    _assert_same(before, _state(model), "fusion_torch")
    _assert_rng(rng, _rng(), "fusion_torch")


def _faulty_pair() -> tuple[Net, Net, dict]:
    golden, inputs, _ = _user_model()
    target, _, _ = _user_model()
    with torch.no_grad():
        target.b1.fc.weight[0].mul_(1.1)
    return golden, target, inputs


def test_diagnose_models_leaves_both_models_and_rng(tmp_path):
    golden, target, inputs = _faulty_pair()
    before = {"golden": _state(golden), "target": _state(target)}
    torch.manual_seed(11)
    rng = _rng()
    d = opdiff.diagnose_models(golden, target, inputs, tmp_path / "dm")
    assert d.to_json()["confirmation"]["method"] == "patch"  # the models were re-run, patched
    _assert_same(before["golden"], _state(golden), "diagnose_models (golden)")
    _assert_same(before["target"], _state(target), "diagnose_models (target)")
    _assert_rng(rng, _rng(), "diagnose_models")


class NormNet(torch.nn.Module):
    """A BatchNorm in train mode: each forward updates its running statistics (buffers)."""

    def __init__(self):
        super().__init__()
        self.fc, self.bn, self.head = torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.fc(x))))


def test_diagnose_models_and_hunts_patching_leave_buffers_as_found(tmp_path):
    """The runs opdiff makes itself (diagnose_models' captures, every patched re-run) leave a train-mode
    BatchNorm's running statistics and batch count as found: not one update per run."""
    torch.manual_seed(0)
    golden, target = NormNet().train(), NormNet().train()
    target.load_state_dict(golden.state_dict())
    with torch.no_grad():
        target.fc.weight[0].mul_(1.2)
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))
    before = {side: {k: v.clone() for k, v in m.named_buffers()} for side, m in (("g", golden), ("t", target))}
    d = opdiff.diagnose_models(golden, target, x, tmp_path / "dm", replay=False)
    assert d.to_json()["confirmation"]["method"] == "patch" and d.culprit is not None and d.culprit.module == "fc"
    for side, m in (("g", golden), ("t", target)):
        for k, v in m.named_buffers():
            assert torch.equal(v, before[side][k]), f"diagnose_models: {side} {k} changed"

    def runner(model):
        def fn(capture):
            with capture(model):
                model(x)
        return fn
    count = lambda: int(dict(golden.named_buffers())["bn.num_batches_tracked"])
    start = count()
    res = opdiff.hunt(runner(golden), runner(target), tmp_path / "h", replay=False)
    assert res.to_json()["confirmation"]["method"] == "patch"
    # only hunt's own unpatched runs of the function count (5 before the fix: the patched re-runs too)
    assert count() - start == 2, "patched re-runs moved the buffers"


def test_hunt_with_patching_leaves_the_functions_models_and_rng(tmp_path):
    golden, target, inputs = _faulty_pair()
    for m in (golden, target):
        m.b0.drop.eval()  # hunt re-runs each function: its runs must repeat (the rest stays in train mode)
    before = {"golden": _state(golden), "target": _state(target)}

    def runner(model):
        def fn(capture):
            with capture(model):
                model(**inputs)
        return fn
    torch.manual_seed(12)
    rng = _rng()
    res = opdiff.hunt(runner(golden), runner(target), tmp_path / "h", replay=False)
    assert res.to_json()["confirmation"]["method"] == "patch"
    assert [c["module"] for c in res.to_json()["confirmation"]["culprits"]] == ["b1.fc"]
    _assert_same(before["golden"], _state(golden), "hunt (golden)")
    _assert_same(before["target"], _state(target), "hunt (target)")
    _assert_rng(rng, _rng(), "hunt")  # the patched re-runs seed torch, then put the user's state back


def test_replay_of_a_random_op_leaves_the_rng(tmp_path):
    from opdiff.replay import replay

    model, inputs, _ = _user_model()
    for side in ("g", "t"):
        torch.manual_seed(3)
        with opdiff.capture(model, tmp_path / side, level="api", mode="tensor"):
            model(**inputs)
    g, t = opdiff.load(tmp_path / "g"), opdiff.load(tmp_path / "t")
    node = next(r.node for r in t.records if "dropout" in r.op and r.module == "b0.drop")
    before = _state(model)
    torch.manual_seed(13)
    rng = _rng()
    res = replay(g, t, node)
    assert res.status == "ok", res.reason
    _assert_rng(rng, _rng(), "replay of a dropout")
    _assert_same(before, _state(model), "replay")


RUN_SCRIPT = '''
import json, random, sys
import numpy as np
import torch
torch.manual_seed(0)
random.seed(0)
np.random.seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
model.train()
model[2].eval()
model[3].bias.requires_grad_(False)
calls = []
model[0].register_forward_hook(lambda m, a, o: calls.append(1))
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
x = torch.randn(4, 8)
for _ in range(2):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print(json.dumps({
    "training": [m.training for m in model.modules()],
    "requires_grad": [p.requires_grad for p in model.parameters()],
    "calls": len(calls),
    "params": [p.detach().double().sum().item() for p in model.parameters()],
    "rng": [torch.rand(3).tolist(), random.random(), np.random.rand()],
}))
'''


def test_opdiff_run_leaves_the_script_model_and_rng_as_a_plain_run(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    run = subprocess.run([sys.executable, "-m", "opdiff", "run", "-o", str(tmp_path / "dump"), "--backward", "--",
                          sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert plain.returncode == 0 and run.returncode == 0, run.stderr
    # flags, requires_grad, the user's hook still called, trained values bitwise, the next random draws (the
    # capture's own hooks stay while the script runs: the session is live until the process ends)
    assert json.loads(run.stdout) == json.loads(plain.stdout)
    assert opdiff.load(tmp_path / "dump").records, "the script's model was captured"
    assert "statistics (and replay) only" in run.stderr  # one run, launched: no patch confirmation


def test_hooks_only_snapshot_restores_every_hook_dict_as_found():
    """restore(hooks_only=True) of a hooks-only snapshot (what a capture block takes): hooks added to a dict that
    was empty and to one that was not are removed, the user's own stay in their order, and an instance forward
    set meanwhile is dropped; parameter tables are neither taken nor touched."""
    from opdiff.capture.torch.preserve import HOOK_DICTS, ModelState

    model, _, _ = _user_model()
    model.head.register_forward_pre_hook(lambda m, a: None)
    found = {name: {k: list(getattr(m, k)) for k in HOOK_DICTS} for name, m in model.named_modules()}
    state = ModelState.snapshot(model, hooks_only=True)
    assert all(not s.params and not s.buffers for s in state.modules)
    for m in model.modules():
        m.register_forward_hook(lambda m, a, o: None, with_kwargs=True, always_call=True)
        m.register_forward_pre_hook(lambda m, a: None, prepend=True)
        m.register_full_backward_hook(lambda m, gi, go: None)
    model.b1.forward = lambda x: x
    state.restore(hooks_only=True)
    assert {name: {k: list(getattr(m, k)) for k in HOOK_DICTS} for name, m in model.named_modules()} == found
    assert "forward" not in model.b1.__dict__
    assert len(model.b0._forward_hooks) == 1 and len(model.head._forward_pre_hooks) == 1
