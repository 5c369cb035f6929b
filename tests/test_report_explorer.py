"""Model Explorer overlays of a real GPT-2 with a fault, keyed by the FX node names of its torch.export program."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import opdiff
from opdiff.testing import zoo

FAULTY = "gpt2.transformer.h.1.mlp.c_fc/aten.addmm.default#0"


class Logits(torch.nn.Module):
    """GPT-2 returning plain logits: a program with tensor inputs only, which torch.export.load and
    Model Explorer's adapter both read (constant bool inputs trip the adapter)."""

    def __init__(self, gpt2: torch.nn.Module):
        super().__init__()
        self.gpt2 = gpt2

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return self.gpt2(**inputs, use_cache=False, return_dict=False)[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Golden and target (one weight row of block 1's c_fc changed) at aten level, and the exported program."""
    root = tmp_path_factory.mktemp("explorer")
    gpt2, inputs = zoo.build("gpt2")
    model, kw = Logits(gpt2), dict(inputs)
    program = torch.export.export(model, args=(), kwargs=kw, strict=False)
    torch.export.save(program, root / "gpt2.pt2")
    with torch.no_grad(), opdiff.capture(model, root / "g", level="aten", mode="tensor"):
        model(**kw)
    with torch.no_grad():
        gpt2.transformer.h[1].mlp.c_fc.weight[0, :] += 0.05
    with torch.no_grad(), opdiff.capture(model, root / "t", level="aten", mode="tensor"):
        model(**kw)
    p = subprocess.run([sys.executable, "-m", "opdiff", "explorer", str(root / "g"), str(root / "t"), "-o", str(root / "me"),
                        "--graph", str(root / "gpt2.pt2")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    docs = {m: json.loads((root / "me" / f"{m}.json").read_text()) for m in ("cosine", "error_units", "verdict")}
    return root, program, docs, p.stdout


def test_every_key_is_a_node_of_the_exported_graph(run):
    _, program, docs, stdout = run
    fx = {n.name for n in program.graph.nodes}
    for metric, doc in docs.items():
        assert doc["results"], metric
        assert set(doc["results"]) <= fx, (metric, set(doc["results"]) - fx)
    assert len(docs["verdict"]["results"]) >= 40 and "graph nodes carry data" in stdout


def test_the_faulty_op_is_red_and_earlier_ops_green(run):
    root, program, docs, _ = run
    from opdiff.capture.torch.export_names import fx_keys

    keys = fx_keys(program, opdiff.load(root / "t").records)
    bad = keys[FAULTY]
    assert docs["verdict"]["results"][bad] == {"value": 2, "bgColor": "#d62728"}
    assert docs["cosine"]["results"][bad]["value"] < 0.9999
    early = keys["gpt2.transformer.h.0.mlp.c_fc/aten.addmm.default#0"]
    assert docs["verdict"]["results"][early]["value"] == 0 and docs["error_units"]["results"][early]["value"] == 0


def test_overlays_load_through_model_explorer_api(run):
    me = pytest.importorskip("model_explorer")
    from model_explorer.node_data_builder import GraphNodeData, NodeDataResult, ThresholdItem

    root, program, docs, _ = run
    config = me.config().add_model_from_pytorch("gpt2", exported_program=program)
    ids = {n.id for n in config.graphs_list[0]["graphs"][0].nodes}  # Model Explorer's own graph of the program
    for metric, doc in docs.items():
        data = GraphNodeData(name=doc["name"], results={k: NodeDataResult(**v) for k, v in doc["results"].items()},
                             thresholds=[ThresholdItem(**t) for t in doc["thresholds"]])
        assert set(data.results) <= ids
        assert json.loads(data.to_json_string())["results"] == doc["results"]  # its own writer gives the same file
        config.add_node_data(metric, data)
        config.add_node_data_from_path(str(root / "me" / f"{metric}.json"))
    assert len(config.node_data_sources) == 6
