"""opdiff hunt on real transformers models: stats pass, tensor pass of the suspect region, diagnose."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import opdiff
from opdiff.hunting import NotDeterministic
from opdiff.testing import faults

SIZE = {"layers": 4, "width": 64}
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _pair(fault: str, model: str = "gpt2"):
    def golden(capture):
        g, inputs, _, _ = faults.build_pair(model, fault, 2, **SIZE)
        with capture(g):
            faults.run(g, inputs)

    def target(capture):
        _, _, t, inj = faults.build_pair(model, fault, 2, **SIZE)
        with capture(t):
            faults.run(t, inj.inputs, inj)

    return golden, target, faults.build_pair(model, fault, 2, **SIZE)[3]


def test_hunt_finds_the_culprit_with_a_small_tensor_dump(tmp_path):
    golden, target, inj = _pair("weight_row")
    res = opdiff.hunt(golden, target, tmp_path / "h", patch=False)  # patching: tests/test_patch_search.py
    assert res.verdict == "fault" and res.culprit.module == inj.module
    assert res.to_json()["confirmation"]["method"] in ("statistics", "replay")  # not re-run: --no-patch
    assert res.region == inj.module and res.stats_diagnosis.culprit.module == inj.module
    assert [p.name for p in res.passes] == ["pass1-golden", "pass1-target", "pass2-golden", "pass2-target"]
    assert all(p.tensor_bytes == 0 for p in res.passes[:2])  # pass 1 keeps no tensor data
    print(f"hunt ratio (gpt2, 4 layers, 64 wide, module level): {res.ratio:.1f}x "
          f"({res.hunt_tensor_bytes} of {res.full_tensor_bytes} bytes)")
    assert res.ratio > 10
    assert (tmp_path / "h" / "hunt.json").exists() and (tmp_path / "h" / "diagnosis.json").exists()


def test_hunt_a_training_step(tmp_path):
    import torch

    def step(fault: bool):
        def fn(capture):
            model, inputs, t, inj = faults.build_pair("llama", "norm_eps", 2, **SIZE)
            model = t if fault else model
            model.train()
            with capture(model, backward=True):
                loss = model(**inputs, labels=inputs["input_ids"]).loss
                loss.backward()
            torch.optim.SGD(model.parameters(), lr=0.1).step()
        return fn

    inj = faults.build_pair("llama", "norm_eps", 2, **SIZE)[3]
    res = opdiff.hunt(step(False), step(True), tmp_path / "h", replay=False)
    assert res.verdict == "fault" and res.culprit.module == inj.module
    assert any(r.direction == "backward" for r in __import__("opdiff").load(tmp_path / "h" / "pass1-golden"))
    assert res.ratio > 5


def test_hunt_refuses_a_run_that_does_not_repeat(tmp_path):
    golden, target, _ = _pair("weight_row")
    calls = {"n": 0}

    def flaky(capture):  # a second call sees other inputs: cannot be re-run
        import torch

        g, inputs, _, _ = faults.build_pair("gpt2", "weight_row", 2, **SIZE)
        calls["n"] += 1
        ids = torch.roll(inputs["input_ids"], calls["n"], dims=1)
        with capture(g):
            faults.run(g, {"input_ids": ids})

    with pytest.raises(NotDeterministic, match="not deterministic enough to re-run"):
        opdiff.hunt(flaky, target, tmp_path / "h")


def test_cli_hunt_script_entry_points(tmp_path):
    script = tmp_path / "pair.py"
    script.write_text(textwrap.dedent("""
        from opdiff.testing import faults
        SIZE = {"layers": 4, "width": 64}

        def golden(capture):
            g, inputs, _, _ = faults.build_pair("gpt2", "activation", 2, **SIZE)
            with capture(g):
                faults.run(g, inputs)

        def target(capture):
            _, _, t, inj = faults.build_pair("gpt2", "activation", 2, **SIZE)
            with capture(t):
                faults.run(t, inj.inputs, inj)
    """))
    env = {**os.environ, "PYTHONPATH": SRC}
    run = lambda *a: subprocess.run([sys.executable, "-m", "opdiff", "hunt", *a], capture_output=True, text=True,
                                    env=env, timeout=600)
    p = run(f"{script}:golden", f"{script}:target", "-o", str(tmp_path / "o"), "--no-replay")
    assert p.returncode == 1, p.stderr
    assert "verdict: fault" in p.stdout and "less" in p.stdout
    p = run(f"{script}:golden", f"{script}:nope", "-o", str(tmp_path / "o2"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "has no function 'nope'" in p.stderr


def test_one_capture_block_per_run(tmp_path):
    from opdiff import OpdiffError

    golden, target, _ = _pair("weight_row")

    def twice(capture):
        g, inputs, _, _ = faults.build_pair("gpt2", "weight_row", 2, **SIZE)
        with capture(g):
            faults.run(g, inputs)
        with capture(g):
            faults.run(g, inputs)

    with pytest.raises(OpdiffError, match="more than once"):
        opdiff.hunt(twice, target, tmp_path / "h")
    with pytest.raises(OpdiffError, match="set by hunt"):
        opdiff.hunt(lambda capture: capture(None, mode="tensor"), target, tmp_path / "h2")


def test_opdiff_hunt_is_a_plain_function_imported_on_first_call():
    """`opdiff.hunt(...)` as the issue writes it; `import opdiff` does not import the hunting package."""
    code = ("import inspect, sys, opdiff; assert inspect.isfunction(opdiff.hunt); "
            "assert 'opdiff.hunting' not in sys.modules; print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC})
    assert p.stdout.strip() == "ok", p.stderr
