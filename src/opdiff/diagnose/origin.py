"""Where an error that compare fails entered: the op whose output jumped, not the op where it crossed a line.

Compare's per-dtype rule fails a pair at a fixed size. An error that enters below that size and is amplified
by ordinary ops on its way (a LayerNorm eps off by 10x gives 16 bf16 units, the attention scores that read it
30) crosses the line at an innocent op. Walking back along the largest error its sources carry, the first
tensor whose error its own sources cannot explain (beyond the amplification its op may show) is where the
error entered (docs/diagnose.md, "Local vs inherited error").
"""

from __future__ import annotations

from ..base.vocab import FAIL
from .graph import Graph, Tensor
from .local import inherited
from .noise import Noise

MAX_STEPS = 64  # how far back the walk goes


def explained(graph: Graph, noise: Noise, t: Tensor) -> bool:
    """Whether `t`'s error is within what its sources bring, amplified as its op may (noise.allowance)."""
    if t.err is None:
        return True
    inh = inherited(graph, t)
    return inh > 0 and t.err <= noise.allowance(graph.nodes[t.node].op, t.node) * inh


def entry(graph: Graph, noise: Noise, failed: Tensor) -> Tensor:
    """The tensor where `failed`'s error entered: `failed` itself when its own sources do not explain it, else
    the nearest upstream tensor (following the largest error) whose sources do not explain its own; `failed`
    again when that one is too small to account for `failed` even amplified (a gradual growth over many ops,
    whose first op is no culprit)."""
    t, steps = failed, 0
    while explained(graph, noise, t) and steps < MAX_STEPS:
        srcs = [s for s in graph.known_sources(t) if s.err is not None and s.unit > 0 and s.pair.result != FAIL]
        if not srcs:
            return failed
        t, steps = max(srcs, key=lambda s: s.err or 0.0), steps + 1
    if t is failed or t.err is None or failed.err is None:
        return failed
    if t.err * noise.allowance(graph.nodes[t.node].op, t.node) < failed.err:
        return failed
    return t
