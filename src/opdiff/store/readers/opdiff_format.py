"""Reader of opdiff's own format: records from the append-only index, tensors in safetensors shards.

A run cut off mid-way loads up to its last complete record and says so (`Dump.complete`,
`Dump.problems`); a corrupt file gets a DumpError naming the file and the problem.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...base.errors import DumpError
from ...base.record import Record
from ...base.safepath import inside, open_regular
from ..format import (
    INDEX_FILE,
    META_FILE,
    axes_base,
    identity_axes,
    numpy_dtype,
    part_dir,
    row_major_strides,
    window_end,
)
from ..headercols import Written, as_written
from ..source import Dump, TensorSpan
from ..stats import content_hash
from ..validate import MAX_HEADER_BYTES, ShardHeader, read_index, read_meta, same_layout, shard_entries

_PART_RE = re.compile(r"^rank(\d+)$")
_STEP_RE = re.compile(r"^step(\d+)$")


def read_shard_header(path: Path, written: Written | None = None) -> ShardHeader:
    """Parse and check a safetensors header against the file's real size; every error names the file. With
    `written` (the entries this part's index says its writer put there), a header that is exactly their text
    needs no parse (headercols.as_written)."""
    raw, n, size = _header_bytes(path)
    entries = None if written is None else as_written(raw, 8 + n, size, *written)
    return ShardHeader(path=path, size=size, entries=entries) if entries is not None else \
        shard_entries(path, raw, n, size)


def _header_bytes(path: Path) -> tuple[bytes, int, int]:
    """(header text, its length, the file's size) of a shard, its length checked against the file."""
    fd, size = open_regular(path, what="shard")
    try:
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise DumpError(f"{path}: truncated shard (no safetensors header)")
        n = int.from_bytes(head, "little")
        if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
            raise DumpError(f"{path}: bad safetensors header length {n} (file is {size} bytes)")
        raw = os.pread(fd, n, 8)
    except OSError as exc:
        raise DumpError(f"{path}: cannot read shard: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) != n:
        raise DumpError(f"{path}: shard ended inside its header")
    return raw, n, size


def _read_meta(root: Path) -> tuple[dict[str, Any], list[str]]:
    meta_path = root / META_FILE
    if not root.exists():
        raise DumpError(f"{root}: no such dump directory")
    if not root.is_dir():
        raise DumpError(f"{root}: not a directory (a dump is a directory with {META_FILE})")
    if not meta_path.exists() and not meta_path.is_symlink():
        raise DumpError(f"{root}: not an opdiff dump (no {META_FILE})")
    inside(root, META_FILE, what=META_FILE)
    return read_meta(meta_path)


def _find_run_root(path: Path) -> tuple[Path, int | None, int | None]:
    """Accept a run directory or one of its rank*/step* parts."""
    if (path / META_FILE).exists() or not path.exists():
        return path, None, None
    m_step = _STEP_RE.match(path.name)
    m_rank = _PART_RE.match(path.parent.name) if m_step else None
    if m_step and m_rank and (path.parent.parent / META_FILE).exists():
        return path.parent.parent, int(m_rank.group(1)), int(m_step.group(1))
    m_rank = _PART_RE.match(path.name)
    if m_rank and (path.parent / META_FILE).exists():
        return path.parent, int(m_rank.group(1)), None
    return path, None, None


def list_parts(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """The (rank, step) parts present in a run directory, sorted."""
    root, _, _ = _find_run_root(Path(path))
    _read_meta(root)
    return _scan_parts(root)


def _scan_parts(root: Path) -> list[tuple[int, int]]:
    parts = []
    try:
        for rank_dir in root.iterdir():
            m = _PART_RE.match(rank_dir.name)
            if not (m and rank_dir.is_dir()):
                continue
            for step_dir in rank_dir.iterdir():
                s = _STEP_RE.match(step_dir.name)
                if s and os.path.lexists(step_dir / INDEX_FILE):
                    parts.append((int(m.group(1)), int(s.group(1))))
    except OSError as exc:
        raise DumpError(f"{root}: cannot list the dump's parts: {exc.strerror or exc}") from None
    return sorted(parts)


NAME = "opdiff"


class _Window(NamedTuple):
    """A record's elements at offset + sum(i_k * strides_k) of its stored entry's elements (`data.window`)."""

    offset: int
    strides: tuple[int, ...]


@dataclass
class OpdiffDump(Dump):
    """One (rank, step) part of a run captured by opdiff."""

    format = "opdiff"
    _headers: dict[str, ShardHeader] = field(default_factory=dict, repr=False)
    _calls: list[dict[str, Any]] = field(default_factory=list, repr=False)  # read with the index

    @property
    def dir(self) -> Path:
        return self.root / part_dir(self.rank, self.step)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The optional call-description lines of the index (kind == "call"), for replay."""
        return self._calls

    def header(self, rel: str, part: str | None = None, written: Written | None = None) -> ShardHeader:
        """A shard's checked header, in this part or in `part` (a record stored once per dump, format
        version 2); the shard must resolve inside the dump (symlinks included). `written`: read_shard_header's."""
        key = rel if part is None else f"{part}/{rel}"
        h = self._headers.get(key)
        if h is None:
            base = self.dir if part is None else inside(self.root, part, what="data part")
            path = inside(base, rel, what="shard path", within=self.root)
            h = self._headers[key] = read_shard_header(path, written)
        return h

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        """Where the record's bytes lie in its shard; the shard's header and the record must agree. A record that
        reads stored bytes in another order (`data.axes`) or a strided window of them (`data.window`, format
        version 3) is an array: those elements copied into the record's shape, checked against its own hash."""
        path, start, how = self._where(rec)
        if isinstance(how, _Window):
            return self._windowed(rec, path, start, how)
        if how is not None:
            return self._reordered(rec, path, start, how)
        return TensorSpan(path=path, offset=start, dtype=rec.dtype, shape=tuple(rec.shape), hash=rec.hash)

    def locate(self, rec: Record) -> tuple[Path, int] | None:
        """(shard, offset) of the record's bytes (span's checks); None when they lie in another order (span
        copies them)."""
        data = rec.data
        if data is not None and len(data) == 2:  # file and key only: the common record, from a header read
            h = self._headers.get(data["file"])
            entry = None if h is None else h.entries.get(data["key"])
            if entry is not None and entry[0] == rec.dtype and entry[1] == rec.shape:
                return h.path, entry[2]  # type: ignore[union-attr]  # h holds the entry
        path, start, how = self._where(rec)
        return (path, start) if how is None else None

    def _where(self, rec: Record) -> tuple[Path, int, tuple[int, ...] | _Window | None]:
        """(shard, offset, how) of the record's bytes; how is None when they lie raw in the record's own order
        from that offset (a window over a contiguous run of elements included), else its axes or window.

        Without `data.axes` or `data.window` the shard's entry must have the record's dtype and shape (size-1
        dimensions aside); with axes, its dtype and element count; with a window, its dtype, and the window must
        lie inside the entry's elements."""
        data = rec.data
        if data is None:
            raise DumpError(f"{self.dir}: record {rec.name!r} has no tensor data (captured in stats or hash mode)")
        part = data.get("part")
        h = (self._headers.get(data["file"]) if part is None else None) or self.header(data["file"], part)
        entry = h.entries.get(data["key"])
        if entry is None:
            raise DumpError(f"{h.path}: shard has no tensor {data['key']!r} (record {rec.name!r})")
        dtype, shape, start, _end = entry
        axes, window = data.get("axes"), data.get("window")
        if window is not None:
            return self._window_of(rec, h.path, entry, window)
        if axes is None:
            if dtype != rec.dtype or (shape != rec.shape and not same_layout(shape, tuple(rec.shape))):
                raise DumpError(f"{h.path}: tensor {data['key']!r} is {dtype}{list(shape)} in the shard but "
                                f"{rec.dtype}{list(rec.shape)} in the index")
            return h.path, start, None
        if dtype != rec.dtype or math.prod(shape) != rec.numel:
            raise DumpError(f"{h.path}: tensor {data['key']!r} is {dtype}{list(shape)} in the shard but record "
                            f"{rec.name!r} reads it as {rec.dtype}{list(rec.shape)} (data.axes {list(axes)})")
        return h.path, start, None if identity_axes(axes) else tuple(axes)

    @staticmethod
    def _window_of(rec: Record, path: Path, entry: tuple[str, tuple[int, ...], int, int], window: dict[str, Any]
                   ) -> tuple[Path, int, _Window | None]:
        """(shard, offset, window) of a record reading a window of an entry; a window over a contiguous run is
        (shard, the run's offset, None). Refused when it passes the entry's end or names another dtype."""
        dtype, shape, start, _end = entry
        offset, strides = window["offset"], tuple(window["strides"])
        if dtype != rec.dtype or len(strides) != len(rec.shape) or window_end(tuple(rec.shape), offset, strides) > \
                math.prod(shape):
            raise DumpError(f"{path}: record {rec.name!r} reads {rec.dtype}{list(rec.shape)} at offset {offset}, "
                            f"strides {list(strides)} of tensor {rec.data['key'] if rec.data else ''!r}, which is "
                            f"{dtype}{list(shape)} (data.window out of bounds)")
        dense = row_major_strides(tuple(rec.shape))
        if all(n == 1 or s == d for n, s, d in zip(rec.shape, strides, dense)):
            return path, start + offset * numpy_dtype(dtype).itemsize, None
        return path, start, _Window(offset, strides)

    def _windowed(self, rec: Record, path: Path, start: int, window: _Window) -> np.ndarray:
        """The record's elements from a strided window of stored bytes (a copy), verified against the record's
        hash: damage to the bytes it reads flags it, damage elsewhere in the entry does not."""
        np_dtype = numpy_dtype(rec.dtype)
        if rec.numel == 0:
            return np.zeros(rec.shape, dtype=np_dtype)
        n = window_end(tuple(rec.shape), *window)  # checked inside the entry by _where
        stored = np.memmap(path, dtype=np_dtype, mode="r", offset=start, shape=(n,))
        view = np.lib.stride_tricks.as_strided(stored[window.offset:], shape=tuple(rec.shape),
                                               strides=[s * np_dtype.itemsize for s in window.strides],
                                               writeable=False)
        out = np.ascontiguousarray(view)
        del view, stored
        self._check_hash(rec, path, out, f"data.window offset {window.offset}, strides {list(window.strides)}")
        return out

    def _reordered(self, rec: Record, path: Path, start: int, axes: tuple[int, ...]) -> np.ndarray:
        """The record's elements from stored bytes read as axes_base(shape, axes) and transposed by `axes` (a
        copy), verified against the record's hash: damage to the stored bytes flags every record reading them."""
        np_dtype = numpy_dtype(rec.dtype)
        if rec.numel == 0:
            return np.zeros(rec.shape, dtype=np_dtype)
        stored = np.memmap(path, dtype=np_dtype, mode="r", offset=start, shape=(rec.numel,))
        out = _reorder(stored.reshape(axes_base(tuple(rec.shape), axes)), axes)
        del stored
        self._check_hash(rec, path, out, f"data.axes {list(axes)}")
        return out

    @staticmethod
    def _check_hash(rec: Record, path: Path, out: np.ndarray, how: str) -> None:
        """A copied record's elements must give its recorded hash (the bytes it reads are undamaged)."""
        if rec.hash and rec.hash.startswith("xxh3:") and content_hash(out, rec.dtype, tuple(rec.shape)) != rec.hash:
            raise DumpError(f"{path}: tensor {rec.name!r} (read through {how}) does not match its "
                            "recorded hash (corrupt shard)")

    def check(self) -> None:
        """Every shard the index refers to resolves inside the dump, is a regular file with a sound header
        whose entries all lie inside it (checked when the header is read)."""
        shards, stored = self._shards()  # a header read already is kept as it was (header())
        for rel, part in sorted(shards):
            own = None if part else stored.get(rel)
            self.header(rel, part or None, None if own is None else
                        ([r.name for r in own], [r.dtype for r in own], [r.shape for r in own]))

    def _shards(self) -> tuple[set[tuple[str, str]], dict[str, list[Record]]]:
        """The (file, part or "") of every record's data, and per shard of this part the records whose bytes
        were stored there under their own name, in the index's order (what its writer put there)."""
        others: set[tuple[str, str]] = set()
        stored: dict[str, list[Record]] = {}
        file, run = None, []  # the shard of the record before and its list: a shard's records are neighbours
        for r in self.records:
            data = r.data
            if data is None:
                continue
            if len(data) == 2 and data.get("key") == r.name:
                if data["file"] != file:
                    file = data["file"]
                    run = stored.setdefault(file, [])
                run.append(r)
            else:
                others.add((data["file"], data.get("part") or ""))
        return others | {(f, "") for f in stored}, stored

    def open_part(self, rank: int, step: int) -> OpdiffDump:
        return open_dump(self.root, rank=rank, step=step)


_BAND = 256  # source rows per block of a matrix transpose: 2.4x quicker than one strided copy ([50257, 768] fp32)


def _reorder(base: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """`base` transposed by `axes`, row-major: a matrix block by block (each block's rows stay in cache while
    they are scattered), any other order in one copy."""
    if axes != (1, 0):
        return np.ascontiguousarray(base.transpose(axes))
    out = np.empty((base.shape[1], base.shape[0]), dtype=base.dtype)
    for i in range(0, base.shape[0], _BAND):
        out[:, i:i + _BAND] = base[i:i + _BAND].T
    return out


INDEX_FILES = (INDEX_FILE, META_FILE)


def address(path: Path) -> tuple[int | None, int | None]:
    """The (rank, step) a path names: rank*/step* both, rank* its rank, the run directory neither."""
    _, rank, step = _find_run_root(Path(path))
    return rank, step


def recognise(path: Path) -> bool:
    """A run directory with meta.json, or one of its rank*/step* parts."""
    root, _, _ = _find_run_root(path)
    return (root / META_FILE).exists()


def open_dump(path: str | os.PathLike[str], rank: int | None = None, step: int | None = None) -> OpdiffDump:
    """Open a dump: a run directory (or one of its rank*/step* parts) and one (rank, step) of it.

    Without rank/step the first part present is opened (lowest rank, then lowest step).
    """
    root, p_rank, p_step = _find_run_root(Path(path))
    rank = p_rank if rank is None else rank
    step = p_step if step is None else step
    meta, meta_problems = _read_meta(root)
    parts = _scan_parts(root)
    if not parts:
        raise DumpError(f"{root}: dump has no records (no rank*/step*/{INDEX_FILE})")
    wanted = [p for p in parts if (rank is None or p[0] == rank) and (step is None or p[1] == step)]
    if not wanted:
        have = ", ".join(f"rank {r} step {s}" for r, s in parts)
        raise DumpError(f"{root}: no part for rank {rank} step {step} (has {have})")
    r, s = wanted[0]
    index = inside(root, f"{part_dir(r, s)}/{INDEX_FILE}", what="index")
    records, problems, calls = read_index(index)
    return OpdiffDump(root=root, meta=meta, rank=r, step=s, records=records, parts=parts, problems=meta_problems + problems,
                      _calls=calls)
