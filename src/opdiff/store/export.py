"""Write any loaded dump part (a foreign format's too) as an opdiff dump, keeping where it came from.

`write_as_opdiff` is the one function that does it: `opdiff import tfdbg` uses it, and so should
any other converter (`opdiff convert SRC DST`). `copy_records` adds a part's records to a writer
that is already open (the TensorFlow op-level capture uses it).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..base.record import Record
from .source import Dump
from .validate import same_layout
from .writer import DumpWriter

# meta fields the writer owns: never copied from the source
_WRITER_FIELDS = ("format", "format_version", "complete", "parts")


def copy_records(dump: Dump, writer: DumpWriter, *, mode: str = "tensor", rank: int | None = None,
                 keep: Callable[[Record], bool] | None = None) -> int:
    """Add `dump`'s records to `writer` as one part; an input sharing its producer's data shares it again.

    mode "tensor" copies data where the source has it; "stats" and "hash" keep summaries only.
    Returns the number of records written.
    """
    writer.begin(dump.rank if rank is None else rank, dump.step)
    written: dict[str, Record] = {}
    for rec in dump.records:
        if keep is not None and not keep(rec):
            continue
        out = dataclasses.replace(rec, index=0, data=None)  # Record has slots: no __dict__
        if mode == "stats":
            out.hash = None
        first = written.get(rec.src) if rec.src else None
        # shared only in the record's own shape: a reader checks the shard's shape against each record
        if (first is not None and rec.src and first.stats == rec.stats and first.hash == rec.hash
                and first.dtype == rec.dtype and same_layout(tuple(first.shape), tuple(rec.shape))
                and (mode != "tensor" or _same_bytes(dump, dump[rec.src], rec))):
            writer.add(out, None, same_data_as=first if mode == "tensor" else None)
        else:
            if rec.src and first is None:
                out.src = None  # its producer is not in the output
            has = rec.data is not None and mode == "tensor"
            writer.add(out, dump.tensor(rec, copy=True) if has else None)
        written[rec.name] = out
    return len(written)


def _same_bytes(dump: Dump, a: Record, b: Record) -> bool:
    """Whether two records hold byte-identical data. A foreign reader's `src` link can be a guess (msprobe's
    is by statistics, which a transposed copy shares), so the data is checked before it is shared."""
    if a.hash is not None and a.hash == b.hash:
        return True
    if a.data is None or b.data is None:
        return a.data is None and b.data is None
    x, y = dump.tensor(a), dump.tensor(b)
    return x.dtype == y.dtype and x.size == y.size and bool(
        np.array_equal(np.ascontiguousarray(x).reshape(-1).view(np.uint8), np.ascontiguousarray(y).reshape(-1).view(np.uint8)))


def write_as_opdiff(dump: Dump, out: str | os.PathLike[str], *, force: bool = False,
                    extra_meta: dict[str, Any] | None = None) -> int:
    """Write `dump` (one part) at `out` as an opdiff dump; its meta keeps the source's meta under `source_meta`.

    `force` replaces an existing opdiff dump at `out` (never another directory). Returns the record count.
    """
    meta = {k: v for k, v in dump.meta.items() if k not in _WRITER_FIELDS}
    meta |= {"source_format": dump.meta.get("source_format", dump.format),
             "source": str(dump.root), "source_meta": dict(dump.meta)} | (extra_meta or {})
    with DumpWriter(out, meta, overwrite=force) as w:
        n = copy_records(dump, w)
        w.update_meta(records=n)
    return n


__all__ = ["copy_records", "write_as_opdiff"]
