"""opdiff node names -> FX node names of a torch.export program, for Model Explorer overlays.

An aten-level record names its op by module path, aten overload and call count in that module
("transformer.h.2.mlp.act/aten.gelu.default#0"); the exported graph's FX nodes carry the same
module path (meta["nn_module_stack"]) and an aten target. Ops are paired per module in order of
occurrence by their base name ("native_layer_norm" and "layer_norm" are one op: capture sees the
ops after autograd, export before). A module-level record maps to its module's last FX node.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ...base.errors import OpdiffError

_ALIASES = {"unsafe_view": "view", "reshape": "view", "linear": "addmm", "matmul": "mm", "bmm": "mm",
            "scaled_dot_product_attention": "sdpa", "scaled_dot_product_flash_attention_for_cpu": "sdpa"}


def base_op(op: str) -> str:
    """"aten.native_layer_norm.default" -> "layer_norm": the op's family, overload and variants dropped."""
    name = op.split(".")[1] if op.startswith("aten.") and op.count(".") >= 1 else op
    name = name.lstrip("_")
    name = name.removeprefix("native_")
    return _ALIASES.get(name, name)


def _fx_module(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else ""


def fx_nodes(program: Any) -> list[tuple[str, str, str]]:
    """(fx name, module path, base op) of every call_function node, in graph order."""
    return [(n.name, _fx_module(n), base_op(str(n.target))) for n in program.graph.nodes if n.op == "call_function"]


def fx_keys(program: Any, records: list[Any]) -> dict[str, str]:
    """opdiff node name -> FX node name for the records of a dump (those that can be paired)."""
    fx_by: dict[tuple[str, str], list[str]] = defaultdict(list)
    last_in: dict[str, str] = {}
    for name, module, op in fx_nodes(program):
        fx_by[(module, op)].append(name)
        parts = module.split(".") if module else []
        for depth in range(len(parts) + 1):  # the last FX node inside each enclosing module
            last_in[".".join(parts[:depth])] = name
    keys: dict[str, str] = {}
    seen: dict[tuple[str, str], int] = defaultdict(int)
    done: set[str] = set()
    for rec in records:
        if rec.node in done or rec.direction != "forward":
            continue
        done.add(rec.node)
        if rec.level == "module":
            if rec.module in last_in:
                keys[rec.node] = last_in[rec.module]
            continue
        k = (rec.module, base_op(rec.op))
        i = seen[k]
        seen[k] += 1
        if i < len(fx_by.get(k, ())):
            keys[rec.node] = fx_by[k][i]
    return keys


def load_program(path: str | Path) -> Any:
    """A torch.export program saved with torch.export.save (a .pt2 file)."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise OpdiffError(f"{p}: no such file (give a torch.export program saved with torch.export.save)")
    try:
        return torch.export.load(str(p))
    except Exception as exc:
        raise OpdiffError(f"{p}: cannot load as a torch.export program ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160]}; a transformers model exports loadably with "
                          f"return_dict=False, use_cache=False)") from None
