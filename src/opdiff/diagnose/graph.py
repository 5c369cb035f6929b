"""The dataflow graph diagnose reasons on: op calls (nodes), their tensors, who produced what.

Built from a comparison's pairs, in the target's execution order. Producer links come from
`Record.src` (api/aten captures); otherwise a tensor passed on unchanged is recognised by its
content (hash, or dtype+shape+statistics) and, failing that, the module tree (which call
encloses which, from execution order) says what a parent's own code could have used.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress, count, repeat
from operator import attrgetter, is_
from typing import cast

import numpy as np

from ..base.errors import DumpError
from ..base.pair import PairResult
from ..base.record import Record, Stats
from ..base.vocab import MATCH_SEQUENCE
from ..metrics import names as M
from ..metrics.masks import FILL, RANGE, mask_pair, masked_errors
from ..metrics.thresholds import unit
from ..store import Dump
from ..store.format import FLOAT_DTYPES
from .columns import ROLE_CODE, ROLE_INPUT, ROLE_OTHER, Columns, Seed, columns
from .inplace import inplace_change, inplace_error
from .noise import pair_error, stats_columns
from .tally import Tally, tally_of


@dataclass(slots=True)
class Tensor:
    """One record pair as diagnose sees it."""

    id: int
    pair: PairResult
    golden: Record | None
    target: Record | None
    err: float | None  # relative error (0: bitwise equal; inf: non-finite where golden is finite)
    unit: float  # rounding unit of the lower-precision side (0: integer or bool)
    node: int = -1  # the target node it belongs to (-1: golden only)
    abs_err: float | None = None  # MaxAbsErr when real data was compared
    order: int = -1  # index of the target record (execution order); -1 when golden only
    moved: float | None = None  # a target-only in-place record: its change from the input its call was handed

    @property
    def rec(self) -> Record:
        rec = self.target or self.golden
        assert rec is not None  # made from a pair, which has at least one side
        return rec

    @property
    def role(self) -> str:
        rec = self.target if self.target is not None else self.golden
        assert rec is not None
        return rec.role


@dataclass(slots=True)
class Node:
    """One op or module call of the target run."""

    id: int
    name: str
    module: str
    op: str
    level: str
    start: int
    end: int
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    params: list[int] = field(default_factory=list)
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    golden: str | None = None  # the golden node it was paired with

    @property
    def matched(self) -> bool:
        return self.golden is not None


@dataclass
class Graph:
    tensors: list[Tensor]
    nodes: list[Node]
    root: int | None
    producer: dict[int, int]  # input tensor id -> output tensor id it is (the same tensor, earlier)
    golden_only: list[int]
    levels: set[str]
    consumers: dict[int, list[int]] = field(default_factory=dict)  # tensor id -> input tensor ids that are it
    _ends: dict[int, list[int]] = field(default_factory=dict, repr=False)  # node id -> its children's ends, sorted
    islands: set[str] = field(default_factory=set)  # narrow dtypes the target uses in a few places only
    wide_unit: float = 0.0  # the coarsest rounding unit among the float dtypes the target uses widely
    _passthrough: set[int] | None = field(default=None, repr=False)  # the passthrough property (build sets it)
    owner: dict[str, int] = field(default_factory=dict)  # module path -> its first (non-parameter) call
    direction: str = "forward"  # the pass the graph is of: forward | backward | update
    _in_order: list[Tensor] | None = field(default=None, repr=False)  # in_order(), computed once
    _in_order_ids: np.ndarray | None = field(default=None, repr=False)  # in_order_ids(), computed once
    _known: dict[int, list[Tensor]] = field(default_factory=dict, repr=False)  # known_sources() at the default depth
    _columns: Columns | None = field(default=None, repr=False)  # columns(), computed once
    _seed: Seed | None = field(default=None, repr=False)  # what build's loop already knew of each tensor (columns.py)
    tally: Tally | None = None  # what build counted over the pairs it was handed (tally.py)
    dtype_pairs: DtypePairs = field(default_factory=dict)  # (golden dtype, target dtype) -> tensors, as built
    _root_keys: list[tuple[object, ...] | None] | None = field(default=None, repr=False)  # is_model_output's

    def __post_init__(self) -> None:
        consumers = self.consumers
        for inp, out in self.producer.items():
            readers = consumers.get(out)
            if readers is None:
                consumers[out] = [inp]  # not setdefault(out, []): no list made per input
            else:
                readers.append(inp)
        calls = sorted((n for n in self.nodes if n.op != "parameter" and n.level != "param"), key=_START)
        if self.owner:
            for n in calls:
                self.owner.setdefault(n.module, n.id)
            return
        modules = list(map(_MODULE, calls))
        first = dict(zip(reversed(modules), map(_ID, reversed(calls))))  # the last value a key gets: its first call
        self.owner.update((m, first[m]) for m in dict.fromkeys(modules))  # keys in order of first call, as setdefault

    @property
    def passthrough(self) -> set[int]:
        """Inputs that golden passes on unchanged from an earlier output (by content; build computes it)."""
        if self._passthrough is None:
            self._passthrough = _golden_passthrough(self.tensors)
        return self._passthrough

    def in_order(self) -> list[Tensor]:
        """The target's tensors in its execution order (sorted once; every pass walks them in this order)."""
        if self._in_order is None:
            self._in_order = sorted((x for x in self.tensors if x.target is not None), key=_by_order)
        return self._in_order

    def in_order_ids(self) -> np.ndarray:
        """The ids of in_order()'s tensors, as a column (computed once, like in_order)."""
        if self._in_order_ids is None:
            ts = self.in_order()
            self._in_order_ids = np.fromiter(map(_ID, ts), np.int64, len(ts))
        return self._in_order_ids

    def changed(self) -> None:
        """Forget what was derived from the nodes' tensors: call after moving tensors between nodes."""
        self._known.clear()
        self._ends.clear()
        self._columns = None
        self._seed = None
        self._root_keys = None

    def columns_seeded(self) -> bool:
        """Whether the graph still holds the tensors build made (nothing moved or added since: `changed`)."""
        return self._seed is not None and len(self._seed.err) == len(self.tensors)

    def columns(self) -> Columns:
        """Per-tensor quantities as numpy columns over tensor ids (columns.py): computed once, shared by the rules."""
        if self._columns is None or len(self._columns.err) != len(self.tensors):
            self._columns = columns(self, self._seed)
        return self._columns

    def inherited(self, t: Tensor) -> float:
        """Largest relative error among the tensors `t` was computed from (0 when none is known)."""
        return float(self.columns().inherited[t.id])

    def node_of(self, t: Tensor) -> Node | None:
        return self.nodes[t.node] if t.node >= 0 else None

    @property
    def module_level(self) -> bool:
        """Whether ops are module calls (so unrecorded code can run in a parent between them)."""
        return self.levels <= {"module", "param"}

    def scope_before(self, node: Node, start: int) -> list[int]:
        """Tensors a node's own code can use at time `start`: its inputs and the outputs of its children
        that finished last before then (the SCOPE most recent: what the next call is computed from)."""
        k = bisect.bisect_left(self.child_ends(node), start)
        out = list(node.inputs)
        for c in node.children[max(0, k - SCOPE):k]:
            out.extend(self.nodes[c].outputs)
        return out

    def child_ends(self, node: Node) -> list[int]:
        """The ends of a node's children, ascending; its `children` sorted so on the first call (scope_before)."""
        ends = self._ends.get(node.id)
        if ends is None:
            node.children.sort(key=lambda c: self.nodes[c].end)
            ends = self._ends[node.id] = [self.nodes[c].end for c in node.children]
        return ends

    def sources(self, t: Tensor) -> list[int]:
        """The tensors whose error `t` inherits."""
        node = self.node_of(t)
        if node is None or t.role == "parameter":
            return []
        if t.role == "output" or t.role == "gradient":
            return node.inputs + node.params + [o for c in node.children for o in self.nodes[c].outputs]
        if t.id in self.producer:
            return [self.producer[t.id]]
        if node.id == self.root or node.parent is None or not self.module_level:
            return []  # a model input, or at op level a tensor no recorded op made (a weight, a buffer)
        return self.scope_before(self.nodes[node.parent], node.start)

    def known_sources(self, t: Tensor, depth: int = 8) -> list[Tensor]:
        """Sources with a known error, looking through unmatched tensors (ops golden does not have).

        Computed once per tensor at the default depth (calibration, events and verdict all ask): do not modify
        the list returned."""
        if depth != 8:
            return self._known_sources(t, depth)
        out = self._known.get(t.id)
        if out is None:
            out = self._known[t.id] = self._known_sources(t, depth)
        return out

    def _known_sources(self, t: Tensor, depth: int) -> list[Tensor]:
        srcs = self.sources(t)
        if len(srcs) == 1 and self.tensors[srcs[0]].err is not None:
            return [self.tensors[srcs[0]]]  # the common case: one producer, matched
        out: list[Tensor] = []
        seen: set[int] = set()
        stack = [(s, 0) for s in srcs]
        while stack:
            sid, d = stack.pop()
            if sid in seen:
                continue
            seen.add(sid)
            s = self.tensors[sid]
            if s.err is not None:
                out.append(s)
            elif d < depth:
                stack.extend((x, d + 1) for x in self.sources(s))
        return out

    def chain_unit(self, t: Tensor, depth: int = 8) -> float:
        """Rounding unit `t` is judged at: its pair's, or coarser when it came through ops golden does
        not run in a narrower dtype the target uses widely (a buffer kept in fp16 in an fp16 model)."""
        u = t.unit
        if t.role == "output" and self.wide_unit > u and (self._reads_unrecorded(t) or self._reads_mixed(t)):
            u = self.wide_unit
        cur = self.producer.get(t.id) if t.role == "input" else None
        for _ in range(depth):
            if cur is None:
                break
            src = self.tensors[cur]
            if src.err is not None or src.target is None:
                break
            node = self.nodes[src.node]
            for i in node.inputs + [src.id]:
                rec = self.tensors[i].target
                d = rec.dtype if rec is not None else None
                if d not in self.islands:
                    u = max(u, unit(d))
            cur = next((self.producer[i] for i in node.inputs if i in self.producer), None)
        return u

    def _reads_unrecorded(self, t: Tensor) -> bool:
        """Whether t's op reads a float input that no recorded op made (a residual add between modules):
        in a run that computes widely in a coarser dtype (bf16 autocast), that input may hold values of
        that precision, so t's error is judged at it, not at t's own dtype."""
        node = self.nodes[t.node]
        return any(i not in self.producer and self.tensors[i].unit > 0 and self.tensors[i].role == "input"
                   and (self.root is None or i not in self.nodes[self.root].inputs) for i in node.inputs)

    def _reads_mixed(self, t: Tensor) -> bool:
        """Whether t's op reads a float input that an op made from a float input coarser than its result (a
        residual add of a bf16 branch into an fp32 stream under autocast): that input's relative error hides
        the coarse branch's, which a norm's centring brings back; t is then judged at the run's wide unit."""
        for i in self.nodes[t.node].inputs:
            p = self.producer.get(i)
            if p is None or self.tensors[i].unit == 0:
                continue
            made = self.tensors[p]
            units = [self.tensors[j].unit for j in self.nodes[made.node].inputs if self.tensors[j].unit > 0]
            if any(x > made.unit for x in units) and any(x <= made.unit for x in units):
                return True  # a coarse input and a fine one mixed (a cast alone hides nothing: it keeps its input's error)
        return False

    def blame(self, t: Tensor) -> tuple[int, str]:
        """The node whose own code made `t` diverge, and how (output | parameter | inserted | input-changed |
        parent | input)."""
        node = self.node_of(t)
        assert node is not None
        if t.role in ("output", "gradient"):
            return node.id, "output"
        if t.role == "parameter":
            readers = sorted(self.consumers.get(t.id, []), key=lambda i: self.tensors[i].order)
            if readers:
                return self.tensors[readers[0]].node, "parameter"  # the first op that reads the weight
            return self.owner.get(node.module, node.id), "parameter"
        p = self.producer.get(t.id)
        if p is not None and self.tensors[p].err is None:
            return self._inserted_origin(self.tensors[p]), "inserted"
        if node.id == self.root:
            return node.id, "input"
        if p is None and not self.module_level:
            return node.id, "input"  # an external tensor (weight, buffer) read by this op
        if p is None and t.id in self.passthrough:
            return node.id, "input-changed"  # golden hands it over unchanged; the target alters it on the way in
        if p is not None and not self.module_level:
            # an op reads another tensor than golden's op did while the one it reads agrees: the code of the
            # innermost module running it wired it (an op-level dump has no call of that module to blame)
            return node.id, "input-changed"
        if node.parent is not None:
            return node.parent, "parent"
        return node.id, "input"

    def _inserted_origin(self, t: Tensor) -> int:
        """The earliest op golden does not have in the chain that produced `t`."""
        best = t.node
        cur: Tensor | None = t
        for _ in range(64):
            if cur is None:
                break
            node = self.node_of(cur)
            if node is None or node.matched:
                break
            best = node.id
            nxt = None
            for i in node.inputs:
                p = self.producer.get(i)
                src = self.tensors[p] if p is not None else None
                if src is not None and src.err is None and not self.nodes[src.node].matched:
                    nxt = src
                    break
            cur = nxt
        return best

    def consumer_nodes(self, t: Tensor) -> list[tuple[Node, int]]:
        """The calls that read `t`, each with the id of its input tensor that is `t`."""
        if t.role == "input":
            node = self.node_of(t)
            return [(node, t.id)] if node is not None else []
        return [(self.nodes[self.tensors[i].node], i) for i in self.consumers.get(t.id, [])]

    def is_model_output(self, t: Tensor) -> bool:
        """Whether `t` is (the same tensor as) one of the model's outputs."""
        if self.root is None:
            return False
        outs = self.nodes[self.root].outputs
        if t.id in outs:
            return True
        key = _identity_key(t.target)
        if key is None:
            return False
        if self._root_keys is None:  # the root outputs' keys, once (every event asks: changed() forgets them)
            self._root_keys = [_identity_key(self.tensors[o].target) for o in outs]
        return key in self._root_keys  # == per key, as any(k == key ...) (list membership: identity, then ==)

    def ancestors(self, node: Node) -> list[Node]:
        out = []
        while node.parent is not None:
            node = self.nodes[node.parent]
            out.append(node)
        return out


def identity_key(r: Record | None) -> tuple[object, ...] | None:
    """What recognises the same tensor passed on unchanged (content hash, or shape+statistics)."""
    return _identity_key(r)


def _identity_key(r: Record | None) -> tuple[object, ...] | None:
    """What recognises the same tensor passed on unchanged (content hash, or shape+statistics)."""
    if r is None:
        return None
    if r.hash:
        return (r.dtype, r.shape, r.hash)
    s = r.stats
    if s is None or not s.norm or r.numel <= 1:
        return None
    return (r.dtype, r.shape, s.min, s.max, s.mean, s.norm, s.zeros)


def _errors(p: PairResult, golden: Dump | None, target: Dump | None) -> tuple[float | None, float | None]:
    """A pair's relative and absolute error. Masks are compared on their unmasked elements when data is at
    hand; without it a mask's absolute error is unknown (the fill values' difference, 1.3e36 between fp32's
    and bf16's finfo.min, is no error of the data and would excuse every op reading the mask)."""
    if p.golden is None:
        return inplace_error(p, golden, target), _abs_error(p)  # an input the target's call changed in place
    if p.target is not None and p.target.role == "output" and p.target.src:
        return None, None  # an output recorded as an alias of an earlier tensor (in-place op): not its own values
    err = pair_error(p)
    if p.match == MATCH_SEQUENCE and p.golden is not None and p.target is not None and \
            ((p.golden.op != p.target.op and not _same_place(p.golden, p.target)) or (err is not None and err > GUESS_LIMIT)):
        return None, None  # a pair guessed by position between different ops, or unrelated-looking: not evidence
    if not err or p.target is None or not mask_pair(p.golden, p.target):
        return err, _abs_error(p)
    if golden is None or target is None or not p.golden.has_data or not p.target.has_data:
        return err, None
    try:
        return masked_errors(golden.tensor(p.golden), target.tensor(p.target), p.golden.dtype, p.target.dtype)
    except DumpError:
        return err, None


def _same_place(g: Record, t: Record) -> bool:
    """Module calls at one module path, one role and position: the same place in the model whose class was
    replaced (SiLU by GELU), not a guess between unrelated ops."""
    return g.level == t.level == "module" and g.module == t.module and g.role == t.role and g.pos == t.pos \
        and g.call == t.call and g.shape == t.shape


def _abs_error(p: PairResult) -> float | None:
    v = p.metrics.get(M.MAX_ABS_ERR)
    if v is None:
        return None
    if type(v) is float:
        return v if math.isfinite(v) else None
    try:
        return float(v) if v is not None and math.isfinite(float(v)) else None
    except (TypeError, ValueError):
        return None


MAX_ABS = M.MAX_ABS_ERR
_START, _END, _MODULE = attrgetter("start"), attrgetter("end"), attrgetter("module")
GUESS_LIMIT = 0.5  # a pair made by sequence alignment whose relative error exceeds this is taken as a mis-pairing
SCOPE = 32  # how many finished children of a module its own code is assumed to read from
ISLAND_SHARE = 0.05  # a narrower dtype in fewer than this share of the target's float pairs is an island


DtypePairs = dict[tuple[str | None, str | None], int]  # (golden dtype, target dtype) -> pairs, first seen first


def _side_counts(pairs: DtypePairs, side: int) -> Counter[str]:
    """Tensors per dtype on one side (0 golden, 1 target), in first-seen order."""
    out: Counter[str] = Counter()
    for key, n in pairs.items():
        d = key[side]
        if d is not None:
            out[d] += n
    return out


def _wide_unit(pairs: DtypePairs, islands: set[str]) -> float:
    """The coarsest rounding unit of the float dtypes the target computes in widely (islands aside)."""
    dtypes = {key[1] for key in pairs if key[1] is not None}
    return max((unit(d) for d in dtypes if d not in islands and unit(d) > 0), default=0.0)


def hold_islands(tensors: list[Tensor], pairs: DtypePairs) -> set[str]:
    """Float dtypes narrower than golden's that the target uses only in a few places (one op computed in
    fp16 in an fp32 run): pairs in them are held to golden's rounding, as a precision bug is not the
    run's precision. Returns those island dtypes. `pairs`: the tensors per (golden, target) dtype build counted."""
    g_all = _side_counts(pairs, 0)
    golden_dtypes = Counter({d: n for d, n in g_all.items() if unit(d) > 0})  # first-seen order kept, as before
    if not golden_dtypes:
        return set()
    base = unit(golden_dtypes.most_common(1)[0][0])
    t_all = _side_counts(pairs, 1)
    target_dtypes = {d: n for d, n in t_all.items() if unit(d) > 0}
    total = sum(target_dtypes.values())
    islands = {d for d, n in target_dtypes.items() if unit(d) > base and n < ISLAND_SHARE * total}
    if not islands:
        return islands
    for t in tensors:
        if t.golden is not None and t.target is not None and t.target.dtype in islands and unit(t.golden.dtype) < t.unit:
            t.unit = unit(t.golden.dtype)
    return islands


def build(pairs: list[PairResult], direction: str = "forward", golden: Dump | None = None,
          target: Dump | None = None) -> Graph:
    """The graph of the target run's `direction` pass, with each record pair's error.

    With the dumps at hand, mask-like tensors are compared on their unmasked elements. Built column by column
    (a list per quantity, most of them by C-level map/zip), the Python work per pair being its error and its
    Tensor (100,000 pairs: docs/diagnose.md, "Speed").
    """
    gs: list[Record | None] = list(map(_GOLDEN, pairs))
    ts: list[Record | None] = list(map(_TARGET, pairs))
    tally, whole = _tally(pairs, gs, ts, direction)
    if tally.other:
        keep = [i for i, p in enumerate(pairs) if p.record.direction == direction]
        pairs, gs, ts = [pairs[i] for i in keep], [gs[i] for i in keep], [ts[i] for i in keep]
    n = len(pairs)
    gds, tds = _dtypes(gs), _dtypes(ts)
    seen = _dtype_pairs(gds, tds)
    units = {k: unit(*k) for k in seen}
    us = [units[next(iter(units))]] * n if len(units) == 1 else list(map(units.__getitem__, zip(gds, tds)))
    golden_only = [i for i, t in enumerate(ts) if t is None] if _has_none(ts) else []
    tgt = [t for t in ts if t is not None] if golden_only else cast("list[Record]", ts)
    tids = [i for i, t in enumerate(ts) if t is not None] if golden_only else list(range(n))
    kinds, srcs = list(map(_ROLE, tgt)), list(map(_SRC, tgt))
    # the bitwise shortcut's conditions but the flag itself hold for every pair: compared, both sides, not by
    # counts or by sequence, no output aliasing an earlier tensor (_pair_errors then reads the flag alone)
    uniform = whole and "counts" not in tally.modes and MATCH_SEQUENCE not in set(map(_MATCH, pairs)) \
        and (not any(srcs) or "output" not in set(compress(kinds, srcs)))
    floats = all(x in FLOAT_DTYPES for pair in seen for x in pair)
    plain = uniform and "stats" in tally.modes and floats and not (any(map(_HASH, gs)) and any(map(_HASH, ts)))
    errs, abs_errs = _pair_errors(pairs, golden, target, uniform, plain, floats=uniform and floats)
    names = list(map(_NODE, tgt))
    ids = dict(zip(dict.fromkeys(names), count()))  # node name -> node id, first seen first
    nids = list(map(ids.__getitem__, names))
    nid_col = np.array(nids, dtype=np.int64)
    first = dict(zip(ids, _first_positions(nid_col)))  # node name -> position (in tgt) of its first record
    orders = list(map(_INDEX, tgt))
    # the golden node each node was paired with: that of its first record, when every record is paired with a
    # known error (else _golden_nodes picks one per node)
    paired = None if _has_none(gs) or None in errs else \
        list(map(_NODE, map(gs.__getitem__, map(tids.__getitem__, first.values()))))
    nodes = _nodes(first, tgt, nid_col, orders, paired)
    _group(nodes, tids, nids, kinds)
    node_col, order_col = ([-1] * n, [-1] * n) if golden_only else (nids, orders)
    if golden_only:
        for i, k, o in zip(tids, nids, orders):
            node_col[i], order_col[i] = k, o
    tensors = list(map(Tensor, range(n), pairs, gs, ts, errs, us, node_col, abs_errs, order_col))
    if paired is None:
        _golden_nodes(nodes, tids, nids, gs, errs)
    for i in _target_only(gs, ts):
        if errs[i] is not None:
            tensors[i].moved = inplace_change(pairs[i], target)
    by_name = dict(zip(map(_NAME, tgt), tids)) if any(srcs) else {}  # only src links read it
    role_col = list(map(ROLE_CODE.get, kinds, repeat(ROLE_OTHER)))
    if golden_only:
        roles = [ROLE_OTHER] * n
        for i, r in zip(tids, role_col):
            roles[i] = r
        role_col = roles
    seed = Seed(errs, us, node_col, role_col)
    islands = hold_islands(tensors, seen)
    if islands:  # units changed
        seed.unit = [x.unit for x in tensors]
    order = sorted([x for x in tensors if x.target is not None] if golden_only else tensors, key=_ORDER)  # target's index
    _nest(nodes)
    root = _root(nodes)
    same = not golden_only and all(map(is_, order, tensors))  # the target's order already: tgt is order's
    producer = _producers(order, by_name, tensors, role_col, (tgt, kinds, srcs) if same else None)
    # the passthrough set is taken from the records as built: the backward pass changes tensors and roles later
    # (backward.wire_output_grads), so it is computed now there; other passes compute it when blame first asks
    passthrough = _golden_passthrough(tensors) if direction == "backward" else None
    return Graph(tensors, nodes, root, producer, golden_only, set(map(_LEVEL, tgt)), islands=islands,
                 direction=direction, _in_order=order, _passthrough=passthrough, wide_unit=_wide_unit(seen, islands),
                 _seed=seed, tally=tally, dtype_pairs=seen)


_GOLDEN, _TARGET, _ID, _MATCH = attrgetter("golden"), attrgetter("target"), attrgetter("id"), attrgetter("match")
_HASH = attrgetter("hash")
_NODE, _INDEX, _ROLE, _NAME, _LEVEL, _DIRECTION, _STATUS, _MODE, _DTYPE, _SRC = (
    attrgetter(a) for a in ("node", "index", "role", "name", "level", "direction", "status", "mode", "dtype", "src"))


def _tally(pairs: list[PairResult], gs: list[Record | None], ts: list[Record | None],
           direction: str) -> tuple[Tally, bool]:
    """build's Tally of `pairs` (tally.py), by C-level passes where every pair is compared and has both records
    (then also True), else pair by pair (False)."""
    out = Tally(len(pairs))
    if list(map(_STATUS, pairs)).count("compared") == len(pairs) and not _has_none(gs) and not _has_none(ts):
        out.modes = set(map(_MODE, pairs))
        out.other = len(pairs) - list(map(_DIRECTION, ts)).count(direction)
        return out, True
    return tally_of(pairs, direction), False


def _dtypes(recs: list[Record | None]) -> list[str | None]:
    """Each record's dtype, None for no record."""
    if not _has_none(recs):
        return list(map(_DTYPE, recs))
    return [r.dtype if r is not None else None for r in recs]


def _dtype_pairs(gds: list[str | None], tds: list[str | None]) -> DtypePairs:
    """(golden dtype, target dtype) -> tensors, first seen first; one count per side where each has one dtype."""
    n = len(gds)
    if n and gds.count(gds[0]) == n and tds.count(tds[0]) == n:
        return {(gds[0], tds[0]): n}
    return dict(Counter(zip(gds, tds)))


def _has_none(xs: list[Record | None]) -> bool:
    """Whether a list holds None: by truth, at C level (a Record has no __bool__ or __len__, so it is always true;
    `None in xs` would call Record.__eq__ on every element)."""
    return not all(xs)


def _pair_errors(pairs: list[PairResult], golden: Dump | None, target: Dump | None,
                 uniform: bool = False, plain: bool = False, *,
                 floats: bool = False) -> tuple[list[float | None], list[float | None]]:
    """Each pair's relative and absolute error (_errors), a pair equal bit for bit answered without its checks,
    those whose error is their statistics' alone (_stats_only) by numpy columns (noise.stats_columns).
    `uniform`: every pair but for its bitwise flag meets the shortcut's conditions (build checked them by columns);
    `plain`: uniform, every dtype float and no hash on one side, so that _stats_only's remaining tests (statistics
    there, the same non-finite counts, no error metric of data) are all a stats-mode pair needs, inline;
    `floats`: uniform and every dtype float, so that a differing tensor-mode pair may take _tensor_errors."""
    errs: list[float | None] = []
    abs_errs: list[float | None] = []
    by_stats: list[int] = []
    add_err, add_abs, errors, abs_error = errs.append, abs_errs.append, _errors, _abs_error
    add_stats, stats_only, tensor_errors = by_stats.append, _stats_only, _tensor_errors
    for i, p in enumerate(pairs):
        if p.bitwise_equal and (uniform or p.golden is not None and (t := p.target) is not None
                                and p.status == "compared" and p.mode != "counts" and p.match != MATCH_SEQUENCE
                                and not (t.src and t.role == "output")):
            add_err(0.0)
            a = p.metrics.get(MAX_ABS)
            add_abs(a if type(a) is float and a - a == 0.0 else abs_error(p))  # a finite float, else _abs_error
        elif p.mode == "stats" and (stats_only(p, p.golden, p.target) if not plain else
                                    (sg := p.golden.stats) is not None  # type: ignore[union-attr]  # uniform
                                    and (st := p.target.stats) is not None  # type: ignore[union-attr]
                                    and sg.nan == st.nan and sg.posinf == st.posinf and sg.neginf == st.neginf
                                    and (m := p.metrics) is not None and m.get(_RED) is None
                                    and m.get(MAX_ABS) is None and m.get(_NORM_MAX_ABS) is None):
            add_err(None)
            add_abs(None)
            add_stats(i)
        elif floats and p.mode == "tensor" and (ea := tensor_errors(p)) is not None:
            add_err(ea[0])
            add_abs(ea[1])
        else:
            e, a = errors(p, golden, target)
            add_err(e)
            add_abs(a)
    if by_stats:
        _stats_pair_errors(pairs, by_stats, errs, abs_errs, golden, target)
    return errs, abs_errs


def _tensor_errors(p: PairResult) -> tuple[float, float | None] | None:
    """_errors of a differing tensor-mode pair of float records that build's `uniform` columns admit (compared,
    both sides, by name, no aliasing output), in the common case only: not the same hash on both sides, statistics on both
    without inf/nan, RelErr and NormMaxAbsErr finite floats (pair_error: their maximum), golden holding no mask
    fill (mask_pair: with no -inf in golden and two float dtypes, only golden's fill can make a mask pair).
    None where any of that does not hold: _errors answers."""
    g, t = p.golden, p.target
    if g is None or t is None or (g.hash and t.hash and g.hash == t.hash):
        return None
    sg, st = g.stats, t.stats
    if sg is None or st is None or sg.nan or sg.posinf or sg.neginf or st.nan or st.posinf or st.neginf:
        return None
    m = p.metrics
    if m is None:
        return None
    rel, nmae = m.get(_RED), m.get(_NORM_MAX_ABS)
    if type(rel) is not float or type(nmae) is not float or rel - rel != 0.0 or nmae - nmae != 0.0:
        return None
    err = max(rel, nmae)
    if err and sg.max is not None and sg.min is not None and \
            max(abs(sg.max), abs(sg.min)) >= FILL * RANGE.get(g.dtype, math.inf):  # has_fill(g)
        return None
    a = m.get(MAX_ABS)
    return err, a if type(a) is float and a - a == 0.0 else _abs_error(p)


def _stats_only(p: PairResult, g: Record | None, t: Record | None) -> bool:
    """Whether _errors gives this stats-mode pair pair_error's last answer, stats_error of its statistics, and
    no absolute error (a mask pair aside, _stats_pair_errors): compared, paired by name, not an output aliasing
    an earlier tensor, float on both sides, not bitwise equal, no hashes on both sides, the same count of
    non-finite elements, no error metric of tensor data."""
    if g is None or t is None or p.status != "compared" or p.match == MATCH_SEQUENCE or p.bitwise_equal \
            or (t.src and t.role == "output") or (g.hash and t.hash):
        return False
    gs, ts = g.stats, t.stats
    if gs is None or ts is None or gs.nan != ts.nan or gs.posinf != ts.posinf or gs.neginf != ts.neginf \
            or g.dtype not in FLOAT_DTYPES or t.dtype not in FLOAT_DTYPES:
        return False
    m = p.metrics
    return m is not None and m.get(_RED) is None and m.get(MAX_ABS) is None and m.get(_NORM_MAX_ABS) is None


_RED, _NORM_MAX_ABS = M.RED, M.NORM_MAX_ABS_ERR  # with MAX_ABS: pair_error's terms before the statistics


def _stats_pair_errors(pairs: list[PairResult], at: list[int], errs: list[float | None],
                       abs_errs: list[float | None], golden: Dump | None, target: Dump | None) -> None:
    """Fill in the errors of the pairs at `at` (_stats_only): their statistics' errors in one numpy pass; a
    pair that differs and may be a mask in two encodings (mask_pair, asked only where a value reaches a fill's
    size) goes through _errors (its data, where at hand)."""
    sel = [pairs[i] for i in at]
    gs = cast("list[Stats]", [p.golden.stats for p in sel])  # type: ignore[union-attr]  # _stats_only: both there
    ts = cast("list[Stats]", [p.target.stats for p in sel])  # type: ignore[union-attr]
    values, large = stats_columns(gs, ts, MASK_SIZE)
    for i, e in zip(at, values):
        errs[i] = e
    for j in large:
        p = sel[j]
        if values[j] and mask_pair(p.golden, p.target):
            errs[at[j]], abs_errs[at[j]] = _errors(p, golden, target)


MASK_SIZE = FILL * min(RANGE.values())  # the least |value| a float dtype's mask fill (has_fill) can have


def _first_positions(nids: np.ndarray) -> list[int]:
    """Where each node id first appears, ids numbered in order of first appearance: where the running
    maximum rises (every earlier id is smaller there)."""
    if not len(nids):
        return []
    top = np.maximum.accumulate(nids)
    fresh = np.empty(len(nids), dtype=bool)
    fresh[0] = True
    np.greater(top[1:], top[:-1], out=fresh[1:])
    return np.flatnonzero(fresh).tolist()


def _nodes(first: dict[str, int], tgt: list[Record], nids: np.ndarray | list[int], orders: list[int],
           golden: list[str] | None = None) -> list[Node]:
    """One Node per call (named by its first record), spanning its records' indexes; `golden`: the golden node
    each was paired with, when known."""
    k = len(first)
    if not k:
        return []
    at = np.asarray(nids, dtype=np.int64)
    idx = np.array(orders, dtype=np.int64)
    starts = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    ends = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(starts, at, idx)
    np.maximum.at(ends, at, idx)
    return [Node(i, name, r.module, r.op, r.level, s, e, [], [], [], None, [], g)
            for i, name, r, s, e, g in zip(range(k), first, map(tgt.__getitem__, first.values()), starts.tolist(),
                                           ends.tolist(), golden or repeat(None))]


def _group(nodes: list[Node], tids: list[int], nids: list[int], roles: list[str]) -> None:
    """Each target tensor into its node's inputs, params or outputs, in order."""
    for tid, k, role in zip(tids, nids, roles):
        n = nodes[k]
        (n.inputs if role == "input" else n.params if role == "parameter" else n.outputs).append(tid)


def _golden_nodes(nodes: list[Node], tids: list[int], nids: list[int],
                  gs: list[Record | None], errs: list[float | None]) -> None:
    """The golden node each node was paired with: that of its first record paired with a known error (where
    every record is paired with a known error, build gives _nodes each node's first record's instead)."""
    pick = [(k, g.node) for tid, k in zip(tids, nids) if (g := gs[tid]) is not None and errs[tid] is not None]
    for k, name in dict(reversed(pick)).items():
        nodes[k].golden = name


def _target_only(gs: list[Record | None], ts: list[Record | None]) -> list[int]:
    """Positions of pairs with a target record and no golden one."""
    if not _has_none(gs):
        return []
    return [i for i, (g, t) in enumerate(zip(gs, ts)) if g is None and t is not None]


def _by_order(t: Tensor) -> int:
    return t.order


_ORDER = attrgetter("order")  # _by_order, C-level


def _nest(nodes: list[Node]) -> None:
    """Parent of each node: the innermost call whose span of records encloses it. The root model's module call
    is the outermost call by definition, even where its records span little (a module-level backward pass:
    its output gradient is recorded once the first child's hook has fired)."""
    stack: list[Node] = []
    for n in _nesting_order(nodes):
        while stack and stack[-1].end < n.start:
            stack.pop()
        if n.module == "" and n.level == "module":
            stack.append(n)
            continue
        if stack and stack[-1].start <= n.start and n.end <= stack[-1].end:
            n.parent = stack[-1].id
            stack[-1].children.append(n.id)
        stack.append(n)


def _nesting_order(nodes: list[Node]) -> list[Node]:
    """Nodes by start, the longer call first at one start: sorted by (start, -end) as two stable sorts on
    C-level keys (no Python call per node)."""
    out = sorted(nodes, key=_END, reverse=True)
    out.sort(key=_START)
    return out


def _root(nodes: list[Node]) -> int | None:
    """The root model's call (module ""), the outermost one if several."""
    roots = [n for n in nodes if n.module == "" and n.parent is None and n.level in ("module", "")]
    if not roots:
        roots = [n for n in nodes if n.module == "" and n.parent is None]
    return min(roots, key=lambda n: n.start).id if roots else None


def _golden_passthrough(tensors: list[Tensor]) -> set[int]:
    """Input tensors that, in golden, are exactly an earlier output (passed on unchanged)."""
    seen: set[object] = set()
    out: set[int] = set()
    goldens = sorted(((x, x.golden) for x in tensors if x.golden is not None), key=lambda xg: xg[1].index)
    for t, g in goldens:
        key = _identity_key(g)
        if key is None:
            continue
        if g.role == "input" and key in seen:
            out.add(t.id)
        elif g.role in ("output", "parameter"):
            seen.add(key)
    return out


def _producers(order: list[Tensor], by_name: dict[str, int], tensors: list[Tensor],
               roles: list[int] | None = None,
               columns: tuple[list[Record], list[str], list[str | None]] | None = None) -> dict[int, int]:
    """For each input tensor, the earlier output (or parameter) it is: from Record.src, else by content.

    Content keys are computed only for outputs that may be one of the inputs without a usable src link (api/aten
    dumps link nearly all inputs): those whose hash or norm (_probe) one of these inputs has; an input's key only
    where its probe is one of those outputs' (keys that differ in probe differ).
    `roles`: ROLE_* of each tensor (columns.py), when at hand: Tensor.role without a call per input. `columns`:
    the target records of `order`, their roles and src links, when build has them."""
    producer: dict[int, int] = {}
    if roles is None:
        roles = [ROLE_CODE.get(t.role, ROLE_OTHER) for t in tensors]
    if "" in by_name:  # an empty src is no link (an input without one is keyed by content)
        by_name = {k: v for k, v in by_name.items() if k}
    if columns is None:
        recs = cast("list[Record]", list(map(_TARGET, order)))
        kinds, srcs = list(map(_ROLE, recs)), list(map(_SRC, recs))
    else:
        recs, kinds, srcs = columns
    # the tensor an input's src link names (None: no usable link)
    links = list(map(by_name.get, srcs, repeat(None))) if by_name else [None] * len(recs)
    wanted = {r.hash or (s.norm if (s := r.stats) is not None else None) or None  # _probe(r), inline
              for r, kind, link in zip(recs, kinds, links) if link is None and kind == "input"}
    wanted.discard(None)
    last_output: dict[object, int] = {}  # content key -> latest output or parameter that may be wanted
    found: set[object] = set()  # the probes of last_output's keys: an input whose probe is not here has no match
    for tid, r, kind, src in zip(map(_ID, order), recs, kinds, links):
        if kind == "input":
            if src is not None and roles[src] != ROLE_INPUT:
                producer[tid] = src
            elif src is not None:
                p = producer.get(src)
                if p is not None:
                    producer[tid] = p
            elif last_output and (r.hash or (s.norm if (s := r.stats) is not None else None) or None) in found:
                key = _identity_key(r)
                if key is not None:
                    p = last_output.get(key)  # one hash of the key, not two
                    if p is not None:
                        producer[tid] = p
        elif wanted and (kind == "output" or kind == "parameter") and \
                (probe := r.hash or (s.norm if (s := r.stats) is not None else None) or None) in wanted:  # _probe(r)
            key = _identity_key(r)
            if key is not None:
                last_output[key] = tid
                found.add(probe)
    return producer


def _probe(r: Record | None) -> object:
    """A cheap part of _identity_key (the hash, else the norm): records whose probes differ have different keys."""
    if r is None:
        return None
    if r.hash:
        return r.hash
    s = r.stats
    return s.norm if s is not None and s.norm else None
