"""Convert every part of a readable dump (msprobe, NumPy directory, tfdbg, opdiff) into an opdiff dump.

The records and data are copied part by part with `export.copy_records`; meta keeps where they came
from: `source_format`, `source_path` and the source's own meta (`source_meta`), so a converted dump
travels without the foreign tool and still says what it was.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base.errors import DumpError
from .export import copy_records
from .readers import load
from .source import Dump
from .writer import DumpWriter

# meta fields the writer owns: never copied from the source (as export.write_as_opdiff)
_WRITER_FIELDS = ("format", "format_version", "complete", "parts", "created", "finished", "command")


def _check_paths(src: Path, dst: Path) -> None:
    """Refuse an output that is the source or lies inside it (or the reverse): --force would delete the source."""
    s, d = src.resolve(), dst.resolve()
    if s == d or s in d.parents or d in s.parents:
        raise DumpError(f"{dst}: the output must lie outside the source dump {src} (and not contain it)")


def _parts(dump: Dump) -> list[Dump]:
    """Every part of the run, each checked before anything is written (a part with problems is refused)."""
    parts = [dump if (r, s) == (dump.rank, dump.step) else dump.with_part(r, s) for r, s in dump.parts]
    for p in parts:
        if p.problems:
            raise DumpError(f"{p.problems[0]} (rank {p.rank} step {p.step}); nothing was converted")
    return parts


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, force: bool = False,
            format: str | None = None) -> tuple[Dump, int]:
    """Write every (rank, step) part of the dump at `src` as an opdiff dump at `dst`.

    Returns the source's first part and the number of records written. `force` replaces an existing
    opdiff dump at `dst` (never another directory).
    """
    src_p, dst_p = Path(src), Path(dst)
    dump = load(src_p, format=format)
    _check_paths(src_p, dst_p)
    parts = _parts(dump)
    meta: dict[str, Any] = {k: v for k, v in dump.meta.items() if k not in _WRITER_FIELDS}
    # the format of what lies at source_path (a dump converted before keeps its own origin in source_meta)
    meta |= {"source_format": dump.format, "source_path": str(src_p.resolve()), "source_meta": dict(dump.meta)}
    n = 0
    with DumpWriter(dst_p, meta, overwrite=force) as w:
        for part in parts:
            n += copy_records(part, w)
        w.update_meta(records=n)
    return dump, n
