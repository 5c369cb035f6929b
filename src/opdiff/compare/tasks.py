"""What a distributed compare task runs on a worker, next to the files: plan a (rank, step) part, or
compare one shard of it. Dumps are opened through the reader interface (`opdiff.store.load`), so
any format works, and kept open per worker process. The plan aligns a part once, compares its
pairs that need no tensor data and cuts the rest into shards of named pairs; a shard task looks
its pairs up by name and runs compare.run's own compare_pair. Tasks return compact metric rows
(compare/rows.py), never tensors.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base.errors import DumpError, OpdiffError
from ..match.align import Pair
from ..match.mapping import Mapping
from ..metrics.tensor import Workspace
from ..metrics.thresholds import Thresholds
from ..store import Dump, list_parts, load
from .rows import ROWS_FORMAT, layout, result_row
from .run import PairPlan, _nbytes, compare_pair, compare_subset, plan_pairs, resolved_mode

CHEAP_PAIR_BYTES = 4096  # what a pair compared without tensor data counts for when shards are cut
_OPEN_PARTS = 4  # (rank, step) parts a worker process keeps open (records and shard headers)
_cache: OrderedDict[tuple[Any, ...], tuple[Dump, Dump, str]] = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True)
class Spec:
    """Everything a task needs to redo its part of the comparison on any worker."""

    golden: str
    target: str
    mode: str
    thresholds: Thresholds
    mapping: Mapping | None
    shard_bytes: int
    allow_partial: bool = False

    def key(self) -> str:
        """A digest of the inputs: task results are reused only by a run with the same key."""
        text = json.dumps([os.path.abspath(self.golden), os.path.abspath(self.target), self.mode,
                           self.thresholds.to_json(), self.mapping.source if self.mapping else None,
                           repr(self.mapping), self.shard_bytes, self.allow_partial, ROWS_FORMAT], sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_shards(plan: PairPlan, shard_bytes: int) -> list[list[int]]:
    """Cut the pairs read as tensors, in execution order, into shards of about `shard_bytes` of reading."""
    shards: list[list[int]] = []
    size = shard_bytes
    for i, nb in sorted(plan.work):
        if size >= shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(i)
        size += nb or CHEAP_PAIR_BYTES
    return shards


def fingerprint(d: Dump) -> str:
    """A digest of a part's meta and records: a shard task refuses a dump that changed since its plan."""
    text = json.dumps([d.format, d.meta, [r.to_json() for r in d.records], d.problems], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _load(spec: Spec, path: str, rank: int, step: int) -> Dump:
    d = load(path, rank=rank, step=step)
    if not d.complete and not spec.allow_partial:
        why = d.problems[0] if d.problems else f"{d.root}: capture did not finish"
        raise DumpError(f"{why} — the dump is incomplete; use --allow-partial to compare up to where it stops")
    return d


def open_part(spec: Spec, rank: int, step: int) -> tuple[Dump, Dump, str]:
    """(golden, target, fingerprint of both) of one part, opened once per worker process."""
    key = (spec.golden, spec.target, spec.allow_partial, rank, step)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    g, t = _load(spec, spec.golden, rank, step), _load(spec, spec.target, rank, step)
    opened = (g, t, fingerprint(g) + fingerprint(t))
    with _lock:
        _cache[key] = opened
        while len(_cache) > _OPEN_PARTS:
            _cache.popitem(last=False)
    return opened


def forget_parts() -> None:
    """Close the parts this process keeps open (a benchmark opens them afresh each run)."""
    with _lock:
        _cache.clear()


def _where() -> str:
    """The address of the worker running the task ("local" outside a worker)."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


def _side(d: Dump) -> dict[str, Any]:
    return {"root": str(d.root), "format": d.format, "meta": d.meta, "problems": list(d.problems),
            "parts": [list(p) for p in d.parts]}


def parts_task(spec: Spec) -> dict[str, list[list[int]]]:
    """The (rank, step) parts of both dumps that this worker's host can see."""
    out: dict[str, list[list[int]]] = {}
    for side, path in (("golden", spec.golden), ("target", spec.target)):
        try:
            out[side] = [list(p) for p in list_parts(path)]
        except DumpError:
            out[side] = []
    return out


def unreadable(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A task that cannot read its files returns {"error": one line} instead of raising: Dask neither
    logs a traceback nor retries what will fail the same way again."""

    @functools.wraps(fn)
    def task(*args: Any) -> dict[str, Any]:
        try:
            return fn(*args)
        except OpdiffError as exc:
            return {"error": str(exc), "worker": _where()}

    return task


@unreadable
def plan_task(spec: Spec, rank: int, step: int) -> dict[str, Any]:
    """Align one part once: its pairs' layout, the rows of the pairs that need no tensor data, and the
    tensor pairs cut into shards of (position, golden name, target name, precision floor). A part of
    one shard is compared right here: a task less, and a scheduler round trip less."""
    g, t, fp = open_part(spec, rank, step)
    plan = plan_pairs(g, t, spec.mapping, spec.mode)
    rows = [[i, result_row(r)] for i, r in compare_subset(g, t, plan, plan.cheap(), spec.mode, spec.thresholds)]
    shards = [[_item(plan, i) for i in cut] for cut in split_shards(plan, spec.shard_bytes)]
    if len(shards) == 1:
        rows += compare_items(spec, g, t, shards.pop())[0]
    return {"rank": rank, "step": step, "mode": resolved_mode(g, t, spec.mode),
            "tensor_bytes": sum(nb for _, nb in plan.work), "fingerprint": fp, "golden": _side(g),
            "target": _side(t), "worker": _where(), **layout(plan.pairs, g.records, t.records),
            "rows": rows, "shards": shards}


def _item(plan: PairPlan, i: int) -> list[Any]:
    p = plan.pairs[i]
    assert p.golden is not None and p.target is not None
    return [i, p.golden.name, p.target.name, plan.floors[i]]


def compare_items(spec: Spec, g: Dump, t: Dump, items: list[list[Any]]) -> tuple[list[list[Any]], int]:
    """The rows of a shard's pairs, looked up by name, and the bytes of tensor data they read."""
    rows = []
    read = 0
    with Workspace() as ws:
        for i, gname, tname, floor in items:
            gr, tr = g[gname], t[tname]
            rows.append([i, result_row(compare_pair(g, t, Pair(golden=gr, target=tr, match=""), spec.mode,
                                                    spec.thresholds, ws, floor))])
            read += _nbytes(gr) + _nbytes(tr)
    return rows, read


@unreadable
def shard_task(spec: Spec, rank: int, step: int, items: list[list[Any]], fp: str) -> dict[str, Any]:
    """Compare one shard's pairs in the part (opened once per worker process)."""
    t0 = time.perf_counter()
    g, t, now = open_part(spec, rank, step)
    if now != fp:
        raise DumpError(f"{g.root}: the dump changed since the comparison was planned; start again in a new output directory")
    rows, read = compare_items(spec, g, t, items)
    return {"rows": rows, "worker": _where(), "seconds": time.perf_counter() - t0, "bytes": read}
