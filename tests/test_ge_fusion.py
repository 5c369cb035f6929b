"""Fused NPU ops against their golden ops through the GE graph's provenance: compare, diagnose, `opdiff fusion ge`.

Real PyTorch runs (a small CNN and a transformer MLP block) written as GE dumps in device formats, with
conv+bn+relu and matmul+bias+gelu fused and the graph JSON naming the ops each fused op replaced; the
golden is the framework's .npy dump (precision_tool's TF layout, outputs only) or the fusion-off GE run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import opdiff
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.store.readers.ge_graph import GraphOp, provenance
from opdiff.testing import ge_dumps as gd

CONV2 = ["cnn/conv2/Conv2D", "cnn/bn2/FusedBatchNormV3", "cnn/relu2/Relu"]
FC1 = ["block/fc1/MatMul", "block/fc1/BiasAdd", "block/act/Gelu"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("ge")
    cnn, mlp = gd.cnn_run(), gd.mlp_run()
    return {
        "cnn_tf": gd.write_tf_golden(base / "cnn_tf", cnn),
        "cnn_off": gd.write_ge_dump(base / "cnn_off", cnn),
        "cnn_fault": gd.write_ge_dump(base / "cnn_fault", gd.fuse(gd.cnn_run(bn2_eps=0.5, fold_bn=True), gd.CNN_FUSION),
                                      t0=gd.T0 + 77_000),
        "cnn_clean": gd.write_ge_dump(base / "cnn_clean", gd.fuse(gd.cnn_run(fold_bn=True), gd.CNN_FUSION)),
        "mlp_tf": gd.write_tf_golden(base / "mlp_tf", mlp),
        "mlp_fault": gd.write_ge_dump(base / "mlp_fault", gd.fuse(gd.mlp_run(tanh_gelu=True), gd.MLP_FUSION)),
        "mlp_clean": gd.write_ge_dump(base / "mlp_clean", gd.fuse(mlp, gd.MLP_FUSION)),
    }


@pytest.mark.parametrize("golden", ["cnn_tf", "cnn_off"])
def test_fault_in_fused_conv_bn_relu_is_named_with_its_golden_ops(runs, golden):
    """A wrong BN eps inside the fused conv2+bn2+relu2: that fused op is the culprit, with the three ops it replaced."""
    d = diagnose(runs[golden], runs["cnn_fault"])
    assert d.verdict == "fault" and d.culprit.module == "cnn/conv2/Conv2D", d.summary
    assert d.culprit.fused_from == CONV2 and ", ".join(CONV2) in d.summary
    assert d.culprit.golden is not None and ("relu2" in d.culprit.golden)  # paired with the last op's output


def test_fault_in_fused_matmul_bias_gelu_fractal_nz(runs):
    """tanh GELU inside the fused fc1 (FRACTAL_NZ tensors): named with fc1/MatMul, fc1/BiasAdd, act/Gelu."""
    d = diagnose(runs["mlp_tf"], runs["mlp_fault"])
    assert d.verdict == "fault" and d.culprit.module == "block/fc1/MatMul" and d.culprit.fused_from == FC1, d.summary


@pytest.mark.parametrize("golden,target", [("cnn_tf", "cnn_clean"), ("cnn_off", "cnn_clean"), ("mlp_tf", "mlp_clean")])
def test_clean_fused_runs_pass(runs, golden, target):
    """BN folded into the conv (rounding differs) and unchanged MLP: pass, every fused op paired by provenance."""
    g, t = opdiff.load(runs[golden]), opdiff.load(runs[target])
    cmp = compare(g, t)
    fused = [r for r in cmp.results if r.match == "fusion" and r.target is not None and r.golden is not None]
    assert fused and all(r.result == "PASS" for r in fused)
    assert all(r.golden_group for r in fused)  # the golden ops each fused op replaced travel with the pair
    assert diagnose(g, t, comparison=cmp).verdict == "pass"


def test_unfused_ops_pair_by_graph_origin_with_folded_golden_names(runs):
    """An op the engine did not fuse pairs with the golden file named after its original op ('/' folded to '_')."""
    cmp = compare(runs["cnn_tf"], runs["cnn_clean"])
    pool = next(r for r in cmp.results if r.target is not None and r.target.name == "cnn/pool/MaxPool/MaxPool#0/forward/output/0")
    assert pool.golden is not None and pool.golden.name == "cnn_pool_MaxPool#0/forward/output/0" and pool.match == "name"


def test_provenance_puts_the_output_origin_last():
    """compare pairs a fused op's outputs with the last golden op: the op its output comes from goes last even
    when the graph lists it first; an origin the graph does not list is added."""
    op = GraphOp("f", "Fused", original=["a/relu", "a/conv", "a/bn"])
    assert provenance(op, "a/relu") == ["a/conv", "a/bn", "a/relu"]
    assert provenance(op, "a/other") == ["a/relu", "a/conv", "a/bn", "a/other"]
    assert provenance(None, "x") == ["x"] and provenance(None, "") == []


def test_graph_in_ges_text_format(tmp_path):
    """The same provenance from GE's own text-format graph dump (`ge_proto_*.txt`) as from the JSON."""
    fused = gd.write_ge_dump(tmp_path / "t", gd.fuse(gd.cnn_run(bn2_eps=0.5), gd.CNN_FUSION), graph="text")
    assert not list(fused.glob("*.json")) and list(fused.glob("ge_proto_*.txt"))
    d = diagnose(gd.write_tf_golden(tmp_path / "g", gd.cnn_run()), fused)
    assert d.verdict == "fault" and d.culprit.fused_from == CONV2, d.summary


def test_fused_run_without_graph_pairs_only_by_header_origin(runs, tmp_path):
    """Without the graph JSON only the header's origin (the last op) is known: the fused output still pairs with
    relu2's output and the fault is found, but the culprit is not called fused."""
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(runs["cnn_fault"], bare)
    for j in bare.glob("*.json"):
        j.unlink()
    d = diagnose(runs["cnn_tf"], bare)
    assert d.verdict == "fault" and d.culprit.module == "cnn/conv2/Conv2D" and d.culprit.fused_from == []


def test_cli_fusion_ge_compare_and_diagnose(runs, tmp_path, opdiff_cli):
    """`opdiff fusion ge` names the first fused op to break and its golden ops (exit 1), passes a clean pair
    (exit 0); compare and diagnose take GE dumps as they are; a missing dump is one line, exit 2."""
    r = opdiff_cli("fusion", "ge", runs["cnn_off"], runs["cnn_fault"], "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["first_broken"]["node"] == "cnn/conv2/Conv2D/Conv2D#0" and doc["first_broken"]["golden_ops"] == CONV2
    assert [f["result"] for f in doc["fused_ops"]][:1] == ["PASS"] and doc["verdict"] == "fault"
    r = opdiff_cli("fusion", "ge", runs["mlp_tf"], runs["mlp_fault"])
    assert r.returncode == 1 and "first fused op to break: block/fc1/MatMul/MatMulV2#0 (rank 0, step 0), standing for " \
        + ", ".join(FC1) in r.stdout
    r = opdiff_cli("fusion", "ge", runs["cnn_tf"], runs["cnn_clean"])
    assert r.returncode == 0 and "3 fused ops: 3 PASS" in r.stdout, r.stdout + r.stderr
    r = opdiff_cli("diagnose", runs["cnn_tf"], runs["cnn_fault"])
    assert r.returncode == 1 and "cnn/conv2/Conv2D" in r.stdout
    r = opdiff_cli("compare", runs["cnn_off"], runs["cnn_clean"], "-o", tmp_path / "c", "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    r = opdiff_cli("fusion", "ge", runs["cnn_off"], tmp_path / "missing")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing: no such dump directory" in r.stderr


def test_tensorflow_cnn_nhwc_golden_and_npu_dump(tmp_path):
    """The CNN run in TensorFlow (NHWC activations as NC1HWC0, HWCN filters as FRACTAL_Z): its .npy golden against the
    fused NPU dump of a run with BN folded — clean passes, BN eps 0.5 in block 2 is named with its three TF ops."""
    pytest.importorskip("tensorflow")
    golden = gd.write_tf_golden(tmp_path / "g", gd.cnn_run_tf())
    clean = gd.write_ge_dump(tmp_path / "c", gd.fuse(gd.cnn_run_tf(fold_bn=True), gd.CNN_FUSION))
    bad = gd.write_ge_dump(tmp_path / "t", gd.fuse(gd.cnn_run_tf(bn2_eps=0.5, fold_bn=True), gd.CNN_FUSION))
    w = opdiff.load(bad)["cnn/conv1/Conv2D/Conv2D#0/forward/input/1"]
    assert w.extra["format"] == "FRACTAL_Z" and w.shape == (3, 3, 3, 8)  # HWCN, as TF keeps filters
    assert diagnose(golden, clean).verdict == "pass"
    d = diagnose(golden, bad)
    assert d.verdict == "fault" and d.culprit.module == "cnn/conv2/Conv2D" and d.culprit.fused_from == CONV2, d.summary


def test_precision_tool_npu_tree(tmp_path):
    """precision_tool's NPU tree (`precision_data/npu/debug_0/dump/{time}/{device}/...` and the graph dump in
    `debug_0/graph/`) read from `debug_0`, against its TF golden (`precision_data/tf/dump`): the fault is named."""
    debug = tmp_path / "precision_data" / "npu" / "debug_0"
    gd.write_ge_dump(debug / "dump", gd.fuse(gd.cnn_run(bn2_eps=0.5), gd.CNN_FUSION), graph="text")
    (debug / "graph").mkdir()
    for g in (debug / "dump").glob("ge_proto_*.txt"):
        g.rename(debug / "graph" / g.name)
    golden = gd.write_tf_golden(tmp_path / "precision_data" / "tf" / "dump", gd.cnn_run())
    d = diagnose(golden, debug)
    assert d.verdict == "fault" and d.culprit.fused_from == CONV2, d.summary
