"""Pair the records of two dumps: mapping file, fusions, names, then sequence alignment.

Order of the passes (each only sees records no earlier pass paired):
0. graph values: records of graph-engine captures (ONNX Runtime) carry `extra["graph_value"]`, the
   name of the value in the model's graph; equal values pair. A tensor the optimizer kept is a cut
   point both runs share; one that exists on one side only (fused away, folded, made by a fusion)
   is expected there and never counts as unmatched (docs/fusion.md),
1. the mapping file's exact names (record or node names),
2. fusions: one target op standing for several golden ops (mapping file, or the capture's
   `extra["fused_from"]` provenance): its outputs pair with the last golden op's outputs, its
   inputs with the first one's inputs,
3. the mapping file's regex renames of target names,
4. equal record names — except for a (module, op) called a different number of times in the two
   runs, where an inserted call shifts the call counters: those go to the sequence pass,
5. sequence alignment of what is left between consecutive paired records, on
   (direction, module, op, role, pos, shape), then without the module (renamed module), then
   without the op (renamed op), then without the shape (same op, other shape: reported as a shape
   mismatch). Keys must be equal, so unrelated tensors are never paired; what stays unpaired is
   reported on its side.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from operator import attrgetter

from ..base.record import Record
from ..base.vocab import (
    GRAPH_VALUE,
    MATCH_FUSION,
    MATCH_MAPPING,
    MATCH_NAME,
    MATCH_SEQUENCE,
    PROVENANCE_KEY,
    UNMATCHED,
)
from ..store import Dump
from .layer_mapping import resolve
from .lcs import lcs, longest_increasing
from .mapping import Mapping

_Key = tuple[object, ...]  # a record's alignment key at one level (direction, module, op, ...)
_Keys = list[list[int]]  # per level: each record's key as a small integer

ONLY_GOLDEN_GRAPH = "only in the golden graph: removed or rewritten by graph optimization"
ONLY_TARGET_GRAPH = "only in the target graph: made by graph optimization"


@dataclass(slots=True)
class Pair:
    """A golden record and its target counterpart; one side is None when it has none."""

    golden: Record | None
    target: Record | None
    match: str
    golden_group: list[Record] = field(default_factory=list)  # fusion: every golden record the target op stands for
    note: str = ""  # how the pair was made, when it is not obvious (mapping rule, fusion)


def _slot(r: Record) -> tuple[str, str, str]:
    return (r.direction, r.role, r.pos)


class _Aligner:
    def __init__(self, golden: list[Record], target: list[Record], mapping: Mapping | None):
        self.G, self.T, self.map = golden, target, mapping
        self.t_of_g = [-1] * len(golden)
        self.g_of_t = [-1] * len(target)
        self.kind: list[str] = [UNMATCHED] * len(target)
        self.note: dict[int, str] = {}  # target pos -> note
        self.group: dict[int, list[Record]] = {}  # target pos -> fusion group
        self.fused_away: dict[int, str] = {}  # golden pos -> the target node it was fused into
        self.g_name = {r.name: i for i, r in enumerate(golden)}
        self.g_node = _nodes(golden)
        self.t_node = _nodes(target)
        self.keyed = False  # both sides are graph captures keyed by graph value
        self._by_op_name: dict[tuple[str, int], str] | None = None  # (op name, call) -> golden node (_resolve)

    def pair(self, gi: int, ti: int, kind: str, note: str = "") -> bool:
        if self.t_of_g[gi] >= 0 or self.g_of_t[ti] >= 0:
            return False
        self.t_of_g[gi], self.g_of_t[ti], self.kind[ti] = ti, gi, kind
        if note:
            self.note[ti] = note
        return True

    def pair_nodes(self, g_pos: list[int], t_pos: list[int], kind: str, note: str) -> None:
        by_slot = {_slot(self.G[i]): i for i in g_pos}
        for ti in t_pos:
            gi = by_slot.get(_slot(self.T[ti]))
            if gi is not None:
                self.pair(gi, ti, kind, note)

    # 0. graph values
    def graph_values(self) -> None:
        g_key = {r.extra[GRAPH_VALUE]: i for i, r in enumerate(self.G) if GRAPH_VALUE in r.extra}
        if not g_key or not any(GRAPH_VALUE in r.extra for r in self.T):
            return
        self.keyed = True
        for ti, r in enumerate(self.T):
            gi = g_key.get(r.extra.get(GRAPH_VALUE))
            if gi is not None:
                self.pair(gi, ti, MATCH_NAME)

    def _graph_only(self, r: Record) -> bool:
        return self.keyed and GRAPH_VALUE in r.extra

    # 1. exact names from the mapping file
    def mapped_names(self, mapping: Mapping) -> None:
        t_name = {r.name: i for i, r in enumerate(self.T)}
        for tn, gn in mapping.names.items():
            if tn in self.t_node and gn in self.g_node:
                self.pair_nodes(self.g_node[gn], self.t_node[tn], MATCH_MAPPING, f"mapping: {tn} -> {gn}")
            elif tn in t_name and gn in self.g_name:
                self.pair(self.g_name[gn], t_name[tn], MATCH_MAPPING, f"mapping: {tn} -> {gn}")

    # 2. fusions
    def fusions(self) -> None:
        for node, t_pos in self.t_node.items():
            wanted = self.map.fusion_of(node) if self.map else None
            if wanted is None:
                wanted = self.T[t_pos[0]].extra.get(PROVENANCE_KEY)
            if not wanted:
                continue
            present = self._resolve(wanted, self.T[t_pos[0]].call)
            if not present:
                continue
            group_pos = sorted(i for n in present for i in self.g_node[n])
            first, last = self.g_node[present[0]], self.g_node[present[-1]]
            if len(wanted) == 1:  # one op for one op: the graph names its counterpart, nothing was fused
                self.pair_nodes(group_pos, t_pos, MATCH_NAME, "" if present[0] == node else f"graph: {present[0]}")
                continue
            note = f"fusion: {node} stands for {', '.join(present)}"
            for ti in t_pos:
                r = self.T[ti]
                if self.g_of_t[ti] >= 0:  # a cut point paired by its graph value: keep the group for the report
                    self.group.setdefault(ti, [self.G[i] for i in group_pos])
                    self.note.setdefault(ti, note)
                    continue
                cands = last if r.role == "output" else first if r.role == "input" else group_pos
                gi = self._same_value(r, group_pos) if self._graph_only(r) else self._fusion_partner(r, cands)
                if gi is not None and self.pair(gi, ti, MATCH_FUSION, note):
                    self.group[ti] = [self.G[i] for i in group_pos]
            for gi in group_pos:
                if self.t_of_g[gi] < 0:
                    self.fused_away[gi] = node

    def _resolve(self, wanted: list[str], call: int) -> list[str]:
        """Golden node names for provenance entries: node names as they are; a bare op name (a graph
        dump's original op) is the golden node whose module is that name, or whose op is it with '/'
        and '.' folded to '_' (file-per-tensor goldens), at the target's call number."""
        if self._by_op_name is None:
            self._by_op_name = {}
            for node, pos in self.g_node.items():
                r = self.G[pos[0]]
                for key in {r.module, _fold(r.module), r.op if not r.module else ""} - {""}:
                    self._by_op_name.setdefault((key, r.call), node)
        out: list[str] = []
        for n in wanted:
            found = n if n in self.g_node else (self._by_op_name.get((n, call))
                                                or self._by_op_name.get((_fold(n), call)))
            if found is not None and found not in out:
                out.append(found)
        return out

    def _same_value(self, r: Record, cands: list[int]) -> int | None:
        """A free golden record of the group holding the very tensor `r` holds (graph captures)."""
        return next((i for i in cands if self.t_of_g[i] < 0 and self.G[i].role == r.role
                     and self.G[i].extra.get("tensor") == r.extra.get("tensor")), None)

    def _fusion_partner(self, r: Record, cands: list[int]) -> int | None:
        free = [i for i in cands if self.t_of_g[i] < 0]
        for i in free:
            if _slot(self.G[i]) == _slot(r):
                return i
        same_role = [i for i in free if (self.G[i].direction, self.G[i].role) == (r.direction, r.role)]
        return same_role[0] if len(same_role) == 1 else None

    # 3. regex renames, 4. equal names
    def names(self) -> None:
        if self.map and self.map.renames:
            for ti, r in enumerate(self.T):
                if self.g_of_t[ti] < 0:
                    new = self.map.rename(r.name)
                    gi = self.g_name.get(new)
                    if new != r.name and gi is not None:
                        self.pair(gi, ti, MATCH_MAPPING, f"renamed to {new}")
        # a (module, op) called a different number of times in the two runs: its call counters may be
        # shifted by an inserted call, so its names prove nothing; the sequence pass pairs it
        calls_g, calls_t = _calls(self.G), _calls(self.T)
        for ti, r in enumerate(self.T):
            gi = self.g_name.get(r.name)
            if gi is not None and self.g_of_t[ti] < 0 and calls_g.get((r.module, r.op)) == calls_t.get((r.module, r.op)):
                self.pair(gi, ti, MATCH_NAME)

    # 5. sequence alignment between anchors
    def sequence(self) -> None:
        anchors_g = [gi for gi, ti in enumerate(self.t_of_g) if ti >= 0]
        keep = longest_increasing([self.t_of_g[gi] for gi in anchors_g])
        anchors = [(anchors_g[k], self.t_of_g[anchors_g[k]]) for k in keep]
        free_g = [i for i in range(len(self.G))
                  if self.t_of_g[i] < 0 and i not in self.fused_away and not self._graph_only(self.G[i])]
        free_t = [i for i in range(len(self.T)) if self.g_of_t[i] < 0 and not self._graph_only(self.T[i])]
        if not free_g or not free_t:
            return
        t_module = [self.map.rename(r.module) if self.map and self.map.renames else r.module for r in self.T]
        keyfns = (
            (lambda r, mod: (r.direction, mod, r.op, r.role, r.pos, r.shape)),
            (lambda r, mod: (r.direction, r.op, r.role, r.pos, r.shape)),  # module renamed
            (lambda r, mod: (r.direction, mod, r.role, r.pos, r.shape)),  # op renamed
            (lambda r, mod: (r.direction, mod, r.op, r.role, r.pos)),  # same op, other shape: a shape mismatch
        )
        ids: dict[_Key, int] = {}
        keys_g = [[ids.setdefault(f(r, r.module), len(ids)) for r in self.G] for f in keyfns]
        keys_t = [[ids.setdefault(f(r, t_module[i]), len(ids)) for i, r in enumerate(self.T)] for f in keyfns]
        bounds = [(-1, -1)] + anchors + [(len(self.G), len(self.T))]
        for (g0, t0), (g1, t1) in zip(bounds, bounds[1:]):
            gl = free_g[bisect_right(free_g, g0):bisect_left(free_g, g1)]
            tl = free_t[bisect_right(free_t, t0):bisect_left(free_t, t1)]
            self._gap(gl, tl, keys_g, keys_t, 0)

    def _gap(self, gl: list[int], tl: list[int], keys_g: _Keys, keys_t: _Keys, level: int) -> None:
        if not gl or not tl or level >= len(keys_g):
            return
        kg, kt = keys_g[level], keys_t[level]
        matches = lcs([kg[i] for i in gl], [kt[j] for j in tl])
        pi, pj = 0, 0
        for i, j in matches + [(len(gl), len(tl))]:
            self._gap(gl[pi:i], tl[pj:j], keys_g, keys_t, level + 1)
            if i < len(gl):
                self.pair(gl[i], tl[j], MATCH_SEQUENCE)
            pi, pj = i + 1, j + 1

    def pairs(self) -> list[Pair]:
        rows: list[tuple[int, int, int, Pair]] = []
        for ti, r in enumerate(self.T):
            gi = self.g_of_t[ti]
            g = self.G[gi] if gi >= 0 else None
            kind, note = self.kind[ti], self.note.get(ti, "")
            if g is None and self._graph_only(r):
                kind, note = MATCH_FUSION, ONLY_TARGET_GRAPH
            rows.append((ti, 0, 0, Pair(g, r, kind, self.group.get(ti, []), note)))
        last_t = -1
        for gi, r in enumerate(self.G):
            ti = self.t_of_g[gi]
            if ti >= 0:
                last_t = ti
                continue
            if gi in self.fused_away:
                p = Pair(r, None, MATCH_FUSION, note=f"fused away: inside target op {self.fused_away[gi]}")
            elif self._graph_only(r):
                p = Pair(r, None, MATCH_FUSION, note=ONLY_GOLDEN_GRAPH)
            else:
                p = Pair(r, None, UNMATCHED)
            rows.append((last_t, 1, gi, p))
        rows.sort(key=lambda row: row[:3])
        return [row[3] for row in rows]


def _fold(name: str) -> str:
    """An op name as file-per-tensor dumps spell it: '/' and '.' folded to '_'."""
    return name.replace("/", "_").replace(".", "_")


def _calls(records: list[Record]) -> dict[tuple[str, str], int]:
    """Number of distinct calls of each (module, op)."""
    seen: dict[tuple[str, str], set[int]] = {}
    for r in records:
        seen.setdefault((r.module, r.op), set()).add(r.call)
    return {k: len(v) for k, v in seen.items()}


def _nodes(records: list[Record]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        out.setdefault(r.node, []).append(i)
    return out


_NAME, _MODULE, _OP, _CALL = attrgetter("name"), attrgetter("module"), attrgetter("op"), attrgetter("call")


def _same_names(golden: list[Record], target: list[Record], mapping: Mapping | None) -> list[Pair] | None:
    """The pairs when both runs recorded the very same unique names, modules, ops and call numbers in the
    same order and nothing else can pair records (no mapping, graph values or fusion provenance): then every
    pass above pairs each record with its namesake and nothing is left, so this is their result, made
    without their tables. None when anything differs (the passes run)."""
    if mapping is not None or len(golden) != len(target):
        return None
    names = list(map(_NAME, target))
    if names != list(map(_NAME, golden)) or len(set(names)) != len(names):
        return None
    for get in (_MODULE, _OP, _CALL):  # the name pass checks each (module, op) is called as often on both sides
        if list(map(get, golden)) != list(map(get, target)):
            return None
    if any(GRAPH_VALUE in r.extra for r in golden if r.extra) \
            or any(GRAPH_VALUE in r.extra or PROVENANCE_KEY in r.extra for r in target if r.extra):
        return None
    return list(map(Pair, golden, target, [MATCH_NAME] * len(target)))


def align_records(golden: list[Record], target: list[Record], mapping: Mapping | None = None) -> list[Pair]:
    """align() on two record lists in execution order (for callers without a Dump)."""
    same = _same_names(golden, target, mapping)
    return same if same is not None else align_passes(golden, target, mapping)


def align_passes(golden: list[Record], target: list[Record], mapping: Mapping | None = None) -> list[Pair]:
    """Every pass of the module's docstring, in order (align_records without its shortcut)."""
    if mapping is not None and mapping.layers:
        mapping = resolve(mapping, target)
    a = _Aligner(golden, target, mapping)
    a.graph_values()
    if mapping is not None:
        a.mapped_names(mapping)
    a.fusions()
    a.names()
    a.sequence()
    return a.pairs()


def align(golden: Dump, target: Dump, mapping: Mapping | None = None) -> list[Pair]:
    """Every record of both dumps in a Pair, in the target's execution order; unmatched golden
    records sit right after the pair of the golden record that preceded them."""
    return align_records(golden.records, target.records, mapping)
