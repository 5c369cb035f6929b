"""Write dumps straight from numpy arrays: for tests, benchmarks and examples (no framework needed)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.record import Record
from ..store.format import dtype_name
from ..store.names import node_name, record_name
from ..store.stats import content_hash, tensor_stats
from ..store.writer import DumpWriter


@dataclass
class Tensor:
    """One tensor to write: where it ran and its value."""

    module: str
    op: str
    role: str
    pos: str
    array: np.ndarray
    call: int = 0
    direction: str = "forward"
    extra: dict[str, Any] | None = None


def make_record(t: Tensor, level: str = "module", with_hash: bool = True) -> Record:
    """The Record a capture would write for `t` (statistics and content hash included)."""
    arr = np.asarray(t.array)
    node = node_name(t.module, t.op, t.call)
    dt = dtype_name(arr.dtype)
    return Record(
        index=0, name=record_name(node, t.direction, t.role, t.pos), node=node, module=t.module, op=t.op,
        level=level, call=t.call, direction=t.direction, role=t.role, pos=t.pos, dtype=dt, shape=tuple(arr.shape),
        stats=tensor_stats(arr), hash=content_hash(arr, dt, tuple(arr.shape)) if with_hash else None,
        extra=dict(t.extra or {}),
    )


def write_dump(path: str | os.PathLike, tensors: Iterable[Tensor], *, mode: str = "tensor", complete: bool = True,
               overwrite: bool = False, shard_bytes: int | None = None, meta: dict[str, Any] | None = None) -> None:
    """Write `tensors` in order as one run (rank 0, step 0); mode "stats"/"hash" keeps no data."""
    kw: dict[str, Any] = {"shard_bytes": shard_bytes} if shard_bytes else {}
    w = DumpWriter(path, {"framework": "numpy", "mode": mode, **(meta or {})}, overwrite=overwrite, **kw)
    w.begin(0, 0)
    for t in tensors:
        rec = make_record(t, with_hash=mode != "stats")
        w.add(rec, np.ascontiguousarray(t.array) if mode == "tensor" else None)
    w.close(complete=complete)


def write_run(path: str | os.PathLike, parts: dict[tuple[int, int], Iterable[Tensor]], *, shard_bytes: int | None = None,
              meta: dict[str, Any] | None = None) -> None:
    """Write a multi-rank / multi-step run in tensor mode: parts[(rank, step)] are that part's tensors."""
    kw: dict[str, Any] = {"shard_bytes": shard_bytes} if shard_bytes else {}
    ranks = {r for r, _ in parts}
    w = DumpWriter(path, {"framework": "numpy", "mode": "tensor", "world_size": len(ranks), **(meta or {})}, **kw)
    for (rank, step), tensors in sorted(parts.items()):
        w.begin(rank, step)
        for t in tensors:
            w.add(make_record(t), np.ascontiguousarray(t.array))
    w.close(complete=True)


class OpRun:
    """Writes one run op by op: ops with input/output tensors, module calls nesting others, producer links."""

    def __init__(self, path: str | os.PathLike[str], mode: str = "tensor", level: str = "aten"):
        self.w = DumpWriter(path, {"framework": "synthetic"})
        self.w.begin(0, 0)
        self.mode, self.level = mode, level
        self.calls: dict[tuple[str, str], int] = {}

    def _node(self, module: str, op: str) -> tuple[str, int]:
        call = self.calls.get((module, op), 0)
        self.calls[(module, op)] = call + 1
        return node_name(module, op, call), call

    def tensor(self, node: str, module: str, op: str, call: int, role: str, pos: str, arr: np.ndarray,
               src: str | None = None, level: str | None = None) -> str:
        """Write one tensor of call `node`; returns its record name."""
        rec = make_record(Tensor(module, op, role, pos, arr, call), level or self.level, with_hash=self.mode == "hash")
        rec.src = src
        self.w.add(rec, arr if self.mode == "tensor" else None)
        return rec.name

    def op(self, module: str, op: str, inputs: list[tuple[np.ndarray, str | None]], outputs: list[np.ndarray]) -> list[str]:
        """One op call: inputs as (array, name of the record that produced it); returns output record names."""
        node, call = self._node(module, op)
        for i, (arr, src) in enumerate(inputs):
            self.tensor(node, module, op, call, "input", str(i), arr, src)
        return [self.tensor(node, module, op, call, "output", str(i), arr) for i, arr in enumerate(outputs)]

    def begin(self, module: str, op: str, inputs: list[np.ndarray]) -> tuple[str, str, str, int]:
        """Open a module call: its inputs are written now, its outputs by end()."""
        node, call = self._node(module, op)
        for i, arr in enumerate(inputs):
            self.tensor(node, module, op, call, "input", str(i), arr, level="module")
        return node, module, op, call

    def end(self, started: tuple[str, str, str, int], outputs: list[np.ndarray]) -> list[str]:
        node, module, op, call = started
        return [self.tensor(node, module, op, call, "output", str(i), arr, level="module") for i, arr in enumerate(outputs)]

    def close(self) -> None:
        self.w.close()
