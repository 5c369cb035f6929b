"""torch.compile: eager golden against Inductor-compiled regions observed at their boundaries (the compiled
code really runs, outputs bitwise unchanged by the capture), and `opdiff fusion torch` finding a deliberately
wrong custom Inductor pass: the region, the switch, the kernel, the switch file (real Inductor on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import opdiff
from opdiff.capture.torch.compiled import CompiledRegions
from opdiff.compare import compare
from opdiff.fusion.inductor import fusion_torch
from opdiff.store import load
from opdiff.testing import zoo

SRC = str(Path(__file__).resolve().parents[1] / "src")

ENTRY = '''
import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass


class ScaleErf(CustomGraphPass):
    """Wrong on purpose: the first erf's result (GELU's) times 1.01."""

    def __call__(self, g):
        for n in list(g.nodes):
            if n.op == "call_function" and n.target == torch.ops.aten.erf.default:
                with g.inserting_after(n):
                    m = g.call_function(torch.ops.aten.mul.Tensor, (n, 1.01))
                n.replace_all_uses_with(m, delete_user_cb=lambda u: u is not m)
                return

    def uuid(self):
        return "opdiff-test-scale-erf-1.01"


class MLP(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = torch.nn.Linear(32, 32), act, torch.nn.Linear(32, 32)
        self.ln = torch.nn.LayerNorm(32)

    def forward(self, x):
        return self.ln(self.fc2(self.act(self.fc1(x))))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b0, self.b1, self.head = MLP(torch.nn.ReLU()), MLP(torch.nn.GELU()), torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.b1(self.b0(x)))


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(4, 32),)


def build_wrong():
    config.post_grad_custom_post_pass = ScaleErf()
    return build()
'''


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    path = tmp_path_factory.mktemp("entry") / "net_entry.py"
    path.write_text(ENTRY)
    return path


def _net(entry: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("net_entry", entry)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build()


def _opdiff(*args):
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600)


def test_compiled_capture_runs_compiled_code_and_changes_nothing(entry, tmp_path):
    model, (x,) = _net(entry)
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        with CompiledRegions(model, ["b0", "b1"]) as plain:
            unobserved = model(x)
        torch._dynamo.reset()
        with opdiff.capture(model, tmp_path / "c", compile=["b0", "b1"]):
            observed = model(x)
        with opdiff.capture(model, tmp_path / "e"):
            model(x)
    assert plain.stats.calls == {"b0": 1, "b1": 1}
    assert torch.equal(observed, unobserved)  # capture changes nothing the compiled model computes
    assert "forward" not in model.b0.__dict__  # the regions are eager again after the capture
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    obs = meta["observed"]
    assert meta["capture_backend"] == "torch.compile" and meta["compile"]["regions"] == ["b0", "b1"]
    assert obs["compiled_code_ran"] and not obs["graph_breaks"] and not obs["recompile_limit_hits"]
    assert obs["compiled_regions"] == {"b0": {"graphs": 1, "compiled_calls": 1}, "b1": {"graphs": 1, "compiled_calls": 1}}
    assert obs["dynamo_counters"]["stats"]["unique_graphs"] == 2
    assert obs["observed_modules"] == ["", "b0", "b1", "head"]
    modules = {r.module for r in load(tmp_path / "c").records if r.level == "module"}  # parameters are recorded too
    assert "b0.fc1" not in modules and {"b0", "b1", "head"} <= modules
    c = compare(tmp_path / "e", tmp_path / "c")
    paired = {p.target.name for p in c.results if p.golden is not None and p.target is not None}
    assert {"b0/MLP#0/forward/output/0", "b1/MLP#0/forward/output/0", "head/Linear#0/forward/output/0"} <= paired
    assert c.counts()["FAIL"] == 0 and float((eager - observed).abs().max()) < 1e-4


def test_gpt2_block_compiled_against_eager(tmp_path):
    model, inputs = zoo.gpt2(layers=1, width=32, heads=2, seq=8, batch=1, vocab=64)
    torch._dynamo.reset()
    with torch.no_grad():
        with opdiff.capture(model, tmp_path / "e"):
            model(**inputs)
        with opdiff.capture(model, tmp_path / "c", compile=["transformer.h.0"]):
            model(**inputs)
    obs = json.loads((tmp_path / "c" / "meta.json").read_text())["observed"]
    assert obs["compiled_code_ran"] and obs["compiled_regions"]["transformer.h.0"]["compiled_calls"] == 1
    c = compare(tmp_path / "e", tmp_path / "c")
    paired = {p.target.name for p in c.results if p.golden is not None and p.target is not None}
    assert "transformer.h.0/GPT2Block#0/forward/output/0" in paired and c.counts()["FAIL"] == 0


def test_correct_compile_passes(entry, tmp_path):
    model, inputs = _net(entry)
    res = fusion_torch(model, inputs, tmp_path / "out")
    assert res.agrees and res.bisection is None and res.counts["FAIL"] == 0
    assert res.extra["observed"]["compiled_code_ran"]
    assert not (tmp_path / "out" / "switches.json").exists()


def test_fusion_torch_names_the_wrong_custom_pass(entry, tmp_path):
    r = _opdiff("fusion", "torch", f"{entry}:build_wrong", "-o", tmp_path / "out")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "region at fault: b1" in r.stdout
    assert "pass at fault: post_grad_custom_post_pass (turning it off restores agreement)" in r.stdout
    assert "bisection:" in r.stdout and "total bisection cost:" in r.stdout
    doc = json.loads((tmp_path / "out" / "switches.json").read_text())
    assert doc["engine"] == "torch.inductor" and doc["off"] == ["post_grad_custom_post_pass"]
    assert doc["switches"]["pattern_matcher"] == "on" and doc["inductor_config"] == {"post_grad_custom_post_pass": None}
    res = json.loads((tmp_path / "out" / "fusion.json").read_text())
    assert res["culprit_regions"] == ["b1"] and res["region_bisection"]["culprits"] == ["b1"]
    # the kernel the wrong pass changed, named by Inductor's provenance tracking, with its FX nodes
    kernels = res["fused_nodes"]
    assert len(kernels) == 1 and any("erf" in nodes for nodes in kernels.values())
    assert res["bisection"]["runs"] <= 6 and res["region_bisection"]["runs"] <= 4


def test_bad_region_is_one_line_exit_2(entry, tmp_path):
    r = _opdiff("fusion", "torch", f"{entry}:build", "-o", tmp_path / "out", "--regions", "b7")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "b7" in r.stderr
    assert not (tmp_path / "out").exists()
