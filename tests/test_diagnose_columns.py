"""Graph.columns: the per-tensor quantities diagnose computes for all tensors at once (diagnose/columns.py) equal
what the per-tensor rules give, on graphs built from real dumps: op level with producer links, module level with
nesting and no links, ops golden lacks (look-through), errors made unknown, nan or inf after build."""

from __future__ import annotations

import math
from statistics import median

import numpy as np
import pytest

from opdiff import load
from opdiff.compare import compare
from opdiff.diagnose.graph import Graph, build
from opdiff.diagnose.local import calibrate
from opdiff.diagnose.noise import AMPLIFICATION, UNIT, Noise
from opdiff.metrics.thresholds import SIGNIFICANT
from opdiff.testing.synthetic import OpRun


def _run(path, level: str, target: bool, fault: int | None, inserted: int | None, blocks: int = 4) -> None:
    """A root call around blocks of two ops each (y = tanh(x w) + x/2, weight inputs without producer); at module
    level each block is a module call enclosing its ops. The target scales op `fault`'s output and runs an extra
    op golden does not have after op `inserted`."""
    rng, noise = np.random.default_rng(0), np.random.default_rng(1)
    run = OpRun(path, level=level)
    x = rng.standard_normal(64).astype(np.float32)
    root = run.begin("", "Model", [x])
    src = None
    k = 0
    for b in range(blocks):
        block = run.begin(f"layers.{b}", "Block", [x]) if level == "module" else None
        for j in range(2):
            w = rng.standard_normal(64).astype(np.float32)
            y = (np.tanh(x * w) + 0.5 * x).astype(np.float32)
            if target and k == fault:
                y = (y * (1 + 1e-3 * noise.standard_normal(64))).astype(np.float32)
            (src,) = run.op(f"layers.{b}.f{j}", "aten.f.default", [(x, src), (w, None)], [y])
            x = y
            if target and k == inserted:
                x = (x * 1.0).astype(np.float32)
                (src,) = run.op(f"layers.{b}.extra", "aten.mul.Tensor", [(y, src)], [x])
            k += 1
        if block is not None:
            run.end(block, [x])
    run.end(root, [x])
    run.close()


def _graph(tmp_path, level: str, fault: int | None = 2, inserted: int | None = None) -> Graph:
    _run(tmp_path / "golden", level, False, fault, inserted)
    _run(tmp_path / "target", level, True, fault, inserted)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    return build(list(compare(g, t, workers=1).results), "forward", g, t)


def _reference(graph: Graph) -> list[float]:
    """inherited() as the per-tensor rule defines it: the largest known error among known_sources."""
    out = []
    for t in graph.tensors:
        errs = [s.err for s in graph._known_sources(t, 8) if s.err is not None]
        out.append(max(errs) if errs else 0.0)
    return out


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def _reference_calibrate(graph: Graph) -> Noise:
    """calibrate() as a walk over the tensors one by one (the rule the columns compute)."""
    run_dtype, run_unit = "float32", UNIT["float32"]
    for t in graph.tensors:
        d = t.target.dtype if t.target is not None else None
        if d in UNIT and UNIT[d] > run_unit:
            run_dtype, run_unit = d, UNIT[d]
    skip = set(graph.nodes[graph.root].inputs) if graph.root is not None else set()
    ref = _reference(graph)
    fresh, measured = [], []
    for t in graph.tensors:
        if t.target is None or t.err is None or not math.isfinite(t.err) or t.unit == 0 or t.id in skip:
            continue
        inh = ref[t.id]
        if inh <= t.unit:
            fresh.append(t.err / t.unit)
        elif t.role == "output" and t.err > 0:
            measured.append((t, t.err, inh))
    floor = min(max(median(fresh), 1.0), 8.0) if fresh else 1.0
    ratios: dict[str, list[tuple[float, int]]] = {}
    for t, err, inh in measured:
        if inh > SIGNIFICANT * floor * t.unit:
            ratios.setdefault(graph.nodes[t.node].op, []).append((err / inh, t.node))
    for rs in ratios.values():
        rs.sort(reverse=True)
    return Noise(floor=floor, amplification=AMPLIFICATION, per_op=ratios, run_unit=run_unit, run_dtype=run_dtype)


@pytest.mark.parametrize("level", ["aten", "module"])
@pytest.mark.parametrize("inserted", [None, 4])
def test_columns_equal_the_per_tensor_rules(tmp_path, level, inserted):
    graph = _graph(tmp_path, level, inserted=inserted)
    cols = graph.columns()
    assert _same(cols.inherited.tolist(), _reference(graph))
    assert max(cols.inherited) > 1e-4  # the fault's error is inherited downstream: the comparison is not vacuous
    if inserted is not None:  # an op golden lacks, after the fault: its reader inherits through it
        extra = next(t for t in graph.tensors if t.target is not None and t.target.op == "aten.mul.Tensor" and
                     t.role == "output")
        reader = next(i for i, p in graph.producer.items() if p == extra.id)
        assert extra.err is None and cols.inherited[reader] > 1e-4
    assert calibrate(graph) == _reference_calibrate(graph)
    assert cols.err.tolist() == [math.nan if t.err is None else t.err for t in graph.tensors] or \
        _same(cols.err.tolist(), [math.nan if t.err is None else t.err for t in graph.tensors])
    assert cols.unit.tolist() == [t.unit for t in graph.tensors]


@pytest.mark.parametrize("level", ["aten", "module"])
def test_columns_follow_changed_errors(tmp_path, level):
    """Errors changed after build (unknown, inf, nan) reach the columns once Graph.changed() is called."""
    graph = _graph(tmp_path, level)
    seeded = graph.columns().inherited.tolist()
    outs = [t for t in graph.in_order() if t.role == "output" and t.err is not None]
    for t, err in zip(outs[2:5], (None, math.inf, 0.25)):
        t.err = err
    graph.changed()
    changed = graph.columns().inherited.tolist()
    assert _same(changed, _reference(graph)) and changed != seeded
    assert calibrate(graph) == _reference_calibrate(graph)
    outs[6].err = math.nan  # max() over a nan is order-bound: every tensor goes through known_sources
    graph.changed()
    assert _same(graph.columns().inherited.tolist(), _reference(graph))


def _flat_run(path, target: bool, inserted: int | None, ops: int = 44) -> None:
    """Module-level calls right under the root, no producer links (y = x/2 + tanh(x w)/10: an error halves at each
    call). The target's call 1 is off by 10 %; it runs an extra call golden lacks after call `inserted`."""
    rng = np.random.default_rng(0)
    run = OpRun(path, level="module")
    x = rng.standard_normal(64).astype(np.float32)
    root = run.begin("", "Model", [x])
    for k in range(ops):
        w = rng.standard_normal(64).astype(np.float32)
        y = (0.5 * x + 0.1 * np.tanh(x * w)).astype(np.float32)
        if target and k == 1:
            y = (y * 1.1).astype(np.float32)
        run.op(f"f{k}", "F", [(x, None), (w, None)], [y])
        x = y
        if target and k == inserted:
            x = (x * 1.5).astype(np.float32)
            run.op(f"extra{k}", "G", [(y, None)], [x])
    run.end(root, [x])
    run.close()


@pytest.mark.parametrize("inserted", [None, 3])
@pytest.mark.parametrize("wide", [False, True])
def test_module_scope_columns_equal_the_per_tensor_rules(tmp_path, monkeypatch, inserted, wide):
    """Module level, a root with more children than the scope (SCOPE) holds: each call's weight, made by no
    recorded call, inherits from the root's input and its last SCOPE children's outputs, as scope_before says
    (the oldest of them carrying the largest error), also where a call golden lacks (an unknown error) lies in
    that scope and known_sources looks through it. `wide`: the parent's scopes in numpy (columns._wide_scope,
    taken for a parent with many inputs to answer), else one input at a time."""
    from opdiff.diagnose import columns as C
    from opdiff.diagnose.graph import SCOPE

    monkeypatch.setattr(C, "WIDE", 1 if wide else 10**9)

    _flat_run(tmp_path / "golden", False, None)
    _flat_run(tmp_path / "target", True, inserted)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    graph = build(list(compare(g, t, workers=1).results), "forward", g, t)
    assert graph.root is not None and len(graph.nodes[graph.root].children) > SCOPE + 4
    cols = graph.columns()
    ref = _reference(graph)
    assert _same(cols.inherited.tolist(), ref)
    late = [t.id for t in graph.in_order() if t.role == "input" and t.target.pos == "1" and t.order > 2 * SCOPE]
    assert late and len({ref[i] for i in late}) > 1  # the window moves: late weights inherit different errors
    assert calibrate(graph) == _reference_calibrate(graph)
