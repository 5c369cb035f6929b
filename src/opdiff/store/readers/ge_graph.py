"""The fusion provenance of a GE graph dump: for each executed op, the original ops it stands for.

Sources: the graph JSON of Ascend's convert (below), GE's own text-format graph dump `ge_proto_*.txt`
(the same attributes), and TorchAir's `dynamo_original_graph_*.txt` (text format, its ops carry
`_fx_tensor_name` on each output: the FX node, the golden of `msprobe compare -m torchair`). An executed op TorchAir fused is named by concatenating the graph ops
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
GE_GRAPH_PREFIX = "ge_proto_"  # GE's own graph dump, text format (`ge_proto_{id}_{stage}.txt`)


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


def _text_attrs(block: Block) -> dict[str, Block]:
    """A text-format attr list (`attr { key: ... value { ... } }`) as key -> value block."""
    out: dict[str, Block] = {}
    for attr in block.get("attr", []):
        if isinstance(attr, dict) and attr.get("key") and isinstance((attr.get("value") or [None])[0], dict):
            out[str(attr["key"][0])] = attr["value"][0]
    return out


def _origin_of(desc: Block) -> tuple[str, int] | None:
    """(original op or FX node, output index) of an output_desc: `_fx_tensor_name`
    (`add_1-aten.add.Tensor.OUTPUT.0`, TorchAir) or `_datadump_origin_name` / `_datadump_origin_output_index`."""
    a = _text_attrs(desc)
    if FX_TENSOR_NAME in a:
        s = str(a[FX_TENSOR_NAME].get("s", [""])[0])
        head, _, idx = s.rpartition(".")
        node, _, kind = head.rpartition(".")
        if kind == "OUTPUT" and idx.isdigit():
            return node, int(idx)
        return (s, 0) if s else None
    if ORIGIN_NAME in a:
        idx = str(a.get(ORIGIN_INDEX, {}).get("i", ["0"])[0])
        return str(a[ORIGIN_NAME].get("s", [""])[0]), int(idx) if idx.lstrip("-").isdigit() else 0
    return None


def _text_op(o: Block) -> GraphOp:
    outs = [x for x in (_origin_of(d) for d in o.get("output_desc", []) if isinstance(d, dict)) if x is not None]
    names = _text_attrs(o).get(ORIGINAL_NAMES, {}).get("list", [{}])[0]
    original = [str(x) for x in names.get("s", [])] if isinstance(names, dict) else []
    return GraphOp(name=str(o.get("name", [""])[0]), type=str(o.get("type", [""])[0]),
                   original=original or list(dict.fromkeys(n for n, _ in outs)), outputs=outs)


def read_text_graph(path: Path) -> dict[str, GraphOp]:
    """Op name -> GraphOp of a graph dump in protobuf text format: GE's own `ge_proto_*.txt` (original op names from
    `_datadump_original_op_names`) or TorchAir's `dynamo_original_graph_*.txt` (the FX nodes its outputs name);
    DumpError naming the file."""
    try:
        doc = parse_pbtxt(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"{path}: not a readable graph dump in text format ({exc})") from None
    ops = [_text_op(o) for o in _ops_in(doc)]
    return {op.name: op for op in ops if op.name}


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
