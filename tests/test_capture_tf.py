"""TensorFlow capture: Keras layer level and tf.function op level (tfdbg), on real TF runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tf_helpers import run_opdiff

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import opdiff
import opdiff.tf
from opdiff.base.errors import OpdiffError
from opdiff.store.readers import tfdbg


class Block(keras.layers.Layer):
    """A residual block held as attributes, with a list of sublayers."""

    def __init__(self, width: int, **kw):
        super().__init__(**kw)
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5)
        self.mlp = [keras.layers.Dense(width * 2, activation="gelu"), keras.layers.Dense(width)]

    def call(self, x):
        h = self.norm(x)
        for layer in self.mlp:
            h = layer(h)
        return x + h


class Net(keras.Model):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.embed = keras.layers.Dense(8)
        self.block = Block(8)
        self.head = keras.layers.Dense(3)

    def call(self, x):
        return self.head(self.block(self.embed(x)))


def build(seed: int = 0) -> Net:
    keras.utils.set_random_seed(seed)
    m = Net()
    m(np.zeros((1, 6), np.float32))
    return m


X = np.random.RandomState(0).randn(4, 6).astype(np.float32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfcap")
    m = build()
    x = tf.constant(X)
    ref = m(x).numpy()
    out = {"root": root, "model": m, "ref": ref}
    for mode in ("tensor", "stats", "hash"):
        with opdiff.tf.capture(m, root / mode, mode=mode):
            out[mode + "-out"] = m(x).numpy()
    m2 = build()
    with opdiff.capture(m2, root / "same", mode="tensor"):  # the generic entry dispatches Keras to this backend
        m2(x)
    bad = build()
    k = bad.block.mlp[0].kernel
    k.assign(k.numpy() * np.float32(1.05))
    with opdiff.tf.capture(bad, root / "fault"):
        bad(x)
    return out


def test_layer_capture_keeps_results_bitwise_and_records_every_layer(runs):
    for mode in ("tensor", "stats", "hash"):
        assert np.array_equal(runs[mode + "-out"], runs["ref"]), mode
    d = opdiff.load(runs["root"] / "tensor")
    assert opdiff.load(runs["root"] / "same").meta["capture_backend"] == "keras-layers"  # opdiff.capture dispatched
    nodes = {r.node for r in d.records}
    assert {"Net#0", "embed/Dense#0", "block/Block#0", "block.norm/LayerNormalization#0", "block.mlp.0/Dense#0",
            "block.mlp.1/Dense#0", "head/Dense#0"} <= nodes
    assert {"embed/parameter#0", "block.mlp.0/parameter#0"} <= nodes
    np.testing.assert_array_equal(d.tensor("Net#0/forward/output/0"), runs["ref"])
    np.testing.assert_array_equal(d.tensor("Net#0/forward/input/0"), X)
    m = runs["model"]
    np.testing.assert_array_equal(d.tensor("block.mlp.0/parameter#0/forward/parameter/kernel"), m.block.mlp[0].kernel.numpy())
    inp = d["block.norm/LayerNormalization#0/forward/input/0"]
    assert inp.src == "embed/Dense#0/forward/output/0"  # the very tensor the embedding returned
    order = [r.node for r in d.records]
    assert order.index("block/Block#0") < order.index("block.mlp.1/Dense#0") < \
        max(i for i, r in enumerate(d.records) if r.node == "block/Block#0")  # calls nest
    assert d.meta["framework"] == "tensorflow" and d.meta["capture_backend"] == "keras-layers"
    assert d.meta["observed"]["layers"] == 7 and d.complete
    assert "call" not in vars(m) and "call" not in vars(m.block)  # hooks removed


def test_stats_and_hash_modes_agree_with_tensor_mode(runs):
    t, s, h = (opdiff.load(runs["root"] / m) for m in ("tensor", "stats", "hash"))
    assert [r.name for r in t.records] == [r.name for r in s.records] == [r.name for r in h.records]
    for a, b, c in zip(t.records, s.records, h.records):
        assert a.stats == b.stats == c.stats, a.name
        assert a.hash == c.hash and b.hash is None and b.data is None and c.data is None


def test_same_model_compares_equal_and_a_changed_weight_is_diagnosed(runs):
    root = runs["root"]
    r = run_opdiff("compare", root / "tensor", root / "same", "-o", root / "cmp", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_opdiff("diagnose", root / "tensor", root / "fault", "--json", "--no-replay")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "fault"
    assert doc["culprit"]["module"] == "block.mlp.0" and doc["culprit"]["op"] in ("Dense", "parameter")


def test_op_level_capture_of_a_tf_function(tmp_path):
    m = build()
    x = tf.constant(X)
    ref = m(x).numpy()
    with opdiff.tf.capture(m, tmp_path / "ops", level="op", keep_raw=True) as cap:
        out = cap(x).numpy()  # runs as the capture's own tf.function, traced (instrumented) here
    # tfdbg's instrumentation keeps grappler from fusing ops (e.g. MatMul+BiasAdd+GELU), so the captured
    # graph may round differently from an uninstrumented tf.function (docs/tensorflow.md); here it is close.
    plain = tf.function(m)(x).numpy()  # the model still runs after the capture (no instrumented graph left)
    np.testing.assert_allclose(out, plain, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    d = opdiff.load(tmp_path / "ops")
    assert d.meta["capture_backend"] == "tfdbg" and d.meta["observed"]["tensor_debug_mode"] == "FULL_TENSOR"
    assert {"MatMul", "BiasAdd", "AddV2"} <= {r.op for r in d.records}
    last = [r for r in d.records if r.role == "output" and r.level == "api"][-1]
    np.testing.assert_array_equal(d.tensor(last), ref)
    linked = [r for r in d.records if r.role == "input" and r.src]
    assert linked and all(d[r.src].hash == r.hash for r in linked)
    raw = tfdbg.open_dump(tmp_path / "ops" / "tfdbg")  # the same records as `opdiff import tfdbg` gives
    assert [(r.name, r.hash) for r in raw.records] == [(r.name, r.hash) for r in d.records]
    with opdiff.tf.capture(m, tmp_path / "ops-stats", level="op", mode="stats") as cap:
        cap(x)
    with opdiff.tf.capture(m, tmp_path / "ops-stats", level="op", mode="stats", overwrite=True) as cap:
        cap(x)  # the same path again in this process: TensorFlow crashed when its dump root was reused
    s = opdiff.load(tmp_path / "ops-stats")
    assert [(r.name, r.stats) for r in s.records] == [(r.name, r.stats) for r in d.records]
    assert all(r.data is None for r in s.records) and not (tmp_path / "ops-stats" / "tfdbg").exists()


def test_bad_options_are_one_line_errors(tmp_path):
    m = build()
    with pytest.raises(OpdiffError, match="level must be"):
        opdiff.tf.capture(m, tmp_path / "x", level="module")
    with pytest.raises(OpdiffError, match="mode must be"):
        opdiff.tf.capture(m, tmp_path / "x", mode="full")
    with pytest.raises(OpdiffError, match="debug_mode"):
        with opdiff.tf.capture(m, tmp_path / "y", level="op", debug_mode="FULL_HEALTH"):
            pass
