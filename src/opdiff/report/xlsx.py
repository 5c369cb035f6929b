"""XLSX report: the CSV table with red/yellow/green rows for FAIL/WARNING/PASS, frozen header, filters."""

from __future__ import annotations

import math
import os

import xlsxwriter

from ..base.vocab import FAIL, PASS, WARNING
from ..compare.run import Comparison
from .table import columns, row

FILLS = {PASS: "#C6EFCE", WARNING: "#FFEB9C", FAIL: "#FFC7CE"}  # Excel's good / neutral / bad fills


def write_xlsx(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the comparison table as one sheet; non-finite numbers are written as text ("nan", "inf")."""
    cols = columns(cmp.results)
    # constant_memory: rows go to disk as they are written, so memory does not grow with the table
    wb = xlsxwriter.Workbook(str(path), {"constant_memory": True, "strings_to_numbers": False})
    try:
        ws = wb.add_worksheet("compare")
        head = wb.add_format({"bold": True, "bg_color": "#D9D9D9", "border": 1})
        fills = {k: wb.add_format({"bg_color": v}) for k, v in FILLS.items()}
        for j, c in enumerate(cols):
            ws.set_column(j, j, 48 if "Name" in c or c in ("Err_message", "Note") else max(10, min(24, len(c) + 2)))
        ws.freeze_panes(1, 0)
        ws.autofilter(0, 0, len(cmp.results), len(cols) - 1)
        ws.write_row(0, 0, cols, head)
        for i, r in enumerate(cmp.results, start=1):
            fmt = fills.get(r.result)
            values = row(r, cols)
            for j, c in enumerate(cols):
                v = values[c]
                if isinstance(v, float) and not math.isfinite(v):
                    ws.write_string(i, j, repr(v), fmt)
                elif isinstance(v, bool):
                    ws.write_boolean(i, j, v, fmt)
                elif isinstance(v, (int, float)):
                    ws.write_number(i, j, v, fmt)
                else:
                    ws.write_string(i, j, str(v), fmt)
    finally:
        wb.close()
