"""The fusion provenance of a GE graph dump: for each executed op, the original ops it stands for.

Two sources: the graph JSON of Ascend's convert (below), and TorchAir's `dynamo_original_graph_*.txt`
(a text-format graph whose ops carry `_fx_tensor_name` on each output: the FX node, the golden of
`msprobe compare -m torchair`). An executed op TorchAir fused is named by concatenating the graph ops
it stands for (`MatMul_1Add_1Gelu_1`); `lookup` splits such a name by longest known prefix.

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
FX_TENSOR_NAME = "_fx_tensor_name"
TORCHAIR_GRAPH_PREFIX = "dynamo_original_graph_"


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


# -- TorchAir's text-format graph -------------------------------------------------------------------

Block = dict[str, list[Any]]  # a text-format message: field -> values (str or Block), in order


def parse_pbtxt(text: str) -> Block:
    """A protobuf text-format document as nested blocks (enough for a graph dump: `key {`, `key: value`, `}`)."""
    root: Block = {}
    stack = [root]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("{"):
            child: Block = {}
            stack[-1].setdefault(line[:-1].strip().rstrip(":").strip(), []).append(child)
            stack.append(child)
        elif line == "}":
            if len(stack) == 1:
                raise ValueError("unbalanced '}'")
            stack.pop()
        elif ":" in line:
            key, _, value = line.partition(":")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
            stack[-1].setdefault(key.strip(), []).append(value)
        else:
            raise ValueError(f"cannot parse line {raw!r}")
    if len(stack) != 1:
        raise ValueError("unbalanced '{'")
    return root


def _ops_in(block: Block) -> list[Block]:
    """Every `op` block, at any depth (a bare op list or ops inside `graph { ... }`)."""
    out: list[Block] = []
    for key, values in block.items():
        for v in values:
            if isinstance(v, dict):
                out.extend([v] if key == "op" else _ops_in(v))
    return out


def _fx_name(desc: Block) -> tuple[str, int] | None:
    """(FX node, output index) of an output_desc's `_fx_tensor_name` (`add_1-aten.add.Tensor.OUTPUT.0`)."""
    for attr in desc.get("attr", []):
        if isinstance(attr, dict) and attr.get("key") == [FX_TENSOR_NAME]:
            value = attr.get("value", [{}])[0]
            s = value.get("s", [""])[0] if isinstance(value, dict) else ""
            head, _, idx = s.rpartition(".")
            node, _, kind = head.rpartition(".")
            if kind == "OUTPUT" and idx.isdigit():
                return node, int(idx)
            return (s, 0) if s else None
    return None


def read_torchair_graph(path: Path) -> dict[str, GraphOp]:
    """Op name -> GraphOp (original = the FX nodes of its outputs) of a TorchAir graph dump; DumpError naming the file."""
    try:
        doc = parse_pbtxt(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"{path}: not a readable TorchAir graph ({exc})") from None
    ops: dict[str, GraphOp] = {}
    for o in _ops_in(doc):
        name = str(o.get("name", [""])[0])
        if not name:
            continue
        outs = [_fx_name(d) for d in o.get("output_desc", []) if isinstance(d, dict)]
        fx = [x for x in outs if x is not None]
        nodes = list(dict.fromkeys(n for n, _ in fx))
        ops[name] = GraphOp(name=name, type=str(o.get("type", [""])[0]), original=nodes, outputs=fx)
    return ops


def lookup(graph: dict[str, GraphOp], name: str) -> GraphOp | None:
    """The graph op `name`, or for a name TorchAir made by concatenating the ops it fused, one GraphOp standing
    for all of them (split by longest known prefix, as msprobe does); None when it cannot be split."""
    if name in graph:
        return graph[name]
    parts: list[GraphOp] = []
    rest = name
    while rest:
        cut = next((k for k in range(len(rest), 0, -1) if rest[:k] in graph), 0)
        if not cut:
            return None
        parts.append(graph[rest[:cut]])
        rest = rest[cut:]
    if len(parts) < 2:
        return None
    original = list(dict.fromkeys(n for p in parts for n in (p.original or [p.name])))
    return GraphOp(name=name, type=parts[-1].type, original=original, outputs=parts[-1].outputs)
