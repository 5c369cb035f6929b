"""Reader of TorchAir's FX-graph dumps: the golden of `msprobe compare -m torchair` (numpy only).

TorchAir runs the FX graph eagerly and saves every node's tensors as
`{fx_name}.{INPUT|OUTPUT}.{index}.{timestamp}.npy`, `fx_name` = `{node}-{aten op}` (`mm-aten.mm.default`),
in one folder per token (forward call): `{token}/{dump}/...` (older releases, tokens counted from 1)
or `worldsize{N}_rank{r}/{token}/...` (tokens from 0). Each token is one part (rank, step = the
token counted from 0, as the GE dump of the same run counts it); records are
`{fx_name}/{aten op}#k/forward/{input|output}/{index}`, so a GE op's `_fx_tensor_name` names its
golden node (docs/ge.md). Headers are read with `np.lib.format`; data is never unpickled.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...base.errors import DumpError
from ...base.record import Record
from ..format import node_name, record_name
from ..source import Dump, TensorSpan
from .npy_files import NpyHeader, link_sources, read_header

NAME = "torchair-fx"
FX_RE = re.compile(r"^(?P<fx>.+)\.(?P<io>INPUT|OUTPUT)\.(?P<idx>\d+)\.(?P<ts>\d+)\.npy$")
RANK_RE = re.compile(r"^worldsize\d+_rank(?P<rank>\d+)$")
MAX_PEEK = 2000


def recognise(path: Path) -> bool:
    """A directory with a `{fx_name}.INPUT|OUTPUT.{i}.{ts}.npy` file below it (names only, bounded)."""
    path = Path(path)
    if not path.is_dir():
        return False
    for i, p in enumerate(path.rglob("*.npy")):
        if FX_RE.match(p.name):
            return True
        if i >= MAX_PEEK:
            break
    return False


def _part(rel: Path) -> tuple[int, int] | None:
    """(rank, step) of a file: the token folder nearest the root, shifted to count from 0 in the older layout."""
    dirs = rel.parts[:-1]
    rank_at = next((i for i, d in enumerate(dirs) if RANK_RE.match(d)), None)
    if rank_at is not None:
        m = RANK_RE.match(dirs[rank_at])
        assert m is not None
        token = next((d for d in dirs[rank_at + 1:] if d.isdigit()), None)
        return (int(m["rank"]), int(token)) if token is not None else None
    token = next((d for d in dirs if d.isdigit()), None)
    if token is None:
        return 0, 0
    return 0, max(int(token) - 1, 0)  # older releases: FX token k is the GE dump's token k - 1


def _scan(root: Path) -> dict[tuple[int, int], list[Path]]:
    parts: dict[tuple[int, int], list[Path]] = {}
    for p in root.rglob("*.npy"):
        part = _part(p.relative_to(root)) if FX_RE.match(p.name) else None
        if part is not None and p.is_file():
            parts.setdefault(part, []).append(p)
    return parts


class FxDump(Dump):
    """One token of a TorchAir FX dump."""

    format = NAME

    def __init__(self, root: Path, files: list[Path], rank: int, step: int, parts: list[tuple[int, int]]):
        named = []
        for p in files:
            m = FX_RE.match(p.name)
            assert m is not None
            named.append((int(m["ts"]), m["io"] == "OUTPUT", int(m["idx"]), m["fx"], p))
        named.sort(key=lambda x: x[:4])
        records: list[Record] = []
        headers: list[NpyHeader] = []
        problems: list[str] = []
        calls: dict[tuple[str, bool, int], int] = {}  # a tensor seen again in this token: its node's next call
        for _, is_out, idx, fx, p in named:
            call = calls.get((fx, is_out, idx), 0)
            calls[(fx, is_out, idx)] = call + 1
            h = read_header(p)
            headers.append(h)
            if h.problem:
                problems.append(h.problem)
            op = fx.split("-", 1)[1] if "-" in fx else fx
            node = node_name(fx, op, call)
            role = "output" if is_out else "input"
            extra = {"file": p.relative_to(root).as_posix(), **({"unreadable": h.problem} if h.problem else {})}
            records.append(Record(index=len(records), name=record_name(node, "forward", role, str(idx)), node=node,
                                  module=fx, op=op, level="graph", call=call, direction="forward",
                                  role=role, pos=str(idx), dtype=h.dtype or "uint8", shape=h.shape,
                                  data={"file": extra["file"], "key": ""}, extra=extra))
        link_sources(records, headers)
        meta = {"source_format": NAME, "source_path": str(root), "complete": True, "mode": "tensor", "level": "graph",
                "framework": "torchair-fx"}
        super().__init__(root=root, meta=meta, rank=rank, step=step, records=records, parts=parts, problems=problems)

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        rec = self[rec] if isinstance(rec, str) else rec
        problem = rec.extra.get("unreadable")
        if problem:
            raise DumpError(problem)
        h = read_header(self.root / rec.extra["file"])
        if h.problem or h.dtype != rec.dtype or h.shape != tuple(rec.shape):
            raise DumpError(h.problem or f"{h.path}: changed since it was opened")
        if h.fortran:
            return np.ascontiguousarray(np.load(h.path, mmap_mode="r", allow_pickle=False))
        return TensorSpan(path=h.path, offset=h.offset, dtype=h.dtype, shape=h.shape)

    def open_part(self, rank: int, step: int) -> FxDump:
        return open_dump(self.root, rank, step)


def list_parts(path: Path) -> list[tuple[int, int]]:
    return sorted(_scan(Path(path)))


def open_dump(path: Path, rank: int | None = None, step: int | None = None) -> FxDump:
    """Open one token of a TorchAir FX dump (the first by default)."""
    root = Path(path)
    parts = _scan(root) if root.is_dir() else {}
    if not parts:
        raise DumpError(f"{root}: no TorchAir FX dump files ({{fx_name}}.INPUT|OUTPUT.{{i}}.{{ts}}.npy) below it")
    keys = sorted(parts)
    want = (keys[0][0] if rank is None else rank, keys[0][1] if step is None else step)
    if want not in parts:
        raise DumpError(f"{root}: no rank {want[0]} token {want[1]} (parts: {keys})")
    dump = FxDump(root, parts[want], want[0], want[1], keys)
    if all(r.extra.get("unreadable") for r in dump.records):
        raise DumpError(dump.problems[0])
    return dump
