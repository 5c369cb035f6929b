"""The dump readers: one module per format, chosen by recognising the path (docs/architecture.md).

A reader module exposes NAME, recognise(path) -> bool (cheap: looks at names, never reads big
files) and open_dump(path, rank, step) -> Dump; optionally address(path) -> (rank | None, step | None),
the part a sub-folder names, and INDEX_FILES, the file names that stand for their folder (dump.json).
To add a format, add its module to READERS.
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


Scope = tuple[int | None, int | None]


def folder_of(path: Path) -> Path:
    """A dump's index file (msprobe's dump.json, opdiff's index.jsonl or meta.json) stands for its folder."""
    if path.is_file() and any(path.name in getattr(r, "INDEX_FILES", ()) for r in READERS):
        return path.parent
    return path


def address(reader: ModuleType, path: Path) -> Scope:
    """The (rank, step) the path itself names (None: every one): a rank folder, a step folder, the root."""
    fn = getattr(reader, "address", None)
    scope: Scope = fn(path) if fn is not None else (None, None)
    return scope


def _within(path: Path, scope: Scope, rank: int | None, step: int | None) -> Scope:
    """The rank and step to open: what the caller asks, which must lie inside what the path names."""
    for what, asked, named in (("rank", rank, scope[0]), ("step", step, scope[1])):
        if asked is not None and named is not None and asked != named:
            raise DumpError(f"{path}: is {what} {named} of its dump, not {what} {asked} (name the dump's root "
                            f"to reach other {what}s)")
    return (scope[0] if rank is None else rank), (scope[1] if step is None else step)


def load(path: str | os.PathLike[str], *, rank: int | None = None, step: int | None = None,
         format: str | None = None) -> Dump:
    """Open one (rank, step) part of a dump in any known format (the lowest rank and step by default).

    The path may name the root, a step or rank folder, or an index file; the Dump then holds only the
    parts that path names (`Dump.parts`, `Dump.scope`), so no command reads beyond it."""
    p = folder_of(Path(path))
    reader = find_reader(p, format)
    scope = address(reader, p)
    rank, step = _within(p, scope, rank, step)
    dump: Dump = reader.open_dump(p, rank, step)
    return dump.narrow(scope, Path(path))


def list_parts(path: str | os.PathLike[str], format: str | None = None) -> list[tuple[int, int]]:
    """The (rank, step) parts of a dump, sorted: from the reader's own scan where it has one
    (no index is parsed), else from opening the first part."""
    p = folder_of(Path(path))
    reader = find_reader(p, format)
    scan = getattr(reader, "list_parts", None)
    if scan is None:
        return load(p, format=format).parts
    rank, step = address(reader, p)
    parts: list[tuple[int, int]] = scan(p)
    return [x for x in parts if (rank is None or x[0] == rank) and (step is None or x[1] == step)]
