"""Checks on everything opdiff's own reader takes from disk, before any of it is used.

meta.json, each index line and each safetensors header entry are checked for type, range and
agreement with each other; the index and the shard never trust each other (docs/reliability.md).
Every failure is a DumpError naming the file (and line) and the problem.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from xxhash import xxh3_64, xxh3_64_hexdigest

from ..base import gcpause
from ..base.errors import DumpError
from ..base.record import Record
from ..base.safepath import open_regular, read_regular
from .colindex import COLS_FILE, Columns, load_columns_of, sound
from .colindex import records as columnar_records
from .format import DTYPES, FORMAT_NAME, READ_VERSIONS, SAFETENSORS_TO_NAME, axes_problem, window_problem
from .headercols import header_entries, plain_object
from .names import KIND_CALL, KIND_TENSOR, line_kind

MAX_META_BYTES = 64 << 20
MAX_HEADER_BYTES = 100 << 20
_CHUNK = 1 << 20  # bytes per read while hashing an index
_PART = re.compile(r"rank\d+/step\d+")  # `data.part`: the part directory holding a record's shard
META_TEXT_FIELDS = ("framework", "framework_version", "model", "device", "default_dtype", "level", "mode",
                    "capture_backend", "source_format")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # rare: find the key to name
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"key {k!r} appears twice")
            seen.add(k)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# made once: json.loads with a hook builds a decoder per call, a third of the cost of a short index line
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys)
_FINITE_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)


def parse_json(raw: bytes | str, *, finite: bool = False) -> Any:
    """Strict JSON: a repeated key is an error (which of the two would win is a guess); with `finite`,
    so are NaN and Infinity (not JSON, and every report that copies the value would choke on it)."""
    try:
        if isinstance(raw, bytes) and raw[:3] != b"\xef\xbb\xbf" and b"\x00" not in raw[:4]:
            raw = raw.decode("utf-8")  # what json.loads would decode it as (no BOM, not UTF-16/32)
        if isinstance(raw, str):
            return (_FINITE_DECODER if finite else _DECODER).decode(raw)
        if finite:
            return json.loads(raw, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
        return json.loads(raw, object_pairs_hook=_no_duplicate_keys)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None


def read_meta(meta_path: Path) -> tuple[dict[str, Any], list[str]]:
    """meta.json checked: (meta, problems). A meta that does not say `"complete": true` is a problem."""
    raw = read_regular(meta_path, what="meta.json", limit=MAX_META_BYTES)
    try:
        meta = parse_json(raw, finite=True)
    except ValueError as exc:
        raise DumpError(f"{meta_path}: corrupt meta.json ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise DumpError(f"{meta_path}: not an opdiff dump (format is {got!r}, expected {FORMAT_NAME!r})")
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version not in READ_VERSIONS:
        raise DumpError(f"{meta_path}: dump format version {version!r} is not supported "
                        f"(this opdiff reads versions {', '.join(map(str, READ_VERSIONS))})")
    for key in META_TEXT_FIELDS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise DumpError(f"{meta_path}: field {key!r} must be a string, not {type(meta[key]).__name__}")
    problems = []
    complete = meta.get("complete")
    if not isinstance(complete, bool):
        problems.append(f"{meta_path}: field 'complete' is {complete!r}, not true or false: read as not finished")
    elif not complete:
        problems.append(f"{meta_path}: capture did not finish (run was cut off or raised)")
    return meta, problems


def check_record(rec: Record) -> None:
    """What Record.from_json cannot know: the dtype is one the format has, the shard path is sane."""
    if rec.dtype not in DTYPES:
        raise ValueError(f"field 'dtype': unknown dtype {rec.dtype!r}")
    if rec.stats is not None and rec.stats.numel != rec.numel:
        raise ValueError(f"field 'stats.numel' is {rec.stats.numel} but the shape {list(rec.shape)} holds {rec.numel}")
    if rec.data is not None:
        if not rec.data["key"]:  # opdiff's own shards name every tensor (foreign readers may leave it empty)
            raise ValueError("field 'data.key' is empty")
        f = rec.data["file"]
        if f.startswith(("/", "\\")) or ".." in f.replace("\\", "/").split("/") or (len(f) > 1 and f[1] == ":"):
            raise ValueError(f"field 'data.file' {f!r} leaves the dump directory (refused)")
        part = rec.data.get("part")
        if part is not None and _PART.fullmatch(part) is None:
            raise ValueError(f"field 'data.part' {part!r} is not a part of the run (rank<R>/step<S>)")
        axes = rec.data.get("axes")
        if axes is not None and (why := axes_problem(axes, len(rec.shape))) is not None:
            raise ValueError(why)
        window = rec.data.get("window")
        if window is not None:
            if axes is not None:
                raise ValueError("fields 'data.axes' and 'data.window' exclude each other (a window says both)")
            if (why := window_problem(window, len(rec.shape))) is not None:
                raise ValueError(why)


def read_index(index_path: Path) -> tuple[list[Record], list[str], list[dict[str, Any]]]:
    """Records of an index, each line checked, and its call-description lines (kind == "call", sound
    objects with a node name, for replay); a cut-off last line is dropped and reported.

    Other damage (a bad field, a repeated name, a record index out of sequence: a lost or moved line) is a
    DumpError naming file:line and the field. A sound columnar copy beside the index (store/colindex.py)
    gives the same records in a few C-level calls (the index itself is only hashed, never held whole);
    without one, the JSON lines are read."""
    fast = _read_columns(index_path)
    return fast if fast is not None else _read_lines(index_path, read_regular(index_path, what="index"))


def _read_columns(index_path: Path, raw: bytes | None = None
                  ) -> tuple[list[Record], list[str], list[dict[str, Any]]] | None:
    """What _read_lines gives, from the columnar copy when it is a sound copy of exactly the index's bytes
    (`raw` when given, else the file hashed as it is read); else None."""
    cols_path = index_path.with_name(COLS_FILE)
    if not os.path.lexists(cols_path):
        return None
    seen = (len(raw), xxh3_64_hexdigest(raw), raw[-1:]) if raw is not None else _digest(index_path)
    if seen is None or (seen[0] and seen[2] != b"\n"):
        return None
    try:
        blob = read_regular(cols_path, what="columnar index", limit=max(seen[0], 1 << 20) * 4)
    except DumpError:
        return None
    cols = load_columns_of(blob, seen[0], seen[1])
    if cols is None or not sound(cols, DTYPES, _PART):
        return None
    try:
        with gcpause.paused():  # tens of thousands of records, no cycles: no full collections over the heap
            records = columnar_records(cols)
        calls = [] if cols.lines == len(records) else _other_lines(index_path, raw, cols, seen)
    except (ValueError, DumpError):
        return None  # the JSON lines name the problem
    return records, [], calls


def _digest(path: Path) -> tuple[int, str, bytes] | None:
    """(size, xxh3 digest, last byte) of a regular file read through one reused buffer, bounded by its size
    when opened (as read_regular), or None when it cannot be read (read_regular then names the problem): a
    copy of the index would cost fresh pages."""
    try:
        fd, left = open_regular(path, what="index")
    except DumpError:
        return None
    h, size, last = xxh3_64(), 0, b""
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    try:
        while left > 0 and (k := os.readv(fd, [view[:min(left, _CHUNK)]])):
            h.update(view[:k])
            size, left, last = size + k, left - k, view[k - 1:k].tobytes()
    except OSError:
        return None
    finally:
        os.close(fd)
    return size, h.hexdigest(), last


def _other_lines(index_path: Path, raw: bytes | None, cols: Columns, seen: tuple[int, str, bytes]
                 ) -> list[dict[str, Any]]:
    """The call lines among the lines the columnar copy does not hold (read as JSON; the bytes read must be
    the ones hashed)."""
    if raw is None:
        raw = read_regular(index_path, what="index")
        if len(raw) != seen[0] or xxh3_64_hexdigest(raw) != seen[1]:
            raise ValueError("the index changed while it was read")
    rows = set(cols.ints[:, 2].tolist())
    calls: list[dict[str, Any]] = []
    for lineno, line in enumerate(raw.split(b"\n")[:-1], 1):
        if lineno in rows or not line.strip():
            continue
        obj = parse_json(line)
        kind = line_kind(obj) if isinstance(obj, dict) else ""
        if not kind or kind == KIND_TENSOR:
            raise ValueError(f"line {lineno} is not in the columnar copy")
        if kind == KIND_CALL and isinstance(obj.get("node"), str):
            calls.append(obj)
    return calls


def _read_lines(index_path: Path, raw: bytes) -> tuple[list[Record], list[str], list[dict[str, Any]]]:
    """read_index from the JSON lines, line by line."""
    problems: list[str] = []
    records: list[Record] = []
    calls: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    lines = raw.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    if tail.strip():
        problems.append(f"{index_path}: last line is cut off (run stopped mid-write); read up to line {len(lines)}")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line)
            if not isinstance(obj, dict):
                raise ValueError(f"a line must be a JSON object, not {type(obj).__name__}")
            kind = line_kind(obj)
            if kind != KIND_TENSOR:
                if not kind:
                    raise ValueError(f"field 'kind' must be a string, not {type(obj.get('kind')).__name__}")
                if kind == KIND_CALL and isinstance(obj.get("node"), str):
                    calls.append(obj)
                continue  # other line kinds are skipped
            rec = Record.from_json(obj)
            check_record(rec)
        except ValueError as exc:
            raise DumpError(f"{index_path}:{lineno}: corrupt index record: {exc}") from None
        if rec.index != len(records):  # the writer numbers records 0, 1, 2, ... in execution order
            raise DumpError(f"{index_path}:{lineno}: record index {rec.index} where {len(records)} was expected: "
                            "an index line is missing or out of order (the index was edited or damaged)")
        if rec.name in seen:
            raise DumpError(f"{index_path}:{lineno}: record name {rec.name!r} repeats line {seen[rec.name]} "
                            "(names must be unique within a part; refused rather than shadowed)")
        seen[rec.name] = lineno
        records.append(rec)
    return records, problems, calls


@dataclass
class ShardHeader:
    """Parsed safetensors header: key -> (dtype name, shape, absolute start, end)."""

    path: Path
    size: int
    entries: dict[str, tuple[str, tuple[int, ...], int, int]]


def shard_entries(path: Path, raw: bytes, n: int, size: int) -> ShardHeader:
    """Every entry of a safetensors header checked: known dtype, sizes, offsets inside the file that
    hold exactly the shape's bytes and overlap no other tensor. A sound header is checked as columns
    (store/headercols.py); any other goes entry by entry, which names the problem."""
    columns = header_entries(raw, 8 + n, size)
    if columns is not None:
        return ShardHeader(path=path, size=size, entries=columns)
    try:
        header = _header_fast(raw)
        if header is None:
            header = parse_json(raw)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise DumpError(f"{path}: corrupt safetensors header ({exc})") from None
    base = 8 + n
    entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
    shapes: dict[tuple[int, ...], tuple[int, ...]] = {}  # entries of one shape share one tuple
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            entries[key] = _entry(info, base, size, shapes)
        except ValueError as exc:
            raise DumpError(f"{path}: corrupt safetensors header entry for {key!r}: {exc}") from None
    spans = sorted((e[2], e[3], k) for k, e in entries.items() if e[3] > e[2])
    for (_, e0, k0), (s1, _, k1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise DumpError(f"{path}: tensors {k0!r} and {k1!r} overlap in the shard (corrupt header)")
    return ShardHeader(path=path, size=size, entries=entries)


def _header_fast(raw: bytes) -> dict[str, Any] | None:
    """A header parsed by orjson (twice as fast as json on thousands of entries) when that provably is what
    parse_json gives: no escape in the text, and no repeated key, which orjson would pass over silently.
    The proof counts pairs: every colon outside a string separates one key from its value, so the colons of
    the text less those inside the keys counted equal the pairs parsed only when no key was dropped (counting
    fewer pairs or fewer colons can only make them differ). None for anything else: parse_json parses it
    and names any problem."""
    header = plain_object(raw)
    if header is None:
        return None
    values = list(header.values())
    if values and set(map(type, values)) != {dict}:
        return None
    pairs = len(header) + sum(map(len, values))
    in_keys = "".join(header).count(":") + "".join(chain.from_iterable(values)).count(":")
    return header if pairs == raw.count(b":") - in_keys else None


def _entry(info: Any, base: int, size: int, shapes: dict[tuple[int, ...], tuple[int, ...]] | None = None
           ) -> tuple[str, tuple[int, ...], int, int]:
    fast = _entry_fast(info, base, size, shapes)
    return fast if fast is not None else _entry_checked(info, base, size)


def _entry_fast(info: Any, base: int, size: int, shapes: dict[tuple[int, ...], tuple[int, ...]] | None = None
                ) -> tuple[str, tuple[int, ...], int, int] | None:
    """The entry of a sound header member, every check of _entry_checked made with exact type tests; None
    for anything _entry_checked must look at (it names the problem). Never raises."""
    if type(info) is not dict:
        return None
    code, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if type(code) is not str or type(shape) is not list or type(offs) is not list or len(offs) != 2:
        return None
    dtype = SAFETENSORS_TO_NAME.get(code)
    lo, hi = offs
    if dtype is None or type(lo) is not int or type(hi) is not int or not 0 <= lo <= hi or base + hi > size:
        return None
    n = 1
    for d in shape:
        if type(d) is not int or d < 0:
            return None
        n *= d
    if hi - lo != n * DTYPES[dtype][0].itemsize:
        return None
    dims = tuple(shape)
    return dtype, dims if shapes is None else shapes.setdefault(dims, dims), base + lo, base + hi


def _entry_checked(info: Any, base: int, size: int) -> tuple[str, tuple[int, ...], int, int]:
    if not isinstance(info, dict):
        raise ValueError("not an object")
    code = info.get("dtype")
    if not isinstance(code, str) or code not in SAFETENSORS_TO_NAME:
        raise ValueError(f"unknown dtype {code!r}")
    dtype = SAFETENSORS_TO_NAME[code]
    shape, offs = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"bad shape {shape!r}")
    if (not isinstance(offs, list) or len(offs) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offs)):
        raise ValueError(f"bad data_offsets {offs!r}")
    start, end = base + offs[0], base + offs[1]
    if end < start:
        raise ValueError(f"data_offsets {offs} end before they start")
    if end > size:
        raise ValueError(f"truncated shard: data_offsets {offs} end past the file's end ({size} bytes)")
    nbytes = math.prod(shape) * DTYPES[dtype][0].itemsize
    if end - start != nbytes:
        raise ValueError(f"data_offsets {offs} hold {end - start} bytes but {dtype}{shape} needs {nbytes}")
    return dtype, tuple(shape), start, end


def same_layout(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Shapes that lay out the same elements: equal once size-1 dimensions are dropped ([] and [1])."""
    return tuple(s for s in a if s != 1) == tuple(s for s in b if s != 1)
