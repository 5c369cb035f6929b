"""The .npy files of a NumPy-directory dump: names parsed, headers read, records built (numpy only).

Two naming schemes: msaccucmp / precision_tool's `{OpType}.{op_name}.{task_id}.{timestamp}.{input|output}.{index}.npy`
(ordered by timestamp, then task id) and anything else, `{name}.npy` (ordered by path). No file is
unpickled: object arrays are refused with a line naming the file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DumpError
from ..format import NUMPY_TO_NAME, Record, node_name, record_name

_MSACCUCMP_RE = re.compile(r"^(?P<type>[^.]+)\.(?P<op>.+)\.(?P<task>\d+)\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<idx>\d+)\.npy$")


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
    """msaccucmp name -> (op_name as module, OpType as op, role, index); other names -> (dir, stem, output, "0")."""
    m = _MSACCUCMP_RE.match(rel.name)
    if m:
        return NpyName(m["op"], m["type"], m["io"], m["idx"],
                       (0, int(m["ts"]), int(m["task"]), m["io"] != "input", int(m["idx"])))
    module = rel.parent.as_posix() if rel.parent != Path(".") else ""
    return NpyName(module, rel.name[: -len(".npy")], "output", "0", (1, rel.as_posix()))


def build_records(root: Path, files: list[Path]) -> tuple[list[Record], list[str]]:
    """Records of the .npy files under `root` in execution order, and the problems found."""
    named = sorted(((parse_name(p.relative_to(root)), p) for p in files), key=lambda x: x[0].order)
    counters: dict[tuple[str, str, str, str], int] = {}
    records: list[Record] = []
    problems: list[str] = []
    for nm, path in named:
        key = (nm.module, nm.op, nm.role, nm.pos)
        call = counters.get(key, 0)  # the same op again (another iteration) is its next call
        counters[key] = call + 1
        h = read_header(path)
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
    return records, problems
