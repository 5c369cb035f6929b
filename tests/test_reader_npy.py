"""NumPy-directory dumps: msaccucmp names ordered by timestamp/task id, plain trees, refused object arrays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opdiff.errors import DumpError
from opdiff.store.readers.npy_files import build_records, read_header
from opdiff.testing import npy_dumps

SRC = Path(__file__).resolve().parents[1] / "src"


def _write_msaccucmp(root: Path) -> dict[str, np.ndarray]:
    """Three ops of a graph as msaccucmp writes them, saved out of execution order."""
    rng = np.random.default_rng(0)
    arrays = {}
    for op_type, op, task, ts in (("Add", "add_1", 30, 300), ("MatMul", "dense_MatMul", 10, 100), ("Relu", "relu", 20, 200)):
        for io in ("input", "output"):
            a = rng.standard_normal((4, 8)).astype(np.float32)
            name = f"{op_type}.{op}.{task}.{ts}.{io}.0.npy"
            np.save(root / name, a)
            arrays[name] = a
    return arrays


def test_msaccucmp_names_in_execution_order(tmp_path):
    _write_msaccucmp(tmp_path)
    recs, problems = build_records(tmp_path, sorted(tmp_path.glob("*.npy")))
    assert not problems
    assert [r.op for r in recs] == ["MatMul", "MatMul", "Relu", "Relu", "Add", "Add"]
    assert [r.role for r in recs[:2]] == ["input", "output"]
    assert recs[0].name == "dense_MatMul/MatMul#0/forward/input/0" and recs[0].level == "graph"


def test_plain_tree_and_data_offset(tmp_path):
    (tmp_path / "layer1").mkdir()
    a = np.arange(12, dtype=np.float16).reshape(3, 4)
    np.save(tmp_path / "layer1" / "conv.npy", a)
    np.save(tmp_path / "logits.npy", a.astype(np.float64))
    recs, problems = build_records(tmp_path, sorted(tmp_path.rglob("*.npy")))
    assert [r.name for r in recs] == ["layer1/conv#0/forward/output/0", "logits#0/forward/output/0"]
    h = read_header(tmp_path / "layer1" / "conv.npy")
    raw = np.fromfile(h.path, dtype=np.float16, offset=h.offset).reshape(h.shape)
    assert np.array_equal(raw, a) and h.dtype == "float16"


def test_object_array_refused_with_one_line(tmp_path):
    np.save(tmp_path / "good.npy", np.ones(3, np.float32))
    np.save(tmp_path / "bad.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    recs, problems = build_records(tmp_path, sorted(tmp_path.glob("*.npy")))
    assert len(problems) == 1 and "bad.npy" in problems[0] and "\n" not in problems[0] and "refused" in problems[0]
    bad = next(r for r in recs if r.op == "bad")
    assert bad.extra["unreadable"] == problems[0]


def test_not_npy(tmp_path):
    (tmp_path / "x.npy").write_bytes(b"garbage")
    with pytest.raises(DumpError, match="not a readable .npy file"):
        read_header(tmp_path / "x.npy")


# -- through opdiff.load / compare / diagnose, on the dumps of a real (numpy) model --------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "opdiff", *args], capture_output=True, text=True, env=env, timeout=300)


def test_msaccucmp_tree_compare_and_diagnose(tmp_path):
    """Two runs in msaccucmp names (other task ids and timestamps): a clean pair passes, the tanh GELU is named."""
    import opdiff
    from opdiff import diagnose

    npy_dumps.write_msaccucmp(tmp_path / "g", npy_dumps.run_model())
    npy_dumps.write_msaccucmp(tmp_path / "g2", npy_dumps.run_model(), t0=1_700_000_009_000_000, task0=41)
    npy_dumps.write_msaccucmp(tmp_path / "t", npy_dumps.run_model(tanh_gelu=True), t0=1_700_000_005_000_000, task0=7)
    g, t = opdiff.load(tmp_path / "g"), opdiff.load(tmp_path / "t")
    assert g.format == "npy" and [r.name for r in g] == [r.name for r in t]
    links = {r.name: r.src for r in g if r.role == "input"}
    assert links["logits_MatMul/MatMul#0/forward/input/0"] == "dense_Gelu/Gelu#0/forward/output/0"
    assert links["logits_MatMul/MatMul#0/forward/input/1"] is None  # a weight: no recorded op made it
    d = diagnose.diagnose(g, t)
    assert d.verdict == "fault" and d.culprit.node == "dense_Gelu/Gelu#0"
    assert diagnose.diagnose(g, opdiff.load(tmp_path / "g2")).verdict == "pass"
    clean = _cli("compare", str(tmp_path / "g"), str(tmp_path / "g2"), "-o", str(tmp_path / "c0"), "--no-progress")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    bad = _cli("diagnose", str(tmp_path / "g"), str(tmp_path / "t"), "-o", str(tmp_path / "d1.json"))
    assert bad.returncode == 1 and "dense_Gelu" in bad.stdout, bad.stdout + bad.stderr


def test_precision_tool_tf_layout(tmp_path):
    """precision_tool's `precision_data/tf/dump` (outputs only, `{op}.{slot}.{µs}.npy`): ordered by time, fault named."""
    import opdiff
    from opdiff import diagnose

    g = npy_dumps.write_precision_tool_tf(tmp_path / "gold", npy_dumps.run_model())
    t = npy_dumps.write_precision_tool_tf(tmp_path / "targ", npy_dumps.run_model(tanh_gelu=True), t0=1_600_000_000_777_000)
    gd = opdiff.load(g)
    assert [r.name for r in gd] == [f"{op}#0/forward/output/0" for op in
                                    ("dense_MatMul", "dense_BiasAdd", "dense_Gelu", "logits_MatMul", "probs_Softmax")]
    d = diagnose.diagnose(gd, opdiff.load(t))
    assert d.verdict == "fault" and d.culprit.op == "dense_Gelu"
    ops = npy_dumps.run_model()
    assert np.array_equal(gd.tensor("dense_Gelu#0/forward/output/0"), ops[2][3])
