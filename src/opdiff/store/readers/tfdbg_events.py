"""The events of a tfdbg v2 dump root, in execution order: eager op executions and graph op outputs.

Files (one set per run, `<prefix>.<kind>`): `.metadata` (TF version, run id), `.graphs` (the ops of
every traced graph: type, inputs), `.execution` (eager ops and tf.function calls, with their output
tensors), `.graph_execution_traces` (each output of each op run inside a graph),
`.stack_frames` / `.source_files` (where each op was made). Execution and trace events carry a wall
time; sorting on it (stably) interleaves the two files in the order things ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...base.errors import DumpError
from .tfdbg_proto import (
    DEBUG_MODES,
    Buf,
    RecordFile,
    TensorInfo,
    Value,
    WireError,
    event_body,
    int_of,
    open_records,
    packed_ints,
    signed64,
    span_of,
    sub,
    tensor_proto,
    text,
)

KINDS = ("metadata", "execution", "graph_execution_traces", "graphs", "source_files", "stack_frames")
REQUIRED = ("metadata", "execution", "graph_execution_traces", "graphs")
LIBRARY_PATHS = ("site-packages", "dist-packages", "/tensorflow/", "/keras/", "/opdiff/capture/")


@dataclass
class OpInfo:
    """One op of a traced graph (GraphOpCreation)."""

    op_type: str
    op_name: str
    graph_id: str
    inputs: list[str]
    frames: list[str]


@dataclass
class Event:
    """One thing that ran: an eager op / function call (`kind` "exec") or one graph op output ("trace")."""

    kind: str
    wall: float
    op_type: str
    op_name: str  # graph op name ("" for eager ops)
    graph_id: str  # the graph the op ran in (trace), or the function's graph (exec of a tf.function)
    debug_mode: str
    tensors: list[tuple[int, TensorInfo]]  # (output slot, tensor) of what was dumped
    inputs: list[int] = field(default_factory=list)  # exec: input tensor ids
    outputs: list[int] = field(default_factory=list)  # exec: output tensor ids
    frames: list[str] = field(default_factory=list)  # stack frame ids (exec)
    file: Path = field(default_factory=Path)  # the event file it was read from
    damaged: bool = False  # its TFRecord payload fails its CRC-32C: its records are flagged, never compared


@dataclass
class TfdbgRun:
    """Everything read from one dump root."""

    root: Path
    files: dict[str, Path]
    meta: dict[str, str]
    graphs: dict[str, tuple[str, str]]  # graph id -> (name, outer context id)
    ops: dict[tuple[str, str], OpInfo]  # (graph id, op name) -> op
    events: list[Event]
    frames: dict[str, tuple[int, int, str]]  # stack frame id -> (file index, line, function)
    source_files: list[str]
    problems: list[str]
    buffers: dict[Path, Buf]  # file -> its memory map (tensor bytes are read from it)


def find_files(root: Path) -> dict[str, list[Path]]:
    """tfdbg files in `root` by kind (names only, nothing is read)."""
    out: dict[str, list[Path]] = {}
    try:
        entries = list(root.iterdir())
    except OSError:
        return out
    for p in entries:
        kind = p.name.rsplit(".", 1)[-1] if "." in p.name else ""
        if kind in KINDS and p.is_file():
            out.setdefault(kind, []).append(p)
    return out


def dump_files(root: Path) -> dict[str, Path]:
    """The one file of each kind; a missing required file or a second run in the same root is an error."""
    if not root.is_dir():
        raise DumpError(f"{root}: not a directory (a tfdbg dump root holds *.execution, *.graphs, ... files)")
    found = find_files(root)
    missing = [k for k in REQUIRED if k not in found]
    if missing:
        raise DumpError(f"{root}: tfdbg dump is missing its {', '.join('*.' + k for k in missing)} file"
                        f"{'s' if len(missing) > 1 else ''}")
    many = [k for k, ps in found.items() if len(ps) > 1]
    if many:
        raise DumpError(f"{root}: holds {len(found[many[0]])} *.{many[0]} files (several tfdbg runs); "
                        "point at a directory with one run")
    return {k: ps[0] for k, ps in found.items()}


def _string_fields(buf: Buf, span: Value | None, wanted: dict[int, str]) -> dict[str, str]:
    """The string fields numbered in `wanted` of the message at `span`, by name."""
    return {wanted[num]: text(buf, v) for num, _, v in sub(buf, span) if num in wanted}


def _code_frames(buf: Buf, span: Value) -> list[str]:
    return [text(buf, v) for num, _, v in sub(buf, span) if num == 2]


def _read_metadata(rf: RecordFile) -> dict[str, str]:
    for span in rf.spans:
        _, _, what, body = event_body(rf.buf, span)
        if what == 3:
            d = _string_fields(rf.buf, body, {1: "tensorflow_version", 2: "file_version", 3: "tfdbg_run_id"})
            return d
    return {}


def _read_graphs(rf: RecordFile) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, str], OpInfo]]:
    graphs: dict[str, tuple[str, str]] = {}
    ops: dict[tuple[str, str], OpInfo] = {}
    buf = rf.buf
    for span in rf.spans:
        _, _, what, body = event_body(buf, span)
        if what == 7:  # GraphOpCreation
            op_type = op_name = graph_id = ""
            inputs: list[str] = []
            frames: list[str] = []
            for num, _, v in sub(buf, body):
                if num == 1:
                    op_type = text(buf, v)
                elif num == 2:
                    op_name = text(buf, v)
                elif num == 4:
                    graph_id = text(buf, v)
                elif num == 6:
                    inputs.append(text(buf, v))
                elif num == 8:
                    frames = _code_frames(buf, v)
            ops[(graph_id, op_name)] = OpInfo(op_type, op_name, graph_id, inputs, frames)
        elif what == 8:  # DebuggedGraph
            d = _string_fields(buf, body, {1: "id", 2: "name", 6: "outer"})
            graphs[d.get("id", "")] = (d.get("name", ""), d.get("outer", ""))
    return graphs, ops


def _read_executions(rf: RecordFile) -> list[Event]:
    out = []
    buf = rf.buf
    for i, span in enumerate(rf.spans):
        if i in rf.damaged:
            out.extend(_damaged(rf, i, _read_executions))
            continue
        wall, _, what, body = event_body(buf, span)
        if what != 9:
            continue
        ev = Event("exec", wall, "", "", "", "UNSPECIFIED", [], file=rf.path)
        protos = []
        for num, wt, v in sub(buf, body):
            if num == 1:
                ev.op_type = text(buf, v)
            elif num == 3:
                ev.graph_id = text(buf, v)
            elif num == 4:
                ev.inputs.extend(signed64(x) for x in packed_ints(buf, wt, v))
            elif num == 5:
                ev.outputs.extend(signed64(x) for x in packed_ints(buf, wt, v))
            elif num == 6:
                ev.debug_mode = DEBUG_MODES.get(int_of(v), str(v))
            elif num == 7:
                protos.append(tensor_proto(buf, *span_of(v)))
            elif num == 8:
                ev.frames = _code_frames(buf, v)
        ev.tensors = list(enumerate(protos))
        out.append(ev)
    return out


def _damaged(rf: RecordFile, i: int, read: Callable[[RecordFile], list[Event]]) -> list[Event]:
    """The events of one record whose checksum failed, flagged damaged; none when it no longer parses."""
    one = RecordFile(rf.path, rf.buf, [rf.spans[i]])
    try:
        events = read(one)
    except WireError:
        rf.lost += 1
        return []
    for e in events:
        e.damaged = True
    return events


def _read_traces(rf: RecordFile) -> list[Event]:
    out = []
    buf = rf.buf
    for i, span in enumerate(rf.spans):
        if i in rf.damaged:
            out.extend(_damaged(rf, i, _read_traces))
            continue
        wall, _, what, body = event_body(buf, span)
        if what != 10:
            continue
        ctx = name = ""
        slot, mode, tensor = 0, "UNSPECIFIED", None
        for num, _, v in sub(buf, body):
            if num == 1:
                ctx = text(buf, v)
            elif num == 2:
                name = text(buf, v)
            elif num == 3:
                slot = int_of(v)
            elif num == 4:
                mode = DEBUG_MODES.get(int_of(v), str(v))
            elif num == 5:
                tensor = tensor_proto(buf, *span_of(v))
        out.append(Event("trace", wall, "", name, ctx, mode, [(slot, tensor)] if tensor else [], file=rf.path))
    return out


def _read_frames(rf: RecordFile | None) -> dict[str, tuple[int, int, str]]:
    out: dict[str, tuple[int, int, str]] = {}
    if rf is None:
        return out
    buf = rf.buf
    for span in rf.spans:
        _, _, what, body = event_body(buf, span)
        if what != 6:
            continue
        fid, loc = "", (0, 0, "")
        for num, _, v in sub(buf, body):
            if num == 1:
                fid = text(buf, v)
            elif num == 2:
                fi = line = 0
                func = ""
                for n2, _, v2 in sub(buf, v):
                    if n2 == 1:
                        fi = int_of(v2)
                    elif n2 == 2:
                        line = int_of(v2)
                    elif n2 == 4:
                        func = text(buf, v2)
                loc = (fi, line, func)
        out[fid] = loc
    return out


def _read_source_paths(rf: RecordFile | None) -> list[str]:
    """File paths of the source files, in file order (stack frames index into it); their lines are skipped."""
    paths: list[str] = []
    if rf is None:
        return paths
    buf = rf.buf
    for span in rf.spans:
        _, _, what, body = event_body(buf, span)
        if what != 4:
            continue
        path = ""
        for num, _, v in sub(buf, body):
            if num == 1:
                path = text(buf, v)
                break
        paths.append(path)
    return paths


def read_run(root: Path) -> TfdbgRun:
    """Read a tfdbg dump root; a missing required file or a record that does not parse is one DumpError line."""
    files = dump_files(root)
    problems: list[str] = []
    opened: dict[str, RecordFile] = {}
    current = root
    try:
        for kind, path in files.items():
            current = path
            rf = opened[kind] = open_records(path)
            if rf.cut_off:
                problems.append(f"{path}: last record is cut off (the run stopped mid-write)")
            if rf.bad_length == 0:
                raise DumpError(f"{path}: not a tfdbg event file (its first record fails its length checksum, CRC-32C)")
            if rf.bad_length is not None:
                problems.append(f"{path}: the record at byte {rf.bad_length} fails its length checksum (CRC-32C): "
                                "the file is read up to there")
            if rf.damaged and kind not in ("execution", "graph_execution_traces"):
                problems.append(f"{path}: {len(rf.damaged)} record(s) fail their CRC-32C checksum (damaged)")
        current = files["metadata"]
        meta = _read_metadata(opened["metadata"])
        if not meta:
            raise DumpError(f"{files['metadata']}: no DebugMetadata event (not a tfdbg v2 dump?)")
        current = files["graphs"]
        graphs, ops = _read_graphs(opened["graphs"])
        current = files["execution"]
        events = _read_executions(opened["execution"])
        current = files["graph_execution_traces"]
        events += _read_traces(opened["graph_execution_traces"])
        for rf in (opened["execution"], opened["graph_execution_traces"]):
            if rf.lost:
                problems.append(f"{rf.path}: {rf.lost} record(s) fail their CRC-32C checksum and no longer parse: "
                                "their ops are missing")
        current = files.get("stack_frames", root)
        frames = _read_frames(opened.get("stack_frames"))
        current = files.get("source_files", root)
        sources = _read_source_paths(opened.get("source_files"))
    except WireError as exc:
        raise DumpError(f"{current}: not a tfdbg event file ({exc})") from None
    events.sort(key=lambda e: e.wall)  # stable: ties keep file order
    for e in events:
        if e.kind == "trace":
            op = ops.get((e.graph_id, e.op_name))
            e.op_type = op.op_type if op else e.op_name.rsplit("/", 1)[-1]
            e.frames = op.frames if op else []
    buffers = {rf.path: rf.buf for rf in opened.values()}
    return TfdbgRun(root, files, meta, graphs, ops, events, frames, sources, problems, buffers)


def user_source(run: TfdbgRun, frame_ids: list[str]) -> str | None:
    """"file.py:line" of the innermost stack frame outside TensorFlow, Keras and opdiff."""
    for fid in reversed(frame_ids):
        loc = run.frames.get(fid)
        if loc is None or loc[0] >= len(run.source_files):
            continue
        path = run.source_files[loc[0]]
        if not any(lib in path for lib in LIBRARY_PATHS):
            return f"{path}:{loc[1]}"
    return None
