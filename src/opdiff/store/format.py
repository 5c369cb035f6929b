"""Record schema, dtype names and layout constants of the opdiff dump format (docs/format.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

FORMAT_NAME = "opdiff-dump"
FORMAT_VERSION = 1
META_FILE = "meta.json"
INDEX_FILE = "index.jsonl"
SHARD_DIR = "shards"

DIRECTIONS = ("forward", "backward")
ROLES = ("input", "output", "parameter", "gradient")
LEVELS = ("module", "api", "aten", "param", "graph")
# Record.extra keys of graph-engine captures (docs/fusion.md): the graph value a record holds (equal in two
# runs of one model: tensor name, "tensor|consumer" for a node input), and the original nodes a fused op replaces
GRAPH_VALUE = "graph_value"
PROVENANCE_KEY = "fused_from"

# dtype name (as torch and the docs spell it) -> (numpy dtype, safetensors dtype code)
DTYPES: dict[str, tuple[np.dtype, str]] = {
    "float64": (np.dtype(np.float64), "F64"),
    "float32": (np.dtype(np.float32), "F32"),
    "float16": (np.dtype(np.float16), "F16"),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), "BF16"),
    "float8_e4m3fn": (np.dtype(ml_dtypes.float8_e4m3fn), "F8_E4M3"),
    "float8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), "F8_E5M2"),
    "int64": (np.dtype(np.int64), "I64"),
    "int32": (np.dtype(np.int32), "I32"),
    "int16": (np.dtype(np.int16), "I16"),
    "int8": (np.dtype(np.int8), "I8"),
    "uint64": (np.dtype(np.uint64), "U64"),
    "uint32": (np.dtype(np.uint32), "U32"),
    "uint16": (np.dtype(np.uint16), "U16"),
    "uint8": (np.dtype(np.uint8), "U8"),
    "bool": (np.dtype(np.bool_), "BOOL"),
}
SAFETENSORS_TO_NAME = {code: name for name, (_, code) in DTYPES.items()}
NUMPY_TO_NAME = {np_dtype: name for name, (np_dtype, _) in DTYPES.items()}
FLOAT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"})


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype (ml_dtypes for bf16/fp8) that holds a tensor of dtype `name`."""
    try:
        return DTYPES[name][0]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def dtype_name(arr_dtype: np.dtype) -> str:
    """The format's name for a numpy dtype."""
    try:
        return NUMPY_TO_NAME[np.dtype(arr_dtype)]
    except KeyError:
        raise ValueError(f"dtype {arr_dtype} cannot be stored in an opdiff dump") from None


@dataclass
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
    def from_json(cls, d: dict[str, Any]) -> "Stats":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})


@dataclass
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
    def from_json(cls, d: dict[str, Any]) -> "Record":
        stats = d.get("stats")
        return cls(
            index=int(d["index"]),
            name=d["name"],
            node=d["node"],
            module=d["module"],
            op=d["op"],
            level=d["level"],
            call=int(d["call"]),
            direction=d["direction"],
            role=d["role"],
            pos=str(d["pos"]),
            dtype=d["dtype"],
            shape=tuple(int(s) for s in d["shape"]),
            stats=Stats.from_json(stats) if stats is not None else None,
            hash=d.get("hash"),
            source=d.get("source"),
            data=d.get("data"),
            src=d.get("src"),
            extra=d.get("extra") or {},
        )


def node_name(module: str, op: str, call: int) -> str:
    """The stable id of one op call: module path, op and per-(module, op) call counter."""
    return f"{module}/{op}#{call}" if module else f"{op}#{call}"


def record_name(node: str, direction: str, role: str, pos: str) -> str:
    """The stable name of one tensor of an op call."""
    return f"{node}/{direction}/{role}/{pos}"


def part_dir(rank: int, step: int) -> str:
    """Relative directory of one (rank, step) part of a run."""
    return f"rank{rank}/step{step}"
