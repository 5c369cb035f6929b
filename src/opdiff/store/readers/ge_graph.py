"""The fusion provenance of a GE graph dump: for each executed op, the original ops it stands for.

Ascend's graph engine records on each node of the graph it runs `_datadump_original_op_names` (the
ops of the framework's graph a fused node replaced) and on each output `_datadump_origin_name` /
`_datadump_origin_output_index` (which original op's output it is). The graph is read from the JSON
Ascend's convert writes (`atc --mode=5`, a ModelDef in protobuf's JSON mapping: graph[].op[] with
attr lists of {key, value}). Only those attributes are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...base.errors import DumpError

ORIGINAL_NAMES = "_datadump_original_op_names"
ORIGIN_NAME = "_datadump_origin_name"
ORIGIN_INDEX = "_datadump_origin_output_index"
ORIGIN_FORMAT = "_datadump_origin_format"


@dataclass
class GraphOp:
    """One node of the executed graph: its type, the original ops it replaced and its outputs' origins."""

    name: str
    type: str
    original: list[str] = field(default_factory=list)
    outputs: list[tuple[str, int]] = field(default_factory=list)  # per output: (origin op, origin output index)


def _attrs(obj: dict[str, Any]) -> dict[str, Any]:
    """A ModelDef attr list ([{key, value}]) or map ({key: value}) as a dict."""
    a = obj.get("attr", {})
    if isinstance(a, dict):
        return a
    return {str(x.get("key")): x.get("value", {}) for x in a if isinstance(x, dict)}


def _strings(v: Any) -> list[str]:
    if not isinstance(v, dict):
        return []
    lst = v.get("list", {})
    s = lst.get("s", []) if isinstance(lst, dict) else []
    return [str(x) for x in s] if isinstance(s, list) else []


def _op(obj: dict[str, Any]) -> GraphOp:
    attrs = _attrs(obj)
    op = GraphOp(name=str(obj.get("name", "")), type=str(obj.get("type", "")),
                 original=_strings(attrs.get(ORIGINAL_NAMES)))
    for desc in obj.get("output_desc", []) or []:
        a = _attrs(desc) if isinstance(desc, dict) else {}
        name = a.get(ORIGIN_NAME, {}).get("s", "") if isinstance(a.get(ORIGIN_NAME), dict) else ""
        idx = a.get(ORIGIN_INDEX, {}).get("i", 0) if isinstance(a.get(ORIGIN_INDEX), dict) else 0
        op.outputs.append((str(name), int(idx)))
    return op


def read_graph(path: Path) -> dict[str, GraphOp]:
    """Op name -> GraphOp for every op of every graph in a ModelDef JSON file; DumpError naming the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DumpError(f"{path}: not a readable GE graph JSON ({exc})") from None
    graphs = doc.get("graph") if isinstance(doc, dict) else None
    if not isinstance(graphs, list):
        raise DumpError(f"{path}: not a GE graph JSON (no 'graph' list)")
    ops: dict[str, GraphOp] = {}
    for g in graphs:
        for o in (g.get("op", []) if isinstance(g, dict) else []):
            if isinstance(o, dict) and o.get("name"):
                op = _op(o)
                ops[op.name] = op
    return ops


def is_graph_json(path: Path) -> bool:
    """Cheap: a .json file whose first bytes open a ModelDef (a 'graph' key near the start)."""
    if path.suffix != ".json":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"graph"' in head


def provenance(op: GraphOp | None, output_origin: str) -> list[str]:
    """The original ops a dumped op stands for, in graph order, with the one its outputs come from last
    (compare pairs a fused op's outputs with the last original op's outputs)."""
    names = list(op.original) if op is not None else []
    if output_origin and output_origin not in names:
        names.append(output_origin)
    if output_origin in names:
        names.remove(output_origin)
        names.append(output_origin)
    return names
