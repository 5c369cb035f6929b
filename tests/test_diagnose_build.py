"""graph.build, column by column (docs/diagnose.md, "Speed"), gives the graph the one-pair-at-a-time walk gave: on
real dumps at op and module level, with ops only the target runs (unmatched target records), ops only golden
runs, pairs of another pass mixed in, and records of a call out of order. The oracle below is that walk, kept
here as the definition."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from opdiff import load
from opdiff.base.pair import PairResult
from opdiff.compare import compare
from opdiff.diagnose.graph import Graph, _errors, _producers, build, identity_key
from opdiff.diagnose.inplace import inplace_change
from opdiff.diagnose.run import diagnose_pass
from opdiff.diagnose.tally import tally_of
from opdiff.metrics.thresholds import unit
from test_diagnose_columns import _run  # blocks of ops; an op only one run has; a fault


def _walk(pairs: list[PairResult], direction: str, golden, target) -> dict:
    """The graph as the walk over the pairs one at a time builds it (the oracle)."""
    ts, nodes, ids, by_name, levels, golden_only = [], [], {}, {}, set(), []
    for p in pairs:
        g, t = p.golden, p.target
        if (t or g).direction != direction:
            continue
        tid = len(ts)
        err, abs_err = _errors(p, golden, target)
        u = unit(g.dtype if g else None, t.dtype if t else None)
        if t is None:
            ts.append((tid, err, abs_err, u, -1, -1, None))
            golden_only.append(tid)
            continue
        if t.node not in ids:
            ids[t.node] = len(nodes)
            nodes.append({"name": t.node, "module": t.module, "op": t.op, "level": t.level, "start": t.index,
                          "end": t.index, "inputs": [], "params": [], "outputs": [], "golden": None})
            levels.add(t.level)
        n = nodes[ids[t.node]]
        n["start"], n["end"] = min(n["start"], t.index), max(n["end"], t.index)
        levels.add(t.level)
        moved = inplace_change(p, target) if g is None and err is not None else None
        ts.append((tid, err, abs_err, u, ids[t.node], t.index, moved))
        by_name[t.name] = tid
        if g is not None and n["golden"] is None and err is not None:
            n["golden"] = g.node
        n["inputs" if t.role == "input" else "params" if t.role == "parameter" else "outputs"].append(tid)
    return {"tensors": ts, "nodes": nodes, "levels": levels, "golden_only": golden_only, "by_name": by_name}


def _as_walk(graph: Graph) -> dict:
    nodes = [{"name": n.name, "module": n.module, "op": n.op, "level": n.level, "start": n.start, "end": n.end,
              "inputs": n.inputs, "params": n.params, "outputs": n.outputs, "golden": n.golden} for n in graph.nodes]
    ts = [(t.id, t.err, t.abs_err, t.unit, t.node, t.order, t.moved) for t in graph.tensors]
    return {"tensors": ts, "nodes": nodes, "levels": graph.levels, "golden_only": graph.golden_only}


def _same(a, b) -> bool:
    """Equal, nan equal to nan (a tensor's error may be nan)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isnan(a) and math.isnan(b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _producers_walk(order, by_name, tensors) -> dict[int, int]:
    """graph._producers one tensor at a time, as it was written first: the oracle for its C-level maps."""
    producer: dict[int, int] = {}
    last_output: dict[object, int] = {}
    for t in order:
        r = t.target
        if r.role == "input":
            src = by_name.get(r.src) if r.src else None
            if src is not None and tensors[src].role != "input":
                producer[t.id] = src
            elif src is not None and src in producer:
                producer[t.id] = producer[src]
            elif src is None:
                key = identity_key(r)
                if key is not None and key in last_output:
                    producer[t.id] = last_output[key]
        elif r.role in ("output", "parameter"):
            key = identity_key(r)
            if key is not None:
                last_output[key] = t.id
    return producer


def _pairs(tmp_path, level: str, golden_extra: bool, target_extra: bool):
    """Golden and target of _run (the target's op 2 off), each with an op the other lacks when asked, compared."""
    _run(tmp_path / "golden", level, True, None, 1 if golden_extra else None)
    _run(tmp_path / "target", level, True, 2, 1 if target_extra else None)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    return g, t, compare(g, t, workers=1)


CASES = [("aten", False, False), ("aten", False, True), ("aten", True, False), ("module", False, True),
         ("module", True, False), ("module", False, False)]


@pytest.mark.parametrize("level,golden_extra,target_extra", CASES)
def test_build_gives_the_graph_of_the_walk(tmp_path, level, golden_extra, target_extra):
    g, t, cmp = _pairs(tmp_path, level, golden_extra, target_extra)
    pairs = list(cmp.results)
    if target_extra or golden_extra:
        assert any(p.golden is None or p.target is None for p in pairs)  # the case has one-sided pairs
    graph = build(pairs, "forward", g, t)
    want = _walk(pairs, "forward", g, t)
    assert _same(_as_walk(graph), {k: v for k, v in want.items() if k != "by_name"})
    assert graph.tally is not None and graph.tally.other == 0
    ref = tally_of(pairs, "forward")
    assert graph.tally.odd == ref.odd and graph.tally.modes == ref.modes and graph.tally.compared() == ref.compared()
    assert graph.tally.compared() == sum(p.status == "compared" for p in pairs)
    assert graph.tally.one_sided("golden") == sum(p.target is None for p in pairs)
    assert graph.tally.one_sided("target") == sum(p.golden is None for p in pairs)
    order = sorted((x for x in graph.tensors if x.target is not None), key=lambda x: x.order)
    assert graph.producer == _producers(order, want["by_name"], graph.tensors)  # roles from the tensors
    assert graph.producer == _producers_walk(order, want["by_name"], graph.tensors)
    owner: dict[str, int] = {}
    for n in sorted(graph.nodes, key=lambda n: n.start):  # the first non-parameter call of each module, one at a time
        if n.op != "parameter" and n.level != "param":
            owner.setdefault(n.module, n.id)
    assert list(graph.owner.items()) == list(owner.items()) and owner
    consumers: dict[int, list[int]] = {}
    for inp, out in graph.producer.items():
        consumers.setdefault(out, []).append(inp)
    assert graph.consumers == consumers
    assert graph.columns_seeded() and list(graph.dtype_pairs) == list(dict.fromkeys(
        (p.golden.dtype if p.golden else None, p.target.dtype if p.target else None) for p in pairs))


def test_pairs_of_another_pass_are_skipped_and_counted(tmp_path):
    g, t, cmp = _pairs(tmp_path, "aten", False, True)
    pairs = [replace(p, target=replace(p.target, direction="backward")) if p.target is not None and i % 3 == 1 else p
             for i, p in enumerate(cmp.results)]
    graph = build(pairs, "forward", g, t)
    assert graph.tally is not None and graph.tally.other == sum(1 for i, p in enumerate(cmp.results)
                                                               if p.target is not None and i % 3 == 1) > 0
    assert _same(_as_walk(graph), {k: v for k, v in _walk(pairs, "forward", g, t).items() if k != "by_name"})


def test_records_of_a_call_out_of_order_span_it(tmp_path):
    """A call whose records come late (an input recorded after its output) still spans them all."""
    g, t, cmp = _pairs(tmp_path, "aten", False, False)
    pairs = list(cmp.results)
    pairs[3], pairs[5] = pairs[5], pairs[3]
    graph = build(pairs, "forward", g, t)
    assert _same(_as_walk(graph), {k: v for k, v in _walk(pairs, "forward", g, t).items() if k != "by_name"})


def test_counts_and_warnings_of_a_pass_are_those_of_its_pairs(tmp_path):
    """diagnose_pass's counts, from build's tally, are the counts over the pairs (unmatched on both sides)."""
    g, t, cmp = _pairs(tmp_path, "module", True, False)
    d = diagnose_pass(g, t, cmp)
    pairs = cmp.results
    assert d.counts["pairs"] == len(pairs)
    assert d.counts["compared"] == sum(p.status == "compared" for p in pairs)
    assert d.counts["unmatched_golden"] == sum(p.target is None for p in pairs) > 0
    assert d.counts["unmatched_target"] == sum(p.golden is None for p in pairs)
    n_g = sum(p.status == "unmatched" and p.target is None for p in pairs)
    assert any(w.startswith(f"{n_g} golden and 0 target records have no counterpart") for w in d.warnings)


@pytest.mark.parametrize("level,golden_extra,target_extra", [("aten", False, True), ("module", True, False)])
def test_stats_mode_errors_are_the_walks(tmp_path, level, golden_extra, target_extra):
    """A stats-mode comparison: every pair's error is its statistics' (noise.stats_errors by columns), as the walk
    (stats_error one pair at a time) gives it."""
    _run(tmp_path / "golden", level, True, None, 1 if golden_extra else None)
    _run(tmp_path / "target", level, True, 2, 1 if target_extra else None)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    pairs = list(compare(g, t, workers=1, mode="stats").results)
    assert {p.mode for p in pairs if p.status == "compared"} == {"stats"}
    graph = build(pairs, "forward", g, t)
    want = _walk(pairs, "forward", g, t)
    assert _same(_as_walk(graph), {k: v for k, v in want.items() if k != "by_name"})
    assert any(x.err for x in graph.tensors) and any(x.err == 0.0 for x in graph.tensors)  # the fault, and agreement


def _mutated(pairs: list[PairResult], how: str) -> list[PairResult]:
    """The pairs with one pair changed so that build's column checks must leave the per-pair tests to the loop:
    a bitwise-equal output recorded as an alias (src), a pair made by sequence alignment, a stats pair whose two
    sides hash the same, a stats pair whose non-finite counts differ, a pair of integers."""
    out = list(pairs)
    for i, p in enumerate(out):
        g, t = p.golden, p.target
        if g is None or t is None or p.status != "compared":
            continue
        differs = not p.bitwise_equal and g.stats.norm != t.stats.norm
        if how == "alias" and p.bitwise_equal and t.role == "output":
            out[i] = replace(p, target=replace(t, src=t.name))
        elif how == "sequence" and p.bitwise_equal and t.role == "output":
            out[i] = replace(p, match="sequence", golden=replace(g, op="aten.other.default"))
        elif how == "hashed" and differs:
            out[i] = replace(p, golden=replace(g, hash="a" * 16), target=replace(t, hash="a" * 16))  # equal: 0
        elif how == "nonfinite" and differs:
            out[i] = replace(p, target=replace(t, stats=replace(t.stats, nan=1)))
        elif how == "integer" and differs:
            out[i] = replace(p, golden=replace(g, dtype="int32"), target=replace(t, dtype="int32"))
        else:
            continue
        return out
    raise AssertionError(f"no pair to change for {how}")


@pytest.mark.parametrize("mode,how", [("auto", "alias"), ("auto", "sequence"), ("auto", "integer"),
                                      ("stats", "hashed"), ("stats", "nonfinite"), ("stats", "integer")])
def test_column_checked_shortcuts_leave_odd_pairs_to_the_walk(tmp_path, mode, how):
    """build reads only the bitwise flag (or, in stats mode, the statistics' tests inline) where it checked every
    other condition of the shortcut by columns: one pair that breaks a condition still gets the walk's error."""
    _run(tmp_path / "golden", "aten", True, None, None)
    _run(tmp_path / "target", "aten", True, 2, None)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    pairs = _mutated(list(compare(g, t, workers=1, mode=mode).results), how)
    graph = build(pairs, "forward", g, t)
    assert _same(_as_walk(graph), {k: v for k, v in _walk(pairs, "forward", g, t).items() if k != "by_name"})


@pytest.mark.parametrize("mode,how", [("auto", None), ("stats", None), ("auto", "integer")])
def test_divergence_over_columns_is_noise_agrees(tmp_path, mode, how):
    """verdict._diverging (the first divergence, the path) tests Noise.agrees over the columns: the same tensors,
    in execution order, as the test asked of each tensor (integers: unit 0, any error diverges)."""
    from opdiff.diagnose.local import calibrate
    from opdiff.diagnose.verdict import _diverging

    _run(tmp_path / "golden", "module", True, None, None)
    _run(tmp_path / "target", "module", True, 2, None)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    pairs = list(compare(g, t, workers=1, mode=mode).results)
    graph = build(_mutated(pairs, how) if how else pairs, "forward", g, t)
    noise = calibrate(graph)
    want = [x.id for x in graph.in_order() if x.err is not None and not noise.agrees(x.err, x.unit)]
    assert [graph.in_order()[i].id for i in _diverging(graph, noise)] == want and want
    if how == "integer":
        assert any(graph.tensors[i].unit == 0 for i in want)
