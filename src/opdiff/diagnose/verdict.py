"""Pick exactly one verdict (pass | inputs-differ | overflow | fault | drift) with its evidence and advice."""

from __future__ import annotations

import bisect
import heapq
import math
import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from ..base.vocab import FAIL, PROVENANCE_KEY, Verdict
from ..metrics import names as M
from ..metrics.thresholds import SIGNIFICANT
from ..replay.result import ReplayResult
from .columns import ROLE_OUTPUT
from .graph import Graph, Node, Tensor
from .local import Event, contributions, inherited, propagates
from .noise import DRIFT, Noise
from .origin import entry
from .overflow import Overflow
from .patch import PatchProof
from .types import Candidate, Culprit, Evidence, OpCandidate, TensorInfo

SCHEMA_VERSION = 1
# an event this many times weaker than the strongest is not taken as the culprit just for being earlier
CULPRIT_MARGIN = 1e3


@dataclass
class Diagnosis:
    """The answer of diagnose: one verdict, the culprit if any, and why (docs/diagnose.md)."""

    verdict: Verdict
    summary: str
    culprit: Culprit | None = None
    first_divergence: dict[str, Any] | None = None  # TensorInfo, plus step, direction and rank
    candidates: list[Candidate] = field(default_factory=list)
    evidence: Evidence = field(default_factory=Evidence)
    advice: str = ""
    path_of_divergence: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    noise: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    replay: ReplayResult | None = None
    patch: PatchProof | None = None  # the causal test, when both runs could be re-executed (patch.py)
    graph: Graph | None = field(default=None, repr=False, compare=False)  # the graph it was decided on (not in JSON)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "pass" else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "summary": self.summary,
            "culprit": self.culprit.to_json() if self.culprit is not None else None,
            "first_divergence": self.first_divergence,
            "candidates": [c.to_json() for c in self.candidates],
            "path_of_divergence": self.path_of_divergence,
            "evidence": self.evidence.to_json(),
            "advice": self.advice,
            "warnings": self.warnings,
            "noise": self.noise,
            "counts": self.counts,
            "replay": self.replay.to_json() if self.replay is not None else None,
            "confirmation": self.confirmation(),
        }

    def confirmation(self) -> dict[str, Any]:
        """How the verdict was confirmed: by patching the re-executed runs, by replaying the culprit op, or
        from the dumps' statistics only (method: patch | replay | statistics)."""
        if self.patch is not None and self.patch.status not in ("skipped", "error"):
            return self.patch.to_json()
        doc: dict[str, Any] = {"method": "statistics", "status": "statistics-only"}
        if self.replay is not None and self.replay.status == "ok":
            doc = {"method": "replay", "status": "confirmed" if self.replay.confirmed else "not-confirmed"}
        if self.patch is not None:
            doc["patch"] = self.patch.to_json()  # why patching could not run
        return doc


def _num(x: float | None) -> float | None:
    if x is None:
        return None
    return x  # non-finite values stay: the JSON writer applies the one rule (base/jsonsafe.py)


def units(t: Tensor) -> float | None:
    """A tensor pair's error in rounding units of its lower-precision dtype (none for a pair judged on counts:
    its error is a share of elements, not a size)."""
    if t.err is None or (t.pair.mode == "counts" and t.err != 0):
        return None
    if t.unit == 0:
        return 0.0 if t.err == 0 else None  # integers differ or not: no units
    return t.err / t.unit


def tensor_info(graph: Graph, t: Tensor) -> dict[str, Any]:
    """What the reports say about one tensor pair."""
    rec = t.rec
    node = graph.node_of(t)
    m = t.pair.metrics
    return {
        "target": t.target.name if t.target is not None else None,
        "golden": t.golden.name if t.golden is not None else None,
        "module": rec.module,
        "op": node.op if node is not None else rec.op,
        "role": rec.role,
        "pos": rec.pos,
        "dtype": {"golden": t.golden.dtype if t.golden else None, "target": t.target.dtype if t.target else None},
        "shape": list(rec.shape),
        "error": _num(t.err),
        "error_units": _num(units(t)),
        "cosine": m.get(M.COSINE),
        "max_abs_err": m.get(M.MAX_ABS_ERR),
        "result": t.pair.result,
        "match": t.pair.match,
    }


def node_info(graph: Graph, node: Node) -> dict[str, Any]:
    return {"node": node.name, "module": node.module, "op": node.op, "level": node.level, "golden_node": node.golden}


def _main_output(graph: Graph, node: Node, fallback: Tensor, noise: Noise | None = None) -> Tensor:
    """The culprit's output pair to name: its first diverging matched output, else the evidence tensor."""
    outs = [graph.tensors[i] for i in node.outputs if graph.tensors[i].err is not None]
    if not outs:
        return fallback
    diverged = [t for t in outs if noise is None or not noise.agrees(t.err, t.unit)]
    return (diverged or outs)[0]


def _reason(graph: Graph, ev_tensor: Tensor, how: str, node: Node, inherited_units: float | None) -> str:
    err = off_by(ev_tensor)
    inh = "exactly" if not inherited_units else f"within {inherited_units:.3g} units"
    rec = ev_tensor.rec
    if how == "output" and rec.pos.startswith("inplace.") and ev_tensor.golden is None:
        return (f"it changes its input {rec.pos.removeprefix('inplace.')} in place (the tensor its caller goes on "
                f"using is off by {err} after the call, golden's is left as it was): the error is its own")
    if how == "output":
        return f"its inputs agree with golden ({inh}) but its output {rec.pos} is off by {err}: the error is its own"
    if how == "parameter":
        return f"its parameter {rec.pos or rec.name} differs from golden by {err}"
    reader = graph.node_of(ev_tensor)
    if how == "inserted" and reader is not None:
        return (f"an op golden does not have ({node.op} in {node.module or '<root>'}) changed the tensor that "
                f"{reader.name} reads (off by {err}) while its own inputs agree")
    if how == "input-changed" and not graph.module_level and graph.producer.get(ev_tensor.id) is not None:
        return (f"its input {rec.pos} is off by {err} although the tensor it reads agrees with golden's: "
                f"{node.module or '<root>'}'s code hands it another tensor than golden's (a changed call or argument)")
    if how == "input-changed":
        parent = graph.nodes[node.parent].module if node.parent is not None else "<root>"
        return (f"its input {rec.pos} is off by {err} although golden hands it the very tensor an earlier op made, "
                f"which agrees: it is changed on the way in (a hook, a cast in {parent or '<root>'}'s call, a patched call)")
    if how == "parent" and reader is not None:
        return (f"everything it computed before agrees ({inh}), but the input of its child {reader.name} "
                f"is off by {err}: its own code between its children changed it")
    return f"it reads a tensor no recorded op produced ({rec.pos}, a weight or buffer?) that differs from golden by {err}"


_ADVICE = [
    (r"norm", "Check the normalization's epsilon, affine weights and the dtype it computes its variance in."),
    (r"gelu|silu|swish|relu|act|tanh|sigmoid", "Check the activation variant (exact GELU vs its tanh approximation, fused approximations) and its dtype."),
    (r"attention|attn|sdpa|softmax|baddbmm|bmm|SelfAttention", "Check the attention scale, the mask and the dtype the scores and softmax are computed in."),
    (r"_to_copy|\bto\b|type_as|cast|float|half|bfloat16", "A dtype cast the golden run does not do: find where the target rounds this tensor and keep it in the golden's precision."),
    (r"linear|addmm|\bmm\b|matmul|conv|Conv1D|proj|dense|fc", "Check this layer's weights and bias (loading, transposes, quantization) and the precision of its matmul."),
    (r"embed", "Check the embedding table and the ids it is indexed with."),
]


def _advice(node: Node, how: str, replayable: bool) -> str:
    parts = []
    if how == "parameter":
        parts.append("The weights differ: check how the target loads or converts its checkpoint.")
    elif how == "parent":
        parts.append(f"Look at {node.module or 'the model'}'s own forward code between its child modules "
                     "(residual adds, scaling, reshapes, masks).")
    for pattern, text in _ADVICE:
        if re.search(pattern, f"{node.op} {node.module}", re.I):
            parts.append(text)
            break
    if replayable and how != "parameter":
        parts.append(f"Confirm with: opdiff replay GOLDEN TARGET '{node.name}'.")
    return " ".join(parts)


def _run_units(t: Tensor | None, noise: Noise) -> float | None:
    """A tensor pair's error in rounding units of the run's coarsest precision (noise.run_dtype): one
    unit for a whole path, so an fp32 step inside a bf16 model is not counted in 65,536 times finer units."""
    if t is None or t.err is None:
        return None
    if t.unit == 0 or t.pair.mode == "counts":
        return 0.0 if t.err == 0 else None
    return t.err / (noise.run_unit or t.unit)


def counts_words(t: Tensor) -> str:
    """What differs in a pair judged on counts (tfdbg health modes), from compare's metrics and reason."""
    what = t.pair.err_message.split("; judged on", 1)[0].strip()
    moved, numel = t.pair.metrics.get(M.DIFF_COUNT), t.pair.metrics.get(M.NUMEL)
    detail = re.search(r"changed sign or zero \(([^()]*)\)", what)
    if isinstance(moved, int) and moved and detail:
        of = f" of {numel}" if isinstance(numel, int) else ""
        return f"at least {moved}{of} elements that changed sign or zero (counts {detail.group(1)}; no values held)"
    return f"its counts ({what})" if what else "its counts"


def off_by(t: Tensor) -> str:
    """How far a pair is off, in the terms its comparison measured: counts, exact integers or rounding units."""
    if t.pair.mode == "counts" and t.err:
        return "nan/inf counts" if not math.isfinite(t.err) and "nan/inf" in t.pair.err_message else counts_words(t)
    u = units(t)
    if t.unit == 0:
        return "some values (integers, compared exactly)"
    return "non-finite values" if u is None or not math.isfinite(u) else f"{u:.3g} rounding units"


def _path(graph: Graph, start_order: int, culprit: Node, noise: Noise, limit: int = 40) -> list[dict[str, Any]]:
    """From the culprit to the model output: diverging calls, one per module at the culprit's level
    (the last diverging call of each), each named by its own module, errors in one unit (_run_units).

    The runs of one module are found first and an entry is made only for the last call of each run that is
    kept (`limit`): every diverging output is visited, but one dict per kept entry, not per output."""
    runs = _path_runs(graph, _diverging_outputs(graph, noise, start_order), culprit)
    if len(runs) > limit:
        runs = runs[: limit - 1] + [runs[-1]]
    return [_path_entry(graph, t, noise) if t is not None else _culprit_entry(graph, culprit, noise) for t in runs]


def _diverging_outputs(graph: Graph, noise: Noise, start_order: int) -> list[tuple[int, int]]:
    """(tensor id, node id) of the diverging outputs (_diverging) from execution order `start_order` on, in order:
    in_order() is sorted by order, so those before it are a prefix, cut by bisection; roles and nodes from the
    columns (an output's role there is its target record's, as Tensor.role of a tensor with a target)."""
    ordered = graph.in_order()
    at = _diverging_at(graph, noise)
    at = at[np.searchsorted(at, bisect.bisect_left(ordered, start_order, key=_ORDER)):]
    c = graph.columns()
    ids = graph.in_order_ids()[at]
    ids = ids[c.role[ids] == ROLE_OUTPUT]
    return list(zip(ids.tolist(), c.node[ids].tolist()))


def _path_runs(graph: Graph, diverging: list[tuple[int, int]], culprit: Node) -> list[Tensor | None]:
    """The last diverging output of each run of outputs that share a module at the culprit's depth (their
    group key), in order; None stands for the culprit's own entry, which the first run replaces when it is
    of the culprit's group."""
    comps = culprit.module.split(".") if culprit.module else []
    groups = [culprit.module]  # the module at the culprit's depth each entry stands for
    runs: list[int | None] = [None]
    keys: dict[int, str] = {}  # node id -> its module's group key
    by_module: dict[str, str] = {}  # module -> its group key (computed once per module)
    nodes = graph.nodes
    for tid, nid in diverging:
        key = keys.get(nid)
        if key is None:
            module = nodes[nid].module
            key = by_module.get(module)
            if key is None:
                key = by_module[module] = _group_key(module, comps)
            keys[nid] = key
        if groups[-1] == key:
            runs[-1] = tid
        else:
            runs.append(tid)
            groups.append(key)
    return [graph.tensors[i] if i is not None else None for i in runs]


def _group_key(module: str, comps: list[str]) -> str:
    """A module's leading parts it shares with the culprit's (`comps`), and one more: the deepest module
    enclosing both, one level down on the module's side."""
    mc = module.split(".") if module else []
    depth = 0
    for part, cpart in zip(mc, comps):
        if part != cpart:
            break
        depth += 1
    return ".".join(mc[: depth + 1])


def _culprit_entry(graph: Graph, culprit: Node, noise: Noise) -> dict[str, Any]:
    """The path's first entry: the culprit, with its first output of known error."""
    own = next((graph.tensors[i] for i in culprit.outputs if graph.tensors[i].err is not None), None)
    return {"module": culprit.module, "node": culprit.name, "op": culprit.op,
            "record": own.target.name if own is not None and own.target else None,
            "error_units": _num(_run_units(own, noise)),
            "cosine": own.pair.metrics.get(M.COSINE) if own is not None else None}


def _path_entry(graph: Graph, t: Tensor, noise: Noise) -> dict[str, Any]:
    """One later entry of the path: a diverging output, named by its node."""
    node = graph.nodes[t.node]
    return {"module": node.module, "node": node.name, "op": node.op, "record": t.rec.name,
            "error_units": _num(_run_units(t, noise)), "cosine": t.pair.metrics.get(M.COSINE)}


def _first_divergence(graph: Graph, noise: Noise) -> Tensor | None:
    at = _diverging(graph, noise)
    return graph.in_order()[at[0]] if at else None


def _diverging(graph: Graph, noise: Noise) -> list[int]:
    """Positions in graph.in_order() of the tensors whose error Noise.agrees does not accept, ascending: its test
    over the columns (err, unit; None is not known), at numpy speed instead of a call per tensor."""
    out: list[int] = _diverging_at(graph, noise).tolist()
    return out


def _diverging_at(graph: Graph, noise: Noise) -> np.ndarray:
    """_diverging's positions as a column."""
    ids = graph.in_order_ids()
    c = graph.columns()
    err, unit_ = c.err[ids], c.unit[ids]
    with np.errstate(invalid="ignore"):
        within = np.where(unit_ == 0, err == 0, err <= SIGNIFICANT * noise.floor * unit_)
    return np.flatnonzero(c.known[ids] & ~within)


_ORDER = attrgetter("order")


def _neg_jump(c: tuple[Node, Event, float]) -> float:
    """Sort key of a suspect: strongest jump first."""
    return -c[2]


Suspects = list[tuple[Node, Event, float]]  # (op, where its error entered, jump over its threshold)


def _when(graph: Graph, ev: Event) -> int:
    """When an event's error enters the execution: a differing weight when the op reading it runs (weights
    are recorded up front, in registration order), any other tensor where it was recorded."""
    if ev.how == "parameter":
        return graph.nodes[ev.node].start
    return graph.tensors[ev.tensor].order


def _candidates(graph: Graph, events: list[Event]) -> Suspects:
    """Blamed nodes with their first event and strongest jump, in execution order of their first event."""
    by_node: dict[int, tuple[Event, float]] = {}
    for ev in events:
        first, best = by_node.get(ev.node, (ev, 0.0))
        if ev.propagates and not first.propagates:
            first = ev  # a node's first event whose error matters speaks for it
        by_node[ev.node] = (first, max(best, ev.jump))
    cands = [(graph.nodes[n], ev, j) for n, (ev, j) in by_node.items()]
    return sorted(cands, key=lambda c: _when(graph, c[1]))


def _pick(cands: Suspects) -> int | None:
    """Index of the culprit: the earliest candidate whose error propagates, not dwarfed by a much stronger one."""
    live = [(i, j) for i, (_, ev, j) in enumerate(cands) if ev.propagates]
    if not live:
        return None
    strongest = max(min(j, 1e300) for _, j in live)
    floor = max(1.0, strongest / CULPRIT_MARGIN)
    for i, j in live:
        if j >= floor:
            return i
    return live[0][0]


def decide(graph: Graph, noise: Noise, events: list[Event], overflow: Overflow | None,
           inputs_differ: list[Tensor], warnings: list[str], replayable: bool = False) -> Diagnosis:
    """The one verdict and everything the reports print about it."""
    first = _first_divergence(graph, noise)
    d = Diagnosis(verdict="pass", summary="", noise=noise.to_json(), warnings=list(warnings))
    d.first_divergence = tensor_info(graph, first) if first is not None else None
    cands = _candidates(graph, events)
    pick = _pick(cands)

    if inputs_differ:
        _inputs_differ(graph, d, inputs_differ)
    elif overflow is not None:  # inf/nan where golden is finite is the headline, whatever came before it
        _overflow(graph, noise, d, overflow, cands, pick)
    elif pick is not None:
        _fault(graph, noise, d, cands, pick, replayable)
    else:
        _drift_or_pass(graph, noise, d)
        failed = _first_compare_fail(graph, noise) if d.verdict == "pass" else None
        if failed is not None:  # compare's rule fails a pair: the two gates must not disagree
            _compare_fault(graph, noise, d, failed, replayable)
    return d


def _first_compare_fail(graph: Graph, noise: Noise) -> Tensor | None:
    """The earliest pair compare judges FAIL although nothing it is computed from fails, and whose error
    reaches what reads it: an error of its own at compare's rule (compare's thresholds are per dtype;
    diagnose's calibrated floor may be wider). An output nothing reads stays no culprit."""
    for t in graph.in_order():
        node = graph.node_of(t)
        if t.pair.result != FAIL or t.err is None or t.err <= t.unit or node is None or \
                node.id == graph.root and t.role == "input":
            # no error: a pair diagnose does not take as evidence (guessed between different ops); within one
            # rounding: diagnose measured it better (a mask's finfo.min fill in golden's and the target's dtype)
            continue
        if not any(s.pair.result == FAIL for s in graph.known_sources(t)) and \
                (propagates(graph, noise, t) or _fails_downstream(graph, t)):
            return t
    return None


def _fails_downstream(graph: Graph, t: Tensor) -> bool:
    """Whether compare also fails what reads `t` (its error reaches downstream by compare's rule)."""
    if graph.is_model_output(t):
        return True
    return any(graph.tensors[i].pair.result == FAIL for node, _ in graph.consumer_nodes(t) for i in node.outputs)


def _compare_fault(graph: Graph, noise: Noise, d: Diagnosis, failed: Tensor, replayable: bool) -> None:
    """A fault named from compare's own verdict on a pair (when no calibrated event was strong enough), blamed
    where its error entered: the pair itself, or the op upstream whose output jumped (origin.py)."""
    t = entry(graph, noise, failed)
    nid, how = graph.blame(t)
    node = graph.nodes[nid]
    main = _main_output(graph, node, t, noise)
    u = units(t)
    if t.pair.mode == "counts" and t.err:
        size = off_by(t)
    elif u is not None and math.isfinite(u):
        size = f"{u:.3g} rounding units"
    elif t.golden is not None and t.target is not None and t.golden.op != t.target.op:
        size = f"golden runs {t.golden.op} there"
    else:
        size = "its values"
    reason = (f"compare fails {t.rec.name} (off by {size}) while everything it is computed from passes: "
              "the error enters here")
    if t is not failed:
        inh = inherited(graph, t) / t.unit
        reason = (f"compare fails {failed.rec.name} (off by {off_by(failed)}), an error its inputs bring; it enters "
                  f"at {t.rec.name}: off by {size} while what it is computed from is within {inh:.3g} units")
    d.verdict = "fault"
    d.culprit = Culprit(**node_info(graph, node), golden=main.golden.name if main.golden else None,
                        target=main.target.name if main.target else None, reason=reason, how=how,
                        evidence_record=t.target.name if t.target else None, direction=graph.direction)
    d.summary = f"{node.module or '<root>'} ({node.op}) is the culprit: {reason}"
    d.evidence = _node_evidence(graph, node, t)
    d.advice = _advice(node, how, replayable) or "Compare this op's implementation and settings with golden's."
    d.path_of_divergence = _path(graph, t.order, node, noise)
    d.candidates = [OpCandidate(rank=1, **node_info(graph, node), golden=d.culprit.golden, target=d.culprit.target,
                                how=how, record=d.culprit.evidence_record, error_units=_num(u), reason=reason)]


def _inputs_differ(graph: Graph, d: Diagnosis, inputs_differ: list[Tensor]) -> None:
    d.verdict = "inputs-differ"
    names = ", ".join(t.rec.pos for t in inputs_differ)
    d.evidence = Evidence(inputs=[tensor_info(graph, t) for t in inputs_differ])
    if graph.direction == "backward":  # the backward pass starts from the gradient the loss hands the outputs
        d.summary = (f"the gradients handed to the model's outputs differ ({names}): the loss or its scaling, "
                     "computed outside the model, differs; no op of the model is to blame")
        d.advice = ("Compare the loss function, its reduction and any loss scaling (a GradScaler's scale, a "
                    "gradient-accumulation divisor) between the runs; unscale before clipping and the update.")
        return
    d.summary = f"the model's own inputs differ ({names}): no op is to blame"
    d.advice = ("Make both runs see the same inputs: same data and order, same seeds, random preprocessing and "
                "augmentation off, same tokenizer; then compare again.")


def _overflow(graph: Graph, noise: Noise, d: Diagnosis, overflow: Overflow, cands: Suspects,
              pick: int | None) -> None:
    node = graph.nodes[overflow.node]
    t = graph.tensors[overflow.tensor]
    main = _main_output(graph, node, t, noise)
    also = "golden has inf/nan there too, but not the same ones" if overflow.golden_overflows else "golden stays finite there"
    reason = (f"inf/nan first appear in {t.rec.name} ({', '.join(f'{k}={v}' for k, v in overflow.counts.items() if v)}) "
              f"while its inputs are finite; {also}")
    d.verdict = "overflow"
    d.culprit = Culprit(**node_info(graph, node), golden=main.golden.name if main.golden else None,
                        target=main.target.name if main.target else None, reason=reason,
                        how=overflow.how, golden_overflows=overflow.golden_overflows, direction=graph.direction)
    d.summary = f"overflow in {node.module or '<root>'} ({node.op}): {reason}"
    if pick is not None and graph.tensors[cands[pick][1].tensor].order < t.order:
        before = cands[pick][0]
        d.summary += f"; before it, {before.module or '<root>'} ({before.op}) already adds an error of its own"
    d.evidence = _node_evidence(graph, node, t)
    d.advice = ("Compute this op in a wider dtype (fp32 or bf16 instead of fp16), subtract the max before exp, "
                "or rescale its inputs; golden's values show how large they get.")
    d.path_of_divergence = _path(graph, t.order, node, noise)
    d.candidates = [_cand_json(graph, 1, node, None, math.inf, reason)] + [
        _cand_json(graph, i + 2, n, ev, j, None) for i, (n, ev, j) in enumerate(heapq.nsmallest(9, cands, key=_neg_jump))]


def _fused_from(rec: Any) -> list[str]:
    """The golden ops a fused target op stands for, from its capture's provenance (empty for a plain op)."""
    names = rec.extra.get(PROVENANCE_KEY) if rec is not None else None
    return [str(n) for n in names] if isinstance(names, list) and len(names) > 1 else []


def _fault(graph: Graph, noise: Noise, d: Diagnosis, cands: Suspects, pick: int, replayable: bool) -> None:
    node, ev, jump = cands[pick]
    t = graph.tensors[ev.tensor]
    inh_units = max((units(s) or 0.0 for s in graph.known_sources(t)), default=0.0)
    reason = _reason(graph, t, ev.how, node, inh_units)
    main = _main_output(graph, node, t, noise)
    d.verdict = "fault"
    d.culprit = Culprit(**node_info(graph, node), golden=main.golden.name if main.golden else None,
                        target=main.target.name if main.target else None, reason=reason, how=ev.how,
                        evidence_record=t.target.name if t.target else None, score=_num(jump),
                        direction=graph.direction)
    d.summary = f"{node.module or '<root>'} ({node.op}) is the culprit: {reason}"
    fused = _fused_from(main.target)
    if fused:
        d.culprit.fused_from = fused
        d.summary += f"; it is a fused op standing for {len(fused)} golden ops: {', '.join(fused)}"
    d.evidence = _node_evidence(graph, node, t)
    d.advice = _advice(node, ev.how, replayable)
    missing = _golden_only_inside(graph, node)
    if missing:
        d.culprit.golden_only_calls = missing
        d.advice = (f"Golden runs {len(missing)} call(s) inside it that the target does not "
                    f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): the target computes this "
                    "module another way (a fused or patched implementation); compare that code with golden's. "
                    + d.advice).strip()
    d.advice = d.advice or "Compare this op's implementation and settings (arguments, dtype) with golden's."
    d.path_of_divergence = _path(graph, t.order, node, noise)
    # the nine strongest others, as sorted(...)[:9] (nsmallest is stable too): no sort of every candidate
    ranked = [cands[pick]] + heapq.nsmallest(9, (c for i, c in enumerate(cands) if i != pick), key=_neg_jump)
    d.candidates = [_cand_json(graph, i + 1, n, e, j, None) for i, (n, e, j) in enumerate(ranked[:10])]


def _drift_or_pass(graph: Graph, noise: Noise, d: Diagnosis) -> None:
    out_errs = _output_errors(graph)
    worst = max(out_errs, key=lambda x: x[1], default=None)
    growth = worst[1] / noise.run_unit if worst is not None else 0.0
    if worst is not None and growth > DRIFT * noise.floor:
        d.verdict = "drift"
        top = contributions(graph, noise)
        d.summary = (f"error grows gradually to {growth:.3g} units of {noise.run_dtype} at the model output "
                     f"with no single op to blame")
        d.evidence = Evidence(output=[tensor_info(graph, t) for t, _ in out_errs[:4]],
                              top_contributors=[{**node_info(graph, graph.nodes[n]), "gain": _num(g)} for n, g in top])
        d.candidates = [Candidate(rank=i + 1, **node_info(graph, graph.nodes[n]), score=_num(g),
                                  reason=f"multiplies the error it receives by {g:.3g}") for i, (n, g) in enumerate(top)]
        d.advice = ("Expected when the target runs in lower precision: keep sensitive ops (norms, softmax, "
                    "reductions, residual adds) in fp32, or judge the result with a tolerance for "
                    f"{noise.run_dtype}. The ops above add the most error.")
        return
    d.verdict = "pass"
    d.summary = ("target agrees with golden everywhere within the noise of the comparison"
                 + (f" ({noise.run_dtype} rounding)" if noise.run_dtype != "float32" else ""))
    d.evidence = Evidence(output=[tensor_info(graph, t) for t, _ in out_errs[:4]])
    d.advice = "Nothing to fix."


def _golden_only_inside(graph: Graph, node: Node) -> list[str]:
    """Golden calls inside the culprit's module that have no counterpart in the target."""
    prefix = node.module + "." if node.module else ""
    goldens = [g for g in (graph.tensors[i].golden for i in graph.golden_only) if g is not None]
    names = [g.node for g in goldens if g.module.startswith(prefix) and g.level != "param"]
    return list(dict.fromkeys(names))


def _output_errors(graph: Graph) -> list[tuple[Tensor, float]]:
    """The model's output pairs (root outputs, else the last outputs) with their errors. A backward pass whose
    root computes no float gradient (token ids in) ends in the last gradients computed."""
    def usable(ts: list[Tensor]) -> list[tuple[Tensor, float]]:
        return [(t, t.err) for t in ts if t.err is not None and math.isfinite(t.err) and t.unit > 0]

    if graph.root is not None:
        outs = usable([graph.tensors[i] for i in graph.nodes[graph.root].outputs])
        if outs or graph.direction != "backward":
            return outs
    return usable([t for t in graph.in_order() if t.role == "output"][-4:])


def _node_evidence(graph: Graph, node: Node, t: Tensor) -> Evidence:
    def pick(ids: list[int]) -> list[TensorInfo]:
        return [tensor_info(graph, graph.tensors[i]) for i in ids[:8]]

    ev = Evidence(inputs=pick(node.inputs), parameters=pick(node.params), outputs=pick(node.outputs))
    if t.id not in node.inputs + node.outputs + node.params:
        ev.diverging = [tensor_info(graph, t)]
    return ev


def _cand_json(graph: Graph, rank: int, node: Node, ev: Event | None, jump: float, reason: str | None) -> Candidate:
    t = graph.tensors[ev.tensor] if ev is not None else None
    main = _main_output(graph, node, t) if t is not None else None
    return OpCandidate(
        rank=rank,
        **node_info(graph, node),
        golden=main.golden.name if main is not None and main.golden else None,
        target=main.target.name if main is not None and main.target else None,
        score=_num(jump),
        how=ev.how if ev is not None else "overflow",
        record=t.target.name if t is not None and t.target else None,
        error_units=_num(units(t)) if t is not None else None,
        inherited_units=_num(ev.inherited / t.unit) if ev is not None and t is not None and t.unit else None,
        reason=reason or _cand_reason(ev, t),
    )


def _cand_reason(ev: Event | None, t: Tensor | None) -> str:
    """Why a candidate ranks: its error against the threshold, or what its counts say (counts-mode pairs)."""
    if ev is None or t is None:
        return "differs exactly"
    if t.pair.mode == "counts" and t.err:
        return f"output: {off_by(t)}"
    return f"output {ev.err / t.unit:.3g} units vs threshold {ev.threshold / t.unit:.3g} units" if t.unit else "differs exactly"
