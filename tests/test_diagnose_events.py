"""The per-event rules' short cuts (docs/diagnose.md, "Sixth pass (session 8)") give what the rules asked one by one
give: events (bounds.unbounded_output skips tight_jump, leaf_jump and blame), the path of divergence (runs found
before entries are made), the candidates' ranking (nsmallest) and graph._tensor_errors (a differing tensor-mode
pair's error without pair_error). The oracles below are the code as it was, kept here as the definition; the runs
are real dumps at aten and module level, tensor and stats mode, with ops of every tight kind and noise in every
op's output, so that most outputs are events."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from opdiff import load
from opdiff.compare import compare
from opdiff.diagnose.bounds import leaf_jump, tight_jump, unbounded_output
from opdiff.diagnose.graph import Graph, _errors, _identity_key, _tensor_errors, build
from opdiff.diagnose.local import Event, abs_jump, calibrate, events, propagates
from opdiff.diagnose.noise import Noise
from opdiff.diagnose.verdict import _candidates, _diverging, _num, _path, _pick, _run_units, decide
from opdiff.metrics import names as M
from opdiff.testing.synthetic import OpRun

# one block: y = tanh(x w); s = y + x; v = view(s); m = v * w2 (no kind, sum, move, mul)
OPS = ("aten.tanh.default", "aten.add.Tensor", "aten.view.default", "aten.mul.Tensor")


def _mixed(path, level: str, target: bool, blocks: int = 12, fault: int = 17) -> None:
    """A root call around `blocks` blocks of the four OPS; at module level each block and each op is a module call
    (no producer links). The target adds relative noise of 0-4e-6 to each op's output (none to every fifth) and
    1e-3 to op `fault`'s, and reads golden's values on."""
    rng, noise = np.random.default_rng(0), np.random.default_rng(1)
    run = OpRun(path, level=level)
    x = rng.standard_normal(64).astype(np.float32)
    root = run.begin("", "Model", [x])
    src: str | None = None
    k = 0
    for b in range(blocks):
        block = run.begin(f"layers.{b}", "Block", [x]) if level == "module" else None
        w, w2 = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
        for j, op in enumerate(OPS):
            ins = {0: [x, w], 1: [x, x], 2: [x], 3: [x, w2]}[j]
            y = {0: lambda: np.tanh(x * w), 1: lambda: x + x, 2: lambda: x.copy(), 3: lambda: x * w2}[j]()
            y = y.astype(np.float32)
            out = y
            if target:  # the output off, what the next op reads as golden's (every output an event, as in the bench)
                eps = 1e-3 if k == fault else 1e-6 * (k % 5)
                out = (y * (1 + eps * noise.standard_normal(64))).astype(np.float32)
            links = [src if level == "aten" and i == 0 else None for i in range(len(ins))]
            module = f"layers.{b}.op{j}" if level == "module" else f"layers.{b}"
            (src,) = run.op(module, op if level == "aten" else f"Op{j}", list(zip(ins, links)), [out])
            x = y
            k += 1
        if block is not None:
            run.end(block, [x])
    run.end(root, [x])
    run.close()


def _compared(tmp_path, level: str, mode: str = "auto"):
    _mixed(tmp_path / "golden", level, False)
    _mixed(tmp_path / "target", level, True)
    g, t = load(tmp_path / "golden"), load(tmp_path / "target")
    return g, t, list(compare(g, t, workers=1, mode=mode).results)


def _events_walk(graph: Graph, noise: Noise) -> list[Event]:
    """local.events as it was: every rule asked of every tensor with an error."""
    skip = set(graph.nodes[graph.root].inputs) if graph.root is not None else set()
    out: list[Event] = []
    for t in graph.in_order():
        if t.err is None or t.err == 0 or t.id in skip:
            continue
        inh = graph.inherited(t)
        node = graph.nodes[t.node]
        if t.unit == 0:
            if inh > 0:
                continue
            thr, jump = 0.0, math.inf
        else:
            thr = noise.threshold(graph.chain_unit(t), inh, node.op, node.id)
            jump = t.err / thr if thr > 0 else math.inf
            if jump > 1 and inh > 0:
                jump = min(jump, abs_jump(graph, noise, t, node.op, node.id))
            tight = tight_jump(graph, t)
            if tight is not None:
                jump, thr = tight, t.err / tight if tight > 0 else thr
        if jump > 1:
            blamed, how = (node.id, "input") if leaf_jump(graph, t) is not None else graph.blame(t)
            out.append(Event(t.id, blamed, how, t.err, inh, thr, jump, _propagates_walk(graph, noise, t)))
    return out


def _propagates_walk(graph: Graph, noise: Noise, t) -> bool:
    """propagates(judged=True) with Graph.is_model_output as it was (every root output's key made per ask)."""
    if graph.root is not None:
        outs = graph.nodes[graph.root].outputs
        key = _identity_key(t.target)
        if t.id in outs or key is not None and any(_identity_key(graph.tensors[o].target) == key for o in outs):
            return True
    graph._root_keys = [None]  # no key equals None: propagates then asks the rest of its rules alone
    try:
        return propagates(graph, noise, t, judged=True)
    finally:
        graph._root_keys = None


def _path_walk(graph: Graph, start_order: int, culprit, noise: Noise, limit: int = 40) -> list[dict[str, Any]]:
    """verdict._path as it was: an entry made for every diverging output, replaced within a run."""
    comps = culprit.module.split(".") if culprit.module else []
    own = next((graph.tensors[i] for i in culprit.outputs if graph.tensors[i].err is not None), None)
    entries: list[dict[str, Any]] = [{
        "module": culprit.module, "node": culprit.name, "op": culprit.op,
        "record": own.target.name if own is not None and own.target else None,
        "error_units": _num(_run_units(own, noise)),
        "cosine": own.pair.metrics.get(M.COSINE) if own is not None else None}]
    groups = [culprit.module]
    ordered = graph.in_order()
    for t in map(ordered.__getitem__, _diverging(graph, noise)):
        if t.order < start_order or t.role != "output":
            continue
        node = graph.nodes[t.node]
        mc = node.module.split(".") if node.module else []
        depth = 0
        for part, cpart in zip(mc, comps):
            if part != cpart:
                break
            depth += 1
        key = ".".join(mc[: depth + 1])
        entry = {"module": node.module, "node": node.name, "op": node.op, "record": t.rec.name,
                 "error_units": _num(_run_units(t, noise)), "cosine": t.pair.metrics.get(M.COSINE)}
        if groups[-1] == key:
            entries[-1] = entry
        else:
            entries.append(entry)
            groups.append(key)
    if len(entries) > limit:
        entries = entries[: limit - 1] + [entries[-1]]
    return entries


CASES = [("aten", "auto"), ("module", "auto"), ("aten", "stats"), ("module", "stats")]


@pytest.mark.parametrize("level,mode", CASES)
def test_events_are_the_rule_by_rule_walk(tmp_path, level, mode):
    g, t, pairs = _compared(tmp_path, level, mode)
    graph = build(pairs, "forward", g, t)
    noise = calibrate(graph)
    got = events(graph, noise)
    assert got == _events_walk(graph, noise)
    assert len(got) >= (10 if level == "module" else 3) and {e.how for e in got} >= {"output"}
    plain = [x for x in graph.in_order() if x.node >= 0 and unbounded_output(x, graph.nodes[x.node])]
    for x in plain:  # the short cut's claim, rule by rule
        assert tight_jump(graph, x) is None and leaf_jump(graph, x) is None
        assert graph.blame(x) == (x.node, "output")
    outputs = [x for x in graph.in_order() if x.role == "output"]
    if level == "module":
        assert len(plain) == len(outputs)  # no module call is of a tight kind
    else:
        assert all(graph.nodes[x.node].level != "aten" for x in plain)  # the root call
        # aten: the tight rules decide (in tensor mode: statistics give no absolute error to bound)
        assert any(tight_jump(graph, x) is not None for x in outputs) == (mode == "auto")


@pytest.mark.parametrize("level,mode", CASES[:2])
def test_path_and_ranking_are_the_walks(tmp_path, level, mode):
    g, t, pairs = _compared(tmp_path, level, mode)
    graph = build(pairs, "forward", g, t)
    noise = calibrate(graph)
    evs = events(graph, noise)
    checked = 0
    for node in graph.nodes[::5]:
        starts = [graph.tensors[i].order for i in node.outputs] or [node.start]
        for limit in (2, 3, 40):
            for start in (starts[0], 0, node.end + 1):
                assert _path(graph, start, node, noise, limit) == _path_walk(graph, start, node, noise, limit)
                checked += 1
    assert checked > 30 and len(_path(graph, 0, graph.nodes[1], noise, 3)) == 3  # truncation exercised
    d = decide(graph, noise, evs, None, [], [], replayable=False)
    cands = _candidates(graph, evs)
    pick = _pick(cands)
    assert d.verdict == "fault" and pick is not None and len(cands) > 10
    ranked = [cands[pick]] + sorted((c for i, c in enumerate(cands) if i != pick), key=lambda c: -c[2])
    assert [(c.node, c.score) for c in d.candidates] == [(n.name, _num(j)) for n, _, j in ranked[:10]]


def _odd(p, how: str):
    """A differing tensor-mode pair changed so that _tensor_errors must leave it to _errors."""
    g, t, m = p.golden, p.target, dict(p.metrics)
    if how == "fill":  # golden holds a mask's finfo.min: maybe one mask in two encodings
        return replace(p, golden=replace(g, stats=replace(g.stats, min=-3.0e38)))
    if how == "nan":
        return replace(p, target=replace(t, stats=replace(t.stats, nan=1)))
    if how == "same_hash":
        return replace(p, golden=replace(g, hash="xxh3:" + "a" * 16), target=replace(t, hash="xxh3:" + "a" * 16))
    if how == "numpy_metric":  # a numpy scalar: _num's work
        return replace(p, metrics={**m, M.RED: np.float32(m[M.RED])})
    if how == "no_rel":
        return replace(p, metrics={k: v for k, v in m.items() if k != M.RED})
    if how == "inf_metric":
        return replace(p, metrics={**m, M.NORM_MAX_ABS_ERR: math.inf})
    raise AssertionError(how)


@pytest.mark.parametrize("level", ["aten", "module"])
def test_tensor_errors_are_errors(tmp_path, level):
    g, t, pairs = _compared(tmp_path, level)
    differing = [p for p in pairs if p.status == "compared" and p.mode == "tensor" and not p.bitwise_equal]
    assert len(differing) > 20
    for p in differing:
        fast = _tensor_errors(p)
        assert fast is not None and fast == _errors(p, g, t)
    for how in ("fill", "nan", "same_hash", "numpy_metric", "no_rel", "inf_metric"):
        for p in differing[:5]:
            q = _odd(p, how)
            assert _tensor_errors(q) is None, how
    # the graph with odd pairs mixed in is the one _errors gives pair by pair
    mixed = list(pairs)
    at = [i for i, p in enumerate(pairs) if p in differing]
    for i, how in zip(at[::4], ("fill", "nan", "same_hash", "numpy_metric", "no_rel", "inf_metric")):
        mixed[i] = _odd(pairs[i], how)
    graph = build(mixed, "forward", g, t)
    want = [_errors(p, g, t) for p in mixed]
    assert [(x.err, x.abs_err) for x in graph.tensors] == want
