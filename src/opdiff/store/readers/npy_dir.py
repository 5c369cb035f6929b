"""Reader of NumPy-directory dumps: one .npy per tensor under a folder (msaccucmp / precision_tool output,
or any `{name}.npy` tree). One run, one part (rank 0, step 0). Data is never unpickled
(`allow_pickle=False`); a file's data is a zero-copy span (file, header offset). See docs/readers.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import DumpError
from ..format import Record
from ..source import Dump, TensorSpan
from .npy_files import build_records, read_header

NAME = "npy"
MAX_PEEK = 2000  # entries looked at by recognise()


def _npy_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.npy") if p.is_file())


def recognise(path: Path) -> bool:
    """A directory with .npy files below it and no other dump's marker file (names only, bounded)."""
    path = Path(path)
    if not path.is_dir() or (path / "meta.json").exists() or (path / "dump.json").exists():
        return False
    for i, p in enumerate(path.rglob("*")):
        if p.suffix == ".npy":
            return True
        if i >= MAX_PEEK:
            break
    return False


class NpyDump(Dump):
    """All .npy files under one folder, as one part."""

    format = NAME

    def __init__(self, root: Path):
        files = _npy_files(root)
        records, problems = build_records(root, files)
        if records and all(r.extra.get("unreadable") for r in records):
            raise DumpError(problems[0] if problems else f"{root}: no readable .npy file")
        meta = {"source_format": NAME, "source_path": str(root), "complete": True, "mode": "tensor", "level": "graph"}
        super().__init__(root=root, meta=meta, rank=0, step=0, records=records, parts=[(0, 0)], problems=problems)

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        """The file's data after its header; a Fortran-ordered array is read (no pickle) and made C-ordered."""
        if isinstance(rec, str):
            rec = self[rec]
        if rec.extra.get("unreadable"):
            raise DumpError(rec.extra["unreadable"])
        path = self.root / rec.extra["file"]
        h = read_header(path)
        if h.problem:
            raise DumpError(h.problem)
        if h.dtype != rec.dtype or h.shape != tuple(rec.shape):
            raise DumpError(f"{path}: changed since it was opened ({h.dtype}{list(h.shape)})")
        if h.fortran:
            return np.ascontiguousarray(np.load(path, mmap_mode="r", allow_pickle=False))
        return TensorSpan(path=path, offset=h.offset, dtype=h.dtype, shape=h.shape)



def open_dump(path: Path, rank: int | None = None, step: int | None = None) -> NpyDump:
    """Open a folder of .npy files (rank/step other than 0 are an error)."""
    path = Path(path)
    if not path.is_dir():
        raise DumpError(f"{path}: not a directory of .npy files")
    if not _npy_files(path):
        raise DumpError(f"{path}: no .npy files below it")
    dump = NpyDump(path)
    if (rank or 0, step or 0) != (0, 0):
        dump.open_part(rank or 0, step or 0)  # says the format has one part
    return dump
