"""The columnar index: a binary copy of a part's index lines, read in a few C-level calls.

Parsing the JSON-lines index costs ~10 µs per line (ten floats per record), most of comparing many small
records. DumpWriter writes `index.cols` beside `index.jsonl` when a part closes: the tensor records as
columns (integers, statistics, shape sizes, and every text field as a code into one table of distinct
strings). It is an optional copy, never the truth: it names the size and xxh3 digest of the index it was
made from and the digest of its own bytes, and a reader uses it only when both match and every check of
the JSON path holds on its columns; anything else (missing, cut off, damaged, stale, an odd record) reads
the JSON lines, which name any problem. Layout (docs/format.md, "Columnar index"):

    b"OPDXCOL1" | header length (8 bytes, little-endian) | header (JSON) | arrays, each 8-byte aligned
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from sys import intern
from typing import Any

import numpy as np
import xxhash

from ..base.record import MAX_DIMS, MAX_NUMEL, Record, Stats
from .format import axes_problem, window_problem

COLS_FILE = "index.cols"
MAGIC = b"OPDXCOL1"
VERSION = 1
MAX_HEADER = 1 << 20
MIN_RECORDS = 2048  # a part with fewer records gets no copy: its JSON lines read in ~20 ms
# text fields, in code-column order; None is code -1
TEXTS = ("name", "node", "module", "op", "level", "direction", "role", "pos", "dtype", "hash", "source", "src",
         "file", "key", "part", "extra", "axes", "window")  # data.axes, data.window as JSON text (version 3)
_INTERNED = (2, 3, 4, 5, 6, 7, 8, 12)  # module, op, level, direction, role, pos, dtype, file
_NEEDED = ("name", "node", "module", "op", "level", "direction", "role", "pos", "dtype")  # never None
_NON_EMPTY = ("name", "node", "op", "level", "direction", "role", "dtype")
_LINE_KEYS = frozenset({"index", "name", "node", "module", "op", "level", "call", "direction", "role", "pos", "dtype",
                        "shape", "stats", "hash", "source", "src", "data", "extra"})
_W = 5  # integer columns per record
_DATA_KEYS = frozenset({"file", "key", "part", "axes", "window"})
_COUNTS = ("numel", "nan", "posinf", "neginf", "zeros")
_FLOATS = ("min", "max", "mean", "std", "norm")
_STAT_KEYS = frozenset(_COUNTS + _FLOATS)
_INT, _FLOAT, _FLOAT_OR_NONE, _TEXT = frozenset({int}), frozenset({float}), frozenset({float, type(None)}), \
    frozenset({str, type(None)})
_NO_NULLS = (False,) * 5
# the bytes a table string may hold: deleting them leaves its control characters (\x01-\x1f, \x7f) and the
# NULs between strings; UTF-8 multi-byte sequences use only bytes >= 0x80
_NOT_CONTROL = bytes(range(0x20, 0x7f)) + bytes(range(0x80, 0x100))


class ColumnBuilder:
    """Collects the index lines of one part as columns while they are written (a few hundred bytes per
    record); `ok` turns False for good at the first line it cannot hold exactly, and no copy is written.

    A part of fewer than `min_records` records gets no copy (its JSON lines read in milliseconds): until
    then the lines are only kept as written, so a short capture pays nothing for the copy."""

    def __init__(self, min_records: int = MIN_RECORDS) -> None:
        self.ok = True
        self.lines = 0
        self.min_records = min_records
        self._early: list[tuple[int, str]] | None = [] if min_records > 0 else None  # (line number, text)
        self.ints: list[int] = []  # index, call, line number (1-based), ndim, has statistics
        self.dims: list[int] = []
        self.counts: list[int] = []
        self.floats: list[float] = []
        self.nulls: list[bool] = []
        self.codes: list[int] = []
        self._table: dict[str, int] = {}

    def skip(self) -> None:
        """A line that is no tensor record (a call line): counted, read from the JSON lines."""
        self.lines += 1

    def add(self, d: dict[str, Any], text: str = "") -> None:
        """One tensor record's line, as written (`text`: its JSON, kept instead while the part is short)."""
        self.lines += 1
        if not self.ok:
            return
        if self._early is not None and text:
            self._early.append((self.lines, text))
            if len(self._early) >= self.min_records:
                self._catch_up()
            return
        if not self._add(d, self.lines):
            self._give_up()

    def _catch_up(self) -> None:
        """The part grew long: the kept lines become columns, and later lines go straight in."""
        early, self._early = self._early or [], None
        for lineno, text in early:
            if not self._add(json.loads(text), lineno):
                self._give_up()
                return

    def _give_up(self) -> None:
        self.ok = False
        self._early = None
        self.ints, self.dims, self.counts, self.codes = [], [], [], []
        self.floats, self.nulls, self._table = [], [], {}

    def _add(self, d: dict[str, Any], lineno: int) -> bool:
        """Type tests by C-level calls (map, set, tuple compares): the writer pays this per record."""
        if not _LINE_KEYS.issuperset(d):
            return False
        shape, stats, index, call = d.get("shape"), d.get("stats"), d.get("index"), d.get("call")
        if type(shape) is not list or type(index) is not int or type(call) is not int:
            return False
        if (shape and not _INT.issuperset(map(type, shape))) or (stats is not None and not self._stats(stats)):
            return False
        texts = _texts(d)
        if texts is None:
            return False
        get = self._table.setdefault
        self.codes += [-1 if t is None else get(t, len(self._table)) for t in texts]
        self.ints += (index, call, lineno, len(shape), stats is not None)
        self.dims += shape
        return True

    def _stats(self, s: Any) -> bool:
        if type(s) is not dict or s.keys() != _STAT_KEYS:
            return False
        counts = (s["numel"], s["nan"], s["posinf"], s["neginf"], s["zeros"])
        floats = (s["min"], s["max"], s["mean"], s["std"], s["norm"])
        if not _INT.issuperset(map(type, counts)):
            return False
        if _FLOAT.issuperset(map(type, floats)):
            self.floats += floats
            self.nulls += _NO_NULLS
        elif _FLOAT_OR_NONE.issuperset(map(type, floats)):
            self.floats += [0.0 if f is None else f for f in floats]
            self.nulls += [f is None for f in floats]
        else:
            return False
        self.counts += counts
        return True

    def write(self, path: Path, index_path: Path) -> None:
        """Write the copy next to the finished index (temp file, then rename); nothing when a line did not fit
        or the part is short."""
        if not self.ok or self._early is not None:
            return
        try:
            arrays = self._arrays()
        except (OverflowError, ValueError):  # a number beyond 64 bits: the JSON lines hold it
            return
        raw = index_path.read_bytes()
        header: dict[str, Any] = {"version": VERSION, "records": len(arrays["ints"]), "lines": self.lines,
                                  "strings": len(self._table), "index_bytes": len(raw),
                                  "index_xxh3": xxhash.xxh3_64_hexdigest(raw), "arrays": {}}
        payload = bytearray()
        for name, arr in arrays.items():
            header["arrays"][name] = [arr.dtype.str, list(arr.shape), len(payload), arr.nbytes]
            payload += arr.tobytes()
            payload += b"\x00" * (-len(payload) % 8)
        header["payload_xxh3"] = xxhash.xxh3_64_hexdigest(bytes(payload))
        head = json.dumps(header, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 8)
        tmp = path.with_suffix(".cols.tmp")
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(head).to_bytes(8, "little") + head)
            f.write(payload)
        os.replace(tmp, path)

    def _arrays(self) -> dict[str, np.ndarray]:
        n, m = len(self.ints) // _W, len(self.counts) // 5
        return {
            "ints": np.array(self.ints, dtype="<i8").reshape(n, _W),
            "dims": np.array(self.dims, dtype="<i8"),
            "codes": np.array(self.codes, dtype="<i4").reshape(n, len(TEXTS)),
            "counts": np.array(self.counts, dtype="<i8").reshape(m, 5),
            "floats": np.array(self.floats, dtype="<f8").reshape(m, 5),
            "nulls": np.array(self.nulls, dtype="u1").reshape(m, 5),
            "table": np.frombuffer("\x00".join(self._table).encode(), dtype="u1"),
        }


def _texts(d: dict[str, Any]) -> list[str | None] | None:
    """The line's text fields in TEXTS order (extra as its JSON text), or None when one is not as expected."""
    data, extra = d.get("data"), d.get("extra")
    if data is not None and (type(data) is not dict or not {"file", "key"} <= data.keys() <= _DATA_KEYS):
        return None
    axes = None if data is None else data.get("axes")
    if axes is not None and (type(axes) is not list or not _INT.issuperset(map(type, axes))):
        return None
    window = None if data is None else data.get("window")
    if window is not None and (type(window) is not dict or window.keys() != {"offset", "strides"}
                               or type(window["offset"]) is not int or type(window["strides"]) is not list
                               or not _INT.issuperset(map(type, window["strides"]))):
        return None
    if extra is not None and type(extra) is not dict:
        return None
    out = [d.get("name"), d.get("node"), d.get("module"), d.get("op"), d.get("level"), d.get("direction"),
           d.get("role"), d.get("pos"), d.get("dtype"), d.get("hash"), d.get("source"), d.get("src")]
    out += (None, None, None) if data is None else (data["file"], data["key"], data.get("part"))
    if not _TEXT.issuperset(map(type, out)):
        return None
    try:
        out.append(None if extra is None else json.dumps(extra, separators=(",", ":"), allow_nan=True))
    except (TypeError, ValueError):
        return None
    out.append(None if axes is None else json.dumps(axes, separators=(",", ":")))
    out.append(None if window is None else json.dumps(window, separators=(",", ":")))
    return out


@dataclass
class Columns:
    """A checked columnar index: the arrays and the string table."""

    ints: np.ndarray
    dims: np.ndarray
    codes: np.ndarray
    counts: np.ndarray
    floats: np.ndarray
    nulls: np.ndarray
    table: list[str]
    lines: int


def load_columns(blob: bytes, raw_index: bytes) -> Columns | None:
    """The columns of a copy's bytes when it is a sound copy of exactly `raw_index`; None for anything else."""
    return load_columns_of(blob, len(raw_index), xxhash.xxh3_64_hexdigest(raw_index))


def load_columns_of(blob: bytes, index_bytes: int, index_xxh3: str) -> Columns | None:
    """load_columns for an index known by its size and xxh3 digest (hashed as it was read, never held whole)."""
    try:
        return _parse(blob, index_bytes, index_xxh3)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, RecursionError):
        return None


def _parse(blob: bytes, index_bytes: int, index_xxh3: str) -> Columns | None:
    if blob[:8] != MAGIC or len(blob) < 16:
        return None
    n_head = int.from_bytes(blob[8:16], "little")
    if n_head > MAX_HEADER or 16 + n_head > len(blob):
        return None
    h = json.loads(blob[16:16 + n_head])
    if h.get("version") != VERSION or h["index_bytes"] != index_bytes or h["index_xxh3"] != index_xxh3:
        return None
    payload = memoryview(blob)[16 + n_head:]
    if h["payload_xxh3"] != xxhash.xxh3_64_hexdigest(payload):
        return None
    arrays = {}
    for name, (dt, shape, off, nbytes) in h["arrays"].items():
        if off < 0 or nbytes < 0 or off + nbytes > len(payload):
            return None
        arrays[name] = np.frombuffer(payload[off:off + nbytes], dtype=np.dtype(dt)).reshape(shape)
    table_bytes = arrays["table"].tobytes()
    table_text = table_bytes.decode("utf-8")
    table = table_text.split("\x00") if h["strings"] else []
    if len(table) != h["strings"] or len(set(table)) != len(table) or _has_control(table_bytes):
        return None
    return Columns(arrays["ints"], arrays["dims"], _all_texts(arrays["codes"]), arrays["counts"], arrays["floats"],
                   arrays["nulls"], table, int(h["lines"]))


def _all_texts(codes: np.ndarray) -> np.ndarray:
    """The code columns of TEXTS: a copy written before `window` (17 columns) or `axes` (16) joined them has
    none of those, as its writer took no line holding them: those columns are absent (-1) everywhere. Any
    other width is left to `sound` to refuse."""
    missing = len(TEXTS) - codes.shape[1] if codes.ndim == 2 else 0
    if missing in (1, 2):
        return np.concatenate([codes, np.full((len(codes), missing), -1, dtype=codes.dtype)], axis=1)
    return codes


def _has_control(table_bytes: bytes) -> bool:
    """A control character in the table's strings (NUL aside: it separates them), by one C-level translate
    instead of a regular expression over the whole table."""
    return bool(table_bytes.translate(None, _NOT_CONTROL).strip(b"\x00"))


def sound(c: Columns, dtypes: frozenset[str] | set[str] | dict[str, Any], part_re: re.Pattern[str]) -> bool:
    """Every check the JSON path makes on a record line and across lines, on whole columns."""
    n = len(c.ints)
    if c.ints.shape != (n, _W) or c.codes.shape != (n, len(TEXTS)) or len(c.table) >= 2**31 - 1:
        return False
    idx, call, ndim = c.ints[:, 0], c.ints[:, 1], c.ints[:, 3]
    if not np.array_equal(idx, np.arange(n)) or (call < 0).any() or (ndim < 0).any() or (ndim > MAX_DIMS).any():
        return False
    if int(ndim.sum()) != len(c.dims) or (c.dims < 0).any() or (c.dims > MAX_NUMEL).any():
        return False
    codes = c.codes
    if (codes < -1).any() or (codes >= len(c.table)).any():
        return False
    col = {f: codes[:, k] for k, f in enumerate(TEXTS)}
    if any((col[f] < 0).any() for f in _NEEDED) or (np.bincount(col["name"]) > 1).any():  # names unique
        return False
    empty = c.table.index("") if "" in c.table else -2
    if any((col[f] == empty).any() for f in _NON_EMPTY + ("file", "key", "part")):
        return False
    if not _used(c, col["dtype"]) <= set(dtypes) or any(not _safe_file(f) for f in _used(c, col["file"])):
        return False
    if any(part_re.fullmatch(p) is None for p in _used(c, col["part"])):
        return False
    has_file = col["file"] >= 0
    if not np.array_equal(has_file, col["key"] >= 0):
        return False
    return _stats_sound(c)


def _used(c: Columns, codes: np.ndarray) -> set[str]:
    """The distinct strings a code column uses."""
    return {c.table[i] for i in distinct(codes)}


def distinct(codes: np.ndarray) -> list[int]:
    """The distinct codes >= 0 of a column, ascending: one bincount (codes index a table; np.unique sorts or
    hashes, several times slower on 100,000 codes)."""
    return np.flatnonzero(np.bincount(codes[codes >= 0])).tolist()


def _safe_file(f: str) -> bool:
    return not (f.startswith(("/", "\\")) or ".." in f.replace("\\", "/").split("/") or (len(f) > 1 and f[1] == ":"))


def _stats_sound(c: Columns) -> bool:
    """Counts not negative, one statistics row per record that has them, numel equal to the shape's."""
    present = c.ints[:, 4]
    if not ((present == 0) | (present == 1)).all() or not len(c.counts) == len(c.floats) == len(c.nulls) == present.sum():
        return False
    if (c.counts < 0).any() or not ((c.nulls == 0) | (c.nulls == 1)).all():
        return False
    n = numels(c)
    return n is not None and np.array_equal(n[present == 1], c.counts[:, 0])


def numels(c: Columns) -> np.ndarray | None:
    """Each record's element count from its shape, or None when one is absurd (the JSON path names it)."""
    n = len(c.ints)
    ndim = c.ints[:, 3]
    width = int(ndim.max()) if n else 0
    grid = np.ones((n, max(width, 1)), dtype=np.float64)
    mask = np.arange(max(width, 1)) < ndim[:, None]
    grid[mask] = c.dims
    if (grid.prod(axis=1) > MAX_NUMEL).any():
        return None
    exact = np.ones((n, max(width, 1)), dtype=np.int64)
    exact[mask] = c.dims
    out: np.ndarray = exact.prod(axis=1)
    return out


def records(c: Columns) -> list[Record]:
    """Records of the columns (checked by `sound`), built column-wise."""
    n = len(c.ints)
    if not n:
        return []
    table: list[str | None] = list(c.table)
    for k in _INTERNED:  # few distinct values, shared with every other dump's (as the JSON path does)
        for i in distinct(c.codes[:, k]):
            table[i] = intern(c.table[i])
    table.append(None)  # code -1: the last entry, as numpy indexes it
    cols = _text_columns(c.codes, table)
    name, node, module, op, level, direction, role, pos, dtype, hsh, source, src, file, key, part, extra, axes, window = cols
    if part.count(None) == n and None not in file:  # every record's data in this part's shards
        data: list[dict[str, Any] | None] = [{"file": f, "key": k} for f, k in zip(file, key)]
    else:
        data = [None if f is None else ({"file": f, "key": k} if p is None else {"file": f, "key": k, "part": p})
                for f, k, p in zip(file, key, part)]
    shapes = _shapes(c)
    if axes.count(None) != n:  # format version 3's data.axes: few records have them
        for i, a in enumerate(axes):
            if a is not None:
                data[i] = _with_axes(data[i], a, len(shapes[i]))
    if window.count(None) != n:  # format version 3's data.window: q, k, v and the like
        for i, w in enumerate(window):
            if w is not None:
                data[i] = _with_window(data[i], w, len(shapes[i]))
    extras = [{} if e is None else _extra(e) for e in extra]
    index, call = c.ints[:, 0].tolist(), c.ints[:, 1].tolist()
    return list(map(Record, index, name, node, module, op, level, call, direction, role, pos, dtype, shapes,
                    _stats(c), hsh, source, data, src, extras))


def _text_columns(codes: np.ndarray, table: list[str | None]) -> list[list[str | None]]:
    """Each text column as a list (`table` ends with None, code -1): a column of one value is that value
    repeated, the others one C-level take together (most runs have one dtype, direction, no part or extra)."""
    n = len(codes)
    same = (codes == codes[0]).all(axis=0).tolist()
    taken = iter(np.array(table, dtype=object)[codes[:, [not s for s in same]].T].tolist()) if not all(same) \
        else iter(())
    return [[table[int(codes[0, k])]] * n if s else next(taken) for k, s in enumerate(same)]


def _with_axes(data: dict[str, Any] | None, text: str, ndim: int) -> dict[str, Any]:
    """A record's data with its `axes` (checked as the JSON path checks them; ValueError sends the reader there)."""
    axes = json.loads(text)
    if data is None or axes_problem(axes, ndim) is not None:
        raise ValueError("data.axes is not an order of the record's dimensions")
    return {**data, "axes": axes}


def _with_window(data: dict[str, Any] | None, text: str, ndim: int) -> dict[str, Any]:
    """A record's data with its `window` (checked as the JSON path checks it; ValueError sends the reader there)."""
    window = json.loads(text)
    if data is None or "axes" in data or window_problem(window, ndim) is not None:
        raise ValueError("data.window is not an offset and one stride per dimension")
    return {**data, "window": window}


def _extra(text: str) -> dict[str, Any]:
    from .validate import parse_json

    out = parse_json(text)
    if type(out) is not dict:
        raise ValueError("extra is not an object")
    return out


def _shapes(c: Columns) -> list[tuple[int, ...]]:
    """Each record's shape; records of one shape share one tuple (a run holds few distinct shapes: less
    memory per record, fewer tuples made)."""
    ndim = c.ints[:, 3]
    if len(ndim) and (ndim == ndim[0]).all():  # one rank for all: rows of a matrix
        k = int(ndim[0])
        if not k:
            return [()] * len(ndim)
        rows = c.dims.reshape(len(ndim), k)
        keyed = _rows_by_key(rows)
        if keyed is not None:
            return keyed
        made = list(map(tuple, rows.tolist()))
    else:
        dims = c.dims.tolist()
        ends = np.cumsum(ndim).tolist()
        made = [tuple(dims[a:b]) for a, b in zip([0, *ends[:-1]], ends)]
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    return list(map(seen.setdefault, made, made))


def _rows_by_key(rows: np.ndarray) -> list[tuple[int, ...]] | None:
    """Each row as a tuple, rows of equal dims sharing one, found by one integer per row (its dims as digits
    of base max + 1) instead of a tuple made and hashed per row; None when that integer could pass 62 bits."""
    base = int(rows.max()) + 1  # dims are >= 0 (sound)
    if base ** rows.shape[1] >= 1 << 62:
        return None
    keys = (rows @ base ** np.arange(rows.shape[1], dtype=np.int64)).tolist()
    last = dict(zip(keys, range(len(keys))))  # a row of each key
    one = dict(zip(last, map(tuple, rows[list(last.values())].tolist())))
    return list(map(one.__getitem__, keys))


def _stats(c: Columns) -> list[Stats | None]:
    """Each record's statistics (None where it has none), built column-wise."""
    floats: list[list[float | None]] = c.floats.T.tolist()
    if c.nulls.any():
        for col, null in zip(floats, c.nulls.T.tolist()):
            for j in (j for j, z in enumerate(null) if z):
                col[j] = None
    numel, nan, posinf, neginf, zeros = c.counts.T.tolist()
    made: list[Stats | None] = list(map(Stats, numel, *floats, nan, posinf, neginf, zeros))
    present = c.ints[:, 4]
    if len(made) == len(present):
        return made
    out: list[Stats | None] = [None] * len(present)
    for i, st in zip(np.flatnonzero(present).tolist(), made):
        out[i] = st
    return out
