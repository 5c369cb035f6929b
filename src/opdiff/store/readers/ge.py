"""Reader of Ascend graph-engine (GE) dump directories, without CANN or any framework.

An NPU in graph mode (TensorFlow on the NPU, TorchAir, MindSpore graph mode, offline models) writes
one binary file per executed op, `{OpType}.{op_name}.{task_id}[.{stream_id}].{timestamp}`, under
`{time}/{device}/{model}/{model_id}/{iteration}/` (ge_file.py reads one). Each input and output is a
record (module = op name, op = op type, level graph, ordered by timestamp then task id); tensors in a
device format (NC1HWC0, FRACTAL_Z, FRACTAL_NZ ...) are brought back to their original shape
(device_formats.py). A format that cannot be converted keeps its device shape and is compared by
statistics only; a data type numpy cannot hold is refused for that record, with the reason. A GE
graph JSON found in the directory adds each op's original (pre-fusion) ops (ge_graph.py), which
compare uses to pair a fused op with the golden ops it replaced. See docs/readers.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...base.errors import DumpError
from ...base.record import Record
from ...base.vocab import PROVENANCE_KEY
from ..device_formats import PLAIN, FormatError, logical_shape, to_logical
from ..format import node_name, numpy_dtype, record_name
from ..source import Dump, TensorSpan
from ..stats import tensor_stats
from . import ge_ffts as ffts
from .ge_file import GeFile, GeName, GeTensor, parse_name, read_file, read_header_length
from .ge_graph import (
    GE_GRAPH_PREFIX,
    TORCHAIR_GRAPH_PREFIX,
    GraphOp,
    is_graph_json,
    lookup,
    provenance,
    read_graph,
    read_text_graph,
)

NAME = "ge"
MAX_PEEK = 2000  # entries looked at by recognise()


def _files(root: Path) -> list[tuple[Path, GeName]]:
    out = []
    for p in root.rglob("*"):
        nm = parse_name(p.name)
        if nm is not None and p.is_file():
            out.append((p, nm))
    return out


def recognise(path: Path) -> bool:
    """A directory with a file named like a GE dump whose first 8 bytes are a plausible header length."""
    path = Path(path)
    if not path.is_dir() or (path / "meta.json").exists() or (path / "dump.json").exists():
        return False
    for i, p in enumerate(path.rglob("*")):
        if parse_name(p.name) is not None and p.is_file() and read_header_length(p) is not None:
            return True
        if i >= MAX_PEEK:
            break
    return False


def _part(rel: Path) -> tuple[int, int]:
    """(rank, step) from `{device}/{model}/{model_id}/{iteration}/file`; (0, 0) for other layouts."""
    d = rel.parts[:-1]
    if len(d) >= 4 and d[-1].isdigit() and d[-2].isdigit() and d[-4].isdigit():
        return int(d[-4]), int(d[-1])
    return 0, 0


def _graph(root: Path) -> dict[str, GraphOp]:
    """The graph ops of every graph JSON and TorchAir graph dump in the directory."""
    ops: dict[str, GraphOp] = {}
    for p in sorted(root.rglob("*.json")):
        if is_graph_json(p):
            ops.update(read_graph(p))
    for prefix in (GE_GRAPH_PREFIX, TORCHAIR_GRAPH_PREFIX):
        for p in sorted(root.rglob(f"{prefix}*.txt")):
            ops.update(read_text_graph(p))
    return ops


class GeDump(Dump):
    """One (device, iteration) of a GE dump directory."""

    format = NAME

    def __init__(self, root: Path, files: list[tuple[Path, GeName]], parts: list[tuple[int, int]],
                 rank: int, step: int, graph: dict[str, GraphOp]):
        records: list[Record] = []
        problems: list[str] = []
        counters: dict[tuple[str, str], int] = {}
        for nm, gf, joined in _ops(root, files, problems):
            problems += gf.problems
            module = gf.op_name or nm.op_folded
            call = counters.get((module, nm.op_type), 0)
            counters[(module, nm.op_type)] = call + 1
            node = node_name(module, nm.op_type, call)
            op = lookup(graph, gf.op_name) or lookup(graph, nm.op_folded) if graph else None
            fused = _provenance(gf, op)
            for t in gf.tensors:
                joined_out = joined is not None and t.role == "output"
                rec = self._record(root, gf, nm, node, module, call, t, op, len(records), joined_out)
                if joined is not None and joined_out:
                    rec.extra["pieces"] = [list(p) for p in joined.pieces[t.index]]
                    rec.extra["cut_axis"] = joined.axes[t.index]
                if fused:
                    rec.extra[PROVENANCE_KEY] = fused
                if rec.extra.get("unreadable"):
                    problems.append(rec.extra["unreadable"])
                records.append(rec)
        link_sources(root, records)
        meta = {"source_format": NAME, "source_path": str(root), "complete": True, "mode": "tensor", "level": "graph",
                "framework": "ascend-ge", "graph": bool(graph)}
        super().__init__(root=root, meta=meta, rank=rank, step=step, records=records, parts=parts, problems=problems)

    def _record(self, root: Path, gf: GeFile, nm: GeName, node: str, module: str, call: int, t: GeTensor,
                op: GraphOp | None, index: int, joined: bool = False) -> Record:
        rel = gf.path.relative_to(root).as_posix()
        extra: dict[str, object] = {"file": rel, "offset": t.offset, "format": t.format, "device_shape": list(t.shape),
                                    "data_type": t.data_type, "task": nm.task}
        if nm.slice:
            extra["slice"] = nm.slice
        shape, data, stats = t.shape, {"file": rel, "key": ""}, None
        if t.problem:
            extra["unreadable"] = t.problem
        elif t.format not in PLAIN:
            try:
                shape = logical_shape(t.format, t.shape, t.orig_shape, t.orig_format)
                extra["original_format"] = t.orig_format or ""
            except FormatError as exc:  # kept in device layout: statistics only
                if joined:  # its bytes lie in several files: not read here
                    extra["unreadable"] = f"{gf.path}: FFTS+ output {t.index} in {t.format} not converted ({exc})"
                else:
                    extra["note"] = f"{t.format} not converted ({exc}): device shape, compared by statistics only"
                    data = None  # type: ignore[assignment]
                    try:
                        stats = tensor_stats(self._raw(gf.path, t))
                    except DumpError as err:
                        extra["unreadable"] = str(err)
        if t.role == "output":
            origin = _origin(t, op)
            if origin:
                extra["origin"] = f"{origin}:{t.orig_index}"
        pos = str(t.index)
        return Record(index=index, name=record_name(node, "forward", t.role, pos), node=node, module=module,
                      op=nm.op_type, level="graph", call=call, direction="forward", role=t.role, pos=pos,
                      dtype=t.dtype or "uint8", shape=tuple(shape), stats=stats, data=data, extra=extra)

    def _joined(self, rec: Record, dtype: np.dtype) -> np.ndarray:
        """An FFTS+ op's output: its slices' device tensors joined along the cut axis, flat."""
        arrays = []
        for rel, offset, shape in rec.extra["pieces"]:
            count = int(np.prod(shape))
            arr = np.fromfile(self.root / rel, dtype=dtype, count=count, offset=int(offset))
            if arr.size != count:
                raise DumpError(f"{self.root / rel}: an FFTS+ slice of {rec.name} is cut off")
            arrays.append(arr.reshape(shape))
        return np.concatenate(arrays, axis=int(rec.extra["cut_axis"])).reshape(-1)

    @staticmethod
    def _raw(path: Path, t: GeTensor) -> np.ndarray:
        """A tensor's elements in device order (read, not mapped: it is converted right after)."""
        assert t.dtype is not None
        count = t.size // numpy_dtype(t.dtype).itemsize
        try:
            arr = np.fromfile(path, dtype=numpy_dtype(t.dtype), count=count, offset=t.offset)
        except (OSError, ValueError) as exc:
            raise DumpError(f"{path}: cannot read {t.role} {t.index} ({exc})") from None
        if arr.size != count:
            raise DumpError(f"{path}: {t.role} {t.index} is cut off")
        return arr

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        """Plain formats: the bytes in place; device formats: the converted array."""
        rec = self[rec] if isinstance(rec, str) else rec
        problem, fmt = rec.extra.get("unreadable"), rec.extra["format"]
        if problem:
            raise DumpError(problem)
        path = self.root / rec.extra["file"]
        if fmt in PLAIN and "pieces" not in rec.extra:
            return TensorSpan(path=path, offset=int(rec.extra["offset"]), dtype=rec.dtype, shape=tuple(rec.shape))
        t = next((x for x in read_file(path).tensors if x.role == rec.role and str(x.index) == rec.pos), None)
        if t is None or t.dtype != rec.dtype or (t.format, list(t.shape)) != (fmt, rec.extra["device_shape"]) \
                and "pieces" not in rec.extra:
            raise DumpError(f"{path}: changed since it was opened ({rec.role} {rec.pos})")
        shape = tuple(rec.extra["device_shape"])
        raw = self._joined(rec, numpy_dtype(rec.dtype)) if "pieces" in rec.extra else self._raw(path, t)
        try:
            return to_logical(raw, fmt, shape, t.orig_shape, t.orig_format)
        except FormatError as exc:
            raise DumpError(f"{path}: {rec.role} {rec.pos}: {exc}") from None

    def open_part(self, rank: int, step: int) -> GeDump:
        return open_dump(self.root, rank, step)


def _ops(root: Path, files: list[tuple[Path, GeName]], problems: list[str]
         ) -> list[tuple[GeName, GeFile, ffts.Joined | None]]:
    """Every dumped op of a part in execution order: whole-op files, and FFTS+ slice groups joined into one op
    (a group that cannot be joined: its slices as ops of their own, and the reason among the problems)."""
    whole, groups = ffts.group(files)
    out: list[tuple[GeName, GeFile, ffts.Joined | None]] = []
    for group in groups:
        try:
            j = ffts.join(root, group)
            out.append((group[0][1], j.file, j))
            continue
        except DumpError as exc:
            problems.append(str(exc))
        whole += group
    for path, nm in whole:
        try:
            out.append((nm, read_file(path), None))
        except DumpError as exc:
            problems.append(str(exc))
    return sorted(out, key=lambda o: (o[0].timestamp, o[0].task, o[0].slice))


def _origin(t: GeTensor, op: GraphOp | None) -> str:
    """The original op an output stands for: the graph's (TorchAir's names the FX node), else the dump header's."""
    return (op.outputs[t.index][0] if op and t.index < len(op.outputs) else "") or t.orig_name


def _provenance(gf: GeFile, op: GraphOp | None) -> list[str]:
    """The original ops one dumped op stands for, the one its first output comes from last; the same
    list on each of its records (compare reads it from the op's first record)."""
    first = next((t for t in gf.tensors if t.role == "output"), None)
    return provenance(op, _origin(first, op) if first is not None else "")


SAMPLE_BYTES = 1 << 16  # bytes compared at each of 4 places when linking a large input to its producer


def _same_bytes(root: Path, a: Record, b: Record, n: int) -> bool:
    """Whether two tensors of one layout hold the same bytes: all of them up to 256 KiB, else 4 samples."""
    starts = [0] if n <= 4 * SAMPLE_BYTES else [0, n // 3, 2 * n // 3, n - SAMPLE_BYTES]
    size = n if n <= 4 * SAMPLE_BYTES else SAMPLE_BYTES
    try:
        with open(root / a.extra["file"], "rb") as fa, open(root / b.extra["file"], "rb") as fb:
            for s in starts:
                fa.seek(int(a.extra["offset"]) + s)
                fb.seek(int(b.extra["offset"]) + s)
                if fa.read(size) != fb.read(size):
                    return False
    except OSError:
        return False
    return True


def link_sources(root: Path, records: list[Record]) -> None:
    """Set `src` of each input to the latest earlier output of the same layout and bytes: a GE dump keeps
    no dataflow, and diagnose needs it to tell an op's own error from the one it inherits."""
    last: dict[tuple[object, ...], list[Record]] = {}
    for r in records:
        if r.extra.get("unreadable") or "pieces" in r.extra:  # a joined FFTS+ output lies in several files
            continue
        key = (r.extra["data_type"], r.extra["format"], tuple(r.extra["device_shape"]))
        if r.role == "output":
            last.setdefault(key, []).append(r)
            continue
        n = int(np.prod(r.extra["device_shape"])) * numpy_dtype(r.dtype).itemsize
        src = next((o for o in reversed(last.get(key, [])) if _same_bytes(root, o, r, n)), None)
        if src is not None:
            r.src = src.name


def list_parts(path: Path) -> list[tuple[int, int]]:
    root = Path(path)
    return sorted({_part(p.relative_to(root)) for p, _ in _files(root)})


def open_dump(path: Path, rank: int | None = None, step: int | None = None) -> GeDump:
    """Open one (device, iteration) of a GE dump directory (the lowest by default)."""
    root = Path(path)
    if not root.is_dir():
        raise DumpError(f"{root}: not a GE dump directory")
    files = _files(root)
    if not files:
        raise DumpError(f"{root}: no GE dump files below it")
    by_part: dict[tuple[int, int], list[tuple[Path, GeName]]] = {}
    for p, nm in files:
        by_part.setdefault(_part(p.relative_to(root)), []).append((p, nm))
    parts = sorted(by_part)
    want = (parts[0][0] if rank is None else rank, parts[0][1] if step is None else step)
    if want not in by_part:
        raise DumpError(f"{root}: no rank {want[0]} step {want[1]} (parts: {parts})")
    dump = GeDump(root, by_part[want], parts, want[0], want[1], _graph(root))
    if dump.records and all(r.extra.get("unreadable") for r in dump.records):
        raise DumpError(dump.problems[0])
    if not dump.records:
        raise DumpError(dump.problems[0] if dump.problems else f"{root}: no readable GE dump file")
    return dump
