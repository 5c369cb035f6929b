"""End to end on real captures: opdiff.capture of zoo transformers, then compare (library and CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import opdiff
from opdiff.compare import compare
from opdiff.testing import faults

OPDIFF = str(Path(sys.executable).with_name("opdiff"))


def captured(tmp_path: Path, model: str, fault: str, level: str = "module", mode: str = "tensor"):
    """Golden and target dumps of one zoo model, the target carrying `fault`."""
    golden, inputs, target, inj = faults.build_pair(model, fault)
    g, t = tmp_path / f"{model}-{fault}-g", tmp_path / f"{model}-{fault}-t"
    with opdiff.capture(golden, g, level=level, mode=mode):
        faults.run(golden, inputs)
    with opdiff.capture(target, t, level=level, mode=mode):
        faults.run(target, inj.inputs, inj)
    return g, t, inj


@pytest.mark.parametrize("model,fault", [("gpt2", "identical"), ("gpt2", "bf16_autocast"), ("llama", "half_model")])
def test_benign_runs_pass(tmp_path, model, fault):
    g, t, _ = captured(tmp_path, model, fault)
    c = compare(g, t)
    assert c.counts()["FAIL"] == 0 and c.counts()["WARNING"] == 0, [r.name for r in c.worst(3)]
    assert c.status_counts() == {"compared": len(c.results)}
    if fault == "identical":
        assert all(r.bitwise_equal for r in c.results)
    else:  # once the target computed in low precision, what follows is judged at that precision
        low = "bfloat16" if fault == "bf16_autocast" else "float16"
        assert c.results[-1].precision == low
        carried = [r for r in c.results if r.golden.dtype == r.target.dtype == "float32" and r.precision == low]
        assert carried or fault != "bf16_autocast"  # fp32-typed tensors downstream of bf16 ops (residual sums)


@pytest.mark.parametrize("model,fault", [("gpt2", "weight_row"), ("llama", "norm_eps"), ("vit", "norm_eps")])
def test_fault_is_flagged_first_in_its_module(tmp_path, model, fault):
    g, t, inj = captured(tmp_path, model, fault)
    c = compare(g, t)
    first = next(r for r in c.results if r.result != "PASS")
    assert first.result == "FAIL" and first.target.module.startswith(inj.module), (first.name, inj.module)
    before = c.results[:first.index]
    assert before and all(r.result == "PASS" for r in before)


def test_stats_capture_against_tensor_capture(tmp_path):
    g, _, _ = captured(tmp_path, "gpt2", "identical")
    _, t, inj = captured(tmp_path, "gpt2", "norm_eps", mode="stats")
    c = compare(g, t)
    assert c.mode == "stats" and {r.mode for r in c.results} == {"stats"}
    first = c.first_fail()
    assert first is not None and first.target.module.startswith(inj.module)


def test_cli_on_real_captures(tmp_path):
    g, t, _ = captured(tmp_path, "gpt2", "weight_row", level="aten")
    p = subprocess.run([OPDIFF, "compare", g, t, "-o", tmp_path / "out", "--format", "json,csv", "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    rep = json.loads((tmp_path / "out" / "compare.json").read_text())
    ff = rep["pairs"][rep["summary"]["first_fail"]]
    assert ff["target"]["module"].startswith("transformer.h.2.mlp.c_fc") and ff["target"]["level"] in ("aten", "param")
    same = subprocess.run([OPDIFF, "compare", g, g, "-o", tmp_path / "same", "--format", "csv", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert same.returncode == 0, same.stdout + same.stderr
