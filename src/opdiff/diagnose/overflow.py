"""Overflow: where inf/nan first appear in the target while the op's inputs were finite.

Also warns where golden values would not fit the target's dtype (an overflow waiting to happen).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.record import Record, Stats
from ..metrics.masks import RANGE, absmax, has_fill
from .graph import Graph, Tensor
from .noise import nonfinite


@dataclass
class Overflow:
    tensor: int  # the first target tensor with inf/nan that golden does not have
    node: int  # the op blamed for it (Graph.blame)
    how: str
    counts: dict[str, int]  # nan / posinf / neginf in the target tensor
    golden_overflows: bool  # golden has inf/nan there too (but not the same ones)


def _counts(t: Tensor) -> dict[str, int]:
    s = t.target.stats if t.target is not None else None
    return {"nan": s.nan, "posinf": s.posinf, "neginf": s.neginf} if s is not None else {}


def first_overflow(graph: Graph) -> Overflow | None:
    """The first target tensor with more inf/nan than golden, computed from finite tensors."""
    for t in graph.in_order():
        s = t.target.stats if t.target is not None else None
        if s is None or not (s.nan or s.posinf or s.neginf):  # nonfinite(s) == 0, inline: this walks every tensor
            continue
        gs = t.golden.stats if t.golden is not None else None
        n_g = nonfinite(gs)
        if t.golden is not None and gs is not None and _counts(t) == {"nan": gs.nan, "posinf": gs.posinf,
                                                                      "neginf": gs.neginf}:
            continue  # golden has exactly the same inf/nan: not the target's doing
        if _constant(graph, t) or _fill_for_fill(t):
            continue  # -inf where golden holds its finfo.min fill (an SDPA mask): the same mask, no overflow
        if any(nonfinite(_target_stats(graph.tensors[s])) for s in graph.sources(t)):
            continue  # inherited from a non-finite input: the origin was seen earlier (or is unrecorded)
        node, how = graph.blame(t)
        return Overflow(t.id, node, how, _counts(t), n_g > 0)
    return None


def _constant(graph: Graph, t: Tensor) -> bool:
    """An op-level output of an op that reads no tensor (aten.scalar_tensor, aten.full): an inf it holds is a
    constant written on purpose (an SDPA mask's -inf), not an overflow of finite values."""
    node = graph.node_of(t)
    return node is not None and t.role == "output" and not graph.module_level and not node.inputs


def _fill_for_fill(t: Tensor) -> bool:
    """Whether the target's inf/nan are only -inf where golden holds a mask's negative fill (finfo.min), the
    rest agreeing (Graph's mask-aware error is below a full one)."""
    s = _target_stats(t)
    if s is None or s.nan or s.posinf or not has_fill(t.golden) or t.golden is None or t.target is None:
        return False
    g_min = t.golden.stats.min if t.golden.stats is not None else None
    if g_min is None or g_min >= 0:
        return False  # golden's fill is +max: not a mask's negative fill
    # the error over the unmasked elements agrees, or (a pair not judged: a fill constant) it is -inf throughout
    return t.err < 1.0 if t.err is not None else s.neginf == t.target.numel


def _target_stats(t: Tensor) -> Stats | None:
    return t.target.stats if t.target is not None else None


def golden_overflows(graph: Graph) -> Record | None:
    """The golden record of the first tensor where golden itself has inf/nan: worth a warning."""
    for t in graph.tensors:
        g = t.golden
        s = g.stats if g is not None else None
        if s is not None and (s.nan or s.posinf or s.neginf):  # nonfinite(s), inline: this walks every tensor
            return g
    return None


def fit_warnings(graph: Graph, run_dtype: str, limit: int = 3) -> list[str]:
    """Golden values beyond the range of the target's dtype: overflows waiting to happen."""
    out: list[str] = []
    narrow = {d for d, lim in RANGE.items() if lim < 1e30}  # the dtypes a golden value can be beyond
    run_narrow = run_dtype in narrow
    if not run_narrow and graph.columns_seeded() and graph.dtype_pairs \
            and not any(t in narrow for _, t in graph.dtype_pairs):
        return out  # no target dtype is narrow (build counted them): no golden value can be beyond one
    for t in graph.in_order():
        g, tr = t.golden, t.target
        if g is None or tr is None or not run_narrow and tr.dtype not in narrow:
            continue
        g_max = absmax(g.stats)
        if g_max is None or has_fill(g) and (has_fill(tr) or nonfinite(tr.stats)):
            continue  # a mask filled with golden's finfo.min, the target's own fill (or -inf): no overflow
        for dtype in dict.fromkeys((tr.dtype, run_dtype)):
            lim = RANGE.get(dtype)
            if lim is not None and lim < 1e30 and g_max > lim:
                node = graph.nodes[t.node]
                out.append(f"golden values of {g.name} reach {g_max:.6g}, beyond {dtype}'s range "
                           f"(±{lim:g}) — an overflow waiting to happen in {node.module or '<root>'} ({node.op})")
                break
        if len(out) >= limit:
            break
    return out
