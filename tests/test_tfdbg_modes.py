"""Every tfdbg tensor_debug_mode, dumped by TensorFlow itself, judged on exactly what it holds: clean runs
agree, a GELU->ReLU bug never passes where the mode can see it, an overflow is named where inf appears."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tf_helpers import run_opdiff

tf = pytest.importorskip("tensorflow")

from opdiff.compare import compare
from opdiff.store import load

MODES = ("FULL_HEALTH", "CONCISE_HEALTH", "CURT_HEALTH", "SHAPE", "NO_TENSOR")


def _run(root: Path, mode: str, variant: str) -> None:
    """One tf.function run under tfdbg: gelu (golden), relu (the planted bug) or an overflow after gelu."""
    @tf.function
    def f(x, w):
        h = tf.matmul(x, w) + 0.5
        if variant.startswith("lrelu"):  # the same op (LeakyRelu) in both runs, with another alpha in the bug
            h = tf.nn.leaky_relu(h, alpha=-0.2 if variant == "lrelu_neg" else 0.2)
        else:
            h = tf.nn.relu(h) if variant == "relu" else tf.nn.gelu(h)
        return tf.reduce_sum(h, axis=1), h * (3e38 if variant == "overflow" else 2.0)

    x = tf.constant(np.random.RandomState(0).randn(3, 4).astype(np.float32))
    w = tf.constant(np.random.RandomState(1).randn(4, 5).astype(np.float32))
    tf.debugging.experimental.enable_dump_debug_info(str(root), tensor_debug_mode=mode, circular_buffer_size=-1)
    try:
        f(x, w)
    finally:
        tf.debugging.experimental.disable_dump_debug_info()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tfdbg-modes")
    for mode in MODES:
        for variant in ("gelu", "gelu2", "relu", "overflow"):
            if variant == "overflow" and mode in ("SHAPE", "NO_TENSOR"):
                continue
            _run(root / variant / mode, mode, "gelu" if variant == "gelu2" else variant)
    _run(root / "gelu" / "FULL_TENSOR", "FULL_TENSOR", "gelu")
    for variant in ("lrelu", "lrelu_neg"):
        _run(root / variant / "FULL_HEALTH", "FULL_HEALTH", variant)
    return root


def _diagnose(a: Path, b: Path) -> tuple[int, dict]:
    r = run_opdiff("diagnose", a, b, "--no-replay", "--json")
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.mark.parametrize("mode", MODES)
def test_identical_runs_never_fail(dumps, mode):
    """Two identical runs: every pair holding anything agrees; NO_TENSOR judges nothing and never passes."""
    cmp = compare(load(dumps / "gelu" / mode), load(dumps / "gelu2" / mode))
    assert not [r for r in cmp.results if r.result == "FAIL"]
    judged = [r for r in cmp.results if r.status == "compared"]
    if mode == "NO_TENSOR":
        assert not judged and all(r.status == "not-judged" for r in cmp.results if r.golden and r.target)
        assert not cmp.passed()
        return
    assert judged and all(r.mode == "counts" and r.result == "PASS" for r in judged)
    code, d = _diagnose(dumps / "gelu" / mode, dumps / "gelu2" / mode)
    assert (code, d["verdict"]) == (0, "pass")
    assert any("judged on" in w and mode in w for w in d["warnings"])  # says what it could not judge


def test_full_health_counts_catch_gelu_to_relu(dumps):
    """FULL_HEALTH keeps negative/zero/positive counts: ReLU's output has no negatives, GELU's has."""
    cmp = compare(load(dumps / "gelu" / "FULL_HEALTH"), load(dumps / "relu" / "FULL_HEALTH"))
    bad = [r for r in cmp.results if r.result == "FAIL"]
    assert bad and any("changed sign or zero" in r.err_message for r in bad)
    code, d = _diagnose(dumps / "gelu" / "FULL_HEALTH", dumps / "relu" / "FULL_HEALTH")
    assert code == 1 and d["verdict"] == "fault"
    # the op that made the counts differ (ReLU, which golden does not run), worded as counts, not rounding units
    assert (d["culprit"]["op"], d["culprit"]["node"]) == ("Relu", "f/Relu#0")
    assert "changed sign or zero" in d["culprit"]["reason"] and "rounding units" not in d["summary"]
    assert d["first_divergence"]["error_units"] is None


def test_full_health_blames_the_op_whose_counts_change_while_its_inputs_agree(dumps):
    """LeakyRelu in both runs, alpha 0.2 against -0.2: the first op whose sign counts differ while its input's
    counts agree is named, with the counts as evidence (golden negative 7 -> target 0)."""
    code, d = _diagnose(dumps / "lrelu" / "FULL_HEALTH", dumps / "lrelu_neg" / "FULL_HEALTH")
    assert code == 1 and d["verdict"] == "fault"
    assert (d["culprit"]["op"], d["culprit"]["how"]) == ("LeakyRelu", "output")
    assert "inputs agree" in d["culprit"]["reason"] and "changed sign or zero" in d["culprit"]["reason"]
    assert "units" not in d["culprit"]["reason"] and "units" not in d["candidates"][0]["reason"]
    assert [e["error_units"] for e in d["evidence"]["inputs"]] == [0.0]
    assert d["evidence"]["outputs"][0]["result"] == "FAIL" and d["evidence"]["outputs"][0]["error_units"] is None


@pytest.mark.parametrize("mode", ("CONCISE_HEALTH", "CURT_HEALTH", "SHAPE"))
def test_modes_blind_to_the_bug_say_so(dumps, mode):
    """Modes without sign counts cannot see GELU->ReLU: they never FAIL on a field they lack, and say what
    they did not judge."""
    cmp = compare(load(dumps / "gelu" / mode), load(dumps / "relu" / mode))
    judged = [r for r in cmp.results if r.status == "compared"]
    assert judged and not [r for r in judged if r.result == "FAIL"]
    assert all("judged on" in r.err_message and "no values" in r.err_message for r in judged)


@pytest.mark.parametrize("mode", ("FULL_HEALTH", "CONCISE_HEALTH", "CURT_HEALTH"))
def test_health_modes_name_the_overflow(dumps, mode):
    """h * 3e38 overflows to inf: the health modes diagnose an overflow at that Mul."""
    code, d = _diagnose(dumps / "gelu" / mode, dumps / "overflow" / mode)
    assert code == 1 and d["verdict"] == "overflow", d["summary"]
    assert d["culprit"]["op"] == "Mul"


def test_shape_mode_compares_shapes_and_dtypes(dumps):
    """SHAPE records carry TensorFlow's shapes and dtypes; the pairs are judged on them."""
    d = load(dumps / "gelu" / "SHAPE")
    mm = d["f/MatMul#0/forward/output/0"]
    assert (mm.shape, mm.dtype, sorted(mm.extra["held"])) == ((3, 5), "float32", ["dtype", "numel", "shape"])
    cmp = compare(d, load(dumps / "gelu2" / "SHAPE"))
    pr = next(r for r in cmp.results if r.name == mm.name)
    assert pr.result == "PASS" and "shape" in pr.err_message


def test_crc32c_flags_a_damaged_record_and_the_rest_still_reads(dumps, tmp_path):
    """One flipped byte inside a dumped tensor: its TFRecord checksum fails, that record (and the inputs that
    share it) are errors, never compared as data; every other pair still compares. A flipped length byte
    ends the file there and makes the dump incomplete (one line, exit 2)."""
    from opdiff.store import TensorSpan

    good = dumps / "gelu" / "FULL_TENSOR"
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    d = load(bad)
    rec = d["f/MatMul#0/forward/output/0"]
    span = d.span(rec)
    assert isinstance(span, TensorSpan)
    raw = bytearray(span.path.read_bytes())
    raw[span.offset + 3] ^= 0x10
    span.path.write_bytes(bytes(raw))
    cmp = compare(load(good), load(bad))
    by = {r.name: r for r in cmp.results}
    assert by[rec.name].status == "error" and "CRC-32C" in by[rec.name].err_message
    assert by["f/AddV2#0/forward/input/0"].status == "error"  # reads the same bytes
    assert sum(r.status == "compared" and r.result == "PASS" for r in cmp.results) >= 10
    r = run_opdiff("compare", good, bad, "-o", tmp_path / "out")
    assert r.returncode == 1, r.stderr
    raw[8] ^= 0x01  # the first record's length checksum of the trace file
    span.path.write_bytes(bytes(raw))
    r = run_opdiff("compare", good, bad, "-o", tmp_path / "out2")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "length checksum" in r.stderr
