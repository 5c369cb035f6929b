"""The optimizer's update as culprit: which parameters it makes differ, its ops, its settings.

Two ways to see it: the update records of a capture with `optimizer=` (direction "update": the
step's inputs agree, its outputs do not), or, without them, gradients that agree at step k
followed by parameters that differ at step k+1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .verdict import Diagnosis

if TYPE_CHECKING:
    from .steps import Part

MAX_NAMES = 12


def _differing(d: Diagnosis, role: str, direction: str) -> list[str]:
    """Target record names of `direction` tensors with `role` that disagree beyond noise."""
    g = d.graph
    if g is None:
        return []
    from ..metrics.thresholds import SIGNIFICANT

    floor = d.noise.get("floor_units", 1.0)
    out = []
    for t in sorted((x for x in g.tensors if x.target is not None), key=lambda x: x.order):
        r = t.target
        if r is None or r.role != role or r.direction != direction or t.err is None:
            continue
        if (t.err > SIGNIFICANT * floor * t.unit) if t.unit else t.err > 0:
            out.append(r.name)
    return out


def _param_name(record: str) -> str:
    """"transformer.h.0.ln_1/parameter#0/forward/parameter/weight" -> "transformer.h.0.ln_1.weight"."""
    parts = record.split("/")
    module, pos = parts[0], parts[-1]
    return f"{module}.{pos}" if module else pos


def from_parameters(chosen: Part, parts: list[Part], steps: list[int]) -> None:
    """Parameters differ at a later step while everything before agreed: the update in between."""
    d, s = chosen.diag, chosen.step
    c = d.culprit
    assert c is not None
    prev = max(x for x in steps if x < s)
    before = [p for p in parts if p.step == prev and p.rank == chosen.rank]
    grads = "gradients agree" if any(p.direction == "backward" for p in before) else "its forward pass agrees"
    names = [_param_name(n) for n in _differing(d, "parameter", "forward")]
    opt = chosen.target.meta.get("optimizer") or "optimizer"
    c.direction, c.how, c.op = "update", "update", str(opt)
    c.parameters = names[:MAX_NAMES]
    if prev == s - 1:
        c.step = prev
        c.reason = (f"at step {prev} everything agrees ({grads}), but at step {s} {len(names)} parameter(s) differ "
                    f"from golden, first {names[0] if names else c.module}: the optimizer's update at step {prev} "
                    "computed them differently")
    else:
        c.step = s - 1
        c.reason = (f"at step {prev} everything agrees, but at step {s} {len(names)} parameter(s) differ: they changed "
                    f"in steps {prev}..{s - 1}, which were not all captured (capture them, with optimizer=, to see which)")
    d.summary = f"the optimizer's update ({opt}) makes {len(names)} parameter(s) differ, first {names[0] if names else c.module}"
    d.advice = ("Compare the optimizer's settings (learning rate and its schedule, betas, eps, weight decay, momentum), "
                "gradient clipping and loss scaling between the runs; capture with optimizer= to see the update's ops.")


def describe(chosen: Part, d: Diagnosis) -> None:
    """Name the parameters, the optimizer's ops and the settings that differ, for an update culprit."""
    c = d.culprit
    assert c is not None
    if chosen.direction == "update":
        levels = {t.target.name: t.target.level for t in d.graph.tensors if t.target is not None} if d.graph else {}
        params = [n for n in _differing(d, "output", "update") if levels.get(n) == "param" and "." not in n.split("/")[-1]]
        c.parameters = list(dict.fromkeys(_param_name(n) for n in params))[:MAX_NAMES]
        c.optimizer_ops = list(dict.fromkeys(cand.op for cand in d.candidates if cand.level not in ("param",)))[:MAX_NAMES]
        c.hyperparameters = hyper_diff(chosen)
        if c.hyperparameters:
            said = ", ".join(f"{k} {v['golden']} vs {v['target']}" for k, v in c.hyperparameters.items())
            c.reason = f"{c.reason}; the optimizer's settings differ: {said}"
            d.summary = f"{d.summary}; optimizer settings differ: {said}"
            d.advice = f"The optimizer's settings differ ({said}): make them equal. " + d.advice
    elif not c.hyperparameters:
        c.hyperparameters = hyper_diff(chosen)


def hyper_diff(part: Part) -> dict[str, Any]:
    """Optimizer settings (update records' extra["hyper"]) that differ between golden and target."""
    out: dict[str, Any] = {}
    for pr in part.comparison.results:
        g, t = pr.golden, pr.target
        if g is None or t is None or t.direction != "update":
            continue
        hg, ht = (g.extra or {}).get("hyper"), (t.extra or {}).get("hyper")
        if not isinstance(hg, dict) or not isinstance(ht, dict):
            continue
        for k in sorted(set(hg) | set(ht)):
            if hg.get(k) != ht.get(k):
                out.setdefault(k, {"golden": hg.get(k), "target": ht.get(k)})
    return out
