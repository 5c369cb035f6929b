"""Per-tensor quantities of a graph as numpy columns over tensor ids, computed once and shared by the rules.

Diagnose reasons on every record pair of a comparison (100,000 and more): the quantities every rule asks
for each tensor (its error, its rounding unit, the largest error it inherits) are computed here for all
tensors at once, in numpy for the common cases (an input with one producer, an op's output computed from
recorded tensors), and through Graph.known_sources only for the rest (look-through of unmatched tensors, a
module's own code). Values are exactly those the per-tensor rules compute (docs/diagnose.md, "Speed").
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import is_not
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .graph import Graph, Node

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

ROLE_OTHER, ROLE_INPUT, ROLE_OUTPUT, ROLE_GRADIENT, ROLE_PARAMETER = 0, 1, 2, 3, 4
ROLE_CODE = {"input": ROLE_INPUT, "output": ROLE_OUTPUT, "gradient": ROLE_GRADIENT, "parameter": ROLE_PARAMETER}


@dataclass(slots=True)
class Seed:
    """Per-tensor values graph.build's loop has at hand anyway (no second pass over the tensors): valid
    until the graph's tensors change (Graph.changed drops it)."""

    err: list[float | None] = field(default_factory=list)
    unit: list[float] = field(default_factory=list)
    node: list[int] = field(default_factory=list)
    role: list[int] = field(default_factory=list)  # ROLE_* of the target record (ROLE_OTHER: golden only)


@dataclass(frozen=True, slots=True)
class Columns:
    """One entry per tensor id of the graph they were taken from (Graph.columns)."""

    err: F64  # Tensor.err, nan where None
    known: B  # Tensor.err is not None
    unit: F64  # Tensor.unit
    node: I64  # Tensor.node (-1: golden only)
    role: npt.NDArray[np.int8]  # ROLE_* of Tensor.role
    has_target: B
    inherited: F64  # local.inherited(): the largest error among the tensors each one is computed from


def columns(graph: Graph, seed: Seed | None = None) -> Columns:
    """The graph's per-tensor columns (Graph.columns caches them until Graph.changed), from build's `seed`
    when it is still valid, else from the tensors."""
    ts = graph.tensors
    n = len(ts)
    fresh = seed is None or len(seed.err) != n
    if seed is None or len(seed.err) != n:
        seed = Seed([t.err for t in ts], [t.unit for t in ts], [t.node for t in ts],
                    [ROLE_CODE.get(r.role, ROLE_OTHER) if (r := t.target) is not None else ROLE_OTHER for t in ts])
    known = np.fromiter(map(is_not, seed.err, repeat(None)), bool, n)
    err = np.array(seed.err, dtype=np.float64)  # None becomes nan
    unit = np.array(seed.unit, dtype=np.float64)
    node = np.array(seed.node, dtype=np.int64)
    role = np.array(seed.role, dtype=np.int8)  # golden-only tensors belong to no node: they inherit nothing
    # build gives every target tensor a node and none other one; later passes may not (backward.py)
    has_target = np.fromiter((t.target is not None for t in ts), bool, n) if fresh else node >= 0
    inh = _inherited(graph, err, known, node, role, seeded=not fresh)
    return Columns(err, known, unit, node, role, has_target, inh)


def _inherited(graph: Graph, err: F64, known: B, node: I64, role: npt.NDArray[np.int8], seeded: bool = False) -> F64:
    """local.inherited() for every tensor: numpy where the sources are one known producer or a leaf op's
    recorded inputs, known_sources for the rest (and for all when an error is nan: max() is order-bound then).
    `seeded`: node and role are build's (its nodes' inputs and params are exactly their input and parameter
    tensors), so a node's inputs are grouped from the columns."""
    n = len(err)
    out = np.zeros(n, dtype=np.float64)
    slow = np.zeros(n, dtype=bool)
    if np.isnan(err[known]).any():
        slow[node >= 0] = True
        return _fill_slow(graph, out, slow)
    slow[(role == ROLE_OTHER) & (node >= 0)] = True  # a role the columns do not model: Graph.sources decides
    ins = np.flatnonzero((role == ROLE_INPUT) & (node >= 0))
    p = _producer_column(graph, n)[ins]
    has_p = p >= 0
    direct = ins[has_p]
    src = p[has_p]
    ok = known[src]
    out[direct[ok]] = err[src[ok]]
    slow[direct[~ok]] = True
    if graph.module_level:  # an input no producer made: a module's own code may have made it (scope_before)
        _scope_inherited(graph, ins[~has_p].tolist(), node[ins[~has_p]].tolist(), err, known, out, slow)
    outs = np.flatnonzero(((role == ROLE_OUTPUT) | (role == ROLE_GRADIENT)) & (node >= 0))
    if len(outs):
        node_inh, node_slow = _node_inherited(graph, err, known, node, role if seeded else None)
        nid = node[outs]
        out[outs] = node_inh[nid]
        slow[outs[node_slow[nid]]] = True
    return _fill_slow(graph, out, slow, err, known)


def _scope_inherited(graph: Graph, ids: list[int], nids: list[int], err: F64, known: B, out: F64, slow: B) -> None:
    """Module level, inputs no producer made (of a call that has a parent and is not the root): the largest error
    in their scope (Graph.scope_before: the parent's inputs and the outputs of its last SCOPE children finished
    before the call starts), per parent with its children's largest output errors computed once; `slow` where a
    source's error is unknown (known_sources then looks through it)."""
    from .graph import SCOPE

    nodes = graph.nodes
    by_parent: dict[int, list[tuple[int, int]]] = {}
    for i, nid in zip(ids, nids):
        nd = nodes[nid]
        if nd.id != graph.root and nd.parent is not None:
            by_parent.setdefault(nd.parent, []).append((i, nd.start))
    if not by_parent:
        return
    errs, knowns = err.tolist(), known.tolist()
    for pid, items in by_parent.items():
        parent = nodes[pid]
        ends = graph.child_ends(parent)
        p_max, p_unknown = _largest(parent.inputs, errs, knowns)
        if len(items) >= WIDE:
            _wide_scope(graph, parent, ends, p_max, p_unknown, items, err, known, out, slow)
            continue
        c_max: list[float] = []
        unknown_before = [0]  # children up to each index with an output of unknown error
        for c in parent.children:
            m, u = _largest(nodes[c].outputs, errs, knowns)
            c_max.append(m)
            unknown_before.append(unknown_before[-1] + u)
        for i, start in items:
            k = bisect_left(ends, start)
            lo = max(0, k - SCOPE)
            if p_unknown or unknown_before[k] - unknown_before[lo]:
                slow[i] = True
                continue
            m = max(c_max[lo:k], default=-math.inf)
            m = max(m, p_max)
            out[i] = m if m != -math.inf else 0.0


WIDE = 256  # a parent with this many inputs to answer has its scopes computed in numpy (_wide_scope)


def _wide_scope(graph: Graph, parent: Node, ends: list[int], p_max: float, p_unknown: bool,
                items: list[tuple[int, int]], err: F64, known: B, out: F64, slow: B) -> None:
    """_scope_inherited's answer for one parent with many inputs to answer (a flat model: every op a child of
    the root), in numpy: each child's largest output error, its running maximum over the last SCOPE children
    (a sliding window; no nan reaches here, so max is order-free), each input's window by searchsorted."""
    from .graph import SCOPE

    nodes = graph.nodes
    kids = [nodes[c].outputs for c in parent.children]
    lens = np.fromiter(map(len, kids), np.int64, len(kids))
    flat = np.fromiter(chain.from_iterable(kids), np.int64, int(lens.sum()))
    c_max = np.full(len(kids), -np.inf)
    c_unknown = np.zeros(len(kids), dtype=np.int64)
    has = lens > 0
    if len(flat):
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))[has]
        c_max[has] = np.maximum.reduceat(np.where(known[flat], err[flat], -np.inf), starts)
        c_unknown[has] = np.add.reduceat((~known[flat]).astype(np.int64), starts) > 0
    unknown_before = np.concatenate(([0], np.cumsum(c_unknown)))
    padded = np.concatenate((np.full(SCOPE, -np.inf), c_max))
    window = np.lib.stride_tricks.sliding_window_view(padded, SCOPE).max(axis=1)  # [k]: children k-SCOPE .. k-1
    ids = np.fromiter((i for i, _ in items), np.int64, len(items))
    k = np.searchsorted(np.asarray(ends, dtype=np.int64), np.fromiter((s for _, s in items), np.int64, len(items)),
                        side="left")
    lo = np.maximum(k - SCOPE, 0)
    bad = (unknown_before[k] - unknown_before[lo]) > 0
    if p_unknown:
        bad[:] = True
    m = np.maximum(window[k], p_max)
    good = ~bad
    out[ids[good]] = np.where(m[good] == -np.inf, 0.0, m[good])
    slow[ids[bad]] = True


def _largest(ids: list[int], errs: list[float], knowns: list[bool]) -> tuple[float, bool]:
    """The largest known error among `ids` (-inf: none), and whether any of them is unknown."""
    m, unknown = -math.inf, False
    for i in ids:
        if knowns[i]:
            e = errs[i]
            if e > m:
                m = e
        else:
            unknown = True
    return m, unknown


def _node_inherited(graph: Graph, err: F64, known: B, node: I64 | None = None,
                    role: npt.NDArray[np.int8] | None = None) -> tuple[F64, B]:
    """Per node: the largest error among its inputs and parameters (what its outputs inherit), and whether
    that needs known_sources (a child's outputs count too, or a source's error is unknown). With build's
    `node` and `role` columns, its inputs and parameters are grouped from them (no walk over the nodes' lists)."""
    nodes = graph.nodes
    k = len(nodes)
    slow = np.fromiter((bool(nd.children) for nd in nodes), bool, k)
    inh = np.zeros(k, dtype=np.float64)
    if node is not None and role is not None:
        at = np.flatnonzero(((role == ROLE_INPUT) | (role == ROLE_PARAMETER)) & (node >= 0))
        nid = node[at]
        has = np.bincount(nid, minlength=k) > 0
        best = np.full(k, -np.inf)
        np.maximum.at(best, nid, np.where(known[at], err[at], -np.inf))
        inh[has] = best[has]
        slow |= np.bincount(nid, weights=~known[at], minlength=k) > 0
        return inh, slow
    lens = np.fromiter((len(nd.inputs) + len(nd.params) for nd in nodes), np.int64, k)
    flat = np.fromiter(chain.from_iterable(chain(nd.inputs, nd.params) for nd in nodes), np.int64, int(lens.sum()))
    has = lens > 0
    if len(flat):
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))[has]
        unknown = np.add.reduceat((~known[flat]).astype(np.int64), starts) > 0
        vals = np.where(known[flat], err[flat], -np.inf)
        inh[has] = np.maximum.reduceat(vals, starts)
        slow[np.flatnonzero(has)[unknown]] = True
    return inh, slow


def _producer_column(graph: Graph, n: int) -> I64:
    """Graph.producer as a column: each tensor's producer id, -1 where it has none."""
    out = np.full(n, -1, dtype=np.int64)
    prod = graph.producer
    if prod:
        out[np.fromiter(prod.keys(), np.int64, len(prod))] = np.fromiter(prod.values(), np.int64, len(prod))
    return out


def _fill_slow(graph: Graph, out: F64, slow: B, err: F64 | None = None, known: B | None = None) -> F64:
    """The tensors the columns cannot answer, through Graph.known_sources (its look-through and scope rules).
    With `err` and `known` (no error is nan, so max is order-free): a tensor whose sources all have a known error
    and the largest positive (the root's output: every call's outputs) takes that maximum over the columns,
    exactly known_sources' answer (nothing to look through) without a walk of its many sources."""
    ts = graph.tensors
    for i in np.flatnonzero(slow).tolist():
        if err is not None and known is not None:
            srcs = np.fromiter(graph.sources(ts[i]), np.int64)
            if len(srcs) > 1 and known[srcs].all():
                m = float(err[srcs].max())
                if m > 0.0:
                    out[i] = m
                    continue
        errs = [s.err for s in graph.known_sources(ts[i]) if s.err is not None]
        out[i] = max(errs) if errs else 0.0
    return out
