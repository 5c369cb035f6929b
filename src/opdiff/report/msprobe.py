"""`--format msprobe-csv,msprobe-xlsx` (or `--preset msprobe`): the comparison as `msprobe compare` writes it.

Same columns, names, units and Result rules as msprobe 26.x's compare_result file in its tensor,
summary (statistics) and md5 modes (msprobe_rows.py, msprobe_rules.py; docs/compare.md "msprobe").
"""

from __future__ import annotations

import os
from typing import Any

from ..compare.run import Comparison
from .blocks import BLOCK_ROWS, number_column
from .csv import cells, header_line
from .msprobe_rows import HEADERS, finish, row, scalar_row
from .msprobe_rules import judge
from .xlsx import _body, write_plain_sheet


def msprobe_mode(cmp: Comparison) -> str:
    """msprobe's layout for the comparison: tensor (real data), summary ("stats") or md5 ("hash")."""
    if cmp.golden.meta.get("mode") == cmp.target.meta.get("mode") == "hash":  # both dumped with a checksum summary
        return "hash"
    modes = {p.mode for p in cmp.results if p.status == "compared"}
    for m in ("tensor", "stats", "hash"):
        if m in modes:
            return m
    return "stats" if cmp.mode in ("stats", "counts") else cmp.mode if cmp.mode in HEADERS else "stats"


def msprobe_table(cmp: Comparison) -> tuple[list[str], list[dict[str, Any]]]:
    """(header, rows): one row per target tensor in its execution order, and per non-tensor argument of an
    msprobe dump (before its call's outputs), judged by msprobe's rules."""
    mode = msprobe_mode(cmp)
    scalars: dict[str, list[list[Any]]] = dict(cmp.target.meta.get("msprobe_scalars") or {})
    gscalars: dict[str, list[list[Any]]] = cmp.golden.meta.get("msprobe_scalars") or {}
    golden_call: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for p in cmp.results:
        t = p.target
        if t is None:
            continue
        key = str(t.extra.get("msprobe_name", ""))
        if p.golden is not None and key and key not in golden_call:
            golden_call[key] = str(p.golden.extra.get("msprobe_name", key))
        if ".output." in str(t.extra.get("msprobe_tensor", "")) and key in scalars:
            rows += _scalar_rows(key, scalars.pop(key), golden_call.get(key), gscalars, mode)
        rows.append(row(p, mode))
    for key, leaves in scalars.items():
        rows += _scalar_rows(key, leaves, golden_call.get(key), gscalars, mode)
    judge(rows, mode)
    finish(rows)
    return HEADERS[mode], rows


def _scalar_rows(key: str, leaves: list[list[Any]], gkey: str | None, gscalars: dict[str, list[list[Any]]],
                 mode: str) -> list[dict[str, Any]]:
    """Rows of one call's non-tensor arguments, each beside golden's argument of the same position."""
    gleaves = {x[0][len(gkey):]: x for x in gscalars.get(gkey, [])} if gkey else {}
    out = []
    for leaf in leaves:
        g = gleaves.get(leaf[0][len(key):])
        out.append(scalar_row(leaf[0], leaf, g[0] if g else None, g, mode))
    return out


def write_msprobe_csv(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """msprobe's table as CSV, byte for byte what csv.writer writes for it (None as "None"), a block of rows at
    a time with each column's numbers formatted at once (blocks.number_column, csv.cells)."""
    header, rows = msprobe_table(cmp)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace", buffering=1 << 20) as f:
        f.write(header_line(header))
        for i in range(0, len(rows), BLOCK_ROWS):
            block = rows[i:i + BLOCK_ROWS]
            columns = [cells(number_column([r.get(c) for r in block], na="None")) for c in header]
            f.write("\r\n".join(map(",".join, zip(*columns))) + "\r\n")


def _ms_body(v: Any) -> str:
    """A cell as xlsxwriter (nan_inf_to_errors) wrote msprobe's tables: nan and ±inf as error formulas, None
    as the text "None", an empty text as no value, other texts and numbers as they are."""
    if isinstance(v, float):  # numpy's float64 too: xlsxwriter wrote it as a number
        v = float(v)
    if type(v) is float and v - v != 0.0:
        if v != v:
            return ' t="e"><f>#NUM!</f><v>#NUM!</v></c>'
        return f' t="e"><f>{"" if v > 0 else "-"}1/0</f><v>#DIV/0!</v></c>'
    if v is None:
        return _body("None")
    if isinstance(v, (int, float, str)):
        return _body(v)
    return _body(str(v))


def write_msprobe_xlsx(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """msprobe's table as one sheet "Sheet1" (the cells xlsxwriter wrote before, written directly:
    xlsx.write_plain_sheet)."""
    header, rows = msprobe_table(cmp)
    write_plain_sheet(path, header, ([r.get(c) for c in header] for r in rows), cell=_ms_body)
