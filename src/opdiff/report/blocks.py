"""The comparison table (report/table.py) in blocks of rows, column by column, every cell already as its text.

What the CSV and XLSX writers stream: the same values and texts as `table.table_value_rows` and `str()`,
produced a block at a time so that a whole column of numbers is formatted in one C call (numtext.py)
instead of ~30 `repr`s per row and report. Memory holds one block, whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..base.pair import PairResult
from ..base.vocab import NA
from ..compare.run import Comparison
from ..metrics import names as M
from .numtext import number_texts
from .table import ACCURACY_REACHED, ID_COLUMNS, STEP_COLUMNS, TAIL_COLUMNS, parts, shape_text

BLOCK_ROWS = 2048  # rows formatted together: large enough for C-speed columns, small enough to stay in cache
_FIXED = ID_COLUMNS + TAIL_COLUMNS  # the order of `_fixed`'s values
_TEXT_FIXED = frozenset(_FIXED) - {"Index"}  # fixed columns that always hold text


@dataclass(slots=True)
class Column:
    """One column of a block: its values as `table.rows` gives them (N/A metrics as "N/A"), each cell's text as
    the CSV writes it, and which cells are not finite numbers (None: every cell is one)."""

    values: list[Any]
    texts: list[str]
    special: list[int] | None


@dataclass(slots=True)
class Block:
    """Up to BLOCK_ROWS consecutive rows of the table."""

    results: list[PairResult]
    columns: list[Column]


def _fixed(r: PairResult, shapes: dict[tuple[int, ...], str]) -> tuple[Any, ...]:
    """The values of ID_COLUMNS then TAIL_COLUMNS for one pair, as table.row gives them."""
    g, t = r.golden, r.target
    rec = t or g
    assert rec is not None
    gs = "" if g is None else _shape(shapes, g.shape)
    ts = "" if t is None else _shape(shapes, t.shape)
    bw = r.bitwise_equal
    return (r.index, g.name if g else "", t.name if t else "", rec.op, rec.module, rec.direction, rec.role, rec.pos,
            g.dtype if g else "", t.dtype if t else "", r.precision, gs, ts, r.match, r.status, r.mode,
            "" if bw is None else ("Yes" if bw else "No"), r.result, ACCURACY_REACHED.get(r.result, ""),
            r.err_message, r.note)


def _shape(shapes: dict[tuple[int, ...], str], shape: tuple[int, ...]) -> str:
    """shape_text, remembered for the next record of that shape (a shape given as a list is not remembered)."""
    if type(shape) is not tuple:
        return shape_text(shape)
    text = shapes.get(shape)
    if text is None:
        text = shapes[shape] = shape_text(shape)
    return text


def _cell_text(v: Any) -> str:
    """A cell's CSV text (csv.writer's): None empty, everything else str() (nan, inf, True ...)."""
    return "" if v is None else v if type(v) is str else str(v)


def _text_column(values: list[Any]) -> Column:
    """A column of texts (names, dtypes, verdicts): no number formatting."""
    texts = values if set(map(type, values)) <= {str} else [_cell_text(v) for v in values]
    return Column(values, texts, list(range(len(values))))


def number_column(values: list[Any], na: Any = NA) -> Column:
    """A column of numbers formatted at once; cells that are not finite numbers (None -> `na`, nan, inf, text,
    bools) are written one at a time."""
    texts = number_texts(values)
    if texts is not None:
        return Column(values, texts, None)
    special = [i for i, v in enumerate(values) if (type(v) is not float and type(v) is not int) or v - v != 0.0]
    if na is not None and special:
        values = [na if v is None else v for v in values]
    if len(special) * 2 > len(values):
        return Column(values, [_cell_text(v) for v in values], special)
    plain = list(values)
    for i in special:
        plain[i] = 0
    texts = number_texts(plain) or [_cell_text(v) for v in plain]
    for i in special:
        texts[i] = _cell_text(values[i])
    return Column(values, texts, special)


def _block(results: list[PairResult], cols: list[str], lead: dict[str, int],
           shapes: dict[tuple[int, ...], str]) -> Block:
    fixed = list(zip(*[_fixed(r, shapes) for r in results]))
    fields = [M.field_of(c) for c in cols if c not in _FIXED and c not in lead]
    metrics = list(zip(*[list(map(m.get, fields)) for m in (r.metrics for r in results)])) if fields else []
    n, k, out = len(results), 0, []
    for c in cols:
        if c in lead:
            out.append(number_column([lead[c]] * n))
        elif c in _TEXT_FIXED:
            out.append(_text_column(list(fixed[_FIXED.index(c)])))
        elif c == "Index":
            out.append(number_column(list(fixed[0]), na=None))
        else:
            out.append(number_column(list(metrics[k])))
            k += 1
    return Block(results, out)


def blocks(cmp: Comparison, cols: list[str], size: int = BLOCK_ROWS) -> Iterator[Block]:
    """The rows of every step, step after step, in blocks of at most `size` (the rows of
    table.table_value_rows for the columns `cols`, Rank and Step first when present)."""
    shapes: dict[tuple[int, ...], str] = {}
    for (rank, step), c in parts(cmp):
        lead = {k: v for k, v in (("Rank", rank), ("Step", step)) if k in cols and k in STEP_COLUMNS}
        for i in range(0, len(c.results), size):
            if len(shapes) > 1 << 16:
                shapes.clear()
            yield _block(c.results[i:i + size], cols, lead, shapes)
