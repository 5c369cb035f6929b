"""TorchAir: the NPU's GE dump against the FX graph's dump of the same model, token by token (docs/ge.md).

The layout `msprobe compare -m torchair` reads: GE files under `{time}/{device}/{graph}/{graph id}/{token}/` with
`dynamo_original_graph_*.txt` whose ops name their FX tensors (`_fx_tensor_name`), fused ops named by concatenating
the graph ops they stand for; FX files `{fx_name}.INPUT|OUTPUT.{i}.{ts}.npy` per token (from 1 in older releases).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import opdiff
from opdiff.base.errors import DumpError
from opdiff.diagnose import diagnose
from opdiff.store.readers.ge_graph import GraphOp, lookup, parse_pbtxt, read_text_graph
from opdiff.testing import ge_dumps as gd

FC1_FX = ["mm-aten.mm.default", "add-aten.add.Tensor", "gelu-aten.gelu.default"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two tokens (forward calls on other inputs); the NPU's second token computes a tanh GELU in its fused fc1."""
    base = tmp_path_factory.mktemp("torchair")
    gold = [gd.mlp_run(seed=s) for s in (0, 1)]
    npu = [gd.mlp_run(seed=0), gd.mlp_run(seed=1, tanh_gelu=True)]
    return {
        "fx": gd.write_torchair_fx(base / "fx", gold, gd.MLP_FX_NAMES),
        "fx_ranks": gd.write_torchair_fx(base / "fx_ranks", gold, gd.MLP_FX_NAMES, rank_dirs=True),
        "ge": gd.write_torchair_ge(base / "ge", npu, gd.MLP_GE_NAMES, gd.MLP_FX_NAMES, gd.MLP_FUSION),
    }


@pytest.mark.parametrize("fx", ["fx", "fx_ranks"])
def test_token_by_token_fault_named_with_fx_nodes(runs, fx):
    """Both FX layouts give the GE dump's tokens (0, 1); token 0 agrees, token 1's fused MatMul+Add+Gelu is the
    culprit, standing for the FX nodes mm, add and gelu."""
    g, t = opdiff.load(runs[fx]), opdiff.load(runs["ge"])
    assert g.format == "torchair-fx" and t.format == "ge" and g.parts == t.parts == [(0, 0), (0, 1)]
    assert diagnose(g, t, step=0).verdict == "pass"  # the first token alone
    d = diagnose(runs[fx], runs["ge"])  # every token both hold
    assert d.verdict == "fault" and d.culprit.step == 1 and d.culprit.module == "MatMulAddGelu", d.summary
    assert d.culprit.fused_from == FC1_FX and d.culprit.golden.startswith("gelu-aten.gelu.default/")


def test_fx_records_and_fused_provenance(runs):
    """FX files become `{fx_name}/{aten op}#0/...` records linked by bytes; a GE op carries the FX nodes its graph
    ops name, an unfused one its single FX node (paired as a name match)."""
    fx = opdiff.load(runs["fx"])
    assert fx["mm-aten.mm.default/aten.mm.default#0/forward/input/0"].src == \
        "layer_norm-aten.layer_norm.default/aten.layer_norm.default#0/forward/output/0"
    ge = opdiff.load(runs["ge"])
    assert ge["MatMulAddGelu/MatMulV2#0/forward/output/0"].extra["fused_from"] == FC1_FX
    assert ge["Add_2/Add#0/forward/output/0"].extra["fused_from"] == ["add_2-aten.add.Tensor"]


def test_graph_text_and_fused_names(tmp_path):
    """The text-format graph parses at any nesting; `_fx_tensor_name` gives (node, output); a concatenated name
    splits by longest known prefix (MatMul_1 before MatMul); a name that does not split is not guessed."""
    doc = parse_pbtxt('graph {\n  op {\n    name: "MatMul"\n    output_desc {\n      attr {\n'
                      '        key: "_fx_tensor_name"\n        value {\n          s: "mm-aten.mm.default.OUTPUT.0"\n'
                      "        }\n      }\n    }\n  }\n}\n")
    assert doc["graph"][0]["op"][0]["name"] == ["MatMul"]
    graph = {"MatMul": GraphOp("MatMul", "MatMul", ["mm"], [("mm", 0)]),
             "MatMul_1": GraphOp("MatMul_1", "MatMul", ["mm_1"], [("mm_1", 0)]),
             "Add_1": GraphOp("Add_1", "Add", ["add_1"], [("add_1", 0)])}
    op = lookup(graph, "MatMul_1Add_1")
    assert op is not None and op.original == ["mm_1", "add_1"] and op.outputs == [("add_1", 0)]
    assert lookup(graph, "MatMul_1Relu") is None and lookup(graph, "MatMul") is graph["MatMul"]
    bad = tmp_path / "dynamo_original_graph_1.txt"
    bad.write_text("op {\n  name: \"x\"\n")
    with pytest.raises(DumpError, match="dynamo_original_graph_1.txt: not a readable graph dump in text format"):
        read_text_graph(bad)


def test_cli_diagnose_and_fusion_ge(runs, opdiff_cli):
    run = opdiff_cli
    r = run("diagnose", runs["fx"], runs["ge"])
    assert r.returncode == 1 and "MatMulAddGelu" in r.stdout and "gelu-aten.gelu.default" in r.stdout, r.stdout + r.stderr
    r = run("fusion", "ge", runs["fx"], runs["ge"])
    assert r.returncode == 1 and "4 fused ops: 2 FAIL, 2 PASS" in r.stdout  # fc2 inherits the error, r.stdout + r.stderr
    assert "first fused op to break: MatMulAddGelu/MatMulV2#0 (rank 0, step 1), standing for " + ", ".join(FC1_FX) \
        in r.stdout
