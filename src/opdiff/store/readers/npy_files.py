"""The .npy files of a NumPy-directory dump: names parsed, headers read, records built (numpy only).

Three naming schemes: msaccucmp / precision_tool's NPU files `{OpType}.{op_name}.{task_id}[.{stream_id}].{timestamp}.{input|output}.{index}.npy`
(ordered by timestamp, then task id), precision_tool's TensorFlow files `{op_name}.{slot}.{timestamp}.npy`
(`precision_data/tf/dump`, written by tfdbg's `pt -w`; ordered by timestamp) and anything else,
`{name}.npy` (ordered by path). No file is unpickled: object arrays are refused with a line naming the file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DumpError
from ..format import NUMPY_TO_NAME, Record, node_name, numpy_dtype, record_name

_MSACCUCMP_RE = re.compile(r"^(?P<type>[^.]+)\.(?P<op>.+)\.(?P<task>\d+)\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<idx>\d+)\.npy$")
# the same from a GE dump with a stream id ({OpType}.{op}.{task}.{stream}.{timestamp}...): op names there have '.' folded
_GE_NPY_RE = re.compile(r"^(?P<type>[^.]+)\.(?P<op>[^.]+)\.(?P<task>\d+)(?:\.(?P<stream>\d+))?\.(?P<ts>\d+)"
                        r"\.(?P<io>input|output)\.(?P<idx>\d+)\.npy$")
# precision_tool's TF golden: tensor "dense/MatMul:0" -> "dense_MatMul.0.{time in µs}.npy"
_TF_DUMP_RE = re.compile(r"^(?P<op>.+)\.(?P<slot>\d+)\.(?P<ts>\d{10,})\.npy$")


@dataclass(frozen=True)
class NpyHeader:
    """What a .npy header says: dtype (opdiff name, or None when unsupported), shape, data offset."""

    path: Path
    dtype: str | None
    shape: tuple[int, ...]
    fortran: bool
    offset: int
    problem: str | None = None  # why the data cannot be read, when it cannot


def read_header(path: Path) -> NpyHeader:
    """Parse a .npy header without loading data; a file that is not .npy is a one-line DumpError."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            offset = f.tell()
    except (ValueError, OSError, SyntaxError) as exc:
        raise DumpError(f"{path}: not a readable .npy file ({exc})") from None
    shape = tuple(int(s) for s in shape)
    if dtype.hasobject:
        return NpyHeader(path, None, shape, fortran, offset, f"{path}: object array (pickled .npy) refused: data is never unpickled")
    name = NUMPY_TO_NAME.get(dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype)
    if name is None:
        return NpyHeader(path, None, shape, fortran, offset, f"{path}: dtype {dtype} cannot be compared")
    size = path.stat().st_size
    if offset + math.prod(shape) * dtype.itemsize > size:
        return NpyHeader(path, name, shape, fortran, offset, f"{path}: data is truncated")
    problem = f"{path}: big-endian data" if dtype.byteorder == ">" else None
    return NpyHeader(path, name, shape, fortran, offset, problem)


@dataclass(frozen=True)
class NpyName:
    """One file's place in the run: node parts, role, pos and its sort key."""

    module: str
    op: str
    role: str
    pos: str
    order: tuple[Any, ...]


def parse_name(rel: Path) -> NpyName:
    """msaccucmp name -> (op_name as module, OpType as op, role, index); precision_tool TF name -> ("", op_name,
    output, slot); other names -> (dir, stem, output, "0")."""
    m = _GE_NPY_RE.match(rel.name) or _MSACCUCMP_RE.match(rel.name)
    if m:
        return NpyName(m["op"], m["type"], m["io"], m["idx"],
                       (0, int(m["ts"]), int(m["task"]), m["io"] != "input", int(m["idx"])))
    m = _TF_DUMP_RE.match(rel.name)
    if m:
        return NpyName("", m["op"], "output", m["slot"], (0, int(m["ts"]), 0, True, int(m["slot"])))
    module = rel.parent.as_posix() if rel.parent != Path(".") else ""
    return NpyName(module, rel.name[: -len(".npy")], "output", "0", (1, rel.as_posix()))


SAMPLE_BYTES = 1 << 16  # bytes compared at each of 4 places when linking a large input to its producer


def _same_bytes(a: NpyHeader, b: NpyHeader) -> bool:
    """Whether two readable .npy files of one dtype and shape hold the same data: all of it up to 256 KiB,
    else four 64 KiB samples (start, thirds, end): enough to tell a tensor passed on from another."""
    n = math.prod(a.shape) * np.dtype(numpy_dtype(a.dtype or "uint8")).itemsize
    starts = [0] if n <= 4 * SAMPLE_BYTES else [0, n // 3, 2 * n // 3, n - SAMPLE_BYTES]
    size = n if n <= 4 * SAMPLE_BYTES else SAMPLE_BYTES
    try:
        with open(a.path, "rb") as fa, open(b.path, "rb") as fb:
            for s in starts:
                fa.seek(a.offset + s)
                fb.seek(b.offset + s)
                if fa.read(size) != fb.read(size):
                    return False
    except OSError:
        return False
    return True


def link_sources(records: list[Record], headers: list[NpyHeader]) -> None:
    """Set `src` of each input to the latest earlier output with the same dtype, shape and bytes: .npy
    dumps keep no dataflow, and diagnose needs it to tell where a difference entered."""
    last: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for i, (r, h) in enumerate(zip(records, headers)):
        if h.problem or h.fortran:
            continue
        key = (r.dtype, r.shape)
        if r.role == "input":
            j = next((j for j in reversed(last.get(key, [])) if _same_bytes(headers[j], h)), None)
            if j is not None:
                r.src = records[j].name
        else:
            last.setdefault(key, []).append(i)


def build_records(root: Path, files: list[Path]) -> tuple[list[Record], list[str]]:
    """Records of the .npy files under `root` in execution order, and the problems found."""
    named = sorted(((parse_name(p.relative_to(root)), p) for p in files), key=lambda x: x[0].order)
    counters: dict[tuple[str, str, str, str], int] = {}
    records: list[Record] = []
    headers: list[NpyHeader] = []
    problems: list[str] = []
    for nm, path in named:
        key = (nm.module, nm.op, nm.role, nm.pos)
        call = counters.get(key, 0)  # the same op again (another iteration) is its next call
        counters[key] = call + 1
        h = read_header(path)
        headers.append(h)
        if h.problem and h.dtype is None:
            problems.append(h.problem)
        node = node_name(nm.module, nm.op, call)
        extra = {"file": path.relative_to(root).as_posix()}
        if h.problem:
            extra["unreadable"] = h.problem
        records.append(Record(index=len(records), name=record_name(node, "forward", nm.role, nm.pos), node=node,
                              module=nm.module, op=nm.op, level="graph", call=call, direction="forward", role=nm.role,
                              pos=nm.pos, dtype=h.dtype or "uint8", shape=h.shape,
                              data={"file": extra["file"], "key": ""}, extra=extra))
    link_sources(records, headers)
    return records, problems
