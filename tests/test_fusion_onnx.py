"""ONNX Runtime: capture of the optimized graph without changing it, fused vs unfused at shared cut
points, and `opdiff fusion onnx` naming the pass at fault (real sessions, real models)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

from opdiff.base.vocab import MATCH_FUSION
from opdiff.capture.onnxruntime import capture_onnx
from opdiff.compare import compare
from opdiff.fusion.bisect import bisect_switches
from opdiff.store import load

SRC = str(Path(__file__).resolve().parents[1] / "src")
GELU_APPROX = "optimization.enable_gelu_approximation=1"


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def mlp_model(path: Path) -> Path:
    """MatMul+Add (-> Gemm) and an erf GELU (-> Gelu, FastGelu with the approximation) then MatMul."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["mm1"], name="fc1_mm"),
             helper.make_node("Add", ["mm1", "B1"], ["fc1"], name="fc1_add"),
             helper.make_node("Div", ["fc1", "sqrt2"], ["d"], name="g_div"),
             helper.make_node("Erf", ["d"], ["e"], name="g_erf"),
             helper.make_node("Add", ["e", "one"], ["e1"], name="g_add"),
             helper.make_node("Mul", ["fc1", "e1"], ["m"], name="g_mul"),
             helper.make_node("Mul", ["m", "half"], ["gelu"], name="g_mul2"),
             helper.make_node("MatMul", ["gelu", "W2"], ["y"], name="fc2")]
    inits = [_init("W1", rng.standard_normal((8, 16))), _init("B1", rng.standard_normal(16)),
             _init("W2", rng.standard_normal((16, 4))), _init("sqrt2", np.sqrt(2)), _init("one", 1.0), _init("half", 0.5)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def cnn_model(path: Path) -> Path:
    """Conv+BatchNorm+Relu twice with a residual Add, global pooling and a Gemm head."""
    rng = np.random.default_rng(1)
    inits, nodes = [], []
    for k, (cin, cout) in enumerate(((3, 8), (8, 8))):
        inits += [_init(f"w{k}", rng.standard_normal((cout, cin, 3, 3)) * 0.3), _init(f"b{k}", rng.standard_normal(cout)),
                  _init(f"s{k}", rng.uniform(0.5, 1.5, cout)), _init(f"o{k}", rng.standard_normal(cout)),
                  _init(f"m{k}", rng.standard_normal(cout) * 0.1), _init(f"v{k}", rng.uniform(0.5, 2, cout))]
        x = "x" if k == 0 else "r0"
        nodes += [helper.make_node("Conv", [x, f"w{k}", f"b{k}"], [f"c{k}"], name=f"conv{k}", pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{k}", f"s{k}", f"o{k}", f"m{k}", f"v{k}"], [f"n{k}"],
                                   name=f"bn{k}"),
                  helper.make_node("Relu", [f"n{k}"], [f"r{k}"], name=f"relu{k}")]
    inits += [_init("wf", rng.standard_normal((10, 8)) * 0.3), _init("bf", rng.standard_normal(10))]
    nodes += [helper.make_node("Add", ["r0", "r1"], ["res"], name="residual"),
              helper.make_node("GlobalAveragePool", ["res"], ["pool"], name="pool"),
              helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
              helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], name="head", transB=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny seeded BERT exported with opdiff's helper (erf GELU, LayerNorm, attention)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from opdiff.capture.onnxruntime.export import export_onnx

    d = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                  vocab_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, initializer_range=0.5)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    feeds = export_onnx(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, d / "bert.onnx")
    np.savez(d / "bert.npz", **feeds)
    return d / "bert.onnx", d / "bert.npz"


def _plain_outputs(model: Path, feeds: dict, config: dict | None = None) -> dict:
    so = ort.SessionOptions()
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    s = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _opdiff(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_capture_records_the_optimized_graph_without_changing_it(tmp_path):
    model = mlp_model(tmp_path / "mlp.onnx")
    x = {"x": np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)}
    meta = capture_onnx(model, x, tmp_path / "dump", session_config={"optimization.enable_gelu_approximation": "1"})
    assert meta["observed"]["outputs_bitwise_equal"] is True
    assert meta["transformers_fired"][:1] == ["MatMulAddFusion"] and "GeluApproximation" in meta["transformers_fired"]
    d = load(tmp_path / "dump")
    ops = [r.op for r in d.records if r.role == "output" and r.module == ""]
    assert ops == ["Gemm", "FastGelu", "MatMul", "Graph"]
    fast = next(r for r in d.records if r.op == "FastGelu" and r.role == "output")
    assert fast.extra["fused_from_onnx"] == ["g_div", "g_erf", "g_add", "g_mul", "g_mul2"]
    assert fast.extra["tensor"] == "gelu"
    # the dump's model output is bitwise the output of a plain, unobserved session
    plain = _plain_outputs(model, x, {"optimization.enable_gelu_approximation": "1"})
    out = next(r for r in d.records if r.op == "Graph" and r.role == "output")
    assert d.tensor(out).tobytes() == plain["y"].tobytes()
    assert (tmp_path / "dump" / "optimized.onnx").is_file()


def test_cnn_fused_against_unfused_has_no_false_failures(tmp_path):
    model = cnn_model(tmp_path / "cnn.onnx")
    x = {"x": np.random.default_rng(3).standard_normal((2, 3, 12, 12)).astype(np.float32)}
    capture_onnx(model, x, tmp_path / "off", opt_level="disable")
    meta = capture_onnx(model, x, tmp_path / "on", opt_level="all")
    assert meta["observed"]["outputs_bitwise_equal"] is True
    assert any(set(v) >= {"Conv#0", "BatchNormalization#0"} for v in meta["provenance"].values())
    cmp = compare(tmp_path / "off", tmp_path / "on", workers=1)
    assert cmp.passed(allow_unmatched=True), [(r.name, r.result, r.status) for r in cmp.results if r.result == "FAIL"]
    assert {r.status for r in cmp.results} <= {"compared", "unmatched"}
    assert all(r.match == MATCH_FUSION for r in cmp.results if r.status == "unmatched")
    assert not cmp.unmatched("golden") and not cmp.unmatched("target")
    final = [r for r in cmp.results if r.target is not None and r.target.op == "Graph" and r.target.role == "output"]
    assert len(final) == 1 and final[0].golden is not None and final[0].result == "PASS"


def test_bert_fused_against_unfused_at_shared_tensors(tmp_path, bert):
    model, inputs = bert
    capture_onnx(model, inputs, tmp_path / "off", opt_level="disable")
    meta = capture_onnx(model, inputs, tmp_path / "on")
    assert {"SkipLayerNormFusion", "GeluFusionL2"} <= set(meta["transformers_fired"])
    cmp = compare(tmp_path / "off", tmp_path / "on", workers=1)
    assert cmp.passed(allow_unmatched=True)
    compared = [r for r in cmp.results if r.status == "compared"]
    assert len(compared) > 50 and all(r.golden.extra["tensor"] == r.target.extra["tensor"] for r in compared)
    d = load(tmp_path / "on")
    assert any(r.module.startswith("encoder.layer.1.attention") for r in d.records)


def test_fusion_onnx_names_gelu_approximation_and_writes_switch_file(tmp_path, bert):
    model, inputs = bert
    p = _opdiff("fusion", "onnx", model, "--inputs", inputs, "-o", tmp_path / "out", "--session-config", GELU_APPROX)
    assert p.returncode == 1, p.stderr
    assert "pass at fault: GeluApproximation (turning it off restores agreement)" in p.stdout
    assert "FastGelu#0 from" in p.stdout and "bisection:" in p.stdout
    sw = json.loads((tmp_path / "out" / "switches.json").read_text())
    assert sw["off"] == ["GeluApproximation"]
    assert sw["switches"]["GeluApproximation"] == "off" and sw["switches"]["SkipLayerNormFusion"] == "on"
    res = json.loads((tmp_path / "out" / "fusion.json").read_text())
    assert res["restored"] and res["bisection"]["runs"] >= 2
    # the switch file turns off just that pass: the other fusions still fire, and the run agrees
    p = _opdiff("capture-onnx", model, "--inputs", inputs, "-o", tmp_path / "fixed", "--switches",
                tmp_path / "out" / "switches.json")
    assert p.returncode == 0, p.stderr
    fired = load(tmp_path / "fixed").meta["transformers_fired"]
    assert "GeluApproximation" not in fired and "SkipLayerNormFusion" in fired
    assert compare(tmp_path / "out" / "golden", tmp_path / "fixed", workers=1).passed(allow_unmatched=True)


def test_fusion_onnx_correct_fusion_passes(tmp_path, bert):
    model, inputs = bert
    p = _opdiff("fusion", "onnx", model, "--inputs", inputs, "-o", tmp_path / "out")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fusion OK" in p.stdout
    assert not (tmp_path / "out" / "switches.json").exists()


def test_bad_input_is_one_line_exit_2(tmp_path):
    model = mlp_model(tmp_path / "mlp.onnx")
    np.savez(tmp_path / "wrong.npz", z=np.zeros((2, 8), np.float32))
    p = _opdiff("fusion", "onnx", model, "--inputs", tmp_path / "wrong.npz", "-o", tmp_path / "out")
    assert p.returncode == 2 and "inputs lack x" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    p = _opdiff("capture-onnx", tmp_path / "junk.onnx", "--inputs", tmp_path / "wrong.npz", "-o", tmp_path / "d")
    assert p.returncode == 2 and "junk.onnx" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


def test_bisect_finds_every_culprit_with_few_runs():
    switches = [f"p{i}" for i in range(16)]
    bad = {"p3", "p11"}
    b = bisect_switches(switches, lambda off: bad <= off, known={frozenset(): False})
    assert sorted(b.culprits) == ["p11", "p3"]
    assert len(b.runs) <= 12
    assert bisect_switches(switches, lambda off: False).culprits is None


def test_backend_context_manager_captures(tmp_path):
    from opdiff.capture.onnxruntime.backend import BACKEND

    model = mlp_model(tmp_path / "mlp.onnx")
    assert BACKEND.handles(model) and BACKEND.handles(onnx.load(str(model))) and not BACKEND.handles(object())
    x = {"x": np.ones((2, 8), np.float32)}
    with BACKEND.capture(model, tmp_path / "d", opt_level="basic") as cap:
        meta = cap.run(x)
    assert meta["capture_backend"] == "onnxruntime" and meta["session"]["opt_level"] == "basic"
    assert load(tmp_path / "d").complete
