"""Stable names: per-(module, op) call counters, and positions of tensors in nested inputs/outputs.

A position ("pos") is the path to a tensor inside what a call took or returned: "0" (first
argument / the only output), "1.0" (first item of the second argument), "kwargs.attention_mask",
"logits" (a ModelOutput field), "0.past_key_values.0". See docs/format.md, "Names".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

MAX_DEPTH = 8  # deeper nesting is not walked (it never holds activations in practice)


class Counters:
    """Per-(module, op) call counters of one step: one extra op elsewhere does not shift a name."""

    def __init__(self) -> None:
        self._n: dict[tuple[str, str], int] = {}

    def next(self, module: str, op: str) -> int:
        key = (module, op)
        n = self._n.get(key, 0)
        self._n[key] = n + 1
        return n

    def clear(self) -> None:
        self._n.clear()


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _items(obj: Any):
    """(key, value) pairs of a container we walk into, or None for a leaf."""
    if isinstance(obj, (tuple, list)):
        return enumerate(obj)
    if isinstance(obj, dict):  # includes transformers' ModelOutput (an OrderedDict of its set fields)
        return obj.items()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return None


def flatten(obj: Any, prefix: str = "", out: list | None = None, depth: int = 0) -> list[tuple[str, torch.Tensor]]:
    """(pos, tensor) for every tensor inside nested tuples, lists, dicts, ModelOutputs and dataclasses."""
    if out is None:
        out = []
    if isinstance(obj, torch.Tensor):
        out.append((prefix or "0", obj))
        return out
    if depth >= MAX_DEPTH or isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return out
    items = _items(obj)
    if items is not None:
        for key, value in items:
            flatten(value, _join(prefix, key), out, depth + 1)
    return out


def flatten_call(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """(pos, tensor) of a call's positional ("0", "1.2") and keyword ("kwargs.mask") arguments."""
    out: list[tuple[str, torch.Tensor]] = []
    for i, a in enumerate(args):
        flatten(a, str(i), out, 1)
    for k, v in kwargs.items():
        flatten(v, f"kwargs.{k}", out, 1)
    return out


def skeleton(obj: Any, prefix: str, tensor_ref: Callable[[str, torch.Tensor], Any], depth: int = 0) -> Any:
    """JSON form of an argument, each tensor replaced by `tensor_ref(pos, tensor)` (docs/format.md)."""
    if isinstance(obj, torch.Tensor):
        return tensor_ref(prefix or "0", obj)
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"float": repr(obj)}
    if isinstance(obj, torch.dtype):
        return {"dtype": str(obj).removeprefix("torch.")}
    if isinstance(obj, torch.device):
        return str(obj)
    if isinstance(obj, (torch.layout, torch.memory_format)):
        return str(obj)
    if isinstance(obj, slice):
        return {"slice": [skeleton(obj.start, prefix, tensor_ref, depth + 1), skeleton(obj.stop, prefix, tensor_ref, depth + 1),
                          skeleton(obj.step, prefix, tensor_ref, depth + 1)]}
    if obj is Ellipsis:
        return {"ellipsis": True}
    if isinstance(obj, complex):
        return {"complex": [obj.real, obj.imag]}
    if depth < MAX_DEPTH:
        if isinstance(obj, (tuple, list)):
            items = [skeleton(v, _join(prefix, i), tensor_ref, depth + 1) for i, v in enumerate(obj)]
            if isinstance(obj, tuple) and any(v is None or v is Ellipsis or isinstance(v, (slice, torch.Tensor)) for v in obj):
                return {"tuple": items}  # an indexing tuple: torch reads a list index differently
            return items
        if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
            return {"dict": {k: skeleton(v, _join(prefix, k), tensor_ref, depth + 1) for k, v in obj.items()}}
    return {"object": f"{type(obj).__module__}.{type(obj).__qualname__}"}


def call_skeleton(args: tuple, kwargs: dict, tensor_ref: Callable[[str, torch.Tensor], Any]) -> tuple[list, dict]:
    """(args, kwargs) of a call in JSON form, positions numbered as in `flatten_call`."""
    return ([skeleton(a, str(i), tensor_ref, 1) for i, a in enumerate(args)],
            {k: skeleton(v, f"kwargs.{k}", tensor_ref, 1) for k, v in kwargs.items()})
