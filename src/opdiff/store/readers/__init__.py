"""The dump readers: one module per format, chosen by recognising the path (docs/architecture.md).

A reader module exposes NAME, recognise(path) -> bool (cheap: looks at names, never reads big
files) and open_dump(path, rank, step) -> Dump. To add a format, add its module to READERS.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from ...base.errors import DumpError
from ..source import Dump
from . import ge, msprobe, npy_dir, opdiff_format, tfdbg, torchair_fx

READERS: tuple[ModuleType, ...] = (opdiff_format, msprobe, tfdbg, ge, torchair_fx, npy_dir)  # npy_dir last: it takes any .npy tree


def reader_names() -> list[str]:
    return [r.NAME for r in READERS]


def find_reader(path: Path, format: str | None = None) -> ModuleType:
    """The reader for `path`: the one named by `format`, else the first that recognises it."""
    if format is not None:
        for r in READERS:
            if r.NAME == format:
                return r
        raise DumpError(f"unknown dump format {format!r} (known: {', '.join(reader_names())})")
    if not path.exists():
        raise DumpError(f"{path}: no such dump directory")
    for r in READERS:
        if r.recognise(path):
            return r
    return opdiff_format  # its own checks say what is wrong with the directory, in one line


def load(path: str | os.PathLike[str], *, rank: int | None = None, step: int | None = None,
         format: str | None = None) -> Dump:
    """Open one (rank, step) part of a dump in any known format (the lowest rank and step by default)."""
    p = Path(path)
    dump: Dump = find_reader(p, format).open_dump(p, rank, step)
    return dump


def list_parts(path: str | os.PathLike[str], format: str | None = None) -> list[tuple[int, int]]:
    """The (rank, step) parts of a dump, sorted: from the reader's own scan where it has one
    (no index is parsed), else from opening the first part."""
    p = Path(path)
    reader = find_reader(p, format)
    scan = getattr(reader, "list_parts", None)
    if scan is not None:
        parts: list[tuple[int, int]] = scan(p)
        return parts
    return load(p, format=format).parts
