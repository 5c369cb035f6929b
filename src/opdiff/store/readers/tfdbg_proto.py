"""TFRecord framing and the few protobuf messages of a tfdbg v2 dump, decoded with numpy alone.

tfdbg writes DebugEvent protos (tensorflow/core/protobuf/debug_event.proto) into TFRecord files:
each record is a little-endian uint64 length, a 4-byte CRC of it, the payload and a 4-byte CRC.
Only the fields opdiff uses are decoded, straight from the protobuf wire format; tensor bytes
(`TensorProto.tensor_content`) are not copied: their file offset is kept for zero-copy reads.
Both CRC-32C checksums of every record are checked (google-crc32c): a bad length checksum ends the
file there (nothing after it can be framed), a bad payload checksum marks that record damaged.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

import google_crc32c
import ml_dtypes
import numpy as np

from ...base.errors import DumpError

# DataType enum (tensorflow/core/framework/types.proto) -> opdiff dtype name
TF_DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 9: "int64", 10: "bool",
             14: "bfloat16", 17: "uint16", 19: "float16", 22: "uint32", 23: "uint64", 24: "float8_e5m2",
             25: "float8_e4m3fn"}
TF_DTYPE_NAMES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
                  8: "complex64", 9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 18: "complex128",
                  19: "float16", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64"}
# TensorDebugMode enum (debug_event.proto)
DEBUG_MODES = {0: "UNSPECIFIED", 1: "NO_TENSOR", 2: "CURT_HEALTH", 3: "CONCISE_HEALTH", 4: "FULL_HEALTH",
               5: "SHAPE", 6: "FULL_NUMERICS", 7: "FULL_TENSOR", 8: "REDUCE_INF_NAN_THREE_SLOTS"}
# TensorProto repeated value fields -> (numpy dtype of the wire values, packed element kind)
_VAL_FIELDS = {5: "<f4", 6: "<f8", 7: "varint", 10: "varint", 11: "varint", 13: "varint", 16: "varint", 17: "varint"}
_NP = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "int32": np.dtype("<i4"), "uint8": np.dtype("u1"),
       "int16": np.dtype("<i2"), "int8": np.dtype("i1"), "int64": np.dtype("<i8"), "bool": np.dtype("?"),
       "bfloat16": np.dtype(ml_dtypes.bfloat16), "uint16": np.dtype("<u2"), "float16": np.dtype("<f2"),
       "uint32": np.dtype("<u4"), "uint64": np.dtype("<u8"), "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
       "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn)}


class WireError(ValueError):
    """A protobuf payload that does not parse."""


Buf: TypeAlias = "mmap.mmap | bytes"  # a mapped event file (or an empty one)
Value: TypeAlias = "int | tuple[int, int]"  # a field's value: an int, or the (start, end) of its bytes


def span_of(v: Value | None) -> tuple[int, int]:
    """A length-delimited field's (start, end); another wire type where one was expected is a WireError."""
    if not isinstance(v, tuple):
        raise WireError("expected a length-delimited field, found a number")
    return v


def int_of(v: Value) -> int:
    """A varint / fixed field's value; a length-delimited field where a number was expected is a WireError."""
    if isinstance(v, tuple):
        raise WireError("expected a number field, found a length-delimited one")
    return v


def sub(buf: Buf, v: Value | None) -> Iterator[tuple[int, int, Value]]:
    """The fields of an embedded message (a length-delimited field's bytes)."""
    return fields(buf, *span_of(v))


def varint(buf: Buf, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at `pos`; returns (value, next position)."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise WireError("varint too long")


def fields(buf: Buf, start: int, end: int) -> Iterator[tuple[int, int, Value]]:
    """(field number, wire type, value) of a message in buf[start:end].

    value: an int for varints, fixed32 and fixed64 (raw bits), (start, end) for length-delimited.
    """
    pos = start
    while pos < end:
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        v: Value
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            if pos + 8 > end:
                raise WireError("fixed64 runs past the end")
            v, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wt == 2:
            n, pos = varint(buf, pos)
            if pos + n > end:
                raise WireError(f"field {num} runs past the end")
            v, pos = (pos, pos + n), pos + n
        elif wt == 5:
            if pos + 4 > end:
                raise WireError("fixed32 runs past the end")
            v, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise WireError(f"unsupported wire type {wt}")
        yield num, wt, v


def text(buf: Buf, v: Value) -> str:
    """A string field's text (undecodable bytes replaced)."""
    start, end = span_of(v)
    return bytes(buf[start:end]).decode("utf-8", "replace")


def as_double(bits: int) -> float:
    value: float = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    return value


def packed_ints(buf: Buf, wt: int, v: Value) -> list[int]:
    """Repeated integers: one value (unpacked) or a packed run of varints."""
    if wt == 0:
        return [int_of(v)]
    out: list[int] = []
    pos, end = span_of(v)
    while pos < end:
        x, pos = varint(buf, pos)
        out.append(x)
    return out


def signed64(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


@dataclass
class TensorInfo:
    """A decoded TensorProto: dtype, shape, and either the file offset of its bytes or its values."""

    dtype: int
    shape: tuple[int, ...]
    content: tuple[int, int] | None = None  # (start, end) of tensor_content within the file
    values: np.ndarray | None = None  # from the typed *_val fields (small tensors, scalars)

    @property
    def dtype_name(self) -> str | None:
        return TF_DTYPES.get(self.dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _shape(buf: Buf, start: int, end: int) -> tuple[int, ...]:
    dims = []
    for num, _, v in fields(buf, start, end):
        if num == 2:  # Dim
            size = 0
            for dn, _, dv in sub(buf, v):
                if dn == 1:
                    size = signed64(int_of(dv))
            dims.append(size)
        elif num == 3 and v:
            raise WireError("tensor of unknown rank")
    return tuple(dims)


def _typed_values(buf: Buf, num: int, wt: int, v: Value) -> np.ndarray:
    kind = _VAL_FIELDS[num]
    if kind == "varint":
        return np.array([signed64(x) if num in (7, 10) else x for x in packed_ints(buf, wt, v)], dtype=np.int64)
    if wt == 2:
        start, end = span_of(v)
        return np.frombuffer(bytes(buf[start:end]), dtype=kind)
    width = np.dtype(kind).itemsize
    return np.frombuffer(int_of(v).to_bytes(width, "little"), dtype=kind)


def tensor_proto(buf: Buf, start: int, end: int) -> TensorInfo:
    """Decode a TensorProto at buf[start:end]."""
    info = TensorInfo(dtype=0, shape=())
    parts: list[np.ndarray] = []
    for num, wt, v in fields(buf, start, end):
        if num == 1:
            info.dtype = int_of(v)
        elif num == 2:
            info.shape = _shape(buf, *span_of(v))
        elif num == 4:
            info.content = span_of(v)
        elif num in _VAL_FIELDS:
            parts.append(_typed_values(buf, num, wt, v))
    if info.content is None and parts:
        info.values = np.concatenate(parts)
    return info


def tensor_array(buf: Buf, info: TensorInfo) -> np.ndarray:
    """The tensor's values as an array of its own dtype (typed fields widened on the wire are narrowed back).

    A TensorProto may list fewer values than elements: the last one repeats (TensorFlow's rule).
    """
    name = info.dtype_name
    if name is None:
        raise WireError(f"dtype {TF_DTYPE_NAMES.get(info.dtype, info.dtype)} cannot be read as numbers")
    dt = _NP[name]
    n = info.numel
    if info.content is not None:
        raw = np.frombuffer(buf[info.content[0]:info.content[1]], dtype=np.uint8)
        if raw.size != n * dt.itemsize:
            raise WireError(f"tensor_content holds {raw.size} bytes for {n} elements of {name}")
        shaped: np.ndarray = raw.view(dt).reshape(info.shape)
        return shaped
    vals = info.values if info.values is not None else np.zeros(0)
    if name in ("float16", "bfloat16"):  # half_val carries the 16-bit patterns as ints
        vals = vals.astype(np.uint16).view(dt)
    else:
        vals = vals.astype(dt)
    if vals.size < n:
        fill = vals[-1] if vals.size else np.zeros((), dt)
        vals = np.concatenate([vals, np.full(n - vals.size, fill, dtype=dt)])
    return vals[:n].reshape(info.shape)


@dataclass
class RecordFile:
    """A TFRecord file, memory-mapped: (payload start, payload end) of each complete record."""

    path: Path
    buf: Buf
    spans: list[tuple[int, int]] = field(default_factory=list)
    cut_off: bool = False  # the last record is incomplete (the writer stopped mid-record)
    damaged: set[int] = field(default_factory=set)  # indices into spans whose payload fails its CRC-32C
    bad_length: int | None = None  # byte offset of a record whose length fails its CRC-32C (the file ends there)
    lost: int = 0  # damaged records that no longer parse (their events are gone)


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data` (tensorflow/core/lib/hash/crc32c.h: Mask)."""
    crc = int(google_crc32c.value(data))
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def open_records(path: Path) -> RecordFile:
    """Map a TFRecord file and find its records; a truncated tail is noted, not fatal."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            buf: Buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as exc:
        raise DumpError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rf = RecordFile(path, buf)
    pos, size = 0, len(buf)
    while pos < size:
        if pos + 12 > size:
            rf.cut_off = True
            break
        head = bytes(buf[pos:pos + 8])
        if masked_crc(head) != int.from_bytes(buf[pos + 8:pos + 12], "little"):
            rf.bad_length = pos
            break
        n = int.from_bytes(head, "little")
        if pos + 12 + n + 4 > size:
            rf.cut_off = True
            break
        if masked_crc(bytes(buf[pos + 12:pos + 12 + n])) != int.from_bytes(buf[pos + 12 + n:pos + 16 + n], "little"):
            rf.damaged.add(len(rf.spans))
        rf.spans.append((pos + 12, pos + 12 + n))
        pos += 12 + n + 4
    return rf


def event_body(buf: Buf, span: tuple[int, int]) -> tuple[float, int, int, tuple[int, int] | None]:
    """(wall_time, step, field number of the event's `what`, its span) of one DebugEvent."""
    wall, step, what = 0.0, 0, 0
    body: tuple[int, int] | None = None
    for num, wt, v in fields(buf, *span):
        if num == 1 and wt == 1:
            wall = as_double(int_of(v))
        elif num == 2 and wt == 0:
            step = int_of(v)
        elif wt == 2:
            what, body = num, span_of(v)
    return wall, step, what, body
