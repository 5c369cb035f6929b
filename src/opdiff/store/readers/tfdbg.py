"""Reader of TensorFlow debugger (tfdbg v2) dump roots, without TensorFlow.

`tf.debugging.experimental.enable_dump_debug_info(root, tensor_debug_mode=...)` writes TFRecord
files of DebugEvent protos (tfdbg_events.py decodes them). Each eager op, each tf.function call
and each op run inside a graph becomes an op call here: its dumped outputs are records, and its
inputs whose producer was dumped too are input records pointing at that producer (`src`), sharing
its data. Names: module = the function's name (`__inference_f_123` -> `f`) plus the op's name
scope (`sequential/dense/MatMul` -> `f.sequential.dense`), op = the op type (docs/tensorflow.md).

Tensor modes: FULL_TENSOR records hold data (read in place from the trace file), statistics and
a content hash; the summary modes (FULL_HEALTH, CONCISE_HEALTH, CURT_HEALTH, SHAPE, NO_TENSOR) hold
what TensorFlow measured, and say which fields (tfdbg_health.py): compare judges only those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...base.errors import DumpError
from ...base.record import Record, Stats
from ...base.vocab import DAMAGED
from ..format import node_name, record_name
from ..source import Dump, TensorSpan
from ..stats import content_hash, tensor_stats
from .tfdbg_events import Event, TfdbgRun, find_files, read_run, user_source
from .tfdbg_health import SUMMARY_MODES, decode
from .tfdbg_proto import TF_DTYPE_NAMES, TensorInfo, WireError, tensor_array

NAME = "tfdbg"
READABLE_MODES = ("FULL_TENSOR", *SUMMARY_MODES)
BACKWARD_SCOPES = ("gradient_tape/", "gradients/")
_FN_RE = re.compile(r"^(?:__inference_|__forward_|__backward_)?(.*?)(?:_\d+)*$")


def recognise(path: Path) -> bool:
    """A directory holding tfdbg event files (by name only)."""
    return path.is_dir() and bool(find_files(path))


def function_name(graph_name: str) -> str:
    """A tf.function graph's name without TensorFlow's prefix and the per-process counter suffix."""
    m = _FN_RE.match(graph_name)
    return (m.group(1) if m else graph_name) or graph_name


# (dtype, shape, stats, hash, data, extra) of a record read from a dumped tensor
_Values = tuple[str, tuple[int, ...], Stats | None, str | None, dict[str, str] | None, dict[str, Any]]
# the graph op run being read: (graph id, op name, output slot, node, module, call)
_Prev = tuple[str, str, int, str, str, int]


@dataclass
class _Data:
    """Where one record's values lie: (file, tensor) of the dumped TensorProto."""

    file: Path
    info: TensorInfo


class _Builder:
    """Turns the run's events into records, in order, with call counters and producer links."""

    def __init__(self, run: TfdbgRun):
        self.run = run
        self.records: list[Record] = []
        self.data: dict[str, _Data] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.counters: dict[tuple[str, str], int] = {}
        self.by_tensor_id: dict[int, str] = {}  # eager tensor id -> output record name
        self.by_output: dict[tuple[str, str, int], str] = {}  # (graph id, op name, slot) -> output record name
        self.skipped = 0
        self.modes: set[str] = set()

    def node(self, module: str, op: str) -> tuple[str, int]:
        call = self.counters.get((module, op), 0)
        self.counters[(module, op)] = call + 1
        return node_name(module, op, call), call

    def add(self, node: str, module: str, op: str, level: str, call: int, direction: str, role: str, pos: str,
            tensor: tuple[Path, TensorInfo, str] | None, src: str | None, source: str | None,
            extra: dict[str, Any]) -> str | None:
        """One record; an input (`src` set, no tensor) shares its producer's values."""
        name = record_name(node, direction, role, pos)
        if src is not None:
            prod = self.records[self._index[src]]
            same = {k: prod.extra[k] for k in ("tfdbg_mode", "held", "counts", DAMAGED) if k in prod.extra}  # what it holds
            rec = Record(0, name, node, module, op, level, call, direction, role, pos, prod.dtype, prod.shape,
                         stats=prod.stats, hash=prod.hash, source=source, data=prod.data, src=src, extra=extra | same)
            if src in self.data:
                self.data[name] = self.data[src]
            if src in self.arrays:
                self.arrays[name] = self.arrays[src]
        elif tensor is not None:
            path, info, mode = tensor
            made = self._values(name, path, info, mode)
            if made is None:
                self.skipped += 1
                return None
            dtype, shape, stats, hsh, data, more = made
            rec = Record(0, name, node, module, op, level, call, direction, role, pos, dtype, shape, stats=stats,
                         hash=hsh, source=source, data=data, extra=extra | {"tfdbg_mode": mode} | more)
        else:
            raise ValueError("a record needs a tensor or a producer")
        rec.index = len(self.records)
        self._index[name] = rec.index
        self.records.append(rec)
        return name

    _index: dict[str, int]

    def _values(self, name: str, path: Path, info: TensorInfo, mode: str) -> _Values | None:
        """(dtype, shape, stats, hash, data) of a dumped tensor; None for a dtype opdiff cannot hold."""
        self.modes.add(mode)
        buf = self.run.buffers[path]
        if mode == "FULL_TENSOR":
            dtype = info.dtype_name
            if dtype is None:
                return None
            arr = tensor_array(buf, info)
            if info.content is not None:
                self.data[name] = _Data(path, info)
            else:
                self.arrays[name] = arr
            data = {"file": path.name, "key": name}
            return dtype, tuple(info.shape), tensor_stats(arr), content_hash(arr, dtype, tuple(arr.shape)), data, {}
        vec = tensor_array(buf, info).astype(np.float64).reshape(-1)
        h = decode(vec, mode, path)
        return None if h is None else (h.dtype, h.shape, h.stats, None, None, h.extra())

    def run_events(self) -> None:
        self._index = {}
        prev: _Prev | None = None
        for ev in self.run.events:
            if ev.kind == "exec":
                self._exec(ev)
                prev = None
            else:
                prev = self._trace(ev, prev)

    def _exec(self, ev: Event) -> None:
        module, level = "", "api"
        op = function_name(ev.op_type) if ev.graph_id or ev.op_type.startswith("__inference_") else ev.op_type
        node, call = self.node(module, op)
        source = user_source(self.run, ev.frames)
        extra = {"tf_op_type": ev.op_type} | ({"tf_graph_id": ev.graph_id} if ev.graph_id else {}) | _damage(ev)
        for k, tid in enumerate(ev.inputs):
            src = self.by_tensor_id.get(tid)
            if src is not None:
                self.add(node, module, op, level, call, "forward", "input", str(k), None, src, source, extra)
        for slot, info in ev.tensors:
            name = self.add(node, module, op, level, call, "forward", "output", str(slot), (ev.file, info, ev.debug_mode),
                            None, source, extra)
            if name is not None and slot < len(ev.outputs):
                self.by_tensor_id[ev.outputs[slot]] = name

    def _trace(self, ev: Event, prev: _Prev | None) -> _Prev:
        graph_name = self.run.graphs.get(ev.graph_id, ("", ""))[0]
        scope = ev.op_name.rpartition("/")[0]
        direction = "backward" if ev.op_name.startswith(BACKWARD_SCOPES) else "forward"
        module = ".".join(p for p in (function_name(graph_name), scope.replace("/", ".")) if p)
        op = ev.op_type
        slot = ev.tensors[0][0] if ev.tensors else 0
        extra = {"tf_op_name": ev.op_name, "tf_graph": graph_name} | _damage(ev)
        source = user_source(self.run, ev.frames)
        if prev is not None and prev[:2] == (ev.graph_id, ev.op_name) and slot > prev[2]:
            node, call = prev[3], prev[5]  # another output of the same op run
        else:
            node, call = self.node(module, op)
            op_info = self.run.ops.get((ev.graph_id, ev.op_name))
            for k, inp in enumerate(op_info.inputs if op_info else []):
                if inp.startswith("^"):
                    continue  # control dependency
                name, _, out_slot = inp.rpartition(":")
                src = self.by_output.get((ev.graph_id, name, int(out_slot) if out_slot.isdigit() else 0))
                if src is not None:
                    self.add(node, module, op, "graph", call, direction, "input", str(k), None, src, source, extra)
        for s, info in ev.tensors:
            rec = self.add(node, module, op, "graph", call, direction, "output", str(s), (ev.file, info, ev.debug_mode),
                           None, source, extra)
            if rec is not None:
                self.by_output[(ev.graph_id, ev.op_name, s)] = rec
        return (ev.graph_id, ev.op_name, slot, node, module, call)


def _damage(ev: Event) -> dict[str, str]:
    """The DAMAGED mark of the records of an event whose TFRecord checksum failed."""
    return {DAMAGED: f"{ev.file.name}: its TFRecord fails its CRC-32C checksum"} if ev.damaged else {}


@dataclass
class TfdbgDump(Dump):
    """A tfdbg dump root read as one (rank 0, step 0) part: records in execution order."""

    format: ClassVar[str] = NAME
    run: TfdbgRun | None = field(default=None, repr=False)
    _data: dict[str, _Data] = field(default_factory=dict, repr=False)
    _arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def span(self, rec: Record) -> TensorSpan | np.ndarray:
        """Raw tensor_content bytes in place in the trace file; values from typed proto fields in memory."""
        arr = self._arrays.get(rec.name)
        if arr is not None:
            return arr
        d = self._data.get(rec.name)
        if d is None or d.info.content is None:
            raise DumpError(f"{self.root}: record {rec.name!r} has no tensor data (tfdbg mode "
                            f"{rec.extra.get('tfdbg_mode', '?')})")
        return TensorSpan(path=d.file, offset=d.info.content[0], dtype=rec.dtype, shape=tuple(rec.shape),
                          hash=rec.hash)



def open_dump(path: Path, rank: int | None = None, step: int | None = None) -> TfdbgDump:
    """Read a tfdbg v2 dump root (see the module docstring)."""
    path = Path(path)
    run = read_run(path)
    b = _Builder(run)
    try:
        b.run_events()
    except WireError as exc:
        raise DumpError(f"{path}: a tensor in the tfdbg dump does not parse ({exc})") from None
    dump = TfdbgDump(root=path, meta=_meta(run, b), rank=0, step=0, records=b.records, parts=[(0, 0)],
                     problems=list(run.problems), run=run, _data=b.data, _arrays=b.arrays)
    if (rank or 0, step or 0) != (0, 0):
        dump.open_part(rank or 0, step or 0)  # says the format has one part
    return dump


def _meta(run: TfdbgRun, b: _Builder) -> dict[str, Any]:
    modes = sorted(b.modes)
    return {
        "format": NAME,
        "source_format": NAME,
        "framework": "tensorflow",
        "framework_version": run.meta.get("tensorflow_version"),
        "capture_backend": "tfdbg",
        "tfdbg_run_id": run.meta.get("tfdbg_run_id"),
        "tfdbg_file_version": run.meta.get("file_version"),
        "tensor_debug_mode": modes,
        "level": "op",
        "mode": "tensor" if modes == ["FULL_TENSOR"] else "stats",
        "files": {k: p.name for k, p in run.files.items()},
        "records": len(b.records),
        "skipped_tensors": b.skipped,
        "graphs": sorted({name for name, _ in run.graphs.values()}),
        "complete": not run.problems,
    }


__all__ = ["NAME", "recognise", "open_dump", "TfdbgDump", "function_name", "TF_DTYPE_NAMES"]
