"""The comparison table (report/table.py) in blocks of rows, column by column, every cell already as its text.

What the CSV, XLSX and JSON writers stream: the same values and texts as `table.table_value_rows` and `str()`,
a block at a time. A column of record fields is gathered by one C-level map over the block's pairs, a
column of numbers formatted by one C call (numtext.py), instead of ~50 attribute reads and ~30 `repr`s per
row and report. A block computes each column when a writer first asks for it and keeps it for the other
writers of the same pass (report.write_many): the numbers of a pair are formatted once for CSV, XLSX and
JSON. Memory holds one block, whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any

from ..base.pair import PairResult
from ..base.record import Record
from ..base.vocab import NA
from ..compare.run import Comparison
from ..metrics import names as M
from .numtext import number_texts
from .table import ACCURACY_REACHED, ID_COLUMNS, STEP_COLUMNS, TAIL_COLUMNS, parts, shape_text

BLOCK_ROWS = 2048  # rows formatted together: large enough for C-speed columns, small enough to stay in cache
_FIXED = ID_COLUMNS + TAIL_COLUMNS  # the order of `_fixed`'s values
_FIXED_AT = {c: i for i, c in enumerate(_FIXED)}
_TEXT_FIXED = frozenset(_FIXED) - {"Index"}  # fixed columns that always hold text
_BITWISE = {None: "", True: "Yes", False: "No"}
_METRICS = attrgetter("metrics")
_SIDE = {"golden": attrgetter("golden"), "target": attrgetter("target")}
_OTHER = {"golden": "target", "target": "golden"}
# record attributes the table's columns hold as they are when every pair has both records (_fixed_columns)
_FIXED_ATTR = {("golden", "name"): "Golden Name", ("target", "name"): "Target Name", ("target", "op"): "Op Type",
               ("target", "module"): "Module", ("target", "direction"): "Direction", ("target", "role"): "Role",
               ("target", "pos"): "Position", ("golden", "dtype"): "Golden Dtype", ("target", "dtype"): "Target Dtype"}


@dataclass(slots=True)
class Column:
    """One column of a block: its values as `table.rows` gives them (N/A metrics as "N/A"), each cell's text as
    the CSV writes it, and which cells are not finite numbers (None: every cell is one)."""

    values: list[Any]
    texts: list[str]
    special: list[int] | None
    unique: set[str] | None = None  # the distinct texts, once a writer needed them (`distinct`)


def distinct(c: Column) -> set[str]:
    """The column's distinct texts, computed once per column: a writer's checks of a text column (quotes,
    markup, escapes) look at each distinct text once instead of at every cell."""
    if c.unique is None:
        c.unique = set(c.texts)
    return c.unique


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


def _shape_texts(shapes: dict[tuple[int, ...], str], recs: list[Record]) -> list[str]:
    """shape_text of each record's shape: the remembered texts looked up by one C-level map."""
    given = list(map(attrgetter("shape"), recs))
    try:
        texts = list(map(shapes.get, given))
    except TypeError:  # a shape given as a list (unhashable): one at a time
        return [_shape(shapes, s) for s in given]
    if None in texts:
        return [_shape(shapes, s) if t is None else t for t, s in zip(texts, given)]
    return texts  # type: ignore[return-value]  # no None: every shape was remembered


def _fixed_columns(results: list[PairResult], gs: list[Record | None], ts: list[Record | None],
                   shapes: dict[tuple[int, ...], str]) -> list[list[Any]]:
    """The values of ID_COLUMNS then TAIL_COLUMNS, a list per column, as `_fixed` gives them: gathered by
    C-level maps when every pair has both records (nearly always), else pair by pair."""
    if not (all(gs) and all(ts)):
        return [list(c) for c in zip(*[_fixed(r, shapes) for r in results])] if results else [[] for _ in _FIXED]
    g: list[Record] = gs  # type: ignore[assignment]  # all() above: no None
    t: list[Record] = ts  # type: ignore[assignment]

    def of(items: Sequence[Any], name: str) -> list[Any]:
        return list(map(attrgetter(name), items))

    result = of(results, "result")
    return [of(results, "index"), of(g, "name"), of(t, "name"), of(t, "op"), of(t, "module"), of(t, "direction"),
            of(t, "role"), of(t, "pos"), of(g, "dtype"), of(t, "dtype"), of(results, "precision"),
            _shape_texts(shapes, g), _shape_texts(shapes, t), of(results, "match"), of(results, "status"),
            of(results, "mode"), _bitwise(of(results, "bitwise_equal")), result,
            list(map(ACCURACY_REACHED.get, result, repeat(""))), of(results, "err_message"), of(results, "note")]


def _bitwise(flags: list[Any]) -> list[str]:
    """The Bitwise Equal cells: "" unknown, "Yes", "No" (by truth, as table.row)."""
    try:
        texts = list(map(_BITWISE.get, flags))
        if None not in texts:
            return texts  # type: ignore[return-value]
    except TypeError:  # an unhashable flag
        pass
    return ["" if b is None else ("Yes" if b else "No") for b in flags]


def metric_values(results: list[PairResult], fields: list[str]) -> list[list[Any]]:
    """Each field's values over the pairs (None where a pair has no such metric): one C-level itemgetter map per
    field (no tuple per pair to transpose: 0.85 of that), a field some pair lacks by `get`."""
    ms = list(map(_METRICS, results))
    out = []
    for f in fields:
        try:
            out.append(list(map(itemgetter(f), ms)))
        except (KeyError, TypeError):
            out.append([m.get(f) for m in ms])
    return out


def _cell_text(v: Any) -> str:
    """A cell's CSV text (csv.writer's): None empty, everything else str() (nan, inf, True ...)."""
    return "" if v is None else v if type(v) is str else str(v)


def _text_column(values: list[Any]) -> Column:
    """A column of texts (names, dtypes, verdicts): no number formatting. A column of one text (two thirds of
    a typical block's: a dtype, a verdict, an empty note) is found by one C-level count, not a set."""
    unique: set[Any] | None
    if values and type(values[0]) is str and values.count(values[0]) == len(values):
        unique = {values[0]}
    else:
        try:
            unique = set(values)
        except TypeError:  # an unhashable value: not a text
            unique = None
    if unique is not None and set(map(type, unique)) <= {str}:
        return Column(values, values, list(range(len(values))), unique)
    return Column(values, [_cell_text(v) for v in values], list(range(len(values))))


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


class Block:
    """Up to BLOCK_ROWS consecutive pairs of one (rank, step) part of the comparison. Its table columns
    (`columns`, those of `cols`) and any other column a writer asks for (`metrics`, `attr`) are computed on
    first use and kept: every writer of one pass shares them."""

    __slots__ = ("results", "cols", "at", "_shapes", "_sides", "_fixed", "_metrics", "_attrs", "_columns")

    def __init__(self, results: list[PairResult], cols: list[str], at: tuple[int, int],
                 shapes: dict[tuple[int, ...], str]) -> None:
        self.results, self.cols, self.at = results, cols, at  # at: (rank, step) of the part
        self._shapes = shapes  # shape -> its text, shared by the blocks of one pass
        self._sides: dict[str, list[Record | None]] = {}
        self._fixed: list[list[Any]] | None = None
        self._metrics: dict[str, Column] = {}
        self._attrs: dict[tuple[str, str], list[Any]] = {}
        self._columns: list[Column] | None = None

    @property
    def columns(self) -> list[Column]:
        """The table's columns `cols`, in order (Rank and Step, ID columns, metric columns, verdict columns)."""
        if self._columns is None:
            self._columns = self._table()
        return self._columns

    def side(self, side: str) -> list[Record | None]:
        """Each pair's golden or target record (None where it has none)."""
        recs = self._sides.get(side)
        if recs is None:
            recs = self._sides[side] = list(map(_SIDE[side], self.results))
        return recs

    def attr(self, side: str, name: str) -> list[Any]:
        """An attribute of each pair's golden or target record (None where it has none); the table's column of
        it when the table has one and every pair has both records (then the same values)."""
        got = self._attrs.get((side, name))
        if got is None:
            recs = self.side(side)
            column = _FIXED_ATTR.get((side, name))
            if column is not None and self._fixed is not None and all(recs) and all(self.side(_OTHER[side])):
                got = self._fixed[_FIXED_AT[column]]
            else:
                got = list(map(attrgetter(name), recs)) if all(recs) else \
                    [None if r is None else getattr(r, name) for r in recs]
            self._attrs[side, name] = got
        return got

    def fixed(self, name: str) -> list[Any]:
        """The values of one of table.ID_COLUMNS or TAIL_COLUMNS, as table.row gives them."""
        if self._fixed is None:
            self._fixed = _fixed_columns(self.results, self.side("golden"), self.side("target"), self._shapes)
        return self._fixed[_FIXED_AT[name]]

    def metrics(self, fields: Sequence[str]) -> list[Column]:
        """The columns of these metric fields (N/A: "N/A"), each gathered and formatted once per block."""
        missing = [f for f in dict.fromkeys(fields) if f not in self._metrics]
        if missing:
            for f, values in zip(missing, metric_values(self.results, missing)):
                self._metrics[f] = number_column(values)
        return [self._metrics[f] for f in fields]

    def _table(self) -> list[Column]:
        fields = [M.field_of(c) for c in self.cols if c not in _FIXED_AT and c not in STEP_COLUMNS]
        metric = iter(self.metrics(fields))
        n, lead, out = len(self.results), {"Rank": self.at[0], "Step": self.at[1]}, []
        for c in self.cols:
            if c in STEP_COLUMNS:
                out.append(number_column([lead[c]] * n))
            elif c in _TEXT_FIXED:
                out.append(_text_column(self.fixed(c)))
            elif c == "Index":
                out.append(number_column(self.fixed(c), na=None))
            else:
                out.append(next(metric))
        return out


def blocks(cmp: Comparison, cols: list[str], size: int = BLOCK_ROWS) -> Iterator[Block]:
    """The rows of every step, step after step, in blocks of at most `size` (the rows of
    table.table_value_rows for the columns `cols`, Rank and Step first when present)."""
    shapes: dict[tuple[int, ...], str] = {}
    for at, c in parts(cmp):
        for i in range(0, len(c.results), size):
            if len(shapes) > 1 << 16:
                shapes.clear()
            yield Block(c.results[i:i + size], cols, at, shapes)
