"""What a record without a counterpart means: one rule for compare, diagnose and the library.

Every unmatched record is reported (listed, counted, warned about). It fails the run (compare's exit
code and `Comparison.passed()`, diagnose's verdict: never `pass`) only when it may carry a difference
that no compared pair shows (docs/reliability.md):

- it is an output of the model itself (the root module's output): nothing after it can show what it holds;
- most of a run has no counterpart (more than `MOSTLY_UNMATCHED` of one side's records, casts, copies and
  views aside): the pairs compared say too little about the run;
- nothing downstream of it was compared: no compared record consumes what its op made (`Record.src`
  links, followed through other unmatched ops), and none comes after it in its own module, inside it,
  or in an enclosing module other than the root. A chain that ends in a predicate (a one-element bool
  nothing reads as a tensor: `if not torch.isfinite(x).all()`) is observed by any compared record after it
  but the model's output: it only decides which ops run next, and those are compared.

An input or output that is another record's output (`Record.src`: a parent returning its child's tensor)
is skipped like a cast: its producer is judged.
Everything else is an op one run adds or lacks whose effect the compared pairs after it show: a cast,
copy or view (e.g. the casts bf16 autocast inserts), a fused kernel against its eager decomposition, an
extra output of a call whose other tensors were compared. Whether those downstream pairs agree is the
pairs' own verdict, which already decides the run. The root module's output alone does not vouch for an
op: a whole model's output is too coarse to show a difference made deep inside it.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..base.pair import PairResult
from ..base.record import Record

MOSTLY_UNMATCHED = 0.6  # share of one side's records without counterpart (casts, copies, views aside)

WHY_MODEL_OUTPUT = "an output of the model"
WHY_MOSTLY = "most of the run has no counterpart"
WHY_UNOBSERVED = "nothing compared downstream of it"

# op names (any level: aten "aten._to_copy.default", api "torch.Tensor.to", module "Identity") whose
# output holds the same values as their input, up to dtype, layout or storage
_TRANSPARENT = re.compile(
    r"(^|[.:/])(_?to(_copy)?|to_dtype|type_as|type|float|double|half|bfloat16|int|long|bool|copy_?|clone|contiguous"
    r"|_?(unsafe_)?view(_as)?|reshape(_as)?|_reshape_alias|expand(_as)?|squeeze_?|unsqueeze_?|flatten|unflatten"
    r"|t|transpose_?|permute|alias|detach_?|lift_fresh|identity|Identity|_autocast_to_(reduced|full)_precision"
    r"|slice|select|split|chunk|narrow|as_strided|unbind|_unsafe_view)"
    r"(\.(default|Tensor|int|dtype|dtype_layout|other|self|using_ints|Scalar|memory_format|copy|out))?$")


def is_transparent(rec: Record) -> bool:
    """True for a record of an op that only casts, copies or views its input."""
    return bool(_TRANSPARENT.search(rec.op))


def is_model_output(rec: Record) -> bool:
    """A forward output of the root model call."""
    return rec.module == "" and rec.role == "output" and rec.level == "module" and rec.direction == "forward"


def is_copy_of_output(rec: Record) -> bool:
    """An input or output that is another record's output (`src`: a consumer's input, a parent returning its
    child's tensor, an eval-mode dropout): it holds nothing its producer does not, and the producer is judged
    on its own (an output-only golden leaves every such input of the target unpaired)."""
    return rec.role in ("input", "output") and bool(rec.src) and rec.src != rec.name


@dataclass(frozen=True)
class Failing:
    """An unmatched record that fails the run, and why."""

    record: Record
    side: str  # golden | target
    why: str


def _ancestors(module: str) -> list[str]:
    """Proper ancestors of a module path, nearest first, the root ("") excluded."""
    parts = module.split(".") if module else []
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


class _Side:
    """One side's records as the rule sees them: which were paired, module scopes, dataflow links."""

    def __init__(self, recs: list[Record], paired: set[int]) -> None:
        self.paired = paired
        self.own_last: dict[str, int] = {}  # module -> index of its last paired record
        self.tree_last: dict[str, int] = {}  # module -> index of the last paired record in its subtree
        self.by_node: dict[str, list[Record]] = defaultdict(list)
        self.consumers: dict[str, list[Record]] = defaultdict(list)  # record name -> records made from it
        self.own_outputs: dict[str, list[Record]] = defaultdict(list)  # module -> its own unpaired outputs
        self.by_name: dict[str, Record] = {}
        self.downstream: dict[str, bool] = {}  # node -> observed_downstream, computed once
        self.last_paired = -1  # index of the last paired record but the model's output
        for r in recs:
            self.by_node[r.node].append(r)
            self.by_name[r.name] = r
            if r.role == "output" and id(r) not in paired:
                self.own_outputs[r.module].append(r)
            if r.src:
                self.consumers[r.src].append(r)
            if id(r) in paired:
                if not is_model_output(r):
                    self.last_paired = max(self.last_paired, r.index)
                self.own_last[r.module] = max(self.own_last.get(r.module, -1), r.index)
                for m in [r.module, *_ancestors(r.module), ""] if r.module else [""]:
                    self.tree_last[m] = max(self.tree_last.get(m, -1), r.index)

    def observed_in_scope(self, rec: Record) -> bool:
        """A paired record after `rec` in its module, inside it, or in an enclosing module but the root; or an
        unpaired output of an enclosing module, after `rec`, that a paired record is made from (a fused last
        block: its dropout's output reaches the compared final norm only through the block's own output)."""
        if self.tree_last.get(rec.module, -1) > rec.index:
            return True
        if rec.role == "output" and any(o is not rec and o.role == "output" and self.output_observed(o)
                                        for o in self.by_node[rec.node]):
            return True  # an extra output of a call whose other outputs were compared
        ancestors = _ancestors(rec.module)
        if any(self.own_last.get(a, -1) > rec.index for a in ancestors):
            return True
        return any(o.index > rec.index and self.output_observed(o) for a in ancestors for o in self.own_outputs.get(a, ()))

    def output_observed(self, out: Record) -> bool:
        """An output that was compared, or that a compared record is made from (through its producer, when
        it is a copy of another record's output)."""
        if id(out) in self.paired:
            return True
        producer = self.by_name.get(out.src) if out.src else None
        return self.observed_downstream(producer or out)

    def observed_downstream(self, rec: Record) -> bool:
        """A paired record made from what rec's op produced, through other unpaired ops (`Record.src`);
        once per op: every unmatched record inside a block asks it of the block's outputs."""
        known = self.downstream.get(rec.node)
        if known is None:
            known = self.downstream[rec.node] = self._walk_downstream(rec)
        return known

    def decides_what_follows(self, out: Record) -> bool:
        """A predicate nothing reads as a tensor (Python's `if` reads it), with a compared record after it: a
        different value would change which ops run, and what runs after it is compared."""
        return (out.dtype == "bool" and math.prod(out.shape) == 1 and not self.consumers.get(out.name)
                and self.last_paired > out.index)

    def _walk_downstream(self, rec: Record) -> bool:
        seen = {rec.node}
        todo = [rec.node]
        while todo:
            for out in self.by_node[todo.pop()]:
                if out.role != "output":
                    continue
                if self.decides_what_follows(out):
                    return True
                for c in self.consumers.get(out.name, ()):
                    if id(c) in self.paired:
                        return True
                    if c.node not in seen:
                        seen.add(c.node)
                        todo.append(c.node)
        return False


def failing_unmatched(results: Sequence[PairResult], unmatched: dict[str, list[Record]]) -> list[Failing]:
    """The records of `unmatched` (by side, as `Comparison.unmatched` gives them) that fail the run.

    `results` are all pairs of the comparison: what was paired, in which order each side ran."""
    out: list[Failing] = []
    for side in ("golden", "target"):
        un = unmatched.get(side) or []
        if not un:
            continue
        recs: list[Record] = []
        paired: set[int] = set()
        for p in results:
            r = getattr(p, side)
            if r is not None:
                recs.append(r)
                if p.golden is not None and p.target is not None:
                    paired.add(id(r))
            for g in p.golden_group if side == "golden" else ():
                if g is not r:
                    recs.append(g)
                    paired.add(id(g))
        substantive = [r for r in un if not is_transparent(r) and not is_copy_of_output(r)]
        mostly = len(recs) > 0 and len(substantive) > MOSTLY_UNMATCHED * len(recs)
        view: _Side | None = None
        for r in un:
            if is_model_output(r):
                out.append(Failing(r, side, WHY_MODEL_OUTPUT))
            elif is_transparent(r) or is_copy_of_output(r):
                continue
            elif mostly:
                out.append(Failing(r, side, WHY_MOSTLY))
            else:
                view = view or _Side(recs, paired)
                if not (view.observed_in_scope(r) or view.observed_downstream(r)):
                    out.append(Failing(r, side, WHY_UNOBSERVED))
    return out


def name_list(names: Sequence[str], show: int = 5) -> str:
    """The first `show` names, then how many more: how warnings name records."""
    more = f", ... ({len(names) - show} more)" if len(names) > show else ""
    return ", ".join(names[:show]) + more


def describe(failing: Sequence[Failing], show: int = 5) -> str:
    """One line naming the failing unmatched records and why they fail."""
    shown = name_list([f"{f.record.name} ({f.why})" for f in failing], show)
    return f"{len(failing)} record(s) have no counterpart and may carry a difference no compared pair shows: {shown}"
