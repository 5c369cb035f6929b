"""Reader of msprobe (mindstudio-probe) dump directories: `step{N}/{rank{R}|proc{pid}|rank}/dump.json`.

Statistics, md5/xor and tensor modes; levels L0, L1, mix; forward and backward. Tensors are read
from `dump_tensor_data/*.pt` by the restricted reader of `torch_pt` (numpy only, never runs
pickled code), or `*.npy` as msprobe's MindSpore dumper writes them (header read, no pickle). A user may point at the dump root, a step folder or a rank folder. See docs/readers.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from ...errors import DumpError
from ..format import Record
from ..source import Dump, TensorSpan
from .msprobe_checksum import mismatch
from .msprobe_records import DUMP_JSON, TENSOR_DIR, read_part
from .npy_files import read_header
from .torch_pt import PickleMemo, PtTensor, read_pt

NAME = "msprobe"
_STEP_RE = re.compile(r"^step(\d+)$")
_RANK_RE = re.compile(r"^(?:rank(\d*)|proc(\d+))$")


def _part_dirs(step_dir: Path) -> dict[int, Path]:
    """rank -> part directory of one step; `proc{pid}` / bare `rank` dirs (no torch.distributed) get ranks 0, 1, … in name order."""
    named: dict[int, Path] = {}
    unnamed: list[Path] = []
    for d in sorted(step_dir.iterdir()) if step_dir.is_dir() else []:
        m = _RANK_RE.match(d.name)
        if m and (d / DUMP_JSON).exists():
            if m.group(1):
                named[int(m.group(1))] = d
            else:
                unnamed.append(d)
    for i, d in enumerate(unnamed):
        named.setdefault(i, d)
    return named


def _layout(path: Path) -> tuple[Path, dict[tuple[int, int], Path], int | None, int | None]:
    """(root, {(rank, step): part dir}, rank and step the path itself selects)."""
    if (path / DUMP_JSON).exists():  # a rank folder, or a bare part without step/rank folders
        step_m = _STEP_RE.match(path.parent.name)
        if not (step_m and _RANK_RE.match(path.name)):
            return path, {(0, 0): path}, 0, 0
        root = path.parent.parent
        parts = _scan(root)
        rank = next((r for (r, s), d in parts.items() if d == path), 0)
        return root, parts, rank, int(step_m.group(1))
    step_m = _STEP_RE.match(path.name)
    if step_m and _part_dirs(path):
        return path.parent, _scan(path.parent), None, int(step_m.group(1))
    return _layout_root(path)


def _layout_root(root: Path) -> tuple[Path, dict[tuple[int, int], Path], None, None]:
    return root, _scan(root), None, None


def _scan(root: Path) -> dict[tuple[int, int], Path]:
    parts: dict[tuple[int, int], Path] = {}
    for d in root.iterdir() if root.is_dir() else []:
        m = _STEP_RE.match(d.name)
        if m and d.is_dir():
            for rank, part in _part_dirs(d).items():
                parts[(rank, int(m.group(1)))] = part
    return dict(sorted(parts.items()))


INDEX_FILES = (DUMP_JSON,)


def address(path: Path) -> tuple[int | None, int | None]:
    """The (rank, step) a path names: a rank folder both, a step folder its step, the root neither."""
    _, _, rank, step = _layout(Path(path))
    return rank, step


def recognise(path: Path) -> bool:
    """A directory holding dump.json, or step*/ (rank*|proc*)/dump.json below it (names only)."""
    path = Path(path)
    if not path.is_dir():
        return False
    if (path / DUMP_JSON).exists():
        return True
    if _STEP_RE.match(path.name) and any(path.glob(f"*/{DUMP_JSON}")):
        return True
    return any(path.glob(f"step*/*/{DUMP_JSON}"))


class MsprobeDump(Dump):
    """One (rank, step) part of an msprobe dump."""

    format = NAME

    def __init__(self, path: Path, part_dirs: dict[tuple[int, int], Path], rank: int, step: int):
        self._part_dirs = part_dirs
        self._verified: set[str] = set()
        self._pickles = PickleMemo()  # torch.save's data.pkl repeats across files: unpickle each kind once
        self.dir = part_dirs[(rank, step)]
        records, header, problems = read_part(self.dir)
        problems += _missing_files(self.dir, records)
        meta: dict[str, Any] = {
            "source_format": NAME, "source_path": str(path), "complete": True,
            "framework": header.get("framework"), "msprobe_task": header.get("task"),
            "msprobe_level": header.get("level"), "mode": _mode(header, records),
            "level": {"L0": "module", "L1": "api"}.get(str(header.get("level")), "module+api"),
            "msprobe_scalars": header.get("scalars", {}),  # non-tensor arguments by call, for msprobe-style results
        }
        super().__init__(root=path, meta=meta, rank=rank, step=step, records=records,
                         parts=sorted(part_dirs), problems=problems)

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        """The .pt file's storage bytes (zero-copy) when contiguous, else the tensor as an array."""
        if isinstance(rec, str):
            rec = self[rec]
        if rec.data is None:
            raise DumpError(f"{self.dir}: record {rec.name!r} has no tensor data (msprobe {self.meta.get('msprobe_task')} mode)")
        if rec.data["file"].endswith(".npy"):  # MindSpore's dumper writes numpy files (bfloat16 as float32)
            return self._npy(rec, self.dir / rec.data["file"])
        pt = self._pt(rec)
        if pt.contiguous:
            span = TensorSpan(path=pt.path, offset=pt.byte_offset, dtype=pt.dtype, shape=tuple(pt.shape))
            if rec.hash:
                self._verify(rec, pt.path, lambda: _read_at(span.path, span.offset, span.nbytes))
            return span
        arr = pt.array()
        if rec.hash:
            self._verify(rec, pt.path, lambda: np.ascontiguousarray(arr).tobytes())
        return arr

    def locate(self, rec: Record) -> tuple[Path, int] | None:
        """A contiguous `.pt` tensor's (file, offset), checked as span checks it, without a TensorSpan; None for
        anything span does more for (a checksum to verify, a .npy, a strided tensor, no data)."""
        data = rec.data
        if data is None or rec.hash or data["file"].endswith(".npy"):
            return None
        pt = self._pt(rec)
        return (pt.path, pt.byte_offset) if pt.contiguous else None

    def _pt(self, rec: Record) -> PtTensor:
        """The record's `.pt` file read (restricted unpickling, once per kind of data.pkl) and checked against
        dump.json's dtype and shape: a file that disagrees is refused in one line."""
        pt = read_pt(self.dir / rec.data["file"], self._pickles)  # type: ignore[index]
        if pt.dtype != rec.dtype or tuple(pt.shape) != tuple(rec.shape):
            raise DumpError(f"{pt.path}: holds {pt.dtype}{list(pt.shape)} but dump.json says {rec.dtype}{list(rec.shape)}")
        return pt

    def _npy(self, rec: Record, path: Path) -> TensorSpan | np.ndarray:
        """A .npy tensor (header read, never unpickled); bfloat16 saved widened to float32 is narrowed back
        exactly, so its values and checksum are the tensor's own."""
        h = read_header(path)
        if h.problem:
            raise DumpError(h.problem)
        widened = rec.dtype == "bfloat16" and h.dtype == "float32"
        if (h.dtype != rec.dtype and not widened) or h.shape != tuple(rec.shape):
            raise DumpError(f"{path}: holds {h.dtype}{list(h.shape)} but dump.json says {rec.dtype}{list(rec.shape)}")
        if h.fortran or widened:
            arr = np.ascontiguousarray(np.load(path, mmap_mode="r", allow_pickle=False))
            arr = arr.astype(ml_dtypes.bfloat16) if widened else arr
            if rec.hash:
                self._verify(rec, path, arr.tobytes)
            return arr
        span = TensorSpan(path=path, offset=h.offset, dtype=rec.dtype, shape=h.shape)
        if rec.hash:
            self._verify(rec, path, lambda: _read_at(span.path, span.offset, span.nbytes))
        return span

    def _verify(self, rec: Record, path: Path, raw: Callable[[], bytes]) -> None:
        """msprobe's md5 (CRC-32) or xor checksum of the record against its data: a mismatch is damage."""
        if rec.name in self._verified:
            return
        why = mismatch(raw(), rec.hash, rec.numel, len(rec.shape))
        if why:
            raise DumpError(f"{path}: tensor {rec.name!r} is damaged: {why}")
        self._verified.add(rec.name)

    def open_part(self, rank: int, step: int) -> MsprobeDump:
        if (rank, step) not in self._part_dirs:
            have = ", ".join(f"rank {r} step {s}" for r, s in self._part_dirs)
            raise DumpError(f"{self.root}: no msprobe part for rank {rank} step {step} (has {have})")
        return MsprobeDump(self.root, self._part_dirs, rank, step)


def _read_at(path: Path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def _mode(header: dict[str, Any], records: list[Record]) -> str:
    if header.get("task") == "tensor":
        return "tensor"
    return "hash" if any(r.hash for r in records[:50]) else "stats"


def _missing_files(part: Path, records: list[Record]) -> list[str]:
    """One problem line for the tensor files dump.json names but the directory lacks."""
    wanted = [r.data["file"] for r in records if r.data]
    if not wanted:
        return []
    try:
        have = set(os.listdir(part / TENSOR_DIR))
    except OSError:
        have = set()
    missing = [w for w in wanted if w.split("/", 1)[1] not in have]
    if not missing:
        return []
    return [f"{part / missing[0]}: tensor file is missing ({len(missing)} of {len(wanted)} files missing; those pairs are N/A)"]


def open_dump(path: Path, rank: int | None = None, step: int | None = None) -> MsprobeDump:
    """Open one (rank, step) part; without rank/step the path's own, else the first present."""
    path = Path(path)
    if not path.exists():
        raise DumpError(f"{path}: no such dump directory")
    root, parts, p_rank, p_step = _layout(path)
    if not parts:
        raise DumpError(f"{path}: not an msprobe dump (no step*/rank*/{DUMP_JSON})")
    rank = p_rank if rank is None else rank
    step = p_step if step is None else step
    wanted = [p for p in parts if (rank is None or p[0] == rank) and (step is None or p[1] == step)]
    if not wanted:
        have = ", ".join(f"rank {r} step {s}" for r, s in parts)
        raise DumpError(f"{root}: no msprobe part for rank {rank} step {step} (has {have})")
    return MsprobeDump(root, parts, *wanted[0])
