"""Reader of opdiff's own format: records from the append-only index, tensors in safetensors shards.

A run cut off mid-way loads up to its last complete record and says so (`Dump.complete`,
`Dump.problems`); a corrupt file gets a DumpError naming the file and the problem.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...base.errors import DumpError
from ...base.record import Record
from ..format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE,
    META_FILE,
    SAFETENSORS_TO_NAME,
    part_dir,
)
from ..names import KIND_CALL, KIND_TENSOR, is_call_line, line_kind
from ..source import Dump, TensorSpan

_PART_RE = re.compile(r"^rank(\d+)$")
_STEP_RE = re.compile(r"^step(\d+)$")
MAX_HEADER_BYTES = 100 << 20


@dataclass
class ShardHeader:
    """Parsed safetensors header: key -> (dtype name, shape, absolute start, end)."""

    path: Path
    size: int
    entries: dict[str, tuple[str, tuple[int, ...], int, int]]


def read_shard_header(path: Path) -> ShardHeader:
    """Parse and validate a safetensors header; every error names the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise DumpError(f"{path}: truncated shard (no safetensors header)")
            n = int.from_bytes(head, "little")
            if n <= 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise DumpError(f"{path}: bad safetensors header length {n} (file is {size} bytes)")
            raw = f.read(n)
    except FileNotFoundError:
        raise DumpError(f"{path}: shard file is missing") from None
    except OSError as exc:
        raise DumpError(f"{path}: cannot read shard: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"{path}: corrupt safetensors header ({exc})") from None
    base = 8 + n
    entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_TO_NAME[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise DumpError(f"{path}: corrupt safetensors header entry for {key!r}") from None
        entries[key] = (dtype, shape, base + start, base + end)
    return ShardHeader(path=path, size=size, entries=entries)


def _read_meta(root: Path) -> dict[str, Any]:
    meta_path = root / META_FILE
    if not root.exists():
        raise DumpError(f"{root}: no such dump directory")
    if not root.is_dir():
        raise DumpError(f"{root}: not a directory (a dump is a directory with {META_FILE})")
    if not meta_path.exists():
        raise DumpError(f"{root}: not an opdiff dump (no {META_FILE})")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"{meta_path}: corrupt meta.json ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise DumpError(f"{meta_path}: not an opdiff dump (format is {meta.get('format') if isinstance(meta, dict) else None!r})")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise DumpError(f"{meta_path}: dump format version {version} is not supported (this opdiff reads version {FORMAT_VERSION})")
    return meta


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
    for rank_dir in root.iterdir():
        m = _PART_RE.match(rank_dir.name)
        if not (m and rank_dir.is_dir()):
            continue
        for step_dir in rank_dir.iterdir():
            s = _STEP_RE.match(step_dir.name)
            if s and (step_dir / INDEX_FILE).exists():
                parts.append((int(m.group(1)), int(s.group(1))))
    return sorted(parts)


def _read_index(index_path: Path) -> tuple[list[Record], list[str]]:
    """Records of an index; a cut-off last line is dropped and reported, other damage is an error."""
    problems: list[str] = []
    records: list[Record] = []
    try:
        data = index_path.read_bytes()
    except OSError as exc:
        raise DumpError(f"{index_path}: cannot read index: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    if tail.strip():
        problems.append(f"{index_path}: last line is cut off (run stopped mid-write); read up to record {len(lines)}")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if line_kind(obj) != KIND_TENSOR:
                continue  # other line kinds (e.g. call descriptions) are read by who needs them
            records.append(Record.from_json(obj))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DumpError(f"{index_path}:{lineno}: corrupt index record ({type(exc).__name__}: {exc})") from None
    return records, problems


NAME = "opdiff"


@dataclass
class OpdiffDump(Dump):
    """One (rank, step) part of a run captured by opdiff."""

    format = "opdiff"
    _headers: dict[str, ShardHeader] = field(default_factory=dict, repr=False)

    @property
    def dir(self) -> Path:
        return self.root / part_dir(self.rank, self.step)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The optional call-description lines of the index (kind == "call"), for replay."""
        out = []
        with open(self.dir / INDEX_FILE, "rb") as f:
            for line in f:
                if is_call_line(line):
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(obj, dict) and line_kind(obj) == KIND_CALL:
                        out.append(obj)
        return out

    def header(self, rel: str) -> ShardHeader:
        h = self._headers.get(rel)
        if h is None:
            h = self._headers[rel] = read_shard_header(self.dir / rel)
        return h

    def span(self, rec: Record) -> TensorSpan:
        """Where the record's bytes lie in its shard, checked against the shard's header."""
        if rec.data is None:
            raise DumpError(f"{self.dir}: record {rec.name!r} has no tensor data (captured in stats or hash mode)")
        h = self.header(rec.data["file"])
        entry = h.entries.get(rec.data["key"])
        if entry is None:
            raise DumpError(f"{h.path}: shard has no tensor {rec.data['key']!r}")
        dtype, shape, start, end = entry
        span = TensorSpan(path=h.path, offset=start, dtype=dtype, shape=tuple(rec.shape), hash=rec.hash)
        if end - start != span.nbytes or end > h.size:
            raise DumpError(f"{h.path}: tensor {rec.data['key']!r} is truncated or its offsets are wrong")
        return span

    def check(self) -> None:
        """Every shard the index refers to exists, has a sound header and holds all its bytes."""
        for rel in sorted({r.data["file"] for r in self.records if r.data is not None}):
            h = self.header(rel)
            end = max((e[3] for e in h.entries.values()), default=0)
            if end > h.size:
                raise DumpError(f"{h.path}: truncated shard ({h.size} bytes, its header needs {end})")

    def with_part(self, rank: int, step: int) -> OpdiffDump:
        return open_dump(self.root, rank=rank, step=step)


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
    meta = _read_meta(root)
    parts = _scan_parts(root)
    if not parts:
        raise DumpError(f"{root}: dump has no records (no rank*/step*/{INDEX_FILE})")
    wanted = [p for p in parts if (rank is None or p[0] == rank) and (step is None or p[1] == step)]
    if not wanted:
        have = ", ".join(f"rank {r} step {s}" for r, s in parts)
        raise DumpError(f"{root}: no part for rank {rank} step {step} (has {have})")
    r, s = wanted[0]
    records, problems = _read_index(root / part_dir(r, s) / INDEX_FILE)
    if meta.get("complete") is not True:
        problems.insert(0, f"{root / META_FILE}: capture did not finish (run was cut off or raised)")
    return OpdiffDump(root=root, meta=meta, rank=r, step=s, records=records, parts=parts, problems=problems)
