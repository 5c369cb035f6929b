"""The comparison table shared by the CSV and XLSX reports: columns and one row per pair."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..base.pair import PairResult
from ..base.vocab import FAIL, NA, PASS, WARNING
from ..compare.run import Comparison
from ..metrics import names as M

ID_COLUMNS = (
    "Index", "Golden Name", "Target Name", "Op Type", "Module", "Direction", "Role", "Position",
    "Golden Dtype", "Target Dtype", "Precision", "Golden Shape", "Target Shape", "Match", "Status", "Mode",
)
# the metric fields of each mode, in column order; written under their column names (names.COLUMN)
TENSOR_FIELDS = M.TENSOR_METRICS + M.COUNT_METRICS + M.WORST_METRICS
STATS_FIELDS = M.STATS_METRICS + (M.GOLDEN_NAN, M.GOLDEN_POSINF, M.GOLDEN_NEGINF, M.TARGET_NAN, M.TARGET_POSINF,
                                  M.TARGET_NEGINF, M.NONFINITE_MISMATCH)
HASH_FIELDS = (M.HASH_EQUAL,)
TENSOR_COLUMNS, STATS_COLUMNS, HASH_COLUMNS = (tuple(M.COLUMN[f] for f in fs) for fs in (TENSOR_FIELDS, STATS_FIELDS,
                                                                                        HASH_FIELDS))
TAIL_COLUMNS = ("Bitwise Equal", "Result", "Accuracy Reached or Not", "Err_message", "Note")
ACCURACY_REACHED = {PASS: "Yes", WARNING: "Yes", FAIL: "No", NA: ""}


def columns(results: list[PairResult]) -> list[str]:
    """ID columns, the metric columns of every mode used, then verdict columns."""
    modes = {r.mode for r in results if r.metrics}
    cols = list(ID_COLUMNS)
    seen = set(cols)
    for mode, group in (("tensor", TENSOR_COLUMNS), ("stats", STATS_COLUMNS), ("hash", HASH_COLUMNS)):
        if mode in modes or (mode == "tensor" and not modes):
            cols += [c for c in group if c not in seen]
            seen.update(group)
    return cols + list(TAIL_COLUMNS)


def shape_text(shape: tuple[int, ...] | None) -> str:
    return "" if shape is None else "[" + ",".join(map(str, shape)) + "]"


def row(r: PairResult, cols: list[str]) -> dict[str, Any]:
    """One pair as column -> value: numbers stay numbers, N/A metrics are "N/A"."""
    g, t, rec = r.golden, r.target, r.record
    out: dict[str, Any] = {
        "Index": r.index,
        "Golden Name": g.name if g else "",
        "Target Name": t.name if t else "",
        "Op Type": rec.op,
        "Module": rec.module,
        "Direction": rec.direction,
        "Role": rec.role,
        "Position": rec.pos,
        "Golden Dtype": g.dtype if g else "",
        "Target Dtype": t.dtype if t else "",
        "Precision": r.precision,
        "Golden Shape": shape_text(g.shape) if g else "",
        "Target Shape": shape_text(t.shape) if t else "",
        "Match": r.match,
        "Status": r.status,
        "Mode": r.mode,
        "Bitwise Equal": "" if r.bitwise_equal is None else ("Yes" if r.bitwise_equal else "No"),
        "Result": r.result,
        "Accuracy Reached or Not": ACCURACY_REACHED.get(r.result, ""),
        "Err_message": r.err_message,
        "Note": r.note,
    }
    for c in cols:
        if c not in out:
            v = r.metrics.get(M.field_of(c))
            out[c] = NA if v is None else v
    return out


def rows(results: Iterable[PairResult], cols: list[str]) -> Iterator[list[Any]]:
    """Each pair's values in the order of `cols`, as `row` gives them, with the columns resolved once for
    all rows (which metric field a column holds) rather than once per cell."""
    plan = [(c, None if c in _FIXED else M.field_of(c)) for c in cols]
    for r in results:
        fixed, m = row(r, []), r.metrics
        yield [fixed[c] if f is None else (NA if (v := m.get(f)) is None else v) for c, f in plan]


_FIXED = frozenset(ID_COLUMNS + TAIL_COLUMNS)  # the columns `row` fills whatever the metrics


STEP_COLUMNS = ("Rank", "Step")  # first columns of a multi-step comparison's table: which part a row belongs to


def parts(cmp: Comparison) -> list[tuple[tuple[int, int], Comparison]]:
    """Every (rank, step) part a comparison covers, in step order: the reports show each of them."""
    return sorted(cmp.by_step().items(), key=lambda kv: (kv[0][1], kv[0][0]))


def all_results(cmp: Comparison) -> list[PairResult]:
    """The pairs of every step, step after step."""
    return [r for _, c in parts(cmp) for r in c.results]


def table_columns(cmp: Comparison) -> list[str]:
    """The table's columns: `columns` over every step, led by Rank and Step when there is more than one."""
    cols = columns(all_results(cmp))
    return [*STEP_COLUMNS, *cols] if cmp.other_steps else cols


def table_rows(cmp: Comparison, cols: list[str]) -> Iterator[tuple[PairResult, dict[str, Any]]]:
    """(pair, column -> value) for every pair of every step, step after step."""
    own = [c for c in cols if c not in STEP_COLUMNS]
    for (rank, step), c in parts(cmp):
        for r in c.results:
            values = row(r, own)
            if cmp.other_steps:
                values["Rank"], values["Step"] = rank, step
            yield r, values


def table_value_rows(cmp: Comparison, cols: list[str]) -> Iterator[tuple[PairResult, list[Any]]]:
    """(pair, its values in the order of `cols`) for every pair of every step, as table_rows gives them, with
    the columns resolved once (`rows`): what the CSV and XLSX writers write."""
    own = [c for c in cols if c not in STEP_COLUMNS]
    lead = [c for c in cols if c in STEP_COLUMNS]  # table_columns puts Rank and Step first
    for (rank, step), c in parts(cmp):
        at = {"Rank": rank, "Step": step}
        for r, values in zip(c.results, rows(c.results, own)):
            yield r, [at[k] for k in lead] + values if lead else values
