"""NumPy-directory dumps: msaccucmp names ordered by timestamp/task id, plain trees, refused object arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opdiff.errors import DumpError
from opdiff.store.readers.npy_files import build_records, read_header


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
