"""Keras layer-level capture: every layer's call is wrapped to record its inputs, then its outputs.

Keras 3 has no forward hooks; `Layer.__call__` runs `self.call(...)`, so an instance attribute
`call` (removed again when the capture ends) sees each eager call with its converted inputs, and
the calls of sublayers nest inside it. Module paths are attribute names where a layer holds its
sublayers as attributes (subclassed layers), else the layer names (Sequential / Functional).
Calls made while tracing a graph (symbolic tensors) are not recorded: only eager calls have values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .session import TfCaptureSession


def children(layer) -> list:
    """A layer's direct sublayers, in tracking order."""
    flat = getattr(layer, "_flatten_layers", None)
    if flat is not None:
        return list(flat(include_self=False, recursive=False))
    return list(getattr(layer, "layers", []))


def _attribute_names(layer) -> dict[int, str]:
    """id(sublayer) -> the public attribute (or list item "blocks.0") of `layer` that holds it."""
    out: dict[int, str] = {}
    for key, value in vars(layer).items():
        if key.startswith("_"):
            continue
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                out.setdefault(id(v), f"{key}.{i}")
        else:
            out.setdefault(id(value), key)
    return out


def named_layers(model) -> Iterator[tuple[str, Any]]:
    """(path, layer) for the model ("") and every sublayer once, parents before children."""
    seen: set[int] = set()
    todo = [("", model)]
    while todo:
        path, layer = todo.pop(0)
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        yield path, layer
        attrs = _attribute_names(layer)
        for child in children(layer):
            local = attrs.get(id(child), child.name).replace("/", ".")
            todo.append((f"{path}.{local}" if path else local, child))


def own_weights(layer) -> list:
    """The variables a layer holds itself (not through a sublayer)."""
    inner = {id(w) for c in children(layer) for w in c.weights}
    return [w for w in layer.weights if id(w) not in inner]


def install(s: TfCaptureSession) -> list[tuple[Any, bool, Any]]:
    """Wrap every layer's `call`; returns (layer, had its own `call` attribute, original call) to undo it."""
    undo = []
    for path, layer in named_layers(s.model):
        had = "call" in vars(layer)
        original = layer.call
        layer.call = functools.wraps(original)(functools.partial(_call, s, path, type(layer).__name__,
                                                                 layer is s.model, original))
        undo.append((layer, had, original))
    return undo


def uninstall(undo: list[tuple[Any, bool, Any]]) -> None:
    for layer, had, original in undo:
        if had:
            layer.call = original
        else:
            try:
                del layer.call
            except AttributeError:
                pass


def _call(s: TfCaptureSession, path: str, op: str, is_root: bool, original, *args, **kwargs):
    if not s.recording or s.internal:
        return original(*args, **kwargs)
    import tensorflow as tf

    if not tf.executing_eagerly():
        s.symbolic_calls += 1
        return original(*args, **kwargs)
    call = s.begin_call(path, op, is_root, args, kwargs)
    out = original(*args, **kwargs)
    s.end_call(call, out)
    return out
