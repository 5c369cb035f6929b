"""A record: one captured tensor, as every stage sees it, whatever format it was read from.

Also its statistics. Field meanings: docs/format.md. Plain dataclasses; no stage imported here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
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
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Stats:
        """Statistics from an index line; ValueError naming the field when one has the wrong type or range."""
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
    data: dict[str, str] | None = None  # {"file": "shards/000000.safetensors", "key": name}
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
        needs the format's tables (dtype names, shard paths)."""
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


def _data(v: Any) -> dict[str, str] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ValueError(f"field 'data' must be an object with 'file' and 'key', not {_kind(v)}")
    # one string per shard, not per record; the key may be empty: a foreign reader's file holds one tensor
    return {"file": intern(_text(_need_in(v, "file"), "data.file")),
            "key": _text(_need_in(v, "key"), "data.key", empty=True)}


def _need_in(d: dict[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"field 'data.{key}' is missing")
    return d[key]
