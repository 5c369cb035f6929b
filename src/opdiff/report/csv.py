"""CSV report: one row per compared tensor in execution order (columns in report/table.py).

Byte for byte what `csv.writer` (excel dialect: ",", '"', CRLF, minimal quoting) writes for the rows of
table.table_value_rows, but a block of rows at a time (blocks.py): cells arrive as texts, lines are
joined in C, and only a column holding a comma, quote or line break is quoted cell by cell (csv.writer
spent ~0.3 us per cell deciding that a number needs no quotes).
"""

from __future__ import annotations

import csv
import io
import os
import re

from ..base import gcpause
from ..compare.run import Comparison
from .blocks import Block, Column, blocks, distinct
from .table import table_columns
from .weave import fold, weave

_QUOTE = re.compile(r'[,"\r\n]')  # what makes csv.writer quote a field (QUOTE_MINIMAL)


def _quoted(texts: list[str]) -> list[str]:
    return ['"' + t.replace('"', '""') + '"' if _QUOTE.search(t) else t for t in texts]


def cells(c: Column) -> list[str]:
    """The column's cells as csv.writer writes them: numbers never need quotes; texts only when they hold a
    delimiter, a quote or a line break (checked once over the whole column)."""
    if c.special is None:
        return c.texts
    joined = "".join(distinct(c))
    if "," not in joined and '"' not in joined and "\r" not in joined and "\n" not in joined:
        return c.texts
    return _quoted(c.texts)


def header_line(cols: list[str]) -> str:
    """The header row as csv.writer writes it."""
    head = io.StringIO(newline="")
    csv.writer(head).writerow(cols)
    return head.getvalue()


class CsvSink:
    """The CSV report written as blocks of rows arrive (blocks.py): header first, then each block's lines."""

    def __init__(self, path: str | os.PathLike[str], cols: list[str], total: int = 0) -> None:
        self.f = open(path, "w", newline="", encoding="utf-8", errors="backslashreplace", buffering=1 << 20)
        self.f.write(header_line(cols))

    def add(self, b: Block) -> None:
        """The block's lines: cells between commas, a column with one text in every row part of the pieces."""
        if b.results:
            cols = [cells(c) for c in b.columns]
            self.f.write(weave(*fold(["", *[","] * (len(cols) - 1), "\r\n"], cols), 0, len(b.results)))

    def close(self) -> None:
        self.f.close()


def write_csv(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the comparison table as CSV (UTF-8, header row first; every step, with Rank and Step columns
    when the comparison covers more than one). Cells are str() of the values (floats in their shortest
    round-trip text, nan, inf, -inf; N/A metrics "N/A")."""
    cols = table_columns(cmp)
    sink = CsvSink(path, cols)
    try:
        with gcpause.paused():  # the comparison's objects: no full collections over them (base/gcpause.py)
            for b in blocks(cmp, cols):
                sink.add(b)
    finally:
        sink.close()
