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
from collections.abc import Iterator
from itertools import islice
from typing import Any

from ..base.vocab import FAIL, PASS, WARNING
from ..compare.run import Comparison
from .table import all_results, table_columns, table_value_rows

FILLS = {PASS: "C6EFCE", WARNING: "FFEB9C", FAIL: "FFC7CE"}  # Excel's good / neutral / bad fills
MAX_ROWS = 1 << 20  # Excel's sheet limit, header included: the CSV and JSON reports hold every row
MAX_TEXT = 32767  # Excel's longest cell text
# cell style indices of styles.xml: 0 plain, 1 header, 2.. one per result fill
_STYLE = {None: 0, PASS: 2, WARNING: 3, FAIL: 4}
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")

_CONTENT_TYPES = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">\
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>\
<Default Extension="xml" ContentType="application/xml"/>\
<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>\
<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>\
<Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/>\
</Types>"""
_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">\
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" \
Target="xl/workbook.xml"/></Relationships>"""
_WORKBOOK_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">\
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" \
Target="worksheets/sheet1.xml"/>\
<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" \
Target="styles.xml"/></Relationships>"""
_WORKBOOK = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" \
xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">\
<sheets><sheet name="compare" sheetId="1" r:id="rId1"/></sheets>\
<definedNames><definedName name="_xlnm._FilterDatabase" localSheetId="0" hidden="1">compare!{ref}</definedName>\
</definedNames></workbook>"""


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


def _cell(ref: str, v: Any, s: str) -> str:
    """One <c> element; non-finite numbers are text ("nan", "inf"), as the CSV writes them."""
    if type(v) is float and v - v == 0.0:  # most cells: a finite metric
        return f'<c r="{ref}"{s}><v>{v!r}</v></c>'
    if isinstance(v, bool):
        return f'<c r="{ref}"{s} t="b"><v>{int(v)}</v></c>'
    if isinstance(v, int):
        return f'<c r="{ref}"{s}><v>{v}</v></c>'
    if isinstance(v, float):
        if math.isfinite(v):
            return f'<c r="{ref}"{s}><v>{v!r}</v></c>'
        v = repr(v)
    elif not isinstance(v, str):
        v = str(v)
    if v == "":
        return f'<c r="{ref}"{s}/>' if s else ""
    space = ' xml:space="preserve"' if v[0].isspace() or v[-1].isspace() else ""
    return f'<c r="{ref}"{s} t="inlineStr"><is><t{space}>{_text(v)}</t></is></c>'


def _sheet(cmp: Comparison, cols: list[str], last: str, nrows: int) -> Iterator[str]:
    """The worksheet XML in pieces: its extent (read-only readers take the row count from it), frozen
    header, column widths, one <row> per pair, the filter."""
    yield ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
           '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
           f'<dimension ref="A1:{last}"/><sheetViews><sheetView tabSelected="1" workbookViewId="0"><pane ySplit="1" topLeftCell="A2" '
           'activePane="bottomLeft" state="frozen"/><selection pane="bottomLeft" activeCell="A2" sqref="A2"/>'
           '</sheetView></sheetViews><sheetFormatPr defaultRowHeight="15"/><cols>')
    for j, c in enumerate(cols):
        w = 48 if "Name" in c or c in ("Err_message", "Note") else max(10, min(24, len(c) + 2))
        yield f'<col min="{j + 1}" max="{j + 1}" width="{w + 0.7109375}" customWidth="1"/>'
    letters = [col_letter(j) for j in range(len(cols))]
    yield '</cols><sheetData><row r="1">'
    yield "".join(_cell(f"{a}1", c, ' s="1"') for a, c in zip(letters, cols))
    yield "</row>"
    repeats = [c not in _UNIQUE for c in cols]  # columns whose texts repeat from row to row
    texts: dict[str, str] = {}  # a repeating text -> its cell after the reference and style
    for i, (r, values) in enumerate(islice(table_value_rows(cmp, cols), nrows - 1), start=2):
        st = _STYLE.get(r.result, 0)
        s = f' s="{st}"' if st else ""
        yield f'<row r="{i}">' + "".join(_cells(i, s, letters, values, repeats, texts)) + "</row>"
    yield f'</sheetData><autoFilter ref="A1:{last}"/></worksheet>'


_UNIQUE = frozenset({"Golden Name", "Target Name", "Err_message", "Note"})  # texts not worth remembering


def _cells(i: int, s: str, letters: list[str], values: list[Any], repeats: list[bool],
           texts: dict[str, str]) -> list[str]:
    """One row's cells, each as _cell writes it: finite numbers inline and repeating texts escaped once
    (a call and an escape per cell were most of the cost)."""
    out = []
    for a, v, rep in zip(letters, values, repeats):
        kind = type(v)
        if kind is int or (kind is float and v - v == 0.0):
            out.append(f'<c r="{a}{i}"{s}><v>{v!r}</v></c>')
        elif kind is str and rep and v and (tail := texts.get(v)) is not None:
            out.append(f'<c r="{a}{i}"{s}{tail}')
        else:
            head = f'<c r="{a}{i}"{s}'
            cell = _cell(f"{a}{i}", v, s)
            if kind is str and rep and v and len(texts) < 1 << 16:
                texts[v] = cell[len(head):]
            out.append(cell)
    return out


def write_xlsx(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the comparison table as one sheet "compare" (at most MAX_ROWS rows, Excel's limit; every step,
    with Rank and Step columns when the comparison covers more than one)."""
    cols = table_columns(cmp)
    nrows = min(len(all_results(cmp)) + 1, MAX_ROWS)
    last = f"{col_letter(len(cols) - 1)}{nrows}"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("[Content_Types].xml", _CONTENT_TYPES)
        zf.writestr("_rels/.rels", _RELS)
        zf.writestr("xl/workbook.xml", _WORKBOOK.format(ref=f"$A$1:${last.rstrip('0123456789')}${nrows}"))
        zf.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS)
        zf.writestr("xl/styles.xml", _styles())
        with zf.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as raw, \
                io.TextIOWrapper(raw, encoding="utf-8", write_through=False) as out:
            for piece in _sheet(cmp, cols, last, nrows):
                out.write(piece)
