"""The JSON report's pair lines for a block of pairs, from the block's columns: one template per block.

A pair's line is pair_json's object, ~65 values between fixed keys and punctuation. Instead of a dict per pair
and per record encoded by orjson (~6 us a pair here), each value of the block is taken as a column
(blocks.py; the numbers the CSV and XLSX already formatted are reused), written as JSON text a column at a
time, and the lines are woven from the fixed pieces and the columns (weave.py). A column of texts needing
no escape (checked once per distinct text) goes in between quotes as it is; other columns are encoded a
cell at a time by orjson. What the template does not cover marks the pair `slow`, and json.py encodes that
pair alone: a missing side, a fusion group, metrics with other keys than the block's first pair, a
non-finite or N/A metric (null and the "metrics_nonfinite" sibling), a value orjson refuses.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from ..metrics import names as M
from . import numtext
from .blocks import Block, Column
from .numtext import number_texts
from .weave import fold

RECORD_FIELDS = ("index", "name", "node", "module", "op", "level", "direction", "role", "pos", "dtype", "shape")
_SHAPE_CHARS = str.maketrans("", "", "0123456789-,")  # what a JSON list of ints holds besides its brackets
_FLAG = {True: "true", False: "false", None: "null"}
_METRICS = attrgetter("metrics")


def default(o: Any) -> Any:
    """What orjson cannot encode itself: a numpy scalar as its Python value, anything else as text."""
    if hasattr(o, "item") and not isinstance(o, (list, dict, str)):
        return o.item()
    return str(o)


@dataclass(slots=True)
class Template:
    """A block's lines: line i is pieces[0] + columns[0][i] + pieces[1] + ... for every pair not `slow`."""

    pieces: list[str]
    columns: list[Sequence[str]]
    slow: bytearray  # 1: the pair is encoded alone


class _Builder:
    """Fixed text and columns appended in line order."""

    def __init__(self, n: int) -> None:
        self.pieces: list[str] = [""]
        self.columns: list[list[str]] = []
        self.slow = bytearray(n)

    def text(self, s: str) -> None:
        self.pieces[-1] += s

    def column(self, texts: list[str], quoted: bool = False) -> None:
        if quoted:
            self.text('"')
        self.columns.append(texts)
        self.pieces.append('"' if quoted else "")

    def cells(self, values: list[Any]) -> list[str]:
        """Each value's JSON text by orjson; a value it refuses marks its pair slow."""
        dumps, out = numtext.orjson.dumps, []
        for i, v in enumerate(values):
            try:
                out.append(dumps(v, default=default).decode("utf-8"))
            except TypeError:
                self.slow[i] = 1
                out.append("")
        return out

    def strings(self, values: list[Any]) -> None:
        """A column of texts: between quotes as they are when none needs an escape, else cell by cell."""
        if _plain(values):
            self.column(values, quoted=True)
        else:
            self.column(self.cells(values))

    def numbers(self, values: list[Any]) -> None:
        """A column of numbers (any other value cell by cell)."""
        texts = number_texts(values)
        self.column(self.cells(values) if texts is None else texts)

    def values(self, values: list[Any]) -> None:
        """A column of texts, numbers or anything else."""
        if _plain(values):
            self.column(values, quoted=True)
        else:
            self.numbers(values)


def _plain(values: list[Any]) -> bool:
    """Whether every value is a text JSON writes as it is between quotes (ASCII, no quote, backslash or
    control character): a column of one text (one C-level count) checked once, any other over all its texts
    joined (cheaper than a set of them when most differ, as names do)."""
    one = bool(values) and type(values[0]) is str and values.count(values[0]) == len(values)
    try:
        joined = values[0] if one else "".join(values)
    except TypeError:  # a value that is no text
        return False
    if not joined.isascii() or '"' in joined or "\\" in joined:
        return False
    raw = joined.encode("ascii")
    return len(raw.translate(None, _CONTROL)) == len(raw)


_CONTROL = bytes(range(32)) + b"\x7f"


def template(b: Block, at: tuple[int, int] | None) -> Template:
    """The block's template: pair_json's keys in its order, each value a column (`at`: rank and step first)."""
    out = _Builder(len(b.results))
    dumps = numtext.orjson.dumps
    out.text(',{"rank":' + dumps(at[0]).decode() + ',"step":' + dumps(at[1]).decode() + ',"index":' if at else
             ',{"index":')
    out.numbers(b.fixed("Index"))
    for side in ("golden", "target"):
        _record(out, b, side)
    for key, name in (("match", "Match"), ("status", "Status"), ("mode", "Mode"), ("result", "Result")):
        out.text(f',"{key}":')
        out.strings(b.fixed(name))
    out.text(',"accuracy_reached":')
    out.values(_or_none(b.fixed("Accuracy Reached or Not")))
    out.text(',"bitwise_equal":')
    _flags(out, list(map(attrgetter("bitwise_equal"), b.results)))
    out.text(',"precision":')
    out.values(_or_none(b.fixed("Precision")))
    out.text(',"metrics":{')
    _metrics(out, b)
    out.text('},"err_message":')
    out.strings(b.fixed("Err_message"))
    out.text(',"note":')
    out.strings(b.fixed("Note"))
    out.text(',"golden_group":[]}\n')
    groups = list(map(attrgetter("golden_group"), b.results))
    if any(groups):
        for i, g in enumerate(groups):
            if g:
                out.slow[i] = 1
    pieces, columns = fold(out.pieces, out.columns)  # a column with one text in every line: part of the pieces
    return Template(pieces, columns, out.slow)


def _record(out: _Builder, b: Block, side: str) -> None:
    """`"golden":{...}` (or target): the record's fields; a pair without this side is slow."""
    recs = b.side(side)
    whole = all(recs)
    if not whole:
        for i, r in enumerate(recs):
            if r is None:
                out.slow[i] = 1
    out.text(f',"{side}":' + "{")
    for k, name in enumerate(RECORD_FIELDS):
        out.text(("," if k else "") + f'"{name}":')
        if name == "shape":
            _shapes(out, b, side)
            continue
        values = b.attr(side, name)
        if not whole:  # the slow pairs' cells are not written: a filler of the column's kind
            filler = 0 if name == "index" else ""
            values = [filler if r is None else v for r, v in zip(recs, values)]
        if name == "index":
            out.numbers(values)
        else:
            out.strings(values)
    out.text("}")


def _shapes(out: _Builder, b: Block, side: str) -> None:
    """A side's shapes as JSON lists: the table's shape texts ("[2,3]") where each is a list of integers."""
    texts = b.fixed("Golden Shape" if side == "golden" else "Target Shape")
    rest = "".join(texts).translate(_SHAPE_CHARS)
    if rest.replace("[]", "") == "" and rest.count("[]") == len(texts) - texts.count(""):
        out.column(texts)
        return
    shapes = b.attr(side, "shape")
    out.column(out.cells([None if s is None else list(s) for s in shapes]))


def _or_none(values: list[Any]) -> list[Any]:
    """pair_json's `value or None`."""
    return values if all(values) else [v or None for v in values]


def _flags(out: _Builder, flags: list[Any]) -> None:
    """bitwise_equal: true, false or null (anything else cell by cell)."""
    try:
        unique = set(flags)
    except TypeError:
        unique = {0.5}  # not a flag: cell by cell
    if all(v is None or type(v) is bool for v in unique):
        out.column(list(map(_FLAG.__getitem__, flags)))
    else:
        out.column(out.cells(flags))


def _metrics(out: _Builder, b: Block) -> None:
    """The metrics object with the keys of the block's first pair, in its order; a pair with other keys, or a
    value that is not a finite number or a flag (N/A, nan, inf: null and "metrics_nonfinite"), is slow."""
    ms = list(map(_METRICS, b.results))
    first = next((m for m, s in zip(ms, out.slow) if m and not s), ms[0] if ms else {})
    keys = list(first)
    if len(set(map(len, ms))) > 1:
        for i, m in enumerate(ms):
            if len(m) != len(keys):
                out.slow[i] = 1
    dumps = numtext.orjson.dumps
    for k, (key, c) in enumerate(zip(keys, b.metrics(keys))):
        out.text(("," if k else "") + dumps(M.column(key)).decode("utf-8") + ":")
        out.column(_metric_texts(out, c))


def _metric_texts(out: _Builder, c: Column) -> list[str]:
    """A metric column's JSON texts: its numbers as the table has them, flags as true/false; any other cell
    marks its pair slow."""
    if c.special is None:
        return c.texts
    texts = list(c.texts)
    for i in c.special:
        v = c.values[i]
        if type(v) is bool:
            texts[i] = "true" if v else "false"
        else:
            out.slow[i] = 1
    return texts


def runs(slow: bytearray, n: int) -> Iterator[tuple[bool, int, int]]:
    """(fast, start, stop) of each run of pairs the template writes (fast) or that are encoded alone."""
    if not any(slow):
        if n:
            yield True, 0, n
        return
    start = 0
    while start < n:
        fast = not slow[start]
        stop = slow.find(b"\x01" if fast else b"\x00", start)
        stop = n if stop < 0 else stop
        yield fast, start, stop
        start = stop
