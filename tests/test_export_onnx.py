"""PyTorch golden against its ONNX Runtime target, matched by the module paths the exporter records:
`opdiff export-onnx`, `capture_onnx(..., level="module")`, a clean export passing, a tampered weight
named by diagnose, and the mapping file as the fallback for a model without opdiff's signatures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import numpy_helper

from opdiff.base.vocab import MATCH_MAPPING
from opdiff.capture.onnxruntime import capture_onnx
from opdiff.capture.onnxruntime.export import MODULES_KEY, export_pair
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.store import load

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENTRY = "from opdiff.testing import zoo\n\ndef build():\n    return zoo.bert(layers=2, width=32)\n"


def _opdiff(*args):
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300)


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.act = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.gelu = torch.nn.GELU()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.gelu(self.conv2(self.act(self.conv1(x))))
        return self.head(self.pool(y).flatten(1))


def _cnn():
    torch.manual_seed(0)
    return SmallCNN().eval(), {"x": torch.randn(2, 3, 16, 16)}


def _tamper(model: Path, out: Path, name: str) -> Path:
    """A copy of the model with one row of weight `name` scaled (an ORT-side fault)."""
    proto = onnx.load(str(model))
    init = next(i for i in proto.graph.initializer if i.name == name)
    a = numpy_helper.to_array(init).copy()
    a[3] *= -4.0
    init.CopyFrom(numpy_helper.from_array(a, name))
    onnx.save(proto, str(out))
    return out


@pytest.fixture(scope="module")
def bert_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    (root / "entry.py").write_text(ENTRY)
    r = _opdiff("export-onnx", root / "entry.py:build", "-o", root / "out")
    assert r.returncode == 0, r.stderr
    return root / "out"


def test_export_onnx_cli_clean_bert_passes_at_module_boundaries(bert_export, tmp_path):
    out = bert_export
    assert {p.name for p in out.iterdir()} >= {"model.onnx", "inputs.npz", "golden"}
    sigs = json.loads(next(p.value for p in onnx.load(str(out / "model.onnx")).metadata_props if p.key == MODULES_KEY))
    assert sigs["encoder.layer.1.output.dense"]["op"] == "Linear"
    r = _opdiff("capture-onnx", out / "model.onnx", "--inputs", out / "inputs.npz", "--level", "module", "-o", tmp_path / "t")
    assert r.returncode == 0, r.stderr
    assert "module boundaries" in r.stdout
    c = compare(out / "golden", tmp_path / "t")
    compared = {p.target.name for p in c.results if p.golden is not None and p.target is not None}
    # module outputs paired by name with torch's records, through ORT's fused graph
    assert "encoder.layer.1.intermediate.dense/Linear#0/forward/output/0" in compared
    assert "encoder.layer.0/BertLayer#0/forward/output/0" in compared
    assert "BertModel#0/forward/output/last_hidden_state" in compared
    assert len(compared) >= 40 and c.counts()["FAIL"] == 0
    r = _opdiff("diagnose", out / "golden", tmp_path / "t")
    assert r.returncode == 0, r.stdout + r.stderr


def test_tampered_initializer_on_the_ort_side_is_named(bert_export, tmp_path):
    bad = _tamper(bert_export / "model.onnx", tmp_path / "bad.onnx", "wrapped_model.encoder.layer.1.intermediate.dense.weight")
    meta = capture_onnx(bad, bert_export / "inputs.npz", tmp_path / "t", level="module")
    assert meta["observed"]["outputs_bitwise_equal"] and meta["modules"]["signatures"]
    d = diagnose(bert_export / "golden", tmp_path / "t")
    assert d.verdict == "fault"
    assert d.culprit.module == "encoder.layer.1.intermediate.dense" and d.culprit.op == "Linear"


def test_cnn_clean_passes_and_tampered_conv_is_named(tmp_path):
    model, inputs = _cnn()
    paths = export_pair(model, inputs, tmp_path / "ex")
    capture_onnx(paths["model"], paths["inputs"], tmp_path / "t", level="module")
    c = compare(paths["golden"], tmp_path / "t")
    compared = {p.target.name for p in c.results if p.golden is not None and p.target is not None}
    assert {"act/ReLU#0/forward/output/0", "gelu/GELU#0/forward/output/0", "head/Linear#0/forward/output/0"} <= compared
    assert c.counts()["FAIL"] == 0
    # at level all ORT fuses conv1 with its ReLU: conv1's own output does not exist in the graph that runs,
    # and meta says so; conv2's output exists, renamed and in ORT's blocked NCHWc layout: found by value
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert "conv1: output 0 not located" in {m.split(" (")[0] for m in meta["modules"]["not_observable"]}
    assert "conv2/Conv2d#0/forward/output/0" in compared and meta["relocated"]
    bad = _tamper(paths["model"], tmp_path / "bad.onnx", "wrapped_model.conv2.weight")
    capture_onnx(bad, paths["inputs"], tmp_path / "tb", level="module", opt_level="extended")  # conv2's output kept
    d = diagnose(paths["golden"], tmp_path / "tb")
    assert d.verdict == "fault" and d.culprit.module == "conv2"


def test_without_signatures_a_mapping_file_pairs_the_modules(tmp_path):
    model, inputs = _cnn()
    paths = export_pair(model, inputs, tmp_path / "ex")
    proto = onnx.load(str(paths["model"]))
    del proto.metadata_props[:]  # as if exported by another tool: scopes in node names only
    onnx.save(proto, str(tmp_path / "plain.onnx"))
    meta = capture_onnx(tmp_path / "plain.onnx", paths["inputs"], tmp_path / "t", level="module")
    assert meta["modules"]["signatures"] is False
    names = {r.name for r in load(tmp_path / "t").records}
    assert "act/Module#0/forward/output/0" in names and "gelu/Module#0/forward/output/0" in names
    mapping = tmp_path / "map.yaml"
    mapping.write_text("names:\n  act/Module#0: act/ReLU#0\n  gelu/Module#0: gelu/GELU#0\n")
    c = compare(paths["golden"], tmp_path / "t", mapping=mapping)
    by_mapping = {p.golden.name for p in c.results if p.match == MATCH_MAPPING}
    assert {"act/ReLU#0/forward/output/0", "gelu/GELU#0/forward/output/0"} <= by_mapping
    assert c.counts()["FAIL"] == 0


def test_export_onnx_bad_entry_is_one_line_exit_2(tmp_path):
    r = _opdiff("export-onnx", "no_such_module_xyz:build", "-o", tmp_path / "o")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no_such_module_xyz" in r.stderr
    assert not np.any([p.exists() for p in [tmp_path / "o"]])


class _Mix(torch.nn.Module):
    """Two inputs of one shape whose graph order is not torch's: `b` is read first (a residual `a` added last)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, a, b):
        return torch.relu(self.lin(b)) + a


class _TwoInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pre, self.mix, self.head = torch.nn.Linear(8, 8), _Mix(), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.mix(torch.tanh(x), self.pre(x)))


def test_same_shaped_inputs_take_torch_positions_by_value(tmp_path):
    """A module's inputs of one shape and dtype are paired with torch's positions by their values' fingerprint
    (the export notes it), not by graph order: before, ELECTRA's SelfOutput(hidden_states, input_tensor) got its
    inputs swapped and a clean ORT port was a fault (the sweep's `ort` class)."""
    model = _TwoInputs().eval()
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    paths = export_pair(model, {"x": x}, tmp_path / "e")
    capture_onnx(paths["model"], paths["inputs"], tmp_path / "t", level="module")
    g, t = load(paths["golden"]), load(tmp_path / "t")
    for pos in ("0", "1"):
        name = f"mix/_Mix#0/forward/input/{pos}"
        np.testing.assert_allclose(t.tensor(t[name]), g.tensor(g[name]), rtol=1e-5, atol=1e-6)
    assert diagnose(paths["golden"], tmp_path / "t", replay=False).verdict == "pass"
