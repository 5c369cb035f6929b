"""CSV report: one row per compared tensor in execution order (columns in report/table.py)."""

from __future__ import annotations

import csv
import os

from ..compare.run import Comparison
from .table import table_columns, table_value_rows


def write_csv(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the comparison table as CSV (UTF-8, header row first; every step, with Rank and Step columns
    when the comparison covers more than one)."""
    cols = table_columns(cmp)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        # csv writes each cell as csv_cell does (floats by repr: nan, inf, -inf; None empty; bools True/False)
        w.writerows(values for _, values in table_value_rows(cmp, cols))
