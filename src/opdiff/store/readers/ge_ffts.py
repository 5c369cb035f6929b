"""FFTS+ slices of one GE op: a kernel run in threads, each thread's part of the outputs in a file of its own.

The files share the op's name and carry a thread/slice suffix after the timestamp
(`{OpType}.{op}.{task}.{stream}.{timestamp}.{a}.{thread}.{c}`); the first OpAttr holds JSON with
`slice_instance_num` (how many) and `outputCutList` (per output, the split count of each device axis:
the axis that is not 1 is the one cut). As msaccucmp does, the slices' outputs are joined along that
axis in thread order and the inputs are the first slice's. A group that cannot be joined (slices
missing, no cut axis, shapes that disagree) stays as separate records, each flagged why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ...base.errors import DumpError
from .ge_file import GeFile, GeName, GeTensor, read_file

Piece = tuple[str, int, tuple[int, ...]]  # (file relative to the dump root, byte offset, device shape)


@dataclass
class Joined:
    """A slice group joined into one op: its header with the joined output shapes, and where each output's pieces lie."""

    file: GeFile
    pieces: dict[int, list[Piece]]  # output index -> its pieces in thread order
    axes: dict[int, int]  # output index -> the device axis they are joined on


def _thread(nm: GeName) -> int:
    fields = nm.slice.split(".")
    return int(fields[-2]) if len(fields) >= 2 else int(fields[0])


def group(files: list[tuple[Path, GeName]]) -> tuple[list[tuple[Path, GeName]], list[list[tuple[Path, GeName]]]]:
    """Whole-op files, and the slice files grouped by op (type, name, task, stream), each group in thread order."""
    whole: list[tuple[Path, GeName]] = []
    groups: dict[tuple[str, str, int, int | None], list[tuple[Path, GeName]]] = {}
    for path, nm in files:
        if nm.slice:
            groups.setdefault((nm.op_type, nm.op_folded, nm.task, nm.stream), []).append((path, nm))
        else:
            whole.append((path, nm))
    return whole, [sorted(g, key=lambda f: _thread(f[1])) for g in groups.values()]


def _cut_axis(cuts: object, i: int, ndim: int) -> int | None:
    if not isinstance(cuts, list) or i >= len(cuts) or not isinstance(cuts[i], list) or len(cuts[i]) != ndim:
        return None
    axes = [k for k, v in enumerate(cuts[i]) if v != 1]
    return axes[0] if axes else None


def join(root: Path, slices: list[tuple[Path, GeName]]) -> Joined:
    """One op from its FFTS+ slice files; DumpError saying why they cannot be joined."""
    files = [read_file(p) for p, _ in slices]
    first = files[0]
    attr = first.attr or {}
    want = attr.get("slice_instance_num")
    name = slices[0][0].name
    if not isinstance(want, int) or want != len(files):
        raise DumpError(f"{slices[0][0]}: FFTS+ op with {len(files)} slice file(s), its header says {want}: not joined")
    outs = [[t for t in f.tensors if t.role == "output"] for f in files]
    tensors: list[GeTensor] = [t for t in first.tensors if t.role == "input"]
    pieces: dict[int, list[Piece]] = {}
    axes: dict[int, int] = {}
    for i, t0 in enumerate(outs[0]):
        parts = [o[i] for o in outs if i < len(o)]
        axis = _cut_axis(attr.get("outputCutList"), i, len(t0.shape))
        if axis is None or len(parts) != len(files) or any(
                p.problem or p.format != t0.format or p.shape[:axis] + p.shape[axis + 1:] != t0.shape[:axis] + t0.shape[axis + 1:]
                for p in parts):
            raise DumpError(f"{slices[0][0]}: FFTS+ slices of output {i} of {name} cannot be joined "
                            "(no cut axis, or slices that disagree)")
        shape = t0.shape[:axis] + (sum(p.shape[axis] for p in parts),) + t0.shape[axis + 1:]
        tensors.append(replace(t0, shape=shape, size=sum(p.size for p in parts)))
        pieces[i] = [(f.path.relative_to(root).as_posix(), p.offset, p.shape) for f, p in zip(files, parts)]
        axes[i] = axis
    return Joined(replace(first, tensors=tensors, problems=[q for f in files for q in f.problems]), pieces, axes)
