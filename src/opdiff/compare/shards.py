"""Which rank and which shard: the checks that only a parallel run needs (docs/parallel.md).

- replicas: copies a layout says are the same (Replicate; every rank of a data-parallel parameter)
  must be bitwise equal; a rank whose copy differs from the others' (or from the golden) is named;
- shards: a logical tensor that fails against the golden is split back to the target's layout and
  each rank's shard is compared with its slice of the golden, naming the ranks and regions that differ;
- collectives: a reduction's output must be the reduction of the ranks' inputs (a broken collective),
  and where a logical tensor fails, a collective whose inputs' sum agrees with the golden while its
  output does not mis-reduced (a wrong reduce op).

The earliest finding in execution order is the origin: a fault one rank makes and a collective then
spreads to every rank is named with that rank and op. No framework is imported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..base.errors import DumpError
from ..base.pair import PairResult
from ..base.record import Record
from ..base.vocab import FAIL, STATUS_COMPARED
from ..metrics.tensor import TensorSource, pair_metrics
from ..metrics.thresholds import Thresholds, preset
from ..metrics.verdict import verdict
from ..store import Dump
from ..store.logical import Collective, Logical, LogicalDump, Shard, reduce_arrays

REPLICAS = "replicas-disagree"
SHARD = "shard-differs"
MISREDUCED = "mis-reduced"
FAILING_KINDS = (REPLICAS, MISREDUCED)  # fail a run even when every logical pair passes
_ORDER = {REPLICAS: 0, MISREDUCED: 1, SHARD: 2}  # at one position: the finding that explains the others first
MAX_SPLIT = 64  # modules whose first failing logical tensor is split back to the ranks' shards


@dataclass(frozen=True)
class ShardFinding:
    """One thing a parallel check found, with the ranks and region it is about."""

    kind: str  # replicas-disagree | shard-differs | mis-reduced
    record: str
    module: str
    op: str
    position: float  # where it ran in the merged execution order
    ranks: tuple[int, ...]
    region: str = ""  # "dim 0 [8:16]" of the logical tensor, "" for the whole
    detail: str = ""

    def line(self) -> str:
        where = f" {self.region}" if self.region else ""
        ranks = ", ".join(map(str, self.ranks))
        return f"{self.kind}: rank {ranks}{where} of {self.record} ({self.op}) — {self.detail}"


@dataclass
class ParallelCheck:
    """Every finding of the parallel checks, in execution order."""

    ranks: list[int]
    findings: list[ShardFinding] = field(default_factory=list)
    checked_replicas: int = 0
    checked_collectives: int = 0

    def origin(self) -> ShardFinding | None:
        """The earliest finding: where a rank first went its own way."""
        return self.findings[0] if self.findings else None

    def failed(self) -> bool:
        return any(f.kind in FAILING_KINDS for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "checked_replicas": self.checked_replicas,
                "checked_collectives": self.checked_collectives,
                "origin": asdict(o) if (o := self.origin()) is not None else None,
                "findings": [asdict(f) for f in self.findings]}


def check_parallel(target: LogicalDump, golden: Dump | None = None, results: Iterable[PairResult] = (),
                   thresholds: Thresholds | None = None) -> ParallelCheck:
    """Replicas, shards of failing logical tensors (with a golden) and collectives of a merged run."""
    th = thresholds or preset("default")
    pos = {r.name: float(r.index) for r in target.records}
    out = ParallelCheck(target.ranks)
    results = list(results)
    failing = [r for r in results if r.result == FAIL and r.status == STATUS_COMPARED and r.golden and r.target]
    gold = {r.target.name: r.golden for r in results if r.status == STATUS_COMPARED and r.target and r.golden}
    for name, lg in target.logical.items():
        out.checked_replicas += _has_copies(lg)
        out.findings += _replicas(target, name, lg, pos[name], golden, gold.get(name), th)
    for r in first_per_module(failing):
        assert r.target is not None and r.golden is not None and golden is not None
        out.findings += _shards(target, golden, r.golden, r.target.name, pos[r.target.name], th)
    out.checked_collectives, found = _collectives(target, pos)
    out.findings += found
    if golden is not None and failing:
        first = failing[0]
        assert first.golden is not None and first.target is not None
        out.findings += _misreduced(target, golden, first.golden, first.target, pos, th)
    out.findings.sort(key=lambda f: (f.position, _ORDER[f.kind]))
    return out


def first_per_module(failing: list[PairResult], cap: int = MAX_SPLIT) -> list[PairResult]:
    """The first failing pair of each module, in order, for at most `cap` modules: every module that goes wrong
    gets its ranks named, while the reads stay bounded (a tensor and its shards per module)."""
    seen: set[str] = set()
    out = []
    for r in failing:
        module = r.target.module if r.target else ""
        if module not in seen and len(seen) < cap:
            seen.add(module)
            out.append(r)
    return out


def check_replicas(target: LogicalDump, pattern: str | None = None) -> ParallelCheck:
    """Replicas only, no golden: copies a layout declares (DTensor, layout file) plus, where nothing is declared,
    the parameters and their gradients (data parallel), or the records whose name `pattern` finds."""
    import re

    rx = re.compile(pattern) if pattern else None
    pos = {r.name: float(r.index) for r in target.records}
    out = ParallelCheck(target.ranks)
    for name, lg in target.logical.items():
        declared = lg.layout.source != "default"
        rec = lg.shards[0].record
        if not (declared or (rx.search(name) if rx else rec.level == "param")):
            continue
        out.checked_replicas += _has_copies(lg)
        out.findings += _replicas(target, name, lg, pos[name], None, None, preset("default"))
    return out


# -- replicas ----------------------------------------------------------------------------------

def _copy_groups(lg: Logical) -> list[list[Shard]]:
    """Shards that the layout says hold the same values: equal coordinates outside Replicate mesh dims."""
    rep = [k for k, p in enumerate(lg.layout.placements) if p.kind == "replicate"]
    groups: dict[tuple[int, ...], list[Shard]] = {}
    for s in lg.shards:
        key = tuple(c for k, c in enumerate(s.coord) if k not in rep) if s.coord else ()
        groups.setdefault(key, []).append(s)
    return [g for g in groups.values() if len(g) > 1] if rep else []


def _has_copies(lg: Logical) -> int:
    return int(bool(_copy_groups(lg)))


def _fingerprint(dump: LogicalDump, s: Shard) -> str:
    """The content hash when the capture kept one, else the raw bytes' digest (read once)."""
    if s.record.hash:
        return s.record.hash
    if s.record.data is None:
        st = s.record.stats
        return repr(st.to_json()) if st is not None else ""
    import hashlib

    arr = np.ascontiguousarray(dump.shard_tensor(s))
    return "sha1:" + hashlib.sha1(arr.view(np.uint8).tobytes()).hexdigest()


def _replicas(dump: LogicalDump, name: str, lg: Logical, position: float, golden: Dump | None,
              grec: Record | None, th: Thresholds) -> list[ShardFinding]:
    out = []
    for group in _copy_groups(lg):
        try:
            prints = {s.rank: _fingerprint(dump, s) for s in group}
        except DumpError as exc:
            out.append(_finding(REPLICAS, lg, position, tuple(s.rank for s in group), detail=f"unreadable: {exc}"))
            continue
        if len(set(prints.values())) <= 1:
            continue
        odd = _odd_ranks(dump, group, prints, golden, grec, th)
        agree = sorted(set(prints) - set(odd))
        detail = (f"its copy differs from rank {', '.join(map(str, agree))}'s" if agree else "the copies all differ") \
            + f" (layout {lg.layout.describe()}: they should be bitwise equal)"
        module = lg.shards[0].record.module
        if not agree and module and not any(c.record.module == module for c in dump.collectives):
            detail += f"; no collective ran in {module} (a missing all_reduce?)"
        out.append(_finding(REPLICAS, lg, position, tuple(odd), detail=detail))
    return out


def _odd_ranks(dump: LogicalDump, group: list[Shard], prints: dict[int, str], golden: Dump | None,
               grec: Record | None, th: Thresholds) -> list[int]:
    """The ranks whose copy is the wrong one: those failing against the golden when there is one, else those
    outside the majority (every rank when no value has a majority)."""
    if golden is not None and grec is not None:
        g = golden.tensor(grec)
        bad = [s.rank for s in group if not _agrees(g, dump.shard_tensor(s), grec.dtype, s.record.dtype, th)[0]]
        if bad:
            return bad
    counts = Counter(prints.values())
    top, n = counts.most_common(1)[0]
    if n * 2 > len(prints):
        return sorted(r for r, p in prints.items() if p != top)
    return sorted(prints)


# -- shards against the golden ---------------------------------------------------------------------

def shard_region(lg: Logical, s: Shard) -> dict[int, tuple[int, int]] | None:
    """tensor dim -> (start, stop) of the logical tensor that shard `s` holds; None when a Partial mesh
    dimension makes a shard meaningless on its own or one tensor dim is sharded twice."""
    region: dict[int, tuple[int, int]] = {}
    ndim = len(s.record.shape)
    for k, p in enumerate(lg.layout.placements):
        if p.kind == "partial":
            return None
        if p.kind != "shard":
            continue
        d = p.dim % ndim if ndim else 0
        if d in region:
            return None
        peers = sorted((o for o in lg.shards if o.coord[:k] + o.coord[k + 1:] == s.coord[:k] + s.coord[k + 1:]),
                       key=lambda o: o.coord[k])
        start = sum(o.record.shape[d] for o in peers if o.coord[k] < s.coord[k])
        region[d] = (start, start + s.record.shape[d])
    return region


def _region_text(region: dict[int, tuple[int, int]]) -> str:
    return ", ".join(f"dim {d} [{a}:{b}]" for d, (a, b) in sorted(region.items()))


def _shards(dump: LogicalDump, golden: Dump, grec: Record, name: str, position: float,
            th: Thresholds) -> list[ShardFinding]:
    lg = dump.logical[name]
    if len(lg.shards) < 2:  # one rank holds it whole (a pipeline stage): that rank ran it
        s = lg.shards[0]
        return [_finding(SHARD, lg, position, (s.rank,), "", "the only rank holding it (its pipeline stage) ran it")]
    if any(p.kind == "partial" for p in lg.layout.placements):
        return _contributions(dump, golden, grec, lg, position, th)
    try:
        g = golden.tensor(grec)
    except DumpError:
        return []
    out = []
    for s in lg.shards:
        region = shard_region(lg, s)
        if region is None:
            continue
        piece = g[tuple(slice(*region[d]) if d in region else slice(None) for d in range(g.ndim))]
        try:
            ok, why = _agrees(piece, dump.shard_tensor(s), grec.dtype, s.record.dtype, th)
        except DumpError as exc:
            ok, why = False, f"unreadable: {exc}"
        if not ok:
            out.append(_finding(SHARD, lg, position, (s.rank,), _region_text(region),
                                f"differs from the golden's slice ({why.split(';')[0]})"))
    return out


def _contributions(dump: LogicalDump, golden: Dump, grec: Record, lg: Logical, position: float,
                   th: Thresholds) -> list[ShardFinding]:
    """A Partial tensor: each rank's contribution against the golden's at the same mesh coordinate. Only a merged
    golden laying the tensor out the same way has contributions; from a whole golden they cannot be told apart."""
    if not isinstance(golden, LogicalDump):
        return []
    glg = golden.logical.get(grec.name)
    if glg is None or (glg.layout.mesh_shape, glg.layout.placements) != (lg.layout.mesh_shape, lg.layout.placements):
        return []
    by_coord = {s.coord: s for s in glg.shards}
    out = []
    for s in lg.shards:
        gs = by_coord.get(s.coord)
        if gs is None:
            continue
        try:
            ok, why = _agrees(golden.shard_tensor(gs), dump.shard_tensor(s), gs.record.dtype, s.record.dtype, th)
        except DumpError as exc:
            ok, why = False, f"unreadable: {exc}"
        if not ok:
            out.append(_finding(SHARD, lg, position, (s.rank,), "partial contribution",
                                f"differs from the golden rank {gs.rank}'s contribution ({why.split(';')[0]})"))
    return out


def _agrees(golden: np.ndarray, target: np.ndarray, gdtype: str, tdtype: str, th: Thresholds) -> tuple[bool, str]:
    """Whether one piece passes against the golden by the comparison's own rules, and why not."""
    if golden.shape != target.shape:
        return False, f"shape {list(target.shape)} against {list(golden.shape)}"
    m = pair_metrics(TensorSource.of(np.ascontiguousarray(golden)), TensorSource.of(np.ascontiguousarray(target)))
    result, reason = verdict(m, gdtype, tdtype, "tensor", th)
    return result != FAIL, reason


# -- collectives ---------------------------------------------------------------------------------------

def _collective_calls(dump: LogicalDump) -> dict[str, list[Collective]]:
    calls: dict[str, list[Collective]] = {}
    for c in dump.collectives:
        calls.setdefault(c.record.node, []).append(c)
    return calls


def _by_role(cs: list[Collective], role: str) -> dict[int, Record]:
    return {c.rank: c.record for c in cs if c.record.role == role and c.record.data is not None
            and c.record.pos in ("0", "kwargs.tensor", "1", "kwargs.input_tensor", "kwargs.input")}


def _collectives(dump: LogicalDump, pos: dict[str, float]) -> tuple[int, list[ShardFinding]]:
    """Each all_reduce / all_gather_into_tensor / reduce_scatter_tensor checked against its ranks' inputs."""
    checked, out = 0, []
    for node, cs in _collective_calls(dump).items():
        first = cs[0].record
        kind, op = first.extra.get("collective"), str(first.extra.get("reduce_op", "sum"))
        group = first.extra.get("group") or dump.ranks
        ins, outs = _by_role(cs, "input"), {c.rank: c.record for c in cs if c.record.role == "output"
                                            and c.record.data is not None}
        if kind not in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor") \
                or set(group) - set(ins) or set(group) - set(outs):
            continue
        checked += 1
        try:
            arrays = [np.asarray(dump.parts_by_rank[r].tensor(ins[r])) for r in group]
            expect = _expected(kind, op, arrays, len(group))
            bad = [r for i, r in enumerate(group)
                   if not _close(expect(i), np.asarray(dump.parts_by_rank[r].tensor(outs[r])))]
        except (DumpError, ValueError) as exc:
            bad, op = list(group), f"{op}; unreadable: {exc}"
        if bad:
            where = pos.get(cs[0].after or "", -0.5) + 0.5
            out.append(ShardFinding(MISREDUCED, node, first.module, first.op, where, tuple(bad), "",
                                    f"its output is not the {op} of ranks {list(group)}' inputs (a broken collective)"))
    return checked, out


def _expected(kind: str, op: str, arrays: list[np.ndarray], n: int) -> Any:
    if kind == "all_reduce":
        total = reduce_arrays(arrays, op)
        return lambda i: total
    if kind == "all_gather_into_tensor":
        whole = np.concatenate([a.reshape(-1) for a in arrays])
        return lambda i: whole
    total = reduce_arrays(arrays, op).reshape(-1)
    size = total.size // n
    return lambda i: total[i * size:(i + 1) * size]


def _close(expect: np.ndarray, got: np.ndarray) -> bool:
    """Equal up to the rounding a reduction in another order makes (a few units in the last place)."""
    if expect.size != got.size:
        return False
    e = np.asarray(expect, dtype=np.float64).reshape(-1)
    g = np.asarray(got, dtype=np.float64).reshape(-1)
    if not np.array_equal(np.isnan(e), np.isnan(g)):
        return False
    eps = float(np.finfo(got.dtype).eps) if got.dtype.kind == "f" else 0.0
    scale = float(np.nanmax(np.abs(e))) if e.size else 0.0
    return bool(np.allclose(e, g, rtol=16 * eps, atol=16 * eps * scale, equal_nan=True))


def _misreduced(dump: LogicalDump, golden: Dump, grec: Record, trec: Record, pos: dict[str, float],
                th: Thresholds) -> list[ShardFinding]:
    """A reduction in the failing tensor's module whose inputs, summed, agree with the golden while the tensor does
    not: the collective reduced the right partial values the wrong way (a wrong reduce op, a wrong group)."""
    out = []
    for node, cs in _collective_calls(dump).items():
        first = cs[0].record
        if first.module != trec.module or first.extra.get("collective") != "all_reduce":
            continue
        ins = _by_role(cs, "input")
        try:
            total = reduce_arrays([np.asarray(dump.parts_by_rank[r].tensor(ins[r])) for r in sorted(ins)], "sum")
            ok, _ = _agrees(golden.tensor(grec), total.reshape(grec.shape), grec.dtype, trec.dtype, th)
        except (DumpError, ValueError):
            continue
        if ok:
            op = first.extra.get("reduce_op", "sum")
            where = pos.get(cs[0].after or "", -0.5) + 0.5
            out.append(ShardFinding(MISREDUCED, node, first.module, first.op, where, tuple(sorted(ins)), "",
                                    f"the sum of the ranks' inputs agrees with the golden {grec.name}, the reduced "
                                    f"output ({op}) does not"))
    return out


def _finding(kind: str, lg: Logical, position: float, ranks: tuple[int, ...], region: str = "",
             detail: str = "") -> ShardFinding:
    rec = lg.shards[0].record
    return ShardFinding(kind, rec.name, rec.module, rec.op, position, ranks, region, detail)
