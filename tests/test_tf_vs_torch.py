"""A Keras golden against a PyTorch target of the same MLP (weights copied across), with a layer-name map."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tf_helpers import run_opdiff

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

import opdiff
import opdiff.tf

D, H, OUT = 16, 32, 8
MAP = """names:
  "0/Linear#0": "dense_in/Dense#0"
  "1/GELU#0": "act/Activation#0"
  "2/LayerNorm#0": "norm/LayerNormalization#0"
  "3/Linear#0": "dense_out/Dense#0"
"""


def keras_mlp():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((D,)), keras.layers.Dense(H, name="dense_in"),
                             keras.layers.Activation("gelu", name="act"),
                             keras.layers.LayerNormalization(epsilon=1e-5, name="norm"),
                             keras.layers.Dense(OUT, name="dense_out")], name="mlp")


def torch_mlp(km, approximate: str = "none", eps: float = 1e-5):
    """The same MLP in PyTorch with the Keras weights (Dense kernels are (in, out): transposed)."""
    m = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.GELU(approximate=approximate),
                            torch.nn.LayerNorm(H, eps=eps), torch.nn.Linear(H, OUT))
    t = lambda v: torch.from_numpy(np.array(v))
    with torch.no_grad():
        for i, name in ((0, "dense_in"), (3, "dense_out")):
            m[i].weight.copy_(t(km.get_layer(name).kernel.numpy().T))
            m[i].bias.copy_(t(km.get_layer(name).bias.numpy()))
        m[2].weight.copy_(t(km.get_layer("norm").gamma.numpy()))
        m[2].bias.copy_(t(km.get_layer("norm").beta.numpy()))
    return m


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf-vs-torch")
    x = np.random.RandomState(0).randn(4, D).astype(np.float32)
    km = keras_mlp()
    with opdiff.tf.capture(km, root / "keras"):
        km(tf.constant(x))
    for name, kw in (("clean", {}), ("tanh", {"approximate": "tanh"}), ("eps", {"eps": 1e-2})):
        m = torch_mlp(km, **kw)
        with torch.no_grad(), opdiff.capture(m, root / name):
            m(torch.from_numpy(x))
    (root / "map.yaml").write_text(MAP)
    return root


def test_clean_port_compares_equal(runs):
    r = run_opdiff("compare", runs / "keras", runs / "clean", "--map", runs / "map.yaml", "--allow-unmatched",
                   "-o", runs / "cmp", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((runs / "cmp" / "compare.json").read_text())
    rows = doc["results"] if "results" in doc else doc["pairs"]
    compared = [p for p in rows if p.get("result") in ("PASS", "WARNING", "FAIL")]
    assert len(compared) >= 10 and all(p["result"] == "PASS" for p in compared)
    r = run_opdiff("diagnose", runs / "keras", runs / "clean", "--map", runs / "map.yaml", "--json", "--no-replay")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["verdict"] == "pass"


@pytest.mark.parametrize("fault,module,op,golden", [
    ("tanh", "1", "GELU", "act/Activation#0/forward/output/0"),
    ("eps", "2", "LayerNorm", "norm/LayerNormalization#0/forward/output/0"),
])
def test_diagnose_names_the_faulty_torch_layer(runs, fault, module, op, golden):
    r = run_opdiff("diagnose", runs / "keras", runs / fault, "--map", runs / "map.yaml", "--json", "--no-replay")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "fault"
    assert (doc["culprit"]["module"], doc["culprit"]["op"], doc["culprit"]["golden"]) == (module, op, golden)
