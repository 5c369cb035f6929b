"""Many ranks as one logical run: a `Dump` whose records are the logical tensors of a parallel run.

`merge_ranks(dump)` reads every rank's part of one step and gives each record name one logical
record: its global shape, and data assembled from the ranks' shards when it is read (concatenate
Shard, take the first Replicate copy, reduce Partial), one logical tensor at a time. compare,
diagnose and the reports then see a sharded target exactly like an unsharded golden. Collective
records and pipeline stage boundaries exist only because of parallelism and are left out here; the
parallel checks (compare/shards.py) look at them (docs/parallel.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from ..base.errors import DumpError
from ..base.record import Record, Stats
from .layout import Layout, LayoutRules, Placement, replicated
from .source import Dump, TensorSpan

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """One rank's piece of a logical tensor."""

    rank: int
    record: Record
    coord: tuple[int, ...]


@dataclass
class Logical:
    """A logical tensor: its layout and the shard every rank holds."""

    layout: Layout
    shards: list[Shard]
    error: str = ""  # why the shards cannot make the logical tensor (its pair is then unreadable, never a pass)


@dataclass(frozen=True)
class Collective:
    """A collective's record on one rank, and the logical record that ran just before it there."""

    rank: int
    record: Record
    after: str | None


@dataclass
class LogicalDump(Dump):
    """One step of a parallel run seen as a single logical run (see module docstring)."""

    ranks: list[int] = field(default_factory=list)
    parts_by_rank: dict[int, Dump] = field(default_factory=dict)
    logical: dict[str, Logical] = field(default_factory=dict)
    collectives: list[Collective] = field(default_factory=list)  # left out of `records`, checked on their own
    rules: LayoutRules | None = None

    @property
    def format(self) -> str:  # type: ignore[override]
        first = next(iter(self.parts_by_rank.values()), None)
        return first.format if first is not None else ""

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        lg = self.logical.get(rec.name)
        if lg is None:
            raise DumpError(f"{self.root}: no logical record named {rec.name!r}")
        return assemble_data(self, rec.name, lg)

    def open_part(self, rank: int, step: int) -> Dump:
        """Another step of the run, merged the same way (the rank is always the merged run's own)."""
        return merge_ranks(self.parts_by_rank[self.ranks[0]].with_part(self.ranks[0], step), self.rules)

    def check(self) -> None:
        for d in self.parts_by_rank.values():
            d.check()

    @property
    def complete(self) -> bool:
        return all(d.complete for d in self.parts_by_rank.values())

    def shard_tensor(self, shard: Shard) -> np.ndarray:
        """One rank's local data of a shard (memory-mapped where the format allows)."""
        return self.parts_by_rank[shard.rank].tensor(shard.record)


def is_collective(rec: Record) -> bool:
    """A record of a torch.distributed collective (capture/torch/collectives.py)."""
    return "collective" in rec.extra


def is_stage_boundary(rec: Record) -> bool:
    """A pipeline stage's root input (what it received) or root output (what it sends on), but the first
    stage's inputs and the last stage's outputs: those are the model's own (the capture marks a stage's root
    records with extra.pipeline)."""
    pp = rec.extra.get("pipeline")
    if not isinstance(pp, dict) or rec.module != "" or rec.level != "module":
        return False
    stage, stages = pp.get("stage", 0), pp.get("stages", 1)
    return (rec.role == "input" and stage > 0) or (rec.role == "output" and stage < stages - 1)


def merge_ranks(dump: Dump, rules: LayoutRules | None = None) -> LogicalDump:
    """Every rank of `dump`'s step as one logical dump (DumpError when the ranks cannot be put together)."""
    ranks = sorted({r for r, s in dump.parts if s == dump.step})
    parts = {r: dump if r == dump.rank else dump.with_part(r, dump.step) for r in ranks}
    if rules is None and isinstance(dump.meta.get("layout_rules"), dict):
        from .layout import rules_from_dict

        try:
            rules = rules_from_dict(dump.meta["layout_rules"], f"{dump.root}/meta.json")
        except ValueError as exc:
            raise DumpError(f"{dump.root}/meta.json: bad layout_rules: {exc}") from None
    order, by_name, collectives = _merged_order(parts)
    logical: dict[str, Logical] = {}
    records: list[Record] = []
    for name in order:
        held = by_name[name]
        lay = _layout_of(dump.root, name, held, rules)
        shards = [Shard(r, rec, lay.coord(r) or ()) for r, rec in held]
        logical[name] = lg = Logical(lay, shards)
        records.append(_logical_record(dump.root, len(records), lg))
    meta = {**dump.meta, "merged_ranks": ranks, "world_size": len(ranks)}
    return LogicalDump(root=dump.root, meta=meta, rank=ranks[0], step=dump.step, records=records,
                       parts=[(ranks[0], s) for r, s in dump.parts if r == ranks[0]],
                       problems=[p for d in parts.values() for p in d.problems], ranks=ranks, parts_by_rank=parts,
                       logical=logical, collectives=collectives, rules=rules, scope=(None, dump.scope[1]),
                       address=dump.address)


def _merged_order(parts: dict[int, Dump]) -> tuple[list[str], dict[str, list[tuple[int, Record]]],
                                                   list[Collective]]:
    """Record names in execution order over all ranks: the first rank's order, and a later rank's own records
    right after the record they followed there (at the end when they follow none: a later pipeline stage)."""
    order: list[str] = []
    by_name: dict[str, list[tuple[int, Record]]] = {}
    collectives: list[Collective] = []
    for rank, d in parts.items():
        after: dict[str | None, list[str]] = {}
        anchor: str | None = None
        last: str | None = None
        for rec in d.records:
            if is_collective(rec):
                collectives.append(Collective(rank, rec, last))
                continue
            last = rec.name
            if is_stage_boundary(rec):
                continue
            if rec.name in by_name:
                by_name[rec.name].append((rank, rec))
                anchor = rec.name
                continue
            by_name[rec.name] = [(rank, rec)]
            after.setdefault(anchor, []).append(rec.name)  # a run of this rank's own records after `anchor`
        if not order:
            order = after.get(None, [])
            continue
        merged: list[str] = []
        for name in order:
            merged.append(name)
            merged.extend(after.get(name, ()))
        order = merged + after.get(None, [])
    return order, by_name, collectives


def _layout_of(root: Any, name: str, held: list[tuple[int, Record]], rules: LayoutRules | None) -> Layout:
    """What the record's capture says (DTensor), else what the layout file says, else replicated where held."""
    raw = held[0][1].extra.get("layout")
    ranks = [r for r, _ in held]
    if raw is not None:
        try:
            lay = Layout.from_json(raw)
        except ValueError as exc:
            raise DumpError(f"{root}: record {name!r}: {exc}") from None
    else:
        lay = (rules.layout_of(name, ranks) if rules is not None and len(ranks) > 1 else None) or replicated(ranks)
    missing = [r for r in lay.mesh if r not in ranks]
    if missing:  # a rank of the mesh lacks the record: its part cannot be rebuilt; the held ranks only
        lay = replicated(ranks) if lay.source == "default" else lay
    return lay


def _logical_record(root: Any, index: int, lg: Logical) -> Record:
    """The logical record of a set of shards; damage (shards that do not fit) flags this record only."""
    lay, shards = lg.layout, lg.shards
    first = shards[0].record
    dtypes = {s.record.dtype for s in shards}
    if len(dtypes) > 1:
        lg.error = f"{root}: record {first.name!r} has dtypes {sorted(dtypes)} on different ranks"
    extra = {**first.extra, "layout": lay.to_json(), "ranks": [s.rank for s in shards]}
    if len(shards) == 1 or all(p.kind == "replicate" for p in lay.placements):
        return replace(first, index=index, extra=extra)
    try:
        shape = combine(lay, shards, lambda s: tuple(s.record.shape), _shape_ops)
    except (ValueError, KeyError) as exc:
        lg.error = f"{root}: record {first.name!r}: shards do not fit layout {lay.describe()}: {exc}"
        given = first.extra.get("layout", {}).get("global_shape")
        shape = tuple(given) if isinstance(given, list) and all(isinstance(x, int) for x in given) else first.shape
    partial = any(p.kind == "partial" for p in lay.placements)
    stats = None if partial else _merged_stats([s.record.stats for s in shards])
    data = {"file": "(assembled from ranks)", "key": first.name} if all(s.record.data for s in shards) else None
    return replace(first, index=index, shape=shape, stats=stats, hash=None, data=data, extra=extra)


# -- assembly ----------------------------------------------------------------------------------

class _Ops:
    """How one mesh dimension's pieces become one: along a Shard dim, from Replicate copies, a Partial reduction."""

    def __init__(self, shard: Callable[[list[Any], int], Any], replicate: Callable[[list[Any]], Any],
                 partial: Callable[[list[Any], str], Any]):
        self.shard, self.replicate, self.partial = shard, replicate, partial


def _cat_shapes(shapes: list[tuple[int, ...]], dim: int) -> tuple[int, ...]:
    first = shapes[0]
    d = dim % len(first) if first else 0
    if any(len(s) != len(first) or s[:d] + s[d + 1:] != first[:d] + first[d + 1:] for s in shapes):
        raise ValueError(f"shard shapes {[list(s) for s in shapes]} differ outside dim {dim}")
    return first[:d] + (sum(s[d] for s in shapes),) + first[d + 1:]


def _same_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    if len(set(shapes)) > 1:
        raise ValueError(f"copies have shapes {[list(s) for s in shapes]}")
    return shapes[0]


_shape_ops = _Ops(_cat_shapes, _same_shape, lambda shapes, op: _same_shape(shapes))


def reduce_arrays(arrays: list[np.ndarray], op: str) -> np.ndarray:
    dtype = arrays[0].dtype
    wide = np.float64 if dtype.kind == "f" and dtype.itemsize >= 8 else np.float32 if dtype.kind in "fV" else None
    acc: list[Any] = [np.asarray(a, dtype=wide) if wide is not None else np.asarray(a) for a in arrays]
    out: Any
    if op in ("sum", "avg"):
        out = acc[0].copy()
        for a in acc[1:]:
            out += a
        if op == "avg":
            out /= len(acc)
    else:
        out = (np.maximum if op == "max" else np.minimum).reduce(acc)
    return np.asarray(out).astype(dtype)


_array_ops = _Ops(lambda arrs, dim: np.concatenate(arrs, axis=dim), lambda arrs: arrs[0], reduce_arrays)


def combine(lay: Layout, shards: Sequence[Shard], value: Callable[[Shard], T], ops: _Ops) -> T:
    """Fold the shards' values over the mesh, innermost mesh dimension first (DTensor's order for
    nested shards): shards along Shard, first copy of Replicate, reduction of Partial."""
    items: dict[tuple[int, ...], Any] = {}
    for s in shards:
        if len(s.coord) != len(lay.mesh_shape):
            raise ValueError(f"rank {s.rank} is not in the mesh {list(lay.mesh)}")
        items[s.coord] = value(s)
    for k in reversed(range(len(lay.mesh_shape))):
        groups: dict[tuple[int, ...], list[tuple[int, Any]]] = {}
        for c, v in items.items():
            groups.setdefault(c[:k] + c[k + 1:], []).append((c[k], v))
        if any(len(g) != lay.mesh_shape[k] for g in groups.values()):
            raise ValueError(f"mesh dimension {k} lacks shards (ranks {sorted(s.rank for s in shards)})")
        p: Placement = lay.placements[k]
        items = {}
        for c, g in groups.items():
            vals = [v for _, v in sorted(g, key=lambda x: x[0])]
            items[c] = ops.shard(vals, p.dim) if p.kind == "shard" else ops.replicate(vals) \
                if p.kind == "replicate" else ops.partial(vals, p.reduce)
    whole: T = items[()]
    return whole


def assemble_data(dump: LogicalDump, name: str, lg: Logical) -> TensorSpan | np.ndarray:
    """The logical tensor's data: the one shard's own bytes when a single rank holds it or all are copies
    (zero-copy), else assembled in memory (one logical tensor)."""
    if len(lg.shards) == 1 or all(p.kind == "replicate" for p in lg.layout.placements):
        s = lg.shards[0]
        return dump.parts_by_rank[s.rank].span(s.record)
    try:
        out: np.ndarray = combine(lg.layout, lg.shards, dump.shard_tensor, _array_ops)
    except ValueError as exc:
        raise DumpError(f"{dump.root}: record {name!r} cannot be assembled: {exc}") from None
    return np.ascontiguousarray(out)


def _merged_stats(parts: list[Stats | None]) -> Stats | None:
    """Statistics of the concatenation of shards, from each shard's statistics."""
    if any(p is None for p in parts):
        return None
    ps = [p for p in parts if p is not None]
    out = Stats(numel=sum(p.numel for p in ps), nan=sum(p.nan for p in ps), posinf=sum(p.posinf for p in ps),
                neginf=sum(p.neginf for p in ps), zeros=sum(p.zeros for p in ps))
    fin = [(p.numel - p.nan - p.posinf - p.neginf, p) for p in ps if p.mean is not None]
    n = sum(k for k, _ in fin)
    if not n:
        return out
    out.min = min(p.min for _, p in fin if p.min is not None)
    out.max = max(p.max for _, p in fin if p.max is not None)
    s1 = sum(k * (p.mean or 0.0) for k, p in fin)
    s2 = sum((p.norm or 0.0) ** 2 for _, p in fin)
    out.mean = s1 / n
    out.norm = math.sqrt(s2)
    out.std = math.sqrt(max(s2 / n - out.mean ** 2, 0.0))
    return out
