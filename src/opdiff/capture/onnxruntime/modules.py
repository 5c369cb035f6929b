"""Module boundaries of an exported graph: the tensors a PyTorch golden capture records per module.

A module's outputs are the tensors its nodes (its scope and the scopes below it) make that a node
outside uses, or that the graph returns; its inputs are the non-constant tensors its nodes use and
do not make. They are given the positions opdiff's torch capture gives them by the export's
signatures (export.MODULES_KEY: position, shape, dtype per input/output), matched on shape and dtype.
Without signatures (a model exported by other tools) the op is `Module` and outputs are numbered
in order: pair such records with a mapping file (docs/fusion.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .graph import GNode

UNKNOWN_OP = "Module"
Spec = tuple[tuple[int, ...], str]  # (shape, dtype name)


@dataclass
class Boundary:
    """One module call seen in the graph: its (pos, tensor name) inputs and outputs and where it runs."""

    path: str
    op: str
    inputs: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    first: float = 0.0
    last: float = 0.0


def read_signatures(proto: Any, key: str) -> dict[str, dict[str, Any]] | None:
    """The export's module signatures from the model metadata, or None."""
    for p in proto.metadata_props:
        if p.key == key:
            try:
                doc = json.loads(p.value)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def scope_paths(sigs: dict[str, dict[str, Any]] | None) -> dict[str, str]:
    """Exporter scope -> module path, from the signatures' `scope`s (an export before they were noted: none).
    A scope two modules share is left out: neither is named by a guess."""
    seen: dict[str, list[str]] = {}
    for path, sig in (sigs or {}).items():
        scope = sig.get("scope") if isinstance(sig, dict) else None
        if path and isinstance(scope, str) and scope:
            seen.setdefault(scope, []).append(path)
    return {scope: paths[0] for scope, paths in seen.items() if len(paths) == 1}


def name_modules(nodes: list[GNode], sigs: dict[str, dict[str, Any]] | None) -> None:
    """Give each node the module path of its scope. A scope no signature names (a module's second call,
    suffixed `_1` by the exporter) keeps its tail under the path of its longest named prefix, so it still
    lies inside the modules calling it."""
    paths = scope_paths(sigs)
    if not paths:
        return
    for n in nodes:
        n.module = _path_of(n.module, paths)


def _path_of(scope: str, paths: dict[str, str]) -> str:
    if scope in paths or not scope:
        return paths.get(scope, scope)
    atoms = scope.split(".")
    for k in range(len(atoms) - 1, 0, -1):
        head = ".".join(atoms[:k])
        if head in paths:
            return paths[head] + "." + ".".join(atoms[k:])
    return scope


Print = tuple[float, float]  # (sum, sum of |x|) of a float tensor


def _assign(specs: list[list], tensors: list[str], spec_of: Callable[[str], Spec | None],
            print_of: Callable[[str], Print | None] | None = None) -> tuple[list, list[str]]:
    """Pair torch positions with graph tensors: in order when all agree and no two share a (shape, dtype), else
    by a unique (shape, dtype), and among several of one (shape, dtype) by the values' fingerprint (the graph's
    order of two same-shaped inputs is not torch's: a residual and the branch added to it)."""
    seen = [spec_of(t) for t in tensors]
    want = [(tuple(s[1]), s[2]) for s in specs]
    by_value = print_of is not None and len(set(want)) < len(want) and all(len(s) > 3 and s[3] for s in specs)
    if len(seen) == len(want) and all(a == b for a, b in zip(seen, want)) and not by_value:
        return [(s[0], t) for s, t in zip(specs, tensors)], []
    out, missing, used = [], [], set()
    paired = _by_value(specs, want, tensors, seen, print_of) if by_value and print_of is not None else {}
    for s, w in zip(specs, want):
        hits = [t for t, got in zip(tensors, seen) if got == w and t not in used]
        if want.count(w) > 1 and paired:
            hits = [paired[s[0]]] if s[0] in paired else []
        if len(hits) == 1:
            out.append((s[0], hits[0]))
            used.add(hits[0])
        else:
            missing.append(s[0])
    return out, missing


def _by_value(specs: list[list], want: list[Spec], tensors: list[str], seen: list[Spec | None],
              print_of: Callable[[str], Print | None]) -> dict[str, str]:
    """Torch position -> graph tensor for positions sharing a (shape, dtype) with another: closest fingerprints
    first, each position and tensor used once (a tensor fused away leaves its position unpaired, never a
    neighbour of the same shape in its place)."""
    def dist(fp: list[float], t: str) -> float:
        got = print_of(t)
        if got is None:
            return float("inf")
        return (abs(got[0] - fp[0]) + abs(got[1] - fp[1])) / max(abs(fp[1]), abs(got[1]), 1e-30)

    pairs = sorted((dist(s[3], t), s[0], t) for s, w in zip(specs, want) if want.count(w) > 1
                   for t, got in zip(tensors, seen) if got == w)
    out: dict[str, str] = {}
    for d, pos, t in pairs:
        if d != float("inf") and pos not in out and t not in out.values():
            out[pos] = t
    return out


def _scopes(nodes: list[GNode]) -> list[str]:
    """Every module path a node lies in, with its ancestors."""
    found: set[str] = set()
    for n in nodes:
        parts = n.module.split(".") if n.module else []
        found.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return sorted(found)


def boundaries(nodes: list[GNode], sigs: dict[str, dict[str, Any]] | None, graph_inputs: list[str],
               graph_outputs: list[str], constants: set[str],
               spec_of: Callable[[str], Spec | None],
               print_of: Callable[[str], Print | None] | None = None) -> tuple[list[Boundary], list[str]]:
    """Module calls and their observable tensors, and what could not be observed (one line each)."""
    consumers: dict[str, list[GNode]] = {}
    for n in nodes:
        for x in n.inputs:
            consumers.setdefault(x, []).append(n)
    returned = set(graph_outputs)
    out: list[Boundary] = []
    missing: list[str] = []
    root = (sigs or {}).get("", {})
    b = Boundary("", root.get("op", UNKNOWN_OP), first=-1.0, last=float(len(nodes)))
    if sigs:
        b.inputs, lost_in = _assign(root.get("inputs", []), graph_inputs, spec_of, print_of)
        b.outputs, lost_out = _assign(root.get("outputs", []), graph_outputs, spec_of, print_of)
    else:
        b.inputs, lost_in = [(f"kwargs.{n}", n) for n in graph_inputs], []
        b.outputs, lost_out = [(str(k), t) for k, t in enumerate(graph_outputs)], []
    missing += [f"<root>: {r} {p}" for r, ps in (("input", lost_in), ("output", lost_out)) for p in ps]
    out.append(b)
    paths = [p for p in sigs if p] if sigs else _scopes(nodes)
    for path in paths:
        sig = (sigs or {}).get(path, {})
        if sig.get("calls", 1) != 1:
            missing.append(f"{path}: called {sig['calls']} times (only single calls are located in the graph)")
            continue
        inside = [n for n in nodes if n.module == path or n.module.startswith(path + ".")]
        if not inside:
            missing.append(f"{path}: no node of the graph lies in this module")
            continue
        names = {n.name for n in inside}
        made = [o for n in inside for o in n.outputs if o]
        made_set = set(made)
        outs = [o for o in made if o in returned or any(c.name not in names for c in consumers.get(o, ()))]
        ins = list(dict.fromkeys(x for n in inside for x in n.inputs
                                 if x and x not in made_set and x not in constants))  # once each (x * x reads x twice)
        b = Boundary(path, sig.get("op", UNKNOWN_OP), first=inside[0].index - 0.5, last=inside[-1].index + 0.5)
        if sigs:
            b.inputs, lost_in = _assign(sig.get("inputs", []), ins, spec_of, print_of)
            b.outputs, lost_out = _assign(sig.get("outputs", []), outs, spec_of, print_of)
            missing += [f"{path}: {r} {p} not located (fused away, or not told apart by shape)" for r, ps in (("input", lost_in), ("output", lost_out)) for p in ps]
        else:
            b.outputs = [(str(k), t) for k, t in enumerate(outs)]
        out.append(b)
    return out, missing


def events(bounds: list[Boundary]) -> list[tuple[Boundary, str]]:
    """(boundary, role) in the order the torch capture writes them: a module's inputs before its
    submodules', its outputs after theirs."""
    keyed = []
    for b in bounds:
        depth = b.path.count(".") + 1 if b.path else 0
        keyed.append(((b.first, 1, depth), b, "input"))  # at one point, outputs of the module before come first
        keyed.append(((b.last, 0, -depth), b, "output"))
    return [(b, role) for _, b, role in sorted(keyed, key=lambda e: e[0])]
