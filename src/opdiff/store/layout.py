"""How one record's tensor is laid out across ranks: a device mesh and a placement per mesh dimension.

A capture writes it into `Record.extra["layout"]` for DTensors (capture/torch/layout.py); a layout file
declares it for hand-written tensor parallelism (rules: record-name regex -> placements). Both end up
as a `Layout`, which says for every rank which part of the logical tensor it holds (docs/parallel.md).

Placements are written as DTensor prints them: ``S(d)`` (shard along tensor dim d), ``R`` (replicate),
``P(sum)`` / ``P(avg)`` / ``P(max)`` / ``P(min)`` (partial: the logical tensor is the reduction).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from ..base.docfile import read_doc

REDUCE_OPS = ("sum", "avg", "max", "min")
_PLACEMENT = re.compile(r"^(?:S\((-?\d+)\)|R|P\((sum|avg|max|min)\))$")


@dataclass(frozen=True)
class Placement:
    """How one mesh dimension places the tensor: kind "shard" (along `dim`), "replicate" or "partial" (`reduce`)."""

    kind: str
    dim: int = 0
    reduce: str = "sum"

    def __str__(self) -> str:
        return {"shard": f"S({self.dim})", "replicate": "R"}.get(self.kind, f"P({self.reduce})")

    @classmethod
    def parse(cls, text: Any) -> Placement:
        """A placement from its text (S(0), R, P(sum)); ValueError naming the text otherwise."""
        m = _PLACEMENT.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"bad placement {text!r} (expected S(dim), R or P(sum|avg|max|min))")
        if m.group(1) is not None:
            return cls("shard", int(m.group(1)))
        return cls("partial", reduce=m.group(2)) if m.group(2) else cls("replicate")


@dataclass(frozen=True)
class Layout:
    """A device mesh (rank of every mesh coordinate) and one placement per mesh dimension."""

    mesh: tuple[int, ...]  # ranks in row-major mesh order
    mesh_shape: tuple[int, ...]
    placements: tuple[Placement, ...]
    source: str = "dtensor"  # dtensor | layout-file | default

    def __post_init__(self) -> None:
        if len(self.placements) != len(self.mesh_shape) or math.prod(self.mesh_shape) != len(self.mesh):
            raise ValueError(f"layout: {len(self.placements)} placements for a mesh of shape {list(self.mesh_shape)} "
                             f"holding {len(self.mesh)} ranks")

    def coord(self, rank: int) -> tuple[int, ...] | None:
        """Mesh coordinate of `rank`, None when it is not in the mesh."""
        try:
            flat = self.mesh.index(rank)
        except ValueError:
            return None
        out = []
        for size in reversed(self.mesh_shape):
            out.append(flat % size)
            flat //= size
        return tuple(reversed(out))

    def describe(self) -> str:
        return f"[{', '.join(map(str, self.placements))}] on mesh {list(self.mesh_shape)}"

    def to_json(self) -> dict[str, Any]:
        return {"mesh": list(self.mesh), "mesh_shape": list(self.mesh_shape),
                "placements": [str(p) for p in self.placements], "source": self.source}

    @classmethod
    def from_json(cls, d: Any) -> Layout:
        """A layout from a record's extra["layout"]; ValueError naming the field otherwise."""
        if not isinstance(d, dict):
            raise ValueError("extra.layout must be an object")
        mesh, shape, pls = d.get("mesh"), d.get("mesh_shape"), d.get("placements")
        if not isinstance(mesh, list) or not isinstance(shape, list) or not _ints(mesh) or not _ints(shape) \
                or not isinstance(pls, list):
            raise ValueError("extra.layout needs mesh (ranks), mesh_shape (sizes) and placements (list)")
        return cls(tuple(mesh), tuple(shape), tuple(Placement.parse(p) for p in pls), str(d.get("source", "dtensor")))


def _ints(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)


def replicated(ranks: list[int]) -> Layout:
    """The layout assumed for a record nothing declares: the same tensor on every rank."""
    return Layout(tuple(ranks), (len(ranks),), (Placement("replicate"),), "default")


@dataclass(frozen=True)
class Rule:
    """Records whose name the regex finds get these placements (on the file's mesh)."""

    pattern: re.Pattern[str]
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class LayoutRules:
    """A layout file: a mesh (default: all ranks in a row) and rules, the first that matches wins."""

    rules: tuple[Rule, ...]
    mesh_shape: tuple[int, ...] | None = None
    source: str = ""

    def layout_of(self, name: str, ranks: list[int]) -> Layout | None:
        """The layout a rule declares for record `name` of a run on `ranks`, or None."""
        for r in self.rules:
            if r.pattern.search(name):
                shape = self.mesh_shape or (len(ranks),)
                return Layout(tuple(sorted(ranks)), shape, r.placements, "layout-file")
        return None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"rules": [{"match": r.pattern.pattern, "placements": [str(p) for p in r.placements]}
                                         for r in self.rules]}
        if self.mesh_shape:
            doc["mesh"] = list(self.mesh_shape)
        return doc


def rules_from_dict(doc: Any, source: str = "") -> LayoutRules:
    """Validate a layout document (see docs/parallel.md); ValueError naming the bad entry."""
    if not isinstance(doc, dict) or "rules" not in doc or set(doc) - {"rules", "mesh"}:
        raise ValueError("expected a mapping with 'rules' (and optionally 'mesh')")
    mesh = doc.get("mesh")
    if mesh is not None and not _ints(mesh):
        raise ValueError("mesh: expected a list of sizes, e.g. [2] or [2, 2]")
    ndim = len(mesh) if mesh else 1
    rules = []
    for i, r in enumerate(doc["rules"] or []):
        if not isinstance(r, dict) or not isinstance(r.get("match"), str) or not r["match"]:
            raise ValueError(f"rules[{i}]: expected {{match: REGEX, shard: DIM | partial: OP | replicate: true "
                             "| placements: [...]}}")
        try:
            pat = re.compile(r["match"])
        except re.error as exc:
            raise ValueError(f"rules[{i}].match: bad regex {r['match']!r} ({exc})") from None
        pls = _rule_placements(r, i)
        if len(pls) != ndim:
            raise ValueError(f"rules[{i}]: {len(pls)} placements for a {ndim}-dimensional mesh")
        rules.append(Rule(pat, pls))
    return LayoutRules(tuple(rules), tuple(mesh) if mesh else None, source)


def _rule_placements(r: dict[str, Any], i: int) -> tuple[Placement, ...]:
    keys = set(r) - {"match"}
    if len(keys) != 1 or not keys <= {"shard", "partial", "replicate", "placements"}:
        raise ValueError(f"rules[{i}]: give exactly one of shard, partial, replicate, placements")
    key = keys.pop()
    v = r[key]
    if key == "shard":
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"rules[{i}].shard: expected a tensor dimension (an integer)")
        return (Placement("shard", v),)
    if key == "partial":
        if v not in REDUCE_OPS:
            raise ValueError(f"rules[{i}].partial: expected one of {', '.join(REDUCE_OPS)}")
        return (Placement("partial", reduce=v),)
    if key == "replicate":
        if v is not True:
            raise ValueError(f"rules[{i}].replicate: expected true")
        return (Placement("replicate"),)
    if not isinstance(v, list) or not v:
        raise ValueError(f"rules[{i}].placements: expected a list such as [R, S(0)]")
    return tuple(Placement.parse(p) for p in v)


def load_rules(path: str | os.PathLike[str]) -> LayoutRules:
    """Read a YAML/JSON layout file; any problem is one OpdiffError line naming the file."""
    return read_doc(path, "layout file", lambda doc: rules_from_dict(doc, str(path)))
