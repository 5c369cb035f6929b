"""The block-at-a-time report rows (report/blocks.py, numtext.py): CSV byte for byte what csv.writer writes
for table_value_rows, XLSX the same values and fills, JSON the same values with and without orjson, every
number's text str()'s, Excel's row limit met by more sheets, and memory that does not grow with the rows."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import struct
import tracemalloc
from dataclasses import replace

import numpy as np
import openpyxl
import pytest

from opdiff import report
from opdiff.compare import compare
from opdiff.metrics import names as M
from opdiff.report import numtext
from opdiff.report.blocks import blocks
from opdiff.report.table import table_columns, table_value_rows
from opdiff.report.xlsx import XlsxSink, sheet_name
from opdiff.testing.synthetic import Tensor, write_dump

RNG = np.random.default_rng(3)


@pytest.fixture(scope="module")
def cmp(tmp_path_factory):
    """Six pairs (PASS, FAIL, WARNING, nan FAIL, bf16, unmatched) widened with odd values: N/A, nan, ±inf,
    numpy and bool metrics, notes with commas, quotes, line breaks, markup and non-ASCII, repeated to 2,400
    rows so that blocks (2,048 rows) split them."""
    root = tmp_path_factory.mktemp("rows")
    g = [Tensor(f"h.{i}", "Linear", "output", "0", RNG.standard_normal((4, 8)).astype(np.float32)) for i in range(5)]
    t = [Tensor(x.module, x.op, x.role, x.pos, x.array.copy()) for x in g]
    t[1].array = t[1].array * 1.02
    t[2].array = (t[2].array.astype(np.float64) * (1 + 2e-5)).astype(np.float32)
    t[3].array[0, 0] = np.nan
    t.append(Tensor("extra", "Dropout", "output", "0", g[0].array))
    write_dump(root / "g", g)
    write_dump(root / "t", t)
    c = compare(root / "g", root / "t")
    odd = [
        {M.COSINE: float("nan"), M.MAX_ABS_ERR: float("inf"), M.EUC_DIST: -float("inf")},
        {M.COSINE: np.float64(0.5), M.MAX_ABS_ERR: 1e-05, M.MEAN_ABS_ERR: 1.5e-7, M.RMSE: 2.5e-05, M.NUMEL: 7},
        {M.COSINE: None, M.MAX_ABS_ERR: 123456789012345678.0, M.NUMEL: 2 ** 70},
        {M.HASH_EQUAL: True, M.COSINE: -0.0},
    ]
    notes = ["a, b", 'say "x"', "line\nbreak", " lead", "<b>&amp;</b> ü 中文", "", "tab\there"]
    rows = []
    for k in range(400):
        for r in c.results:
            m = dict(r.metrics)
            if k % 5 == 1:
                m.update(odd[k % len(odd)])
            rows.append(replace(r, metrics=m, note=notes[k % len(notes)] if k % 3 else r.note,
                                err_message="bad, very" if k % 11 == 0 else r.err_message))
    return replace(c, results=rows)


def _floats(n: int) -> list[float]:
    rnd = random.Random(5)
    out = []
    while len(out) < n:
        v = struct.unpack("d", struct.pack("Q", rnd.getrandbits(64)))[0] if rnd.random() < 0.5 else \
            rnd.random() * 10 ** rnd.randint(-12, 20) * rnd.choice((1, -1))
        if math.isfinite(v):
            out.append(v)
    return out + [1e-5, -1e-5, 9.999999999999999e-05, 1e-4, 5e-324, -0.0, 1e16, 1e15, 10.00001, 2.5e-05, 1e-7]


@pytest.mark.parametrize("encoder", ["orjson", "standard"])
def test_number_texts_are_str_of_each_value(encoder, monkeypatch):
    if encoder == "standard":
        monkeypatch.setattr(numtext, "orjson", None)
    vals = _floats(20_000) + [0, -7, 2 ** 62, 1.0, 0.1]
    assert numtext.number_texts(vals) == [str(v) for v in vals]
    for bad in ([1.0, None], [True], [float("nan")], [1.0, float("inf")], ["1"]):
        assert numtext.number_texts(bad) is None


def _reference_csv(c) -> bytes:
    """What the CSV report was before blocks: csv.writer over table_value_rows."""
    cols = table_columns(c)
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(cols)
    w.writerows(values for _, values in table_value_rows(c, cols))
    return f.getvalue().encode("utf-8")


def test_csv_is_byte_for_byte_csv_writers(cmp, tmp_path):
    report.write_csv(cmp, tmp_path / "c.csv")
    assert (tmp_path / "c.csv").read_bytes() == _reference_csv(cmp)
    assert sum(1 for _ in blocks(cmp, table_columns(cmp))) == 2  # the rows did span blocks


def test_csv_of_a_multi_step_comparison(cmp, tmp_path):
    two = replace(cmp, other_steps={(0, 1): replace(cmp, results=cmp.results[:300])})
    report.write_csv(two, tmp_path / "s.csv")
    text = (tmp_path / "s.csv").read_bytes()
    assert text == _reference_csv(two) and text.startswith(b"Rank,Step,Index")


def test_xlsx_holds_the_tables_values_and_fills(cmp, tmp_path):
    report.write_xlsx(cmp, tmp_path / "c.xlsx")
    ws = openpyxl.load_workbook(tmp_path / "c.xlsx").active
    cols = table_columns(cmp)
    assert [c.value for c in ws[1]] == cols
    fill = {"PASS": "C6EFCE", "WARNING": "FFEB9C", "FAIL": "FFC7CE"}
    got = ws.iter_rows(min_row=2, values_only=False)
    for (r, values), cells in zip(table_value_rows(cmp, cols), got, strict=True):
        want = [None if v == "" else v.replace("\t", "\t") if isinstance(v, str) else
                (repr(v) if isinstance(v, float) and not math.isfinite(v) else
                 float(v) if isinstance(v, np.floating) else v) for v in values]
        assert [c.value for c in cells] == want
        if r.result in fill:
            assert cells[0].fill.fgColor.rgb[-6:] == fill[r.result]


def test_xlsx_goes_on_in_more_sheets_past_the_row_limit(cmp, tmp_path):
    """Excel's 1,048,575 rows below the header, met here at 1,000 rows a sheet: every row is in the workbook,
    in order, each sheet with the header, a frozen first row and its own filter; read-only readers agree."""
    cols = table_columns(cmp)
    sink = XlsxSink(tmp_path / "m.xlsx", cols, len(cmp.results), rows_per_sheet=1000)
    for b in blocks(cmp, cols):
        sink.add(b)
    sink.close()
    wb = openpyxl.load_workbook(tmp_path / "m.xlsx")
    assert wb.sheetnames == [sheet_name(k) for k in range(3)] == ["compare", "compare 2", "compare 3"]
    index = []
    for ws in wb.worksheets:
        assert [c.value for c in ws[1]] == cols and ws.freeze_panes == "A2"
        assert ws.auto_filter.ref == f"A1:{ws.max_column and openpyxl.utils.get_column_letter(len(cols))}{ws.max_row}"
        index += [row[0] for row in ws.iter_rows(min_row=2, values_only=True)]
    assert index == [r.index for r in cmp.results] and len(index) == 2400
    ro = openpyxl.load_workbook(tmp_path / "m.xlsx", read_only=True)
    assert [ws.max_row for ws in ro.worksheets] == [1001, 1001, 401]


def test_json_with_orjson_has_the_standard_encoders_values(cmp, tmp_path, monkeypatch):
    report.write_json(cmp, tmp_path / "fast.json")
    monkeypatch.setattr(numtext, "orjson", None)
    report.write_json(cmp, tmp_path / "std.json")

    def strict(name):
        raise AssertionError(name)

    fast, std = (json.loads((tmp_path / f).read_text(encoding="utf-8"), parse_constant=strict)
                 for f in ("fast.json", "std.json"))
    assert fast == std and len(fast["pairs"]) == 2400
    odd = fast["pairs"][16 * 6]  # k = 16: nan, inf, -inf metrics
    assert odd["metrics"]["Cosine"] is None and odd["metrics_nonfinite"] == {"Cosine": "nan", "MaxAbsErr": "inf",
                                                                             "EucDist": "-inf"}
    assert fast["pairs"][6 * 6 + 1]["metrics"]["Numel"] == 2 ** 70  # past orjson's 64 bits: the standard line
    assert fast["pairs"][6]["metrics"]["Cosine"] == 0.5  # a numpy scalar


def test_write_many_writes_csv_and_xlsx_in_one_pass_as_write_does(cmp, tmp_path):
    one, alone = tmp_path / "one", tmp_path / "alone"
    one.mkdir()
    alone.mkdir()
    fmts = ["csv", "xlsx", "json"]
    report.write_many(cmp, [(f, one / f"c.{f}") for f in fmts])
    for f in fmts:
        report.write(cmp, f, alone / f"c.{f}")
    assert sorted(p.name for p in one.iterdir()) == ["c.csv", "c.json", "c.xlsx"]  # no temporary left
    assert (one / "c.csv").read_bytes() == (alone / "c.csv").read_bytes()
    assert (one / "c.json").read_bytes() == (alone / "c.json").read_bytes()
    a, b = (openpyxl.load_workbook(d / "c.xlsx", read_only=True).active for d in (one, alone))
    assert list(a.iter_rows(values_only=True)) == list(b.iter_rows(values_only=True))


def test_memory_of_writing_does_not_grow_with_the_rows(cmp, tmp_path):
    """Python's peak allocations while writing CSV, XLSX and JSON of 2,400 rows and of 7,200 rows: the same
    blocks in memory whatever the count (the pairs themselves are the caller's)."""
    def peak(c) -> int:
        tracemalloc.start()
        report.write_many(c, [(f, tmp_path / f"p.{f}") for f in ("csv", "xlsx", "json")])
        p = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return p

    small, big = peak(cmp), peak(replace(cmp, results=cmp.results * 3))
    assert big < small * 1.5 + 2_000_000, (small, big)


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot print this metric")


def test_write_many_failing_midway_leaves_the_old_files_and_no_temporary(cmp, tmp_path):
    """A value no writer can print in the second block: the CSV and XLSX written so far are dropped with
    their temporaries, the files of an earlier run stay as they were."""
    outs = [(f, tmp_path / f"c.{f}") for f in ("csv", "xlsx")]
    for _, p in outs:
        p.write_text("earlier run")
    bad = list(cmp.results)
    bad[2300] = replace(bad[2300], metrics={**bad[2300].metrics, M.COSINE: _Unprintable()})
    with pytest.raises(RuntimeError, match="cannot print"):
        report.write_many(replace(cmp, results=bad), outs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "c.xlsx"]
    assert all(p.read_text() == "earlier run" for _, p in outs)


def test_msprobe_xlsx_holds_the_msprobe_csvs_table(cmp, tmp_path):
    """msprobe's table written directly (no xlsxwriter): every cell of the XLSX is the CSV's cell, numbers
    exactly (17 digits, where xlsxwriter kept 16), nan and inf as the error formulas xlsxwriter wrote."""
    from opdiff.report.msprobe import msprobe_table

    m = [dict(r.metrics) for r in cmp.results[:12]]
    m[0][M.MAX_ABS_ERR], m[1][M.MAX_ABS_ERR], m[2][M.MAX_ABS_ERR] = float("nan"), float("inf"), -float("inf")
    small = replace(cmp, results=[replace(r, metrics=x) for r, x in zip(cmp.results, m)])
    report.write(small, "msprobe-csv", tmp_path / "m.csv")
    report.write(small, "msprobe-xlsx", tmp_path / "m.xlsx")
    with open(tmp_path / "m.csv", newline="", encoding="utf-8") as f:
        text = list(csv.reader(f))
    header, rows = msprobe_table(small)
    ws = openpyxl.load_workbook(tmp_path / "m.xlsx").active
    assert ws.title == "Sheet1"
    cells = list(ws.iter_rows(values_only=True))
    assert list(cells[0]) == text[0] == header and len(cells) == len(text) == 13
    for got, want, row in zip(cells[1:], text[1:], rows):
        for g, w, c in zip(got, want, header):
            v = row[c]
            if isinstance(v, float) and not math.isfinite(v):
                assert g == ("=#NUM!" if math.isnan(v) else "=1/0" if v > 0 else "=-1/0"), (c, g)
            elif isinstance(v, bool):
                assert g is v
            elif isinstance(v, (int, float)):
                assert g == v and str(g) == w, (c, g, w)
            else:
                assert g == (None if w == "" else w), (c, g, w)
    assert any(isinstance(v, float) and not math.isfinite(v) for r in rows for v in r.values())


def test_metric_values_are_each_pairs_get_field_by_field(cmp):
    """blocks.metric_values (one itemgetter map per field): each field's values as `get` gives them, None where a
    pair lacks the field (the unmatched pair: that field falls back to `get`), in the pairs' order."""
    from opdiff.report.blocks import metric_values

    results = cmp.results
    fields = [M.COSINE, M.MAX_ABS_ERR, M.RED, "numel"]
    assert any(M.COSINE not in r.metrics for r in results) and any(M.COSINE in r.metrics for r in results)
    assert metric_values(results, fields) == [[r.metrics.get(f) for r in results] for f in fields]
