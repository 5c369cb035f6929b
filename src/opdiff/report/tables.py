"""The comparison's row formats written together: one pass over the rows feeds every sink (CSV, XLSX, JSON),
so that the rows are gathered and their numbers formatted once (blocks.py), not once per format."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..base import gcpause
from ..base.outdir import write_atomic
from ..compare.run import Comparison
from .blocks import Block, blocks
from .csv import CsvSink
from .json import JsonSink
from .table import all_results, table_columns
from .xlsx import XlsxSink


class Sink(Protocol):
    """A table format written block by block."""

    def add(self, b: Block) -> None: ...

    def close(self) -> None: ...


def _csv(path: Path, cmp: Comparison, cols: list[str], total: int) -> Sink:
    return CsvSink(path, cols, total)


def _xlsx(path: Path, cmp: Comparison, cols: list[str], total: int) -> Sink:
    return XlsxSink(path, cols, total)


def _json(path: Path, cmp: Comparison, cols: list[str], total: int) -> Sink:
    return JsonSink(path, cmp)


SINKS: dict[str, Callable[[Path, Comparison, list[str], int], Sink]] = {"csv": _csv, "xlsx": _xlsx, "json": _json}


def write_tables(cmp: Comparison, outputs: list[tuple[str, Path]]) -> None:
    """Write each (format, path) of SINKS in one pass over the comparison's rows, each file through a
    temporary renamed into place (base.outdir.write_atomic) once all are written."""
    cols = table_columns(cmp)
    total = len(all_results(cmp))

    def write(tmps: list[Path]) -> None:
        sinks: list[Sink] = []
        try:
            for (fmt, _), tmp in zip(outputs, tmps):
                sinks.append(SINKS[fmt](tmp, cmp, cols, total))
            with gcpause.paused():  # a million live objects of the comparison: no full collections over them
                for b in blocks(cmp, cols):
                    for s in sinks:
                        s.add(b)
        finally:
            for s in sinks:
                s.close()

    _nested(outputs, [], write)


def _nested(outputs: list[tuple[str, Path]], tmps: list[Path], write: Callable[[list[Path]], Any]) -> None:
    """write_atomic around write_atomic: every temporary exists while `write` runs, each is renamed in (or
    removed when writing fails) as the nesting unwinds."""
    if len(tmps) == len(outputs):
        write(tmps)
        return
    write_atomic(outputs[len(tmps)][1], lambda tmp: _nested(outputs, [*tmps, tmp], write))
