"""Inputs-differ: the model's own inputs (the root call's input records) already disagree."""

from __future__ import annotations

from .graph import Graph, Tensor
from .noise import Noise


def root_inputs(graph: Graph) -> list[Tensor]:
    """The root model call's input tensors that both runs recorded."""
    if graph.root is None:
        return []
    return [graph.tensors[i] for i in graph.nodes[graph.root].inputs]


def differing_inputs(graph: Graph, noise: Noise) -> list[Tensor]:
    """Model inputs whose golden and target differ beyond rounding (integers: at all)."""
    return [t for t in root_inputs(graph) if t.err is not None and not noise.agrees(t.err, t.unit)]
