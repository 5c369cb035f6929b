"""The tfdbg v2 reader: real TensorFlow dumps read without TensorFlow, checked against TensorFlow's own reader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tf_helpers import run_opdiff

tf = pytest.importorskip("tensorflow")

from opdiff.base.errors import DumpError
from opdiff.store.readers import tfdbg


def _cli(*args: object) -> tuple[int, str, str]:
    r = run_opdiff(*args)
    return r.returncode, r.stdout, r.stderr


def _fn():
    @tf.function
    def f(x, w):
        h = tf.nn.relu(tf.matmul(x, w) + 0.5)
        return tf.reduce_sum(h, axis=1), tf.math.log(h)  # log(0) = -inf where relu cut
    return f


def _dump(root: Path, mode: str) -> tuple:
    f = _fn()
    x = tf.constant(np.random.RandomState(0).randn(3, 4).astype(np.float32))
    w = tf.constant(np.random.RandomState(1).randn(4, 5).astype(np.float32))
    tf.debugging.experimental.enable_dump_debug_info(str(root), tensor_debug_mode=mode, circular_buffer_size=-1)
    try:
        outs = f(x, w)
        eager = x * 2.0
    finally:
        tf.debugging.experimental.disable_dump_debug_info()
    return [o.numpy() for o in outs], eager.numpy()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfdbg")
    out = {}
    for mode in ("FULL_TENSOR", "FULL_HEALTH", "CURT_HEALTH"):
        out[mode] = root / mode
        out[mode + "-values"] = _dump(root / mode, mode)
    return out


def test_records_equal_tensorflows_own_reader(dumps):
    from tensorflow.python.debug.lib import debug_events_reader

    d = tfdbg.open_dump(dumps["FULL_TENSOR"])
    outputs = [r for r in d.records if r.level == "graph" and r.role == "output"]
    with debug_events_reader.DebugDataReader(str(dumps["FULL_TENSOR"])) as ref:
        ref.update()
        traces = list(ref.graph_execution_traces())
        assert [t.op_name for t in traces] == [r.extra["tf_op_name"] for r in outputs]
        for t, r in zip(traces, outputs):
            want = ref.graph_execution_trace_to_tensor_value(t)
            got = d.tensor(r)
            assert got.dtype == want.dtype and got.shape == want.shape, r.name
            np.testing.assert_array_equal(got, want)
    ops = {r.op for r in outputs}
    assert {"MatMul", "AddV2", "Relu", "Sum", "Log"} <= ops


def test_graph_outputs_are_the_functions_results_and_inputs_link_producers(dumps):
    d = tfdbg.open_dump(dumps["FULL_TENSOR"])
    (s, log), eager = dumps["FULL_TENSOR-values"]
    np.testing.assert_array_equal(d.tensor("f/Sum#0/forward/output/0"), s)
    np.testing.assert_array_equal(d.tensor("f#0/forward/output/1"), log)
    np.testing.assert_array_equal(d.tensor("Mul#0/forward/output/0"), eager)
    relu_in = d["f/Relu#0/forward/input/0"]
    assert relu_in.src == "f/AddV2#0/forward/output/0"
    np.testing.assert_array_equal(d.tensor(relu_in), d.tensor(relu_in.src))
    log_out = d["f/Log#0/forward/output/0"]
    assert log_out.stats.neginf == int(np.isneginf(log).sum()) > 0
    assert log_out.source and log_out.source.endswith(".py:" + log_out.source.rsplit(":", 1)[1])
    assert "test_reader_tfdbg.py" in log_out.source
    assert d.meta["framework"] == "tensorflow" and d.meta["tensor_debug_mode"] == ["FULL_TENSOR"]
    assert d.complete and d.parts == [(0, 0)]


def test_full_health_gives_counts_without_data(dumps):
    d = tfdbg.open_dump(dumps["FULL_HEALTH"])
    log_out = d["f/Log#0/forward/output/0"]
    (_, log), _ = dumps["FULL_HEALTH-values"]
    assert log_out.stats.numel == log.size and log_out.stats.neginf == int(np.isneginf(log).sum())
    assert log_out.data is None and log_out.stats.max is None
    with pytest.raises(DumpError, match="no tensor data"):
        d.tensor(log_out)


def test_reading_does_not_import_tensorflow(dumps):
    code = ("import sys\nfrom pathlib import Path\nfrom opdiff.store.readers import tfdbg\nimport opdiff.tf\n"
            "d = tfdbg.open_dump(Path(sys.argv[1])); d.tensor(d.records[-1])\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'torch'))))\n")
    res = subprocess.run([sys.executable, "-c", code, str(dumps["FULL_TENSOR"])], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""


def test_opdiff_load_recognises_a_tfdbg_root(dumps):
    import opdiff
    from opdiff.store import Dump, TensorSpan

    d = opdiff.load(dumps["FULL_TENSOR"])
    assert isinstance(d, Dump) and d.format == "tfdbg" and "f/MatMul#0/forward/output/0" in d
    assert d.with_part(0, 0) is d
    with pytest.raises(DumpError, match="one part"):
        d.with_part(1, 0)
    # a tensor_content tensor is a span of the trace file itself; reading it gives TensorFlow's values
    spans = [(r, d.span(r)) for r in d.records if r.data is not None]
    on_disk = [(r, s) for r, s in spans if isinstance(s, TensorSpan)]
    assert on_disk, "no record read in place"
    for rec, span in on_disk:
        assert span.path.parent == dumps["FULL_TENSOR"] and span.path.suffix in (".execution", ".graph_execution_traces")
        raw = np.frombuffer(span.path.read_bytes()[span.offset:span.offset + span.nbytes], dtype=d.tensor(rec).dtype)
        np.testing.assert_array_equal(raw.reshape(rec.shape), d.tensor(rec))


def test_import_writes_an_opdiff_dump_that_compares_equal(dumps, tmp_path):
    code, out, err = _cli("import", "tfdbg", dumps["FULL_TENSOR"], tmp_path / "a")
    assert code == 0, err
    assert "records" in out
    import opdiff

    src = tfdbg.open_dump(dumps["FULL_TENSOR"])
    a = opdiff.load(tmp_path / "a")
    assert [r.name for r in a.records] == [r.name for r in src.records]
    assert a.meta["source_format"] == "tfdbg" and a.meta["source_meta"]["tfdbg_run_id"] == src.meta["tfdbg_run_id"]
    rec = a["f/Relu#0/forward/input/0"]
    assert rec.src == "f/AddV2#0/forward/output/0" and rec.hash == src[rec.name].hash
    np.testing.assert_array_equal(a.tensor(rec), src.tensor(rec.name))
    code, _, err = _cli("import", "tfdbg", dumps["FULL_TENSOR"], tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and "--force" in err  # never overwritten silently
    code, _, err = _cli("import", "tfdbg", dumps["FULL_TENSOR"], tmp_path / "b")
    assert code == 0, err
    r = run_opdiff("compare", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "cmp", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout.split("reports:")[0].replace("FAIL 0", "")
    assert (tmp_path / "cmp" / "compare.json").exists()


def _bad(dumps, tmp_path, drop: str | None = None, garble: str | None = None) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(dumps["FULL_TENSOR"], bad)
    for p in bad.iterdir():
        if drop and p.name.endswith("." + drop):
            p.unlink()
        if garble and p.name.endswith("." + garble):
            p.write_bytes(b"\x05" + b"\x00" * 11 + b"\xff\xff\xff" + b"\x00" * 6)
    return bad


@pytest.mark.parametrize("drop", ["graphs", "graph_execution_traces", "metadata"])
def test_missing_file_is_one_line_exit_2(dumps, tmp_path, drop):
    bad = _bad(dumps, tmp_path, drop=drop)
    code, out, err = _cli("import", "tfdbg", bad, tmp_path / "o")
    assert code == 2
    assert err.count("\n") == 1 and str(bad) in err and f"*.{drop}" in err
    assert not (tmp_path / "o").exists()


def test_garbled_file_is_one_line_exit_2_and_curt_health_imports(dumps, tmp_path):
    bad = _bad(dumps, tmp_path, garble="graphs")
    code, _, err = _cli("import", "tfdbg", bad, tmp_path / "o")
    assert code == 2 and err.count("\n") == 1 and ".graphs" in err
    code, _, err = _cli("import", "tfdbg", dumps["CURT_HEALTH"], tmp_path / "o2")  # every mode reads now
    assert code == 0 and (tmp_path / "o2" / "meta.json").exists(), err
    (tmp_path / "empty").mkdir()
    code, _, err = _cli("import", "tfdbg", tmp_path / "empty", tmp_path / "o3")
    assert code == 2 and "not a tfdbg dump" in err
