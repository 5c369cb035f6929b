"""`opdiff diagnose` and `opdiff replay` through the real CLI: exit codes, --json, --out, bad input."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from opdiff.capture import capture
from opdiff.testing import faults, zoo


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """A GPT-2 golden, a target with its attention scale changed, and an identical target (aten level)."""
    root = tmp_path_factory.mktemp("cli")
    model, inputs = zoo.build("gpt2", layers=3)
    out = {}
    for name, fault in (("golden", None), ("identical", "identical"), ("scale", "attention_scale"), ("eps", "norm_eps")):
        m = model if fault is None else zoo.build("gpt2", layers=3)[0]
        inj = faults.inject(fault, m, inputs) if fault else None
        level = "module" if name == "eps" else "aten"
        path = root / name
        with capture(m, path, level=level, mode="tensor"):
            faults.run(m, inj.inputs if inj else inputs, inj)
        out[name] = path
    with capture(model, root / "golden-module", level="module", mode="tensor"):
        faults.run(model, inputs)
    out["golden-module"] = root / "golden-module"
    return out


def test_pass_exits_0(dumps, opdiff_cli):
    r = opdiff_cli("diagnose", dumps["golden"], dumps["identical"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout


def test_fault_exits_1_and_json_names_the_culprit(dumps, opdiff_cli, strict_json):
    r = opdiff_cli("diagnose", dumps["golden"], dumps["scale"], "--json")
    assert r.returncode == 1, r.stderr
    doc = strict_json(r.stdout)
    assert doc["verdict"] == "fault"
    assert doc["culprit"]["module"] == "transformer.h.1.attn"
    assert doc["culprit"]["op"].startswith("aten._scaled_dot_product")
    assert doc["culprit"]["golden"].endswith("/forward/output/0") and doc["culprit"]["target"]
    assert doc["candidates"][0]["module"] == "transformer.h.1.attn"
    assert doc["first_divergence"]["module"] == "transformer.h.1.attn"
    # replay confirmed it and found the argument that differs
    assert doc["replay"]["status"] == "ok" and doc["replay"]["confirmed"] is True
    assert [d["arg"] for d in doc["replay"]["arg_differences"]] == ["kwargs.scale"]


def test_console_report_and_out_file(dumps, tmp_path, opdiff_cli, strict_json):
    out = tmp_path / "diag.json"
    r = opdiff_cli("diagnose", dumps["golden"], dumps["scale"], "-o", out, "--no-replay")
    assert r.returncode == 1
    for text in ("FAULT", "culprit", "transformer.h.1.attn", "path of divergence", "advice"):
        assert text in r.stdout
    doc = strict_json(out.read_text())
    assert doc["verdict"] == "fault" and doc["replay"] is None
    again = opdiff_cli("diagnose", dumps["golden"], dumps["scale"], "-o", out)
    assert again.returncode == 2 and "exists" in again.stderr
    assert opdiff_cli("diagnose", dumps["golden"], dumps["scale"], "-o", out, "--force").returncode == 1


def test_module_level_dump(dumps, opdiff_cli, strict_json):
    r = opdiff_cli("diagnose", dumps["golden-module"], dumps["eps"], "--json", "--level", "module")
    doc = strict_json(r.stdout)
    assert r.returncode == 1
    assert doc["culprit"]["module"] == "transformer.h.1.ln_1" and doc["culprit"]["op"] == "LayerNorm"
    assert doc["replay"]["status"] == "skipped"  # a LayerNorm cannot be rebuilt from a module-level dump


@pytest.mark.parametrize("args", [("missing-dir",), ("not-a-dump",)])
def test_bad_input_exits_2_with_one_line(dumps, tmp_path, args, opdiff_cli):
    bad = tmp_path / args[0]
    if args[0] == "not-a-dump":
        bad.mkdir()
        (bad / "x.txt").write_text("hello")
    r = opdiff_cli("diagnose", dumps["golden"], bad)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opdiff: error:") and str(bad) in lines[0]


def test_level_without_records_is_bad_input(dumps, opdiff_cli):
    r = opdiff_cli("diagnose", dumps["golden"], dumps["scale"], "--level", "api")
    assert r.returncode == 2 and "nothing to diagnose" in r.stderr


def test_replay_cli(dumps, opdiff_cli):
    node = "transformer.h.1.attn/aten._scaled_dot_product_flash_attention_for_cpu.default#0"
    r = opdiff_cli("replay", dumps["golden"], dumps["scale"], node)
    assert r.returncode == 0, r.stderr
    assert "argument kwargs.scale: golden 0.25, target 0.2625" in r.stdout
    assert "reproduces the target's output" in r.stdout
    r = opdiff_cli("replay", dumps["golden"], dumps["scale"], "aten.addmm")  # matches many ops
    assert r.returncode == 2 and "matches" in r.stderr
    r = opdiff_cli("replay", dumps["golden"], dumps["scale"], "no-such-op")
    assert r.returncode == 2 and "no op matches" in r.stderr
    r = opdiff_cli("replay", dumps["golden-module"], dumps["eps"], "h.1.ln_1/LayerNorm")
    assert r.returncode == 1 and "cannot be rebuilt" in r.stdout


def test_map_pairs_a_fused_module_of_another_class(tmp_path, dumps, opdiff_cli, strict_json):
    """The target's MLP is a FusedMLP (another class, with a bug); --map pairs it with golden's GPT2MLP."""
    import torch

    model, inputs = zoo.build("gpt2", layers=3)
    mlp = model.transformer.h[1].mlp

    class FusedMLP(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.w1, self.b1, self.w2, self.b2 = m.c_fc.weight, m.c_fc.bias, m.c_proj.weight, m.c_proj.bias

        def forward(self, x):
            h = torch.nn.functional.gelu(x @ self.w1 + self.b1)  # bug: exact GELU where GPT-2 uses tanh
            return h @ self.w2 + self.b2

    model.transformer.h[1].mlp = FusedMLP(mlp)
    with capture(model, tmp_path / "fused", level="module", mode="tensor"):
        faults.run(model, inputs)
    mapping = tmp_path / "map.yaml"
    mapping.write_text('names:\n  "transformer.h.1.mlp/FusedMLP#0": "transformer.h.1.mlp/GPT2MLP#0"\n')
    r = opdiff_cli("diagnose", dumps["golden-module"], tmp_path / "fused", "--map", mapping, "--json")
    doc = strict_json(r.stdout)
    assert r.returncode == 1, r.stderr
    assert doc["culprit"]["module"] == "transformer.h.1.mlp" and doc["culprit"]["op"] == "FusedMLP"
    assert doc["culprit"]["golden"] == "transformer.h.1.mlp/GPT2MLP#0/forward/output/0"
    assert doc["culprit"]["how"] == "output"
    assert len(doc["culprit"]["golden_only_calls"]) == 4  # c_fc, act, c_proj, dropout were fused away
