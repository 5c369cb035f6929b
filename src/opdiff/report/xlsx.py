"""XLSX report: the CSV table with red/yellow/green rows for FAIL/WARNING/PASS, frozen header, filters.

Written directly as SpreadsheetML (a zip of a few XML parts; ECMA-376), one row at a time into the
deflated sheet: a cell costs one string format instead of a general-purpose writer's per-cell
objects (xlsxwriter took 45 % of a 4,000-pair comparison), and memory stays constant whatever the
table size. Strings are inline (no shared-string table to hold in memory).
"""

from __future__ import annotations

import io
import math
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from operator import attrgetter
from typing import IO, Any

from ..base import gcpause
from ..base.vocab import FAIL, PASS, WARNING
from ..compare.run import Comparison
from .blocks import Block, Column, blocks, distinct
from .table import all_results, table_columns
from .weave import constant, fold, weave

_isal: Any  # ISA-L's deflate (isal.isal_zlib), or None where it is not installed: zlib's, slower
try:
    from isal import isal_zlib as _isal
except ImportError:  # pragma: no cover - isal is a dependency; zlib writes the same format
    _isal = None

FILLS = {PASS: "C6EFCE", WARNING: "FFEB9C", FAIL: "FFC7CE"}  # Excel's good / neutral / bad fills
MAX_ROWS = 1 << 20  # Excel's sheet limit, header included: the CSV and JSON reports hold every row
MAX_TEXT = 32767  # Excel's longest cell text
# cell style indices of styles.xml: 0 plain, 1 header, 2.. one per result fill
_STYLE = {None: 0, PASS: 2, WARNING: 3, FAIL: 4}
# what XML 1.0 cannot hold, written as Excel's _xHHHH_: control characters, and lone surrogates (no UTF-8 for them)
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

_CONTENT_TYPES = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">\
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>\
<Default Extension="xml" ContentType="application/xml"/>\
<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>\
{sheets}\
<Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/>\
</Types>"""
_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">\
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" \
Target="xl/workbook.xml"/></Relationships>"""
_WORKBOOK_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">\
<Relationship Id="rId0" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" \
Target="styles.xml"/>{sheets}</Relationships>"""
_WORKBOOK = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" \
xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">\
<sheets>{sheets}</sheets><definedNames>{filters}</definedNames></workbook>"""
_SHEET_TYPE = ('<Override PartName="/xl/worksheets/sheet{k}.xml" '
               'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>')
_SHEET_REL = ('<Relationship Id="rId{k}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
              'worksheet" Target="worksheets/sheet{k}.xml"/>')


def _styles() -> str:
    fills = "".join(f'<fill><patternFill patternType="solid"><fgColor rgb="FF{c}"/><bgColor indexed="64"/>'
                    f'</patternFill></fill>' for c in ("D9D9D9", *FILLS.values()))
    xfs = ('<xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>'
           '<xf numFmtId="0" fontId="1" fillId="2" borderId="1" xfId="0" applyFont="1" applyFill="1" applyBorder="1"/>'
           + "".join(f'<xf numFmtId="0" fontId="0" fillId="{3 + i}" borderId="0" xfId="0" applyFill="1"/>'
                     for i in range(len(FILLS))))
    thin = '<{0} style="thin"><color auto="1"/></{0}>'
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
            '<styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
            '<fonts count="2"><font><sz val="11"/><name val="Calibri"/></font>'
            '<font><b/><sz val="11"/><name val="Calibri"/></font></fonts>'
            f'<fills count="{2 + 1 + len(FILLS)}"><fill><patternFill patternType="none"/></fill>'
            f'<fill><patternFill patternType="gray125"/></fill>{fills}</fills>'
            '<borders count="2"><border><left/><right/><top/><bottom/><diagonal/></border>'
            f'<border>{"".join(thin.format(s) for s in ("left", "right", "top", "bottom"))}<diagonal/></border></borders>'
            '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>'
            f'<cellXfs count="{2 + len(FILLS)}">{xfs}</cellXfs>'
            '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles></styleSheet>')


def col_letter(j: int) -> str:
    """Column name of 0-based index j: A .. Z, AA .. ."""
    out = ""
    j += 1
    while j:
        j, r = divmod(j - 1, 26)
        out = chr(65 + r) + out
    return out


def _text(v: str) -> str:
    """A string as XML text: escaped, control characters as Excel's _xHHHH_, at most MAX_TEXT long."""
    v = v[:MAX_TEXT].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if _BAD_XML.search(v):
        v = _BAD_XML.sub(lambda m: f"_x{ord(m.group()):04X}_", v)
    return v


def _body(v: Any) -> str:
    """A cell after its `<c` and style: `/>` when empty, else its type, value and `</c>`. Non-finite numbers
    are text ("nan", "inf"), as the CSV writes them."""
    if type(v) is float and v - v == 0.0:  # most cells: a finite metric
        return f"><v>{v!r}</v></c>"
    if hasattr(v, "item") and not isinstance(v, str):  # a numpy scalar: the Python number it equals
        v = v.item()
    if isinstance(v, bool):
        return f' t="b"><v>{int(v)}</v></c>'
    if isinstance(v, int):
        return f"><v>{v}</v></c>"
    if isinstance(v, float):
        if math.isfinite(v):
            return f"><v>{v!r}</v></c>"
        v = repr(v)
    elif not isinstance(v, str):
        v = str(v)
    if v == "":
        return "/>"
    space = ' xml:space="preserve"' if v[0].isspace() or v[-1].isspace() else ""
    return f' t="inlineStr"><is><t{space}>{_text(v)}</t></is></c>'


def _cell(ref: str, v: Any, s: str) -> str:
    """One <c> element with its reference (the header row)."""
    return f'<c r="{ref}"{s}{_body(v)}'


def _payload(c: Column) -> tuple[str, list[str] | None]:
    """How a block's column goes into the row template: (its piece after `<c` and the style, the texts that
    fill it). Numbers and plain texts (no escape, space kept or shortening needed; checked once per distinct
    text) go in as they are; a column of numbers with a few other cells (N/A, nan) as whole cells, its
    numbers' texts wrapped, the others written by `_body`; other columns as whole cells by `_body`."""
    if c.special is None:
        return "><v>%s</v></c>", c.texts
    if len(c.special) == len(c.values):
        if not any(c.values):  # a column of empty texts (Err_message, Note): empty cells
            return "/>", None
        if c.texts is c.values and _plain_texts(distinct(c)):
            return ' t="inlineStr"><is><t>%s</t></is></c>', c.texts
        return "%s", [_body(v) for v in c.values]
    cells = ["><v>" + t + "</v></c>" for t in c.texts]
    for i in c.special:
        cells[i] = _body(c.values[i])
    return "%s", cells


def _plain_texts(texts: set[str]) -> bool:
    """Whether every text is non-empty ASCII written as it is (no markup, control character or space at
    either end, not too long for a cell)."""
    if "" in texts:
        return False
    joined = "\x00".join(texts)
    if not joined.isascii() or joined.count("\x00") != len(texts) - 1:
        return False
    raw = joined.encode("ascii")
    return len(raw.translate(None, _PLAIN_NOT)) == len(raw) - len(texts) + 1 and "\x00 " not in joined and \
        " \x00" not in joined and joined[:1] != " " and joined[-1:] != " " and max(map(len, texts)) <= MAX_TEXT


_PLAIN_NOT = b"&<>" + bytes(range(32))  # ASCII that makes a text more than <t>text</t> (\t \n \r: maybe a space)
_RESULT = attrgetter("result")
_CELL = {st: f'<c s="{st}"' if st else "<c" for st in _STYLE.values()}  # a cell's start in a row of each style


def _pieces(cell: str, payloads: list[str]) -> list[str]:
    """A row's fixed pieces around its row number and each column's texts: `cell` starts every cell, each
    payload holds its column's `%s` (or none: an empty cell)."""
    out = ['<row r="', '">']
    for p in payloads:
        before, *after = p.split("%s")
        out[-1] += cell + before
        out += after
    out[-1] += "</row>"
    return out


def _runs(styles: list[int]) -> Iterator[tuple[int, int, int]]:
    """(style, start, stop) of each run of rows of one style."""
    start = 0
    for i in [i for i in range(1, len(styles)) if styles[i] != styles[i - 1]]:
        yield styles[start], start, i
        start = i
    if styles:
        yield styles[start], start, len(styles)


def sheet_name(k: int) -> str:
    """The name of the k-th sheet (0-based): "compare", then "compare 2", "compare 3" ... past Excel's rows."""
    return "compare" if k == 0 else f"compare {k + 1}"


class XlsxSink:
    """The XLSX report written as blocks of rows arrive (blocks.py): a zip of SpreadsheetML parts, the sheet
    deflated as it is written, memory constant whatever the table size. Past `rows_per_sheet` rows (Excel's
    limit: 1,048,575 below the header) the table goes on in sheet "compare 2", "compare 3" ..., each with
    the header, frozen and filtered: every row is in the workbook."""

    def __init__(self, path: str | os.PathLike[str], cols: list[str], total: int,
                 rows_per_sheet: int = MAX_ROWS - 1) -> None:
        self.cols, self.per = cols, rows_per_sheet
        self.counts = [min(rows_per_sheet, total - k) for k in range(0, total, rows_per_sheet)] or [0]
        self.letter = col_letter(len(cols) - 1)
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1)
        self.out: io.TextIOWrapper | None = None
        self.k, self.row, self.left = -1, 0, 0
        self._parts()
        self._next_sheet()

    def _parts(self) -> None:
        ks = range(1, len(self.counts) + 1)
        self.zf.writestr("[Content_Types].xml", _CONTENT_TYPES.format(sheets="".join(_SHEET_TYPE.format(k=k) for k in ks)))
        self.zf.writestr("_rels/.rels", _RELS)
        sheets = "".join(f'<sheet name="{sheet_name(k - 1)}" sheetId="{k}" r:id="rId{k}"/>' for k in ks)
        filters = "".join(f'<definedName name="_xlnm._FilterDatabase" localSheetId="{k - 1}" hidden="1">'
                          f"'{sheet_name(k - 1)}'!$A$1:${self.letter}${n + 1}</definedName>"
                          for k, n in zip(ks, self.counts))
        self.zf.writestr("xl/workbook.xml", _WORKBOOK.format(sheets=sheets, filters=filters))
        self.zf.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS.format(sheets="".join(_SHEET_REL.format(k=k) for k in ks)))
        self.zf.writestr("xl/styles.xml", _styles())

    def _next_sheet(self) -> None:
        self._end_sheet()
        self.k += 1
        n = self.counts[self.k]
        raw = deflated_member(self.zf, f"xl/worksheets/sheet{self.k + 1}.xml")
        self.out = io.TextIOWrapper(raw, encoding="utf-8", write_through=False)
        self.out.write(_sheet_head(self.cols, f"{self.letter}{n + 1}", selected=self.k == 0))
        self.row, self.left = 2, n

    def _end_sheet(self) -> None:
        if self.out is not None:
            self.out.write(f'</sheetData><autoFilter ref="A1:{self.letter}{self.row - 1}"/></worksheet>')
            self.out.close()
            self.out = None

    def add(self, b: Block) -> None:
        """The block's rows: each row is its style's fixed pieces (one template per result fill and block) with
        the row's texts between them, a run of rows of one fill at a time (weave.py); a column with one text in
        every row is part of the template."""
        pays = [_payload(c) for c in b.columns]
        fills = [t for _, t in pays if t is not None]
        tmpl = {st: _pieces(cell, [p for p, _ in pays]) for st, cell in _CELL.items()}
        styles = list(map(_STYLE.get, map(_RESULT, b.results), repeat(0)))
        start, size = 0, len(b.results)
        while start < size:
            if self.left == 0:
                self._next_sheet()
            n = min(self.left, size - start)
            assert self.out is not None
            cols = [list(map(str, range(self.row, self.row + n)))]
            cols += [f[start:start + n] for f in fills] if start or n < size else fills
            fixed = [constant(c) for c in cols]
            folded = {st: fold(pieces, cols, fixed) for st, pieces in tmpl.items()}
            self.out.write("".join(weave(*folded[st], a, z) for st, a, z in _runs(styles[start:start + n])))
            start, self.row, self.left = start + n, self.row + n, self.left - n

    def close(self) -> None:
        while self.k < len(self.counts) - 1:  # fewer rows came than announced: the sheets stay well-formed
            self._next_sheet()
        self._end_sheet()
        self.zf.close()


def deflated_member(zf: zipfile.ZipFile, name: str) -> IO[bytes]:
    """A member of `zf` to stream into, deflated by ISA-L's level 1 where isal is installed: the same DEFLATE
    format as zlib's, ~10x less CPU for a sheet's XML and a smaller file (bench/writers_bench.py,
    docs/compare.md). zipfile keeps the container, the CRC and the sizes; only its compressor object is
    ISA-L's (zipfile calls its compress() and flush(), which ISA-L's has with the same meaning)."""
    raw: Any = zf.open(name, "w", force_zip64=True)
    if _isal is not None and getattr(raw, "_compressor", None) is not None:
        raw._compressor = _isal.compressobj(1, _isal.DEFLATED, -15)  # raw deflate, as zipfile's own
        if _IsalMember is not None and type(raw) is _ZIP_WRITE and all(
                hasattr(raw, a) for a in ("_crc", "_file_size", "_compress_size", "_fileobj")):
            raw.__class__ = _IsalMember  # the same object and state; only write() changes
    return raw  # type: ignore[no-any-return]


def _isal_write(self: Any, data: Any) -> int:
    """zipfile's member write() with the CRC-32 from ISA-L too: the same checksum, ~30x less CPU than zlib's
    (0.7 ns per byte of a sheet's XML here); close() and the container stay zipfile's."""
    if self.closed:
        raise ValueError("I/O operation on closed file.")
    view = memoryview(data)
    self._file_size += view.nbytes
    self._crc = _isal.crc32(view, self._crc)
    out = self._compressor.compress(view)
    self._compress_size += len(out)
    self._fileobj.write(out)
    return view.nbytes


_ZIP_WRITE: Any = getattr(zipfile, "_ZipWriteFile", None)  # zipfile's member writer (what zf.open(.., "w") gives)
_IsalMember: Any = None if _isal is None or _ZIP_WRITE is None else \
    type("_IsalMember", (_ZIP_WRITE,), {"write": _isal_write, "__doc__": _isal_write.__doc__})


def _sheet_head(cols: list[str], last: str, selected: bool) -> str:
    """A worksheet up to its first data row: its extent (read-only readers take the row count from it), frozen
    header, column widths, the header row. Data rows follow with cells in column order without references,
    which ECMA-376 makes optional (unique "B123" references were a third of the bytes to deflate)."""
    widths = "".join(f'<col min="{j + 1}" max="{j + 1}" width="{_width(c) + 0.7109375}" customWidth="1"/>'
                     for j, c in enumerate(cols))
    header = "".join(_cell(f"{col_letter(j)}1", c, ' s="1"') for j, c in enumerate(cols))
    tab = ' tabSelected="1"' if selected else ""
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
            '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
            f'<dimension ref="A1:{last}"/><sheetViews><sheetView{tab} '
            'workbookViewId="0"><pane ySplit="1" topLeftCell="A2" activePane="bottomLeft" state="frozen"/>'
            '<selection pane="bottomLeft" activeCell="A2" sqref="A2"/></sheetView></sheetViews>'
            f'<sheetFormatPr defaultRowHeight="15"/><cols>{widths}</cols><sheetData><row r="1">{header}</row>')


def _width(c: str) -> int:
    return 48 if "Name" in c or c in ("Err_message", "Note") else max(10, min(24, len(c) + 2))


def write_xlsx(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the comparison table as sheet "compare" (every step, with Rank and Step columns when the
    comparison covers more than one; past Excel's 1,048,576 rows, sheets "compare 2" ...: XlsxSink)."""
    cols = table_columns(cmp)
    sink = XlsxSink(path, cols, len(all_results(cmp)))
    try:
        with gcpause.paused():  # the comparison's objects: no full collections over them (base/gcpause.py)
            for b in blocks(cmp, cols):
                sink.add(b)
    finally:
        sink.close()


def write_plain_sheet(path: str | os.PathLike[str], header: list[str], rows: Iterable[Iterable[Any]],
                      name: str = "Sheet1", cell: Callable[[Any], str] | None = None) -> None:
    """A workbook of one unstyled sheet (no frozen header, no filter): the header row, then `rows`, each
    cell as `cell` writes it after `<c` (default `_body`), streamed into the deflated sheet. What
    msprobe-format XLSX files are (report/msprobe.py), at a fraction of a general-purpose writer's cost."""
    body = cell or _body
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("[Content_Types].xml", _CONTENT_TYPES.format(sheets=_SHEET_TYPE.format(k=1)))
        zf.writestr("_rels/.rels", _RELS)
        zf.writestr("xl/workbook.xml", _WORKBOOK.format(sheets=f'<sheet name="{name}" sheetId="1" r:id="rId1"/>',
                                                        filters="").replace("<definedNames></definedNames>", ""))
        zf.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS.format(sheets=_SHEET_REL.format(k=1)))
        zf.writestr("xl/styles.xml", _styles())
        with deflated_member(zf, "xl/worksheets/sheet1.xml") as raw, \
                io.TextIOWrapper(raw, encoding="utf-8", write_through=False) as out:
            out.write('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
                      '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>')
            out.write('<row r="1">' + "".join("<c" + _body(h) for h in header) + "</row>")
            chunk: list[str] = []
            for i, row in enumerate(rows, start=2):
                chunk.append(f'<row r="{i}">' + "".join(["<c" + body(v) for v in row]) + "</row>")
                if len(chunk) >= 1024:
                    out.write("".join(chunk))
                    chunk.clear()
            out.write("".join(chunk) + "</sheetData></worksheet>")
