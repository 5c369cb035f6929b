"""What a pass captured, and what a full tensor dump would have weighed, from record shapes and dtypes."""

from __future__ import annotations

from dataclasses import dataclass

from ..store import Dump
from ..store.format import numpy_dtype


def data_bytes(dump: Dump, *, stored_only: bool) -> int:
    """Bytes of tensor data: of the records holding data (stored_only), or of every record (a full dump)."""
    return sum(r.numel * numpy_dtype(r.dtype).itemsize for r in dump.records
               if not stored_only or r.data is not None)


def disk_bytes(dump: Dump) -> int:
    """Bytes the run directory takes on disk (index, shards, meta)."""
    return sum(p.stat().st_size for p in dump.root.rglob("*") if p.is_file())


@dataclass
class PassInfo:
    """One capture pass of one side."""

    name: str  # pass1-golden, pass1-target, pass2-golden, pass2-target
    mode: str
    level: str
    include: str | None
    records: int
    tensor_bytes: int  # tensor data stored
    full_tensor_bytes: int  # what a tensor-mode capture of the same records would store
    disk_bytes: int

    @classmethod
    def of(cls, name: str, dump: Dump, mode: str, level: str, include: str | None) -> PassInfo:
        return cls(name, mode, level, include, len(dump.records), data_bytes(dump, stored_only=True),
                   data_bytes(dump, stored_only=False), disk_bytes(dump))
