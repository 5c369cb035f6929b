"""Records of one msprobe part directory (dump.json + construct.json + stack.json), numpy-free.

Each tensor of dump.json becomes one opdiff Record, named so that it pairs with opdiff's own capture
of the same model (docs/readers.md, "msprobe"). msprobe's backward `input` is the gradient of the
call's outputs and its `output` the gradient of its inputs: they become opdiff's backward
`output` and `input` roles.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import DumpError
from ..format import DTYPES, Record, Stats, node_name, record_name
from .msprobe_names import MsName, dtype_of, module_path_of, parse_key, source_of

DUMP_JSON, STACK_JSON, CONSTRUCT_JSON, TENSOR_DIR = "dump.json", "stack.json", "construct.json", "dump_tensor_data"
_BACKWARD_ROLES = {"input": "output", "output": "input", "grad_output": "output", "grad_input": "input"}


def read_json(path: Path, required: bool = True) -> Any:
    """A JSON file, or a one-line DumpError naming it ({} when optional and absent)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise DumpError(f"{path}: missing (an msprobe part directory holds {DUMP_JSON})") from None
        return {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"{path}: corrupt JSON ({exc})") from None
    except OSError as exc:
        raise DumpError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _is_leaf(obj: Any) -> bool:
    return isinstance(obj, dict) and "type" in obj


def _leaves(obj: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(pos, entry) of every leaf of msprobe's nested lists/dicts: an entry with a `type`, or None."""
    if obj is None or _is_leaf(obj):
        yield prefix or "0", obj
    elif isinstance(obj, (list, dict)):
        for k, item in enumerate(obj) if isinstance(obj, list) else obj.items():
            yield from _leaves(item, f"{prefix}.{k}" if prefix else str(k))


def _is_tensor(entry: Any) -> bool:
    return isinstance(entry, dict) and "dtype" in entry and "shape" in entry


def walk(obj: Any, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(pos, tensor entry) of every tensor inside msprobe's nested lists/dicts of entries."""
    return ((pos, e) for pos, e in _leaves(obj, prefix) if _is_tensor(e))


def scalar_leaves(obj: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(pos, entry) of every non-tensor argument (`{"type": "float", "value": 2.0}`, or None) in an entry tree."""
    return ((pos, e) for pos, e in _leaves(obj, prefix) if not _is_tensor(e))


def _unwrap(obj: Any) -> Any:
    """msprobe wraps a returned ModelOutput/dict in a one-item list; opdiff names its fields directly."""
    if isinstance(obj, list) and len(obj) == 1 and isinstance(obj[0], dict) and not _is_leaf(obj[0]):
        return obj[0]
    return obj


def _ms_pos(raw: Any, pos: str) -> str:
    """msprobe's own position of a tensor `_unwrap` moved up out of a one-item list (`0.logits` for `logits`)."""
    return f"0.{pos}" if _unwrap(raw) is not raw else pos


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def stats_of(entry: dict[str, Any], numel: int) -> Stats | None:
    """msprobe's Max/Min/Mean/Norm as opdiff Stats; a non-finite Max/Min/Mean counts as one nan/inf (a lower bound)."""
    raw = [entry.get("Max"), entry.get("Min"), entry.get("Mean"), entry.get("Norm")]
    if all(type(v) is float and math.isfinite(v) for v in raw):  # the usual case: four finite numbers
        return Stats(numel=numel, max=raw[0], min=raw[1], mean=raw[2], norm=raw[3], nan=0, posinf=0, neginf=0)
    if not any(k in entry for k in ("Max", "Min", "Mean", "Norm")):
        return None
    text = " ".join(str(v).lower() for v in raw if v is not None)
    nan = int("nan" in text)
    posinf = int(str(entry.get("Max")).lower() in ("inf", "+inf"))
    neginf = int(str(entry.get("Min")).lower() == "-inf")
    return Stats(numel=numel, max=_num(raw[0]), min=_num(raw[1]), mean=_num(raw[2]), norm=_num(raw[3]),
                 nan=nan, posinf=posinf, neginf=neginf)


def hash_of(entry: dict[str, Any]) -> str | None:
    """msprobe's `md5` field (a CRC-32 in md5 mode, a 64-bit xor checksum in xor mode) as an opdiff hash."""
    value = entry.get("md5")
    if not isinstance(value, str) or not value:
        return None
    return f"xor64:{value[2:].lower()}" if value.lower().startswith("0x") else f"crc32:{value.lower()}"


class _Builder:
    """Turns dump.json entries into Records, numbering calls per (module, op) as opdiff's capture does."""

    def __init__(self, part: Path, construct: dict[str, Any], stacks: dict[str, str], framework: str = "pytorch"):
        self.part, self.construct, self.stacks, self.framework = part, construct, stacks, framework
        self.counters: dict[tuple[str, str], int] = defaultdict(int)
        self.nodes: dict[str, tuple[str, str, int]] = {}  # forward key -> (module, op, call)
        self.out: list[tuple[tuple[Any, ...], Record]] = []
        self.out_pos: dict[str, list[str]] = {}  # forward key -> positions of its output tensors
        self.problems: list[str] = []
        self.scalars: dict[str, list[list[Any]]] = {}  # call key -> [msprobe name, type, value] of its non-tensor inputs

    def node(self, name: MsName) -> tuple[str, str, int]:
        fkey = name.forward_key
        got = self.nodes.get(fkey)
        if got is None:
            if name.kind == "module":
                got = (name.module, name.op, name.count)
            else:
                module = module_path_of(self.construct.get(fkey) or self.construct.get(name.key))
                call = self.counters[(module, name.op)]
                self.counters[(module, name.op)] += 1
                got = (module, name.op, call)
            self.nodes[fkey] = got
        return got

    def add(self, order: tuple[Any, ...], name: MsName, node: tuple[str, str, int], level: str, direction: str, role: str,
            pos: str, entry: dict[str, Any], ms: str = "") -> None:
        module, op, call = node
        dtype = dtype_of(str(entry.get("dtype")))
        if dtype not in DTYPES:
            self.problems.append(f"{self.part / DUMP_JSON}: {name.key} {role} {pos}: dtype {entry.get('dtype')} not supported, skipped")
            return
        shape = tuple(int(s) for s in entry.get("shape") or ())
        nn = node_name(module, op, call)
        numel = math.prod(shape)
        data_name = entry.get("data_name")
        data = {"file": f"{TENSOR_DIR}/{data_name}", "key": ""} if isinstance(data_name, str) and data_name.endswith((".pt", ".npy")) else None
        extra: dict[str, Any] = {"msprobe_name": name.key, "msprobe_tensor": ms or f"{name.key}.{pos}",
                                 "msprobe_dtype": str(entry.get("dtype"))}
        if "requires_grad" in entry:
            extra["requires_grad"] = entry["requires_grad"]
        rec = Record(index=0, name=record_name(nn, direction, role, pos), node=nn, module=module, op=op, level=level,
                     call=call, direction=direction, role=role, pos=pos, dtype=dtype, shape=shape,
                     stats=stats_of(entry, numel), hash=hash_of(entry), source=self.stacks.get(name.forward_key),
                     data=data, extra=extra)
        self.out.append((order, rec))

    def entry(self, i: int, key: str, value: Any, first: dict[str, int]) -> None:
        name = parse_key(key, self.framework)
        if name is None or not isinstance(value, dict):
            self.problems.append(f"{self.part / DUMP_JSON}: entry {key!r} not understood, skipped")
            return
        if name.kind == "param_grad":
            # msprobe counts `parameters_grad.N` on across steps; within a part the n-th one of a module is call n,
            # so step 1's gradients pair by name with step 0's (and with opdiff's own capture)
            call0 = self.counters[(name.module, "parameters_grad")]
            self.counters[(name.module, "parameters_grad")] += 1
            for pname, grads in value.items():
                for acc, g in enumerate(grads if isinstance(grads, list) else [grads]):
                    for pos, e in walk(g, pname):
                        self.add((i, 1, 0), name, (name.module, "parameter", call0 + acc), "param", "backward", "gradient", pos, e,
                                 f"{key}.{pos}")
            return
        node = self.node(name)
        level = "module" if name.kind == "module" else "api"
        if name.direction == "backward":
            for part, role in _BACKWARD_ROLES.items():
                raw = value.get(part)
                grads = list(walk(_unwrap(raw), ""))
                fwd = self.out_pos.get(name.forward_key, [])
                names = fwd if role == "output" and len(fwd) == len(grads) else [p for p, _ in grads]
                for pos, (own, e) in zip(names, grads):
                    self.add((i, 1, 0), name, node, level, "backward", role, pos, e, f"{key}.{part}.{_ms_pos(raw, own)}")
            return
        depth = name.module.count(".") + 1 if name.kind == "module" else 99
        start = (min(first.get(key, i), i) - 0.5, depth, 0) if name.kind == "module" else (i, 0, 0)
        in_args = list(_leaves(value.get("input_args"), ""))  # one walk: its scalars, then its tensors
        args = [(f"{key}.input.{p}", e) for p, e in in_args if not _is_tensor(e)]
        args += [(f"{key}.input.{p}", e) for p, e in scalar_leaves(value.get("input_kwargs"), "")]
        if args:
            self.scalars[key] = [[n, e.get("type") if e else None, e.get("value") if e else None] for n, e in args]
        for pos, e in in_args:
            if _is_tensor(e):
                self.add(start, name, node, level, "forward", "input", pos, e, f"{key}.input.{pos}")
        for pos, e in walk(value.get("input_kwargs"), "kwargs"):
            self.add(start, name, node, level, "forward", "input", pos, e, f"{key}.input.{pos.split('.', 1)[1]}")
        for pos, e in walk(value.get("parameters"), ""):
            self.add(start, name, (node[0], "parameter", node[2]), "param", "forward", "parameter", pos, e,
                     f"{key}.parameters.{pos}")
        out_pos = []
        raw = value.get("output")
        for pos, e in walk(_unwrap(raw), ""):
            out_pos.append(pos)
            self.add((i, 1, 0), name, node, level, "forward", "output", pos, e, f"{key}.output.{_ms_pos(raw, pos)}")
        self.out_pos[name.forward_key] = out_pos


def first_descendants(keys: list[str], construct: dict[str, Any]) -> dict[str, int]:
    """For each module call: the dump.json position of its first descendant (its inputs go before it)."""
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        parent, seen = construct.get(key), 0
        while isinstance(parent, str) and seen < 64:
            if first.get(parent, i + 1) <= i:
                break
            first[parent] = i
            parent, seen = construct.get(parent), seen + 1
    return first


def stack_sources(stack: Any) -> dict[str, str]:
    """forward key -> `file:line` from stack.json (26.x: {"0": [[keys], [frames]]}; older: {key: [frames]})."""
    out: dict[str, str] = {}
    if not isinstance(stack, dict):
        return out
    for k, v in stack.items():
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, list) for x in v):
            keys, frames = v
        else:
            keys, frames = [k], v if isinstance(v, list) else []
        src = source_of([f for f in frames if isinstance(f, str)])
        if src:
            for key in keys:
                out[key] = src
    return out


def _fingerprint(r: Record) -> tuple[Any, ...] | None:
    s = r.stats
    if s is None or s.max is None or s.norm is None:
        return None
    return (r.dtype, r.numel, s.max, s.min, s.mean, s.norm)  # numel, not shape: a view keeps the data


def link_sources(records: list[Record]) -> None:
    """Set `src` of forward inputs to the latest earlier forward output with the same dtype, size and
    statistics: msprobe keeps no dataflow, and diagnose needs it to tell where a difference entered."""
    last: dict[tuple[Any, ...], str] = {}
    for r in records:
        if r.direction != "forward":
            continue
        fp = _fingerprint(r)
        if fp is None:
            continue
        if r.role == "input" and fp in last:
            r.src = last[fp]
        elif r.role == "output":
            last[fp] = r.name


def read_part(part: Path) -> tuple[list[Record], dict[str, Any], list[str]]:
    """(records in execution order, dump.json's header fields, problems) of one part directory."""
    doc = read_json(part / DUMP_JSON)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        raise DumpError(f"{part / DUMP_JSON}: not an msprobe dump.json (no 'data' object)")
    construct = read_json(part / CONSTRUCT_JSON, required=False)
    construct = construct if isinstance(construct, dict) else {}
    b = _Builder(part, construct, stack_sources(read_json(part / STACK_JSON, required=False)), str(doc.get("framework")))
    keys = list(data)
    first = first_descendants(keys, construct)
    for i, key in enumerate(keys):
        b.entry(i, key, data[key], first)
    b.out.sort(key=lambda x: x[0])  # stable: within one position, entries keep dump.json's order
    records = [r for _, r in b.out]
    for idx, r in enumerate(records):
        r.index = idx
    link_sources(records)
    header = {k: v for k, v in doc.items() if k != "data"} | {"scalars": b.scalars}
    return records, header, b.problems
