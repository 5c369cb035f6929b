"""One Ascend GE dump file: its name, its `DumpData` header and where each tensor's bytes lie (numpy only).

A file is an 8-byte little-endian header length, the serialized `DumpData` message (ge_proto.py),
then the raw bytes of every input, output, buffer and workspace, in that order, each `size` bytes.
Only the header is read when a dump is opened; tensor bytes are mapped when compared.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...base.errors import DumpError
from ..format import numpy_dtype

# {OpType}.{op_name}.{task_id}[.{stream_id}].{timestamp}[.{thread/slice fields}]: op names have '/' and '.' folded to '_'
NAME_RE = re.compile(r"^(?P<type>[A-Za-z0-9_-]+)\.(?P<op>[A-Za-z0-9_-]+)\.(?P<task>\d+)(?:\.(?P<stream>\d+))?"
                     r"\.(?P<ts>\d{10,})(?P<slice>(?:\.\d+)*)$")
MAX_HEADER = 1 << 28  # a header longer than this is not a GE dump header (the largest real ones are kilobytes)

# OutputDataType -> opdiff dtype; quantized ints are held as the ints they are stored as
DTYPES = {"DT_FLOAT": "float32", "DT_FLOAT16": "float16", "DT_DOUBLE": "float64", "DT_BF16": "bfloat16",
          "DT_INT8": "int8", "DT_UINT8": "uint8", "DT_INT16": "int16", "DT_UINT16": "uint16", "DT_INT32": "int32",
          "DT_UINT32": "uint32", "DT_INT64": "int64", "DT_UINT64": "uint64", "DT_BOOL": "bool",
          "DT_QINT8": "int8", "DT_QUINT8": "uint8", "DT_QINT16": "int16", "DT_QUINT16": "uint16",
          "DT_QINT32": "int32", "DT_FLOAT8_E5M2": "float8_e5m2", "DT_FLOAT8_E4M3FN": "float8_e4m3fn"}


@dataclass(frozen=True)
class GeName:
    """What a GE dump file's name says."""

    op_type: str
    op_folded: str  # the op name with '/' and '.' folded to '_'
    task: int
    stream: int | None
    timestamp: int
    slice: str  # FFTS+ thread / slice fields after the timestamp ("" for a whole op)


def parse_name(name: str) -> GeName | None:
    m = NAME_RE.match(name)
    if not m:
        return None
    return GeName(m["type"], m["op"], int(m["task"]), int(m["stream"]) if m["stream"] else None, int(m["ts"]),
                  m["slice"].lstrip("."))


@dataclass
class GeTensor:
    """One input or output of a dumped op: device layout, original layout and where its bytes lie."""

    role: str  # input | output
    index: int
    dtype: str | None  # opdiff dtype, None when numpy cannot hold the schema's type
    data_type: str  # the schema's name (DT_FLOAT ...)
    format: str
    shape: tuple[int, ...]
    orig_shape: tuple[int, ...]
    offset: int
    size: int
    orig_name: str = ""  # outputs: the original (pre-fusion) op this output stands for
    orig_index: int = 0
    orig_format: str | None = None
    problem: str | None = None  # why its data cannot be read


@dataclass
class GeFile:
    """One dump file's header: op name, time and tensors (no tensor data read)."""

    path: Path
    op_name: str
    dump_time: int
    tensors: list[GeTensor] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # file-wide: a cut-off data section
    attr: dict[str, Any] | None = None  # the first OpAttr's value as JSON: FFTS+ slicing (threadMode, outputCutList ...)


def _header(path: Path) -> tuple[bytes, int]:
    """The serialized DumpData and the file size; DumpError when the file cannot hold one."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise DumpError(f"{path}: not a GE dump file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, MAX_HEADER):
                raise DumpError(f"{path}: not a GE dump file (header length {n} exceeds the file's {size} bytes)")
            return f.read(n), size
    except OSError as exc:
        raise DumpError(f"{path}: cannot read ({exc.strerror})") from None


def read_header_length(path: Path) -> int | None:
    """The header length a GE dump file starts with, or None when the file cannot be one (recognise)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return n if 0 < n <= min(size - 8, MAX_HEADER) else None


def _dtype(data_type: str) -> tuple[str | None, str | None]:
    dt = DTYPES.get(data_type)
    if dt is None:
        return None, f"data type {data_type} cannot be held by numpy / ml_dtypes"
    return dt, None


def read_file(path: Path) -> GeFile:
    """Parse one GE dump file's header and lay out its tensors; a header that does not parse is a DumpError.
    (protobuf and the message classes load here, on the first GE file: not for every command that only
    recognises a dump's format.)"""
    from google.protobuf.message import DecodeError

    from .ge_proto import DumpData

    raw, size = _header(path)
    msg = DumpData()
    try:
        msg.ParseFromString(raw)
    except DecodeError as exc:
        raise DumpError(f"{path}: GE dump header does not parse as DumpData ({exc})") from None
    out = GeFile(path=path, op_name=msg.op_name, dump_time=msg.dump_time, attr=_attr_json(msg))
    offset = 8 + len(raw)
    for role, items in (("input", msg.input), ("output", msg.output)):
        for i, t in enumerate(items):
            out.tensors.append(_tensor(path, role, i, t, offset))
            offset += t.size
    for extra in (*msg.buffer, *msg.space):
        offset += extra.size
    if offset > size:
        out.problems.append(f"{path}: data section is cut off ({size} bytes, the header describes {offset})")
        for t in out.tensors:
            if t.offset + t.size > size and t.problem is None:
                t.problem = f"{path}: {t.role} {t.index} is cut off"
    return out


def _attr_json(msg: Any) -> dict[str, Any] | None:
    """The JSON the first OpAttr carries (FFTS+ slicing), or None when there is none or it is not a JSON object."""
    if not msg.attr:
        return None
    try:
        doc = json.loads(msg.attr[0].value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _tensor(path: Path, role: str, i: int, t: object, offset: int) -> GeTensor:
    from .ge_proto import DATA_TYPES, FORMATS  # loaded by read_file already

    data_type = DATA_TYPES.get(t.data_type, f"DT_{t.data_type}")  # type: ignore[attr-defined]
    dtype, problem = _dtype(data_type)
    shape = tuple(int(d) for d in t.shape.dim)  # type: ignore[attr-defined]
    orig = tuple(int(d) for d in t.original_shape.dim) or shape  # type: ignore[attr-defined]
    size = int(t.size)  # type: ignore[attr-defined]
    fmt = FORMATS.get(t.format, f"FORMAT_{t.format}")  # type: ignore[attr-defined]
    g = GeTensor(role=role, index=i, dtype=dtype, data_type=data_type, format=fmt, shape=shape, orig_shape=orig,
                 offset=offset, size=size, problem=f"{path}: {role} {i}: {problem}" if problem else None)
    if role == "output":
        o = t.original_op  # type: ignore[attr-defined]
        g.orig_name, g.orig_index = o.name, int(o.output_index)
        g.orig_format = FORMATS.get(o.format) if o.name else None
    if dtype is not None and g.problem is None:
        want = math.prod(shape) * numpy_dtype(dtype).itemsize
        if want != size:
            g.problem = f"{path}: {role} {i} holds {size} bytes, its {dtype}{list(shape)} needs {want}"
    return g
