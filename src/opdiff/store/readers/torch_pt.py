"""Read one tensor from a PyTorch `.pt` file without torch and without running pickled code.

A `.pt` written by `torch.save` is a zip archive: `<prefix>/data.pkl` (a pickle that rebuilds the
object) and `<prefix>/data/<key>` (each storage's raw bytes, stored uncompressed). The pickle is
read by an Unpickler whose `find_class` admits only the names a plain tensor needs
(`torch._utils._rebuild_tensor_v2`, the `torch.<X>Storage` classes, `collections.OrderedDict`);
anything else — the way a malicious payload runs code — is refused with one line naming the file.
A contiguous tensor becomes a zero-copy `(path, byte offset)` span into the archive.

An archive laid out as torch.save writes it (stored members, central directory at the end, no
comment) is parsed from two reads, its head and its tail (`_read_fast`: a compare of thousands of
small .pt files spent half its time in zipfile); anything else goes through `zipfile`, which also
names what is wrong.
"""

from __future__ import annotations

import collections
import io
import math
import os
import pickle
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...errors import DumpError
from ..format import numpy_dtype

# torch's storage class names (what torch.save pickles) -> opdiff dtype names
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "Float8_e4m3fnStorage": "float8_e4m3fn", "Float8_e5m2Storage": "float8_e5m2",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "UInt16Storage": "uint16", "UInt32Storage": "uint32",
    "UInt64Storage": "uint64",
}
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # zip local file header (30 bytes)
_CENTRAL = struct.Struct("<4s6H3I5H2I")  # zip central directory entry (46 bytes)
_EOCD = struct.Struct("<4s4H2IH")  # end of central directory record (22 bytes)
_WINDOW = 4096  # bytes read at each end of the file: torch.save's headers and pickle fit in them
_ZIP64 = 0xFFFFFFFF
_MEMO_LIMIT = 4096  # distinct pickles a PickleMemo keeps (a dump's tensors share a few layouts)


class PtError(DumpError):
    """A .pt file that is not a plain tensor archive (or would run code to load)."""


@dataclass(frozen=True)
class _Storage:
    dtype: str
    key: str
    numel: int


@dataclass(frozen=True)
class PtTensor:
    """One tensor of a .pt archive: dtype, shape, strides (elements) and where its storage lies."""

    path: Path
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int  # elements
    data_offset: int  # byte offset of the storage in the file
    storage_numel: int

    @property
    def contiguous(self) -> bool:
        expect, acc = [], 1
        for s in reversed(self.shape):
            expect.append(acc)
            acc *= s
        return all(st == ex for st, ex, n in zip(self.stride, reversed(expect), self.shape) if n > 1)

    @property
    def byte_offset(self) -> int:
        """Byte offset of the first element (meaningful when `contiguous`)."""
        return self.data_offset + self.storage_offset * numpy_dtype(self.dtype).itemsize

    def array(self) -> np.ndarray:
        """The tensor as a read-only numpy array (memory-mapped when contiguous, else a copy)."""
        dt = numpy_dtype(self.dtype)
        if self.storage_numel == 0 or math.prod(self.shape) == 0:
            return np.zeros(self.shape, dtype=dt)
        storage = np.memmap(self.path, dtype=dt, mode="r", offset=self.data_offset, shape=(self.storage_numel,))
        if self.contiguous:
            n = math.prod(self.shape)
            return storage[self.storage_offset:self.storage_offset + n].reshape(self.shape)
        view = np.lib.stride_tricks.as_strided(
            storage[self.storage_offset:], shape=self.shape, strides=tuple(s * dt.itemsize for s in self.stride))
        return np.ascontiguousarray(view)


def _rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any, *_rest: Any) -> tuple[Any, ...]:
    return ("tensor", storage, int(storage_offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


def _rebuild_parameter(data: Any, *_rest: Any) -> Any:
    return data


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only the globals a tensor needs; storages become `_Storage` placeholders."""

    def __init__(self, file: IO[bytes], path: Path):
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in STORAGE_DTYPES:
            return name
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        raise PtError(f"{self._path}: refused to load: the pickle asks for {module}.{name} (not a plain tensor; nothing was run)")

    def persistent_load(self, pid: Any) -> Any:
        try:
            kind, storage_type, key, _location, numel = pid
        except (TypeError, ValueError):
            raise PtError(f"{self._path}: unexpected persistent id in the pickle") from None
        if kind != "storage" or storage_type not in STORAGE_DTYPES:
            raise PtError(f"{self._path}: unsupported storage {storage_type!r}")
        return _Storage(STORAGE_DTYPES[storage_type], str(key), int(numel))


def _member_offset(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Byte offset of a stored (uncompressed) member's data inside the archive file."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise PtError(f"{path}: storage {info.filename} is compressed (not written by torch.save)")
    fp = zf.fp
    assert fp is not None
    fp.seek(info.header_offset)
    head = fp.read(_LOCAL_HEADER.size)
    fields = _LOCAL_HEADER.unpack(head)
    if fields[0] != b"PK\x03\x04":
        raise PtError(f"{path}: corrupt zip local header for {info.filename}")
    return int(info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10])


class PickleMemo:
    """What the restricted unpickler made of each distinct `data.pkl` a reader has met, keyed by its bytes.

    torch.save writes the same pickle for every tensor of one dtype, shape and stride (the storage key is
    "0"), so a dump of thousands of small files unpickles a handful; the result is a pure function of the
    bytes, and only accepted pickles are kept (a refusal is raised again, naming its own file)."""

    def __init__(self, limit: int = _MEMO_LIMIT):
        self._limit = limit
        self._got: dict[bytes, tuple[Any, ...]] = {}

    def load(self, raw: bytes, path: Path) -> Any:
        """The unpickled object of `raw` (restricted unpickler on first sight)."""
        got = self._got.get(raw)
        if got is not None:
            return got
        obj = _RestrictedUnpickler(io.BytesIO(raw), path).load()
        if _is_tensor(obj) and len(self._got) < self._limit:
            self._got[raw] = obj
        return obj


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, tuple) and bool(obj) and obj[0] == "tensor" and isinstance(obj[1], _Storage)


class _Slow(Exception):
    """The archive is not laid out as the fast path expects: read it with zipfile instead."""


class _Archive:
    """A stored-only zip read through a head and a tail window (positional reads beyond them)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.size = os.lseek(fd, 0, os.SEEK_END)  # cheaper than fstat's full stat_result
        self.head = os.pread(fd, min(_WINDOW, self.size), 0)
        tail_at = max(0, self.size - _WINDOW)
        self.tail = os.pread(fd, self.size - tail_at, tail_at)
        self.tail_at = tail_at

    def read(self, offset: int, n: int) -> bytes:
        if offset + n <= len(self.head):
            return self.head[offset:offset + n]
        if offset >= self.tail_at:
            return self.tail[offset - self.tail_at:offset - self.tail_at + n]
        return os.pread(self.fd, n, offset)

    def members(self) -> dict[str, tuple[int, int, int, int]]:
        """name -> (compression method, crc32, size, local header offset) from the central directory."""
        if len(self.tail) < _EOCD.size:
            raise _Slow
        sig, _, _, _, count, cd_size, cd_off, comment = _EOCD.unpack(self.tail[-_EOCD.size:])
        if sig != b"PK\x05\x06" or comment or cd_size == _ZIP64 or cd_off == _ZIP64 or cd_off + cd_size > self.size:
            raise _Slow
        cd = self.read(cd_off, cd_size)
        out: dict[str, tuple[int, int, int, int]] = {}
        pos = 0
        unpack, fixed = _CENTRAL.unpack_from, _CENTRAL.size
        for _ in range(count):
            sig, _, _, _, method, _, _, crc, csize, size, nlen, xlen, clen, _, _, _, at = unpack(cd, pos)
            if sig != b"PK\x01\x02" or csize == _ZIP64 or size == _ZIP64 or at == _ZIP64:
                raise _Slow
            name_end = pos + fixed + nlen
            out[cd[pos + fixed:name_end].decode("utf-8")] = (method, crc, size, at)
            pos = name_end + xlen + clen
        return out

    def data_offset(self, member: tuple[int, int, int, int]) -> int:
        """Where a stored member's bytes begin (after its local header)."""
        method, _, size, at = member
        head = self.read(at, _LOCAL_HEADER.size)
        fields = _LOCAL_HEADER.unpack(head)
        if method != zipfile.ZIP_STORED or fields[0] != b"PK\x03\x04":
            raise _Slow
        start = at + _LOCAL_HEADER.size + int(fields[9]) + int(fields[10])
        if start + size > self.size:
            raise _Slow
        return start

    def content(self, member: tuple[int, int, int, int]) -> bytes:
        """A stored member's bytes, checked against its CRC-32 (as zipfile does)."""
        data = self.read(self.data_offset(member), member[2])
        if zlib.crc32(data) != member[1]:
            raise _Slow
        return data


def _read_fast(path: Path, memo: PickleMemo | None = None) -> tuple[tuple[Any, ...], int] | None:
    """(the unpickled tensor tuple, its storage's byte offset) of a torch.save archive, or None when it
    is laid out otherwise (zipfile then reads it and names any problem). Refusals stay refusals."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        zf = _Archive(fd)
        members = zf.members()
        pkl = next((n for n in members if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            return None
        prefix = pkl[: -len("data.pkl")]
        order = members.get(prefix + "byteorder")
        if order is not None and zf.content(order) != b"little" and zf.content(order).decode().strip() != "little":
            return None
        raw = zf.content(members[pkl])
        obj = (memo or PickleMemo(0)).load(raw, path)
        if not _is_tensor(obj):
            return None
        storage: _Storage = obj[1]
        member = members.get(prefix + "data/" + storage.key)
        if member is None or member[2] < storage.numel * numpy_dtype(storage.dtype).itemsize:
            return None
        return obj, zf.data_offset(member)
    except PtError:
        raise
    except Exception:  # anything odd (a damaged archive, a foreign layout): zipfile's path names it
        return None
    finally:
        os.close(fd)


def _read_zipfile(path: Path) -> tuple[tuple[Any, ...], int]:
    """(the unpickled tensor tuple, its storage's byte offset) through zipfile, or a one-line PtError."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                raise PtError(f"{path}: not a torch.save archive (no data.pkl)")
            prefix = pkl[: -len("data.pkl")]
            order = zf.read(prefix + "byteorder").decode().strip() if prefix + "byteorder" in names else "little"
            if order != "little":
                raise PtError(f"{path}: {order}-endian tensors are not supported")
            with zf.open(pkl) as f:
                obj = _RestrictedUnpickler(f, path).load()
            if not (isinstance(obj, tuple) and obj and obj[0] == "tensor"):
                raise PtError(f"{path}: holds a {type(obj).__name__}, not a single tensor")
            storage = obj[1]
            member = prefix + "data/" + storage.key
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise PtError(f"{path}: storage {member} is missing from the archive") from None
            if info.file_size < storage.numel * numpy_dtype(storage.dtype).itemsize:
                raise PtError(f"{path}: storage {member} is truncated")
            return obj, _member_offset(path, zf, info)
    except zipfile.BadZipFile:
        raise PtError(f"{path}: not a zip archive (legacy or damaged .pt; re-save with torch.save)") from None
    except FileNotFoundError:
        raise PtError(f"{path}: tensor file is missing") from None
    except (pickle.UnpicklingError, EOFError, ValueError, struct.error) as exc:
        raise PtError(f"{path}: corrupt pickle in the archive ({exc})") from None
    except OSError as exc:
        raise PtError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_pt(path: str | Path, memo: PickleMemo | None = None) -> PtTensor:
    """The single tensor saved in `path` by torch.save; one-line PtError for anything else. A reader of
    many files passes one `memo` so that identical pickles are unpickled once."""
    if not isinstance(path, Path):  # Path(a Path) still costs a parse (µs, per file)
        path = Path(path)
    obj, data_offset = _read_fast(path, memo) or _read_zipfile(path)
    _, storage, offset, shape, stride = obj
    if len(stride) != len(shape):
        raise PtError(f"{path}: tensor shape {shape} and stride {stride} disagree")
    need = offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1 if math.prod(shape) else 0
    if need > storage.numel:
        raise PtError(f"{path}: tensor reaches past its storage")
    return PtTensor(path, storage.dtype, shape, stride, offset, data_offset, storage.numel)
