"""A record: one captured tensor, as every stage sees it, whatever format it was read from.

Also its statistics. Field meanings: docs/format.md. Plain dataclasses; no stage imported here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from sys import intern
from typing import Any


@dataclass(slots=True)
class Stats:
    """Summary of a tensor. min/max/mean/std/norm are over its finite elements, in float64."""

    numel: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    norm: float | None = None
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int = 0

    def to_json(self) -> dict[str, Any]:
        """The ten fields as a dict (by hand: dataclasses.asdict deep-copies, ~20x slower, once per record)."""
        return {"numel": self.numel, "min": self.min, "max": self.max, "mean": self.mean, "std": self.std,
                "norm": self.norm, "nan": self.nan, "posinf": self.posinf, "neginf": self.neginf, "zeros": self.zeros}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Stats:
        """Statistics from an index line; ValueError naming the field when one has the wrong type or range."""
        fast = _stats_fast(d)
        return fast if fast is not None else cls._checked(d)

    @classmethod
    def _checked(cls, d: dict[str, Any]) -> Stats:
        """from_json field by field: finds and names what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"field 'stats' must be an object, not {_kind(d)}")
        out: dict[str, Any] = {}
        for k in cls.__dataclass_fields__:
            if k not in d:
                continue
            v = d[k]
            if k in _COUNTS:
                out[k] = _count(v, f"stats.{k}")
            elif v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"field 'stats.{k}' must be a number or null, not {_kind(v)}")
            else:
                try:
                    out[k] = None if v is None else float(v)
                except OverflowError:
                    raise ValueError(f"field 'stats.{k}' is out of range") from None
        if "numel" not in out:
            raise ValueError("field 'stats.numel' is missing")
        return cls(**out)


@dataclass(slots=True)
class Record:
    """One captured tensor: where it ran, what it is, its statistics, and where its data lies.

    `name` is unique within one (rank, step) and stable between two runs of the same model:
    ``{module}/{op}#{call}/{direction}/{role}/{pos}`` (see docs/format.md).
    """

    index: int
    name: str
    node: str  # the op call this tensor belongs to: "{module}/{op}#{call}"
    module: str  # module path it ran in ("" is the root model)
    op: str  # op or module type: "Linear", "torch.nn.functional.gelu", "aten.mm.default"
    level: str  # module | api | aten | param | graph
    call: int  # per-(module, op) call counter within the step
    direction: str  # forward | backward
    role: str  # input | output | parameter | gradient
    pos: str  # position inside nested inputs/outputs: "0", "1.0", "kwargs.attention_mask", "logits"
    dtype: str
    shape: tuple[int, ...]
    stats: Stats | None = None
    hash: str | None = None
    source: str | None = None  # "file.py:123" of the user code that made the call
    # {"file": "shards/000000.safetensors", "key": name}; "part": "rank0/step0" when the data lies in another
    # part of the run (format version 2: stored once per dump, docs/format.md); "axes": [1, 0] when the record
    # reads those bytes under another shape or order, "window": {"offset": n, "strides": [...]} when it reads a
    # strided window of them (format version 3)
    data: dict[str, Any] | None = None
    src: str | None = None  # name of the record that produced this tensor, when known
    extra: dict[str, Any] = field(default_factory=dict)  # anything else a capture wants to keep

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def has_data(self) -> bool:
        return self.data is not None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "name": self.name,
            "node": self.node,
            "module": self.module,
            "op": self.op,
            "level": self.level,
            "call": self.call,
            "direction": self.direction,
            "role": self.role,
            "pos": self.pos,
            "dtype": self.dtype,
            "shape": list(self.shape),
        }
        if self.stats is not None:
            d["stats"] = self.stats.to_json()
        for key in ("hash", "source", "data", "src"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.extra:
            d["extra"] = self.extra
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Record:
        """A record from an index line, every field checked for type and range.

        ValueError names the field (the reader adds file:line); the store's reader checks what
        needs the format's tables (dtype names, shard paths). A sound line takes a fast path that
        checks the same things in bulk (reading the index was 45 % of comparing small records);
        anything it doubts goes field by field, which names the problem."""
        fast = _record_fast(d)
        return fast if fast is not None else cls._checked(d)

    @classmethod
    def _checked(cls, d: dict[str, Any]) -> Record:
        """from_json field by field: finds and names what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"a record must be a JSON object, not {_kind(d)}")
        stats = d.get("stats")
        extra = d.get("extra")
        if extra is not None and not isinstance(extra, dict):
            raise ValueError(f"field 'extra' must be an object, not {_kind(extra)}")
        data = _data(d.get("data"))
        return cls(
            index=_count(_need(d, "index"), "index"),
            name=_text(_need(d, "name"), "name"),
            node=_text(_need(d, "node"), "node"),
            module=intern(_text(_need(d, "module"), "module", empty=True)),
            op=intern(_text(_need(d, "op"), "op")),
            level=intern(_text(_need(d, "level"), "level")),
            call=_count(_need(d, "call"), "call"),
            direction=intern(_text(_need(d, "direction"), "direction")),
            role=intern(_text(_need(d, "role"), "role")),
            pos=intern(_text(str(p) if isinstance(p := _need(d, "pos"), int) and not isinstance(p, bool) else p, "pos",
                             empty=True)),
            dtype=intern(_text(_need(d, "dtype"), "dtype")),
            shape=_shape(_need(d, "shape")),
            stats=Stats.from_json(stats) if stats is not None else None,
            hash=_opt_text(d.get("hash"), "hash"),
            source=_opt_text(d.get("source"), "source"),
            data=data,
            src=_opt_text(d.get("src"), "src"),
            extra=extra or {},
        )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_COUNTS = ("numel", "nan", "posinf", "neginf", "zeros")
MAX_DIMS = 64
MAX_NUMEL = 1 << 48  # far beyond any real tensor; keeps byte counts exact and reads bounded


def _kind(v: Any) -> str:
    return "null" if v is None else {bool: "a boolean", int: "a number", float: "a number", str: "a string",
                                     list: "a list", dict: "an object"}.get(type(v), type(v).__name__)


def _need(d: dict[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"field {key!r} is missing")
    return d[key]


def _count(v: Any, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"field {field!r} must be a whole number, not {_kind(v)}")
    if v < 0:
        raise ValueError(f"field {field!r} is negative ({v})")
    return v


def _text(v: Any, field: str, *, empty: bool = False) -> str:
    if not isinstance(v, str):
        raise ValueError(f"field {field!r} must be a string, not {_kind(v)}")
    if not v and not empty:
        raise ValueError(f"field {field!r} is empty")
    if _CONTROL.search(v):
        raise ValueError(f"field {field!r} holds control characters ({v!r})")
    return v


def _opt_text(v: Any, field: str) -> str | None:
    return None if v is None else _text(v, field, empty=True)


def _shape(v: Any) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise ValueError(f"field 'shape' must be a list of sizes, not {_kind(v)}")
    if len(v) > MAX_DIMS:
        raise ValueError(f"field 'shape' has {len(v)} dimensions (at most {MAX_DIMS})")
    shape = tuple(_count(s, "shape") for s in v)
    if any(s > MAX_NUMEL for s in shape):
        raise ValueError(f"field 'shape' {list(shape)} has an absurd size")
    n = math.prod(shape)
    if n > MAX_NUMEL:
        raise ValueError(f"field 'shape' {list(shape)} is absurd ({n} elements)")
    return shape


def _data(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ValueError(f"field 'data' must be an object with 'file' and 'key', not {_kind(v)}")
    # one string per shard, not per record; the key may be empty: a foreign reader's file holds one tensor
    out: dict[str, Any] = {"file": intern(_text(_need_in(v, "file"), "data.file")),
                           "key": _text(_need_in(v, "key"), "data.key", empty=True)}
    if v.get("part") is not None:
        out["part"] = intern(_text(v["part"], "data.part"))
    if v.get("axes") is not None:  # format version 3: the stored bytes under another shape or order
        axes = v["axes"]
        if not isinstance(axes, list) or len(axes) > MAX_DIMS or not all(_is_count(a) for a in axes):
            raise ValueError(f"field 'data.axes' must be a list of dimensions, not {_kind(axes)}")
        out["axes"] = list(axes)
    if v.get("window") is not None:  # format version 3: a strided window of the stored bytes
        w = v["window"]
        if not isinstance(w, dict) or set(w) != {"offset", "strides"} or not _is_count(w["offset"]) or not \
                isinstance(w["strides"], list) or len(w["strides"]) > MAX_DIMS or not all(map(_is_count, w["strides"])):
            raise ValueError(f"field 'data.window' must be {{'offset': n, 'strides': [...]}} of whole numbers >= 0, "
                             f"not {str(w)[:80]}")
        out["window"] = {"offset": w["offset"], "strides": list(w["strides"])}
    return out


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _need_in(d: dict[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"field 'data.{key}' is missing")
    return d[key]


def _stats_fast(d: Any) -> Stats | None:
    """Stats of a stats object with all ten fields sound, or None for anything _checked must look at
    (never raises)."""
    if type(d) is not dict or len(d) != 10:
        return None
    try:
        counts = (d["numel"], d["nan"], d["posinf"], d["neginf"], d["zeros"])
        floats = (d["min"], d["max"], d["mean"], d["std"], d["norm"])
    except KeyError:
        return None
    for c in counts:
        if type(c) is not int or c < 0:
            return None
    for f in floats:
        if type(f) is not float and f is not None:
            return None
    return Stats(counts[0], *floats, *counts[1:])


def _clean(text: str) -> bool:
    """No control characters (what _text refuses), by C string tests when the text is ASCII."""
    return text.isprintable() if text.isascii() else _CONTROL.search(text) is None


def _record_fast(d: Any) -> Record | None:
    """The record of a sound index line, or None for anything Record._checked must look at: every
    check of _checked, in bulk (one control-character test over all the text). Never raises."""
    if type(d) is not dict:
        return None
    try:
        name, node, module, op, level = d["name"], d["node"], d["module"], d["op"], d["level"]
        direction, role, dtype, pos = d["direction"], d["role"], d["dtype"], d["pos"]
        index, call, shape = d["index"], d["call"], d["shape"]
    except KeyError:
        return None
    if type(pos) is int:
        pos = str(pos)
    hsh, source, src, data = d.get("hash"), d.get("source"), d.get("src"), d.get("data")
    texts = [name, node, module, op, level, direction, role, dtype, pos]
    texts += [v for v in (hsh, source, src) if v is not None]
    if data is not None:
        if type(data) is not dict or type(data.get("file")) is not str or type(data.get("key")) is not str \
                or len(data) != 2:  # another part, a declared layout (`data.axes`): _checked reads it
            return None
        texts += (data["file"], data["key"])
    for v in texts:
        if type(v) is not str:
            return None
    if not (name and node and op and level and direction and role and dtype) or not _clean("".join(texts)) or (
            data is not None and not data["file"]):
        return None
    if type(index) is not int or index < 0 or type(call) is not int or call < 0 or type(shape) is not list \
            or len(shape) > MAX_DIMS:
        return None
    for x in shape:
        if type(x) is not int or x < 0 or x > MAX_NUMEL:
            return None
    shape_t = tuple(shape)
    stats, extra = d.get("stats"), d.get("extra")
    if math.prod(shape_t) > MAX_NUMEL or (extra is not None and type(extra) is not dict):
        return None
    st = None
    if stats is not None and (st := _stats_fast(stats)) is None:
        return None
    return Record(index, name, node, intern(module), intern(op), intern(level), call, intern(direction),
                  intern(role), intern(pos), intern(dtype), shape_t, st, hsh, source,
                  None if data is None else {"file": intern(data["file"]), "key": data["key"]}, src, extra or {})
