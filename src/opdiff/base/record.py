"""A record: one captured tensor, as every stage sees it, whatever format it was read from.

Also its statistics. Field meanings: docs/format.md. Plain dataclasses; no stage imported here.
"""

from __future__ import annotations

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
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


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
        n = 1
        for s in self.shape:
            n *= s
        return n

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
        stats = d.get("stats")
        data = d.get("data")
        if data is not None and isinstance(data.get("file"), str):  # one string per shard, not per record
            data["file"] = intern(data["file"])
        return cls(
            index=int(d["index"]),
            name=d["name"],
            node=d["node"],
            # few distinct values repeated on every record: one string object each (less memory per record)
            module=intern(d["module"]),
            op=intern(d["op"]),
            level=intern(d["level"]),
            call=int(d["call"]),
            direction=intern(d["direction"]),
            role=intern(d["role"]),
            pos=intern(str(d["pos"])),
            dtype=intern(d["dtype"]),
            shape=tuple(int(s) for s in d["shape"]),
            stats=Stats.from_json(stats) if stats is not None else None,
            hash=d.get("hash"),
            source=d.get("source"),
            data=data,
            src=d.get("src"),
            extra=d.get("extra") or {},
        )
