"""Console summary of a comparison: counts by verdict, the first FAIL in execution order, the worst pairs."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

from rich.console import Console
from rich.table import Table

from ..base import numfmt
from ..base.pair import Metrics, PairResult
from ..base.termsafe import safe
from ..base.vocab import (
    FAIL,
    NA,
    PASS,
    STATUS_DTYPE_MISMATCH,
    STATUS_ERROR,
    STATUS_SHAPE_MISMATCH,
    STATUS_UNMATCHED,
    WARNING,
)
from ..compare.run import Comparison
from ..compare.unmatched import describe, name_list
from ..metrics import names as M
from ..metrics.thresholds import ROUNDING_UNIT
from ..store import Dump

_DTYPE, _BITWISE = attrgetter("dtype"), attrgetter("bitwise_equal")
STYLE = {PASS: "green", WARNING: "yellow", FAIL: "red", NA: "dim"}
KEY_METRICS = (M.COSINE, M.RED, M.MAX_ABS_ERR, M.MAX_REL_ERR, M.NORM_REL_DIFF, M.HASH_EQUAL)
# the worst-pairs table's metric columns per compare mode, headed by each metric's own column name
MODE_COLUMNS = {
    "tensor": (M.COSINE, M.RED, M.MAX_ABS_ERR, M.MAX_REL_ERR),
    "stats": (M.NORM_REL_DIFF, M.NORM_STATS_DIFF, M.MAX_REL_DIFF, M.MEAN_REL_DIFF),
    "hash": (M.HASH_EQUAL,),
    "counts": (M.NUMEL, M.DIFF_COUNT, M.NONFINITE_MISMATCH),
}
# short headers for an 80-column terminal, each naming exactly one metric (docs/metrics.md has the full names)
SHORT = {M.RED: "RelEuclidDist", M.MAX_REL_ERR: "MaxRelErr (abs)", M.NORM_REL_DIFF: "L2normRelDiff",
         M.NORM_STATS_DIFF: "NormStatsDiff", M.MAX_REL_DIFF: "MaxRelDiff", M.MEAN_REL_DIFF: "MeanRelDiff",
         M.NONFINITE_MISMATCH: "NonFiniteMismatch"}


def _fmt(v: Any, key: str = "") -> str:
    if key == M.COSINE:
        return numfmt.cosine(v, na="N/A")
    return numfmt.num(v, 6, na="N/A")


def _rel(m: Metrics) -> str:
    """MaxRelativeErr, with the absolute error beside it when huge (golden near zero)."""
    return numfmt.rel_err(m.get(M.MAX_REL_ERR), m.get(M.MAX_ABS_ERR), na="N/A")


def _key_metrics(r: PairResult) -> str:
    m: Mapping[str, object] = r.metrics
    return "  ".join(f"{M.column(k)}={_rel(r.metrics) if k == M.MAX_REL_ERR else _fmt(m[k], k)}"
                     for k in KEY_METRICS if k in m)


def worst_table(worst: list[PairResult]) -> Table:
    """The worst pairs with the metrics of their compare mode(s), each column named by its metric."""
    modes = [m for m in MODE_COLUMNS if any(r.mode == m for r in worst)]
    keys = [k for m in modes for k in MODE_COLUMNS[m]]
    t = Table(title=f"worst {len(worst)} pairs" + (f" ({'/'.join(modes)} mode)" if modes else ""), show_lines=False)
    for c in ("#", "name", "result", *(SHORT.get(k, M.column(k)) for k in keys)):
        t.add_column(c, overflow="fold")
    for r in worst:
        m: Mapping[str, object] = r.metrics
        cells = [_rel(r.metrics) if k == M.MAX_REL_ERR else _fmt(m.get(k), k) for k in keys]
        t.add_row(str(r.index), safe(r.name), f"[{STYLE[r.result]}]{r.result}[/]", *cells)
    return t


def _float_dtype(d: Dump) -> str | None:
    """The float dtype most of a dump's records have (None: no float records; a tie: the first seen)."""
    counts = Counter(map(_DTYPE, d.records))  # counted at C speed
    return max((dt for dt in counts if dt in ROUNDING_UNIT), key=counts.__getitem__, default=None)


def input_warnings(golden: Dump, target: Dump) -> list[str]:
    """Signs the user swapped or repeated the inputs: the same directory twice, or a golden at a
    lower precision than its target."""
    out = []
    try:
        same = golden.where.resolve() == target.where.resolve() and (golden.rank, golden.step) == (target.rank, target.step)
    except OSError:
        same = False
    if same:
        out.append(f"golden and target are the same directory ({golden.where}): everything will agree")
    g, t = _float_dtype(golden), _float_dtype(target)
    if g and t and ROUNDING_UNIT[g] > ROUNDING_UNIT[t]:
        out.append(f"golden runs mostly in {g}, target in the more precise {t}: are GOLDEN and TARGET swapped? "
                   "(the golden is the reference, usually the higher precision)")
    return out


def print_summary(cmp: Comparison, console: Console | None = None, *, top: int = 10,
                  outputs: list[str] | None = None, allow_unmatched: bool = False) -> None:
    """Print the verdict counts, the first FAIL, the worst pairs, unmatched records and the report files."""
    # not a terminal (CI logs, pipes): do not wrap long record names at 80 columns
    con = console or Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    counts = cmp.counts()
    n = len(cmp.results)
    parts = [f"[{STYLE[k]}]{k} {counts.get(k, 0)}[/]" for k in (PASS, WARNING, FAIL, NA)]
    con.print(f"[bold]opdiff compare[/]  {safe(cmp.golden.where)} (golden) vs {safe(cmp.target.where)} (target)  "
              f"rank {cmp.target.rank} step {cmp.target.step}  mode {cmp.mode}  thresholds {cmp.thresholds.name}")
    for w in input_warnings(cmp.golden, cmp.target):
        con.print(f"[yellow]warning:[/] {safe(w)}", highlight=False)
    statuses = cmp.status_counts()
    con.print(f"{n} pairs: " + "  ".join(parts) + "   statuses: " +
              ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    bitwise = len(list(filter(None, map(_BITWISE, cmp.results))))
    if bitwise:
        con.print(f"bitwise equal: {bitwise}")
    ff = cmp.first_fail()
    if ff is not None:
        con.print(f"[red bold]first FAIL[/] #{ff.index} {safe(ff.name)}  ({safe(ff.target.op) if ff.target else ''} in "
                  f"module '{safe(ff.target.module) if ff.target else ''}', match {ff.match})")
        con.print(f"  {_key_metrics(ff)}")
        if ff.err_message:
            con.print(f"  [dim]{safe(ff.err_message)}[/]")
            if "u (" in ff.err_message or "u)" in ff.err_message:
                con.print(f"  [dim]{numfmt.UNIT_NOTE}[/]")
    worst = cmp.worst(top)
    if worst:
        con.print(worst_table(worst))
    for side in ("golden", "target"):
        un = cmp.unmatched(side) if statuses.get(STATUS_UNMATCHED) else []  # none: no scan of every pair
        if un:
            con.print(f"[yellow]unmatched {side} records: {len(un)}[/]  {name_list([safe(r.name) for r in un])}")
    failing = [] if allow_unmatched else cmp.failing_unmatched()
    if failing:  # the rest are reported only: what they change shows in the compared pairs after them
        con.print(f"[yellow]warning:[/] {safe(describe(failing))}")
    mismatch = (STATUS_SHAPE_MISMATCH, STATUS_DTYPE_MISMATCH, STATUS_ERROR)
    bad = [r for r in cmp.results if r.status in mismatch] if any(map(statuses.get, mismatch)) else []
    for r in bad[:5]:
        con.print(f"[yellow]{r.status}[/] #{r.index} {safe(r.name)}: {safe(r.err_message)}")
    if len(bad) > 5:
        con.print(f"[yellow]... {len(bad) - 5} more pairs with a mismatch or unreadable data[/]")
    mb = cmp.tensor_bytes / 1e6
    speed = f", {mb / cmp.elapsed:.0f} MB/s" if cmp.elapsed > 0 and mb else ""
    con.print(f"[dim]{mb:.1f} MB of tensor data in {cmp.elapsed:.2f} s with {cmp.workers} worker(s){speed}[/]")
    for p in cmp.golden.problems + cmp.target.problems:
        con.print(f"[yellow]warning:[/] {safe(p)}")
    if outputs:
        con.print("reports: " + "  ".join(outputs))
    j = cmp.judgement
    if j is not None:  # the run's one gate (compare/gate.py): which rule, and why it passes or fails
        con.print(f"gate {j.rule}: {safe(j.summary)}", highlight=False)
    if cmp.passed(allow_unmatched):
        con.print(f"[bold {STYLE[PASS]}]PASS[/]")
        return
    why = [f"diagnose says {j.verdict}" + (f" at {safe(j.culprit) or '<root>'}" if j.culprit is not None else "")] \
        if j is not None and j.rule == "noise" else []
    if counts.get(FAIL):
        why.append(f"{counts[FAIL]} FAIL")
    if bad:
        why.append(f"{len(bad)} mismatched or unreadable")
    if not cmp.compared_any():
        why.append("nothing compared")
    if failing:
        why.append(f"{len(failing)} unmatched (--allow-unmatched accepts them)")
    steps = cmp.failed_steps(allow_unmatched)
    if steps:
        why.append(f"step(s) {', '.join(str(s) for _, s in steps)} fail")
    con.print(f"[bold {STYLE[FAIL]}]FAIL[/] ({', '.join(why)})")
