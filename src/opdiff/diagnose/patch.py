"""Causal proof by patching, when both runs can be re-executed (docs/diagnose.md, "Patch confirmation").

Statistics on dumps say where an error *appears*; patching says what *causes* it. Given a Patcher
(capture/torch/patching.py for PyTorch) this module:

1. localises: one target run in which every module returns golden's output; each module's own output
   in that run was computed from golden's values (its inputs, its children's outputs), so an error there
   is its own code's — the leaves' own ops, or a parent's code between its children;
2. repairs: the target re-run with the culprits' outputs replaced by golden's must agree with golden
   at the model output within the noise tolerance; each culprit is shown to be needed (leaving it out
   keeps the divergence) and golden given that culprit's target output diverges (breakage test);
3. searches further when the localised set does not repair: modules are added by decreasing local
   error until it does (a bounded number of runs);
4. goes down to ops: inside each culprit module whose own code runs several ops (an attention written
   inline, a parent's code between its children), the ops are localised and repaired the same way, the
   other culprits staying patched; when no set of modules repairs the output, the root's own ops are tried.

Framework-neutral (no torch import): the Patcher does the running.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..metrics.thresholds import SIGNIFICANT, unit
from .noise import DRIFT
from .types import _JsonForm

MAX_RUNS = 48  # re-executions the search may spend beyond the first three
NEEDED = 1.25  # leaving a culprit out must leave this much more error than the full repair does
MAX_CULPRITS = 4  # more modules than this needed to repair it is no fault of a few ops: drift


class Patcher(Protocol):
    """Re-runs two models with module outputs exchanged."""

    def modules(self) -> list[str]:
        """Called module paths (not the root), in the target's execution order."""
        ...

    def error(self, patched: frozenset[str], into: str = "target") -> float:
        """Model-output error against golden when `into`'s modules `patched` return the other side's outputs."""
        ...

    def local_errors(self, scopes: set[str] | None = None) -> dict[str, tuple[float, str | None]]:
        """Per module, the error of its own output when every module returns golden's (and its output dtype);
        with `scopes`, per own op of those modules instead (op keys "module/aten.x#k")."""
        ...

    def ops_of(self, module: str) -> list[str]:
        """The op keys of `module`'s own code (outside its children) that both runs ran."""
        ...


@dataclass
class PatchCulprit(_JsonForm):
    """One module the repair needs, with the model-output errors that prove it."""

    module: str
    local_error: float | None  # its own output's error on golden's values
    error_without: float | None = None  # target, every other culprit patched but not this one
    error_golden_broken: float | None = None  # golden with this module's target output
    op: str | None = None  # the first op of the module's own code the repair needs ("aten.mul.Tensor#2")
    ops: list[str] = field(default_factory=list)  # every op needed, when the search went down to ops
    error_after_ops: float | None = None  # model-output error with those ops patched instead of the module
    inserted_ops: list[str] = field(default_factory=list)  # ops of the target's own code golden does not run

    OPTIONAL = frozenset({"op", "ops", "error_after_ops", "inserted_ops"})


@dataclass
class PatchProof(_JsonForm):
    """What patching showed: status, the model-output error before and after, every culprit needed."""

    status: str  # confirmed | found | agrees | not-found | skipped | error
    method: str = "patch"
    tolerance: float | None = None
    error_before: float | None = None  # target's model output against golden's, as run
    error_after: float | None = None  # with every culprit's output replaced by golden's
    culprits: list[PatchCulprit] = field(default_factory=list)
    statistical_culprit: str | None = None  # the module diagnose named from the dumps
    agrees_with_statistics: bool | None = None
    runs: int = 0
    reason: str | None = None

    OPTIONAL = frozenset({"reason", "statistical_culprit", "agrees_with_statistics"})
    DROP_EMPTY = False

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        doc["culprits"] = [c.to_json() for c in self.culprits]
        return doc


class _Budget(Exception):
    pass


class _Runs:
    """Cached error runs with a budget."""

    def __init__(self, patcher: Patcher, limit: int):
        self.patcher, self.limit = patcher, limit
        self.cache: dict[tuple[frozenset[str], str], float] = {}
        self.count = 0

    def error(self, patched: frozenset[str], into: str = "target") -> float:
        key = (patched, into)
        if key not in self.cache:
            if self.count >= self.limit:
                raise _Budget
            self.count += 1
            self.cache[key] = self.patcher.error(patched, into)
        return self.cache[key]


def tolerance(noise: dict[str, Any]) -> float:
    """Model-output error still within noise: the bar diagnose's pass/drift decision uses."""
    floor = float(noise.get("floor_units", 1.0) or 1.0)
    run_unit = float(noise.get("run_unit", unit("float32")) or unit("float32"))
    return DRIFT * floor * run_unit


def is_within(module: str, other: str) -> bool:
    """Whether `module` is `other` or inside it (or `other` is the root)."""
    return not other or module == other or module.startswith(other + ".")


def significant(dtype: str | None, floor: float, run_unit: float) -> float:
    """The local error beyond which a module's (or op's) own output is off: SIGNIFICANT x floor rounding units
    of its dtype, or of the run's precision when coarser (under autocast a module's fp32 output is computed
    from values the run rounded to bf16)."""
    return SIGNIFICANT * floor * max(unit(dtype), unit("float32"), run_unit)


def localise(patcher: Patcher, floor: float = 1.0, run_unit: float = 0.0) -> tuple[list[str], dict[str, float]]:
    """Modules whose own output is off beyond noise on golden's values, in execution order; all local errors.
    A module whose *inputs* were already off in that run (made by its parent's own code, between the
    children, which no module patch replaces) is not to blame for them: its parent is flagged instead."""
    local = patcher.local_errors()
    errs = {m: e for m, (e, _) in local.items()}
    order = patcher.modules()
    inputs = getattr(patcher, "input_errors", {})

    def off(m: str, err: float) -> bool:
        return err > significant(local[m][1], floor, run_unit)
    flagged: list[str] = []
    for m in order:
        if m not in local or not off(m, local[m][0]):
            continue
        blamed = m.rpartition(".")[0] if off(m, inputs.get(m, 0.0)) else m
        if blamed not in flagged:
            flagged.append(blamed)
    if "" in flagged:  # the root's own code: not a module patch can repair (its ops are searched instead)
        flagged.remove("")
    errs.update({p: max(errs.get(p, 0.0), errs[m]) for m in order if m in errs and off(m, inputs.get(m, 0.0))
                 and (p := m.rpartition(".")[0])})
    return flagged, errs


def _needed(runs: _Runs, flagged: list[str], tol: float, base: frozenset[str] = frozenset()) -> list[str]:
    """Drop culprits whose repair is not needed (latest first: an earlier cause outranks what it feeds).
    A culprit is needed when leaving it unpatched keeps the error above the noise (or, for a low-precision
    target whose own rounding exceeds it, clearly above what the full repair leaves). `base`: units kept
    patched throughout (the other culprits, in an op search). A culprit whose target output alone breaks
    golden is kept too: a later culprit whose output is the model's (a tied lm_head reading the same wrong
    table as the embedding) would otherwise mask every earlier one."""
    keep = list(flagged)
    bar = max(tol, NEEDED * runs.error(base | frozenset(keep)))
    for m in reversed(flagged):
        if len(keep) > 1 and runs.error(base | (frozenset(keep) - {m})) <= bar \
                and runs.error(frozenset({m}), into="golden") <= bar:
            keep.remove(m)
    return keep


def _widen(runs: _Runs, patcher: Patcher, start: list[str], local: dict[str, float], tol: float) -> list[str] | None:
    """Add modules by decreasing local error (earliest first on ties) until patching them repairs the output."""
    order = {m: i for i, m in enumerate(patcher.modules())}
    rest = sorted((m for m in local if m not in start and m in order), key=lambda m: (-local[m], order[m]))
    chosen = list(start)
    for m in rest:
        if local[m] <= 0:
            break
        chosen.append(m)
        if runs.error(frozenset(chosen)) <= tol:
            return sorted(chosen, key=order.__getitem__)
        if len(chosen) > 2 * MAX_CULPRITS:
            return None
    return None


def prove(patcher: Patcher, noise: dict[str, Any], statistical: str | None = None,
          max_runs: int = MAX_RUNS) -> PatchProof:
    """Localise, repair, show each culprit needed, then go down to ops; see the module docstring."""
    tol = tolerance(noise)
    floor = float(noise.get("floor_units", 1.0) or 1.0)
    run_unit = float(noise.get("run_unit", 0.0) or 0.0)
    runs = _Runs(patcher, max_runs)
    proof = PatchProof("agrees", tolerance=tol, statistical_culprit=statistical)
    try:
        proof.error_before = runs.error(frozenset())
        flagged, local = localise(patcher, floor, run_unit)
        if proof.error_before <= tol and not flagged:
            proof.reason = "the model outputs agree within the noise tolerance and no module errs on golden's values"
            return proof
        culprits = _repair(runs, patcher, flagged, local, tol, proof.error_before)
        if culprits is None and proof.error_before > tol:
            culprits = _root_ops(runs, patcher, tol, floor, run_unit)
        if culprits is None:
            proof.status = "not-found"
            proof.reason = (f"no set of at most {MAX_CULPRITS} modules whose golden outputs repair the model output "
                            "(the error is spread over many modules, or made outside any module)")
            return proof
        _explain(runs, proof, culprits, local, tol)
        _down_to_ops(runs, patcher, proof, tol, floor, run_unit)
        _agree(proof)
    except _Budget:
        proof.status = "not-found"
        proof.reason = f"the search stopped after {max_runs} re-runs"
    finally:
        proof.runs = runs.count
    return proof


def _op_search(runs: _Runs, patcher: Patcher, scope: str, base: frozenset[str], bar: float, tol: float,
               floor: float, run_unit: float) -> list[str] | None:
    """The ops of `scope`'s own code whose golden outputs (with `base` patched too) bring the model-output
    error to `bar` or below: those off beyond noise on golden's values, widened by local error if need be."""
    ops = patcher.ops_of(scope)
    if len(ops) < 2:  # a module running one op of golden's: that op, if patching it repairs as the module did
        return ops if ops and scope and runs.error(base | frozenset(ops)) <= bar else None
    runs.count += 3  # recording both sides' ops, and the localisation run
    local = patcher.local_errors({scope})
    flagged = [k for k in ops if k in local and local[k][0] > significant(local[k][1], floor, run_unit)]
    chosen: list[str] | None = None
    if flagged and runs.error(base | frozenset(flagged)) <= bar:
        chosen = flagged
    else:
        chosen = list(flagged)
        rest = sorted((k for k in ops if k not in flagged and local.get(k, (0.0, None))[0] > 0),
                      key=lambda k: (-local[k][0], ops.index(k)))
        for k in rest[:2 * MAX_CULPRITS]:
            chosen.append(k)
            if runs.error(base | frozenset(chosen)) <= bar:
                break
        else:
            return None
        chosen.sort(key=ops.index)
    return _needed(runs, chosen, tol, base)


def _root_ops(runs: _Runs, patcher: Patcher, tol: float, floor: float, run_unit: float) -> list[str] | None:
    """When no set of modules repairs the output: the root's own ops (code of the model's forward between
    its children), each op a culprit unit."""
    found = _op_search(runs, patcher, "", frozenset(), tol, tol, floor, run_unit)
    return found if found and len(found) <= MAX_CULPRITS else None


def _down_to_ops(runs: _Runs, patcher: Patcher, proof: PatchProof, tol: float, floor: float, run_unit: float) -> None:
    """For each module culprit, the ops of its own code the repair needs, the other culprits staying patched."""
    units = [c.module for c in proof.culprits]
    bar = max(tol, NEEDED * (proof.error_after or 0.0))
    for c, u in zip(proof.culprits, units):
        if c.op is not None:
            continue
        base = frozenset(units) - {u}
        try:
            ops = _op_search(runs, patcher, u, base, bar, tol, floor, run_unit)
        except _Budget:
            return
        if ops:
            c.ops = [k.partition("/")[2] for k in ops]
            c.op = c.ops[0]
            c.error_after_ops = runs.error(base | frozenset(ops))
        else:  # no op of golden's to patch with: name what the target runs instead (shown, not proven)
            inserted = getattr(patcher, "inserted_ops", None)
            c.inserted_ops = list(inserted(u)) if inserted is not None else []


def _repair(runs: _Runs, patcher: Patcher, flagged: list[str], local: dict[str, float], tol: float,
            before: float) -> list[str] | None:
    """The culprits: the localised modules when patching them repairs the output (to within the noise, or,
    below it, to less than what it was), else a set widened by local error."""
    culprits: list[str] | None
    if flagged and (runs.error(frozenset(flagged)) <= tol or before <= tol and runs.error(frozenset(flagged)) < before):
        culprits = _needed(runs, flagged, tol)
    else:
        widened = _widen(runs, patcher, flagged, local, tol)
        culprits = _needed(runs, widened, tol) if widened else None
    if culprits is None or len(culprits) > MAX_CULPRITS:
        return None
    return culprits


def _explain(runs: _Runs, proof: PatchProof, culprits: list[str], local: dict[str, float], tol: float) -> None:
    proof.error_after = runs.error(frozenset(culprits))
    for m in culprits:
        c = PatchCulprit(m.partition("/")[0], local.get(m))
        if "/" in m:  # an op of the root's own code
            c.op = m.partition("/")[2]
            c.ops = [c.op]
        c.error_without = runs.error(frozenset(culprits) - {m}) if len(culprits) > 1 else proof.error_before
        c.error_golden_broken = runs.error(frozenset({m}), into="golden")
        proof.culprits.append(c)
    proof.status = "found"
    names = ", ".join(m or "<root>" for m in culprits)
    proof.reason = (f"replacing the output of {names} by golden's brings the model-output error from "
                    f"{_fmt(proof.error_before)} to {_fmt(proof.error_after)} (tolerance {_fmt(tol)})")


def _agree(proof: PatchProof) -> None:
    """`confirmed` when a culprit patching needs is the statistics' culprit, lies inside it, or contains it —
    unless the culprit's fault is in its own ops (outside its children), and the statistics named a child."""
    st = proof.statistical_culprit
    if st is None:
        return

    def agrees(c: PatchCulprit) -> bool:
        if c.module == st or is_within(c.module, st) and c.module:
            return True
        return bool(c.module) and is_within(st, c.module) and not (c.ops or c.inserted_ops)
    proof.agrees_with_statistics = any(agrees(c) for c in proof.culprits)
    if proof.agrees_with_statistics:
        proof.status = "confirmed"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else ("inf" if not math.isfinite(x) else f"{x:.3g}")


def apply(diag: Any, proof: PatchProof, graph: Any = None) -> None:
    """Attach the proof to a Diagnosis. When patching finds culprits the statistics missed (a pass, a drift,
    another module), the verdict becomes a fault at the first culprit in execution order; when it confirms
    the statistics' culprit but proves a module inside it, the culprit is narrowed to that module."""
    diag.patch = proof
    if not proof.culprits or diag.verdict in ("inputs-differ", "overflow"):
        return
    first = proof.culprits[0].module
    prior = diag.culprit
    narrows = (proof.status == "confirmed" and prior is not None and bool(first) and first != prior.module
               and is_within(first, prior.module))
    if proof.status != "found" and not narrows:
        return
    from .types import Candidate, Culprit

    was = f"{diag.verdict}" + (f" at {prior.module or '<root>'}" if prior is not None else "")
    nid = graph.owner.get(first) if graph is not None else None
    node = graph.nodes[nid] if nid is not None else None
    others = [c.module for c in proof.culprits[1:]]
    said = "narrowed from" if narrows else "alone said"
    reason = (f"patching proves it: {proof.reason}" + (f"; {', '.join(others)} also needed" if others else "")
              + f" (the dumps' statistics {said} {was})")
    named = proof.culprits[0].op or next(iter(proof.culprits[0].inserted_ops), None)
    op = named.rpartition("#")[0] if named else (node.op if node else "")
    diag.verdict = "fault"
    diag.culprit = Culprit(module=first, op=op, node=node.name if node else first,
                           level=node.level if node else "module", golden_node=node.golden if node else None,
                           reason=reason, how="patch", direction="forward")
    diag.summary = f"{first or '<root>'} is the culprit: {reason}"
    cands = [Candidate(rank=i + 1, node=c.module, module=c.module, op="", level="module", reason="patch culprit",
                       score=c.local_error) for i, c in enumerate(proof.culprits)]
    if prior is not None:
        why = "the statistics' culprit, which contains it" if narrows else "the statistics' culprit, which patching did not need"
        cands.append(Candidate(rank=len(cands) + 1, node=prior.node, module=prior.module, op=prior.op, level=prior.level,
                               reason=why))
    diag.candidates = cands + [c for c in diag.candidates if c.module not in {x.module for x in cands}][:8]
    diag.advice = (f"Compare {first or 'the model'}'s code and settings with golden's"
                   + (f", and those of {', '.join(others)}" if others else "") + ".")
