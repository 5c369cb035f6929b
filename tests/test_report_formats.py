"""The three report formats read back: CSV with the csv module, XLSX with openpyxl, JSON strictly."""

from __future__ import annotations

import csv
import json

import ml_dtypes
import numpy as np
import openpyxl
import pytest
from rich.console import Console

from opdiff.compare import compare
from opdiff.metrics import names as M
from opdiff.report import SCHEMA, SCHEMA_VERSION, print_summary, write_csv, write_json, write_xlsx
from opdiff.report.table import ID_COLUMNS, TAIL_COLUMNS
from opdiff.testing.synthetic import Tensor, write_dump

RNG = np.random.default_rng(0)
G = [Tensor(f"h.{i}", "Linear", "output", "0", RNG.standard_normal((4, 8)).astype(np.float32)) for i in range(5)]


@pytest.fixture(scope="module")
def cmp(tmp_path_factory):
    root = tmp_path_factory.mktemp("rep")
    t = [Tensor(x.module, x.op, x.role, x.pos, x.array.copy()) for x in G]
    t[1].array = t[1].array * 1.02  # FAIL
    t[2].array = (t[2].array.astype(np.float64) * (1 + 2e-5)).astype(np.float32)  # WARNING: ~300u
    t[3].array = t[3].array.copy()
    t[3].array[0, 0] = np.nan  # nan on one side: FAIL
    t[4].array = t[4].array.astype(ml_dtypes.bfloat16)  # PASS at bf16
    t.append(Tensor("extra", "Dropout", "output", "0", G[0].array))  # unmatched
    write_dump(root / "g", G)
    write_dump(root / "t", t)
    return compare(root / "g", root / "t")


def test_verdicts_of_the_fixture(cmp):
    assert [r.result for r in cmp.results] == ["PASS", "FAIL", "WARNING", "FAIL", "PASS", "N/A"]


def test_csv_reads_back(cmp, tmp_path):
    path = tmp_path / "c.csv"
    write_csv(cmp, path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6
    cols = list(rows[0])
    assert cols[:len(ID_COLUMNS)] == list(ID_COLUMNS) and cols[-len(TAIL_COLUMNS):] == list(TAIL_COLUMNS)
    for key in ("Cosine", "MaxAbsErr", "MaxRelativeErr", "MeanAbsErr", "MeanRelativeErr", "RootMeanSquareError",
                "AccumulatedRelativeError", "RelativeEuclideanDistance", "EucDist", "KullbackLeiblerDivergence",
                "GoldenStd", "TargetStd", "One Thousandth Err Ratio", "Five Thousandth Err Ratio", "Err_message",
                "Accuracy Reached or Not", "Match", "Golden Dtype", "Target Dtype"):
        assert key in cols
    assert [r["Result"] for r in rows] == ["PASS", "FAIL", "WARNING", "FAIL", "PASS", "N/A"]
    assert [r["Accuracy Reached or Not"] for r in rows] == ["Yes", "No", "Yes", "No", "Yes", ""]
    assert float(rows[1]["RelativeEuclideanDistance"]) == pytest.approx(0.02, rel=1e-5)
    assert float(rows[1]["Cosine"]) == cmp.results[1].metrics[M.COSINE]  # full precision round trip
    assert rows[3]["TargetNaN"] == "1" and rows[3]["NonFiniteMismatch"] == "1"
    assert (rows[4]["Golden Dtype"], rows[4]["Target Dtype"], rows[4]["Golden Shape"]) == ("float32", "bfloat16", "[4,8]")
    assert (rows[5]["Status"], rows[5]["Match"], rows[5]["Golden Name"], rows[5]["Cosine"]) == \
        ("unmatched", "unmatched", "", "N/A")
    assert rows[0]["Bitwise Equal"] == "Yes" and rows[1]["Bitwise Equal"] == "No"


def test_xlsx_reads_back_with_fills_frozen_header_and_filter(cmp, tmp_path):
    path = tmp_path / "c.xlsx"
    write_xlsx(cmp, path)
    ws = openpyxl.load_workbook(path).active
    header = [c.value for c in ws[1]]
    assert header[0] == "Index" and "Cosine" in header and header[-1] == "Note"
    res = header.index("Result")
    assert [ws.cell(row=i, column=res + 1).value for i in range(2, 8)] == ["PASS", "FAIL", "WARNING", "FAIL", "PASS", "N/A"]
    fills = [ws.cell(row=i, column=1).fill.fgColor.rgb[-6:] for i in range(2, 6)]
    assert fills == ["C6EFCE", "FFC7CE", "FFEB9C", "FFC7CE"]  # green, red, yellow, red
    assert ws.freeze_panes == "A2"
    assert ws.auto_filter.ref.startswith("A1:") and ws.auto_filter.ref.endswith("7")
    red = header.index("RelativeEuclideanDistance")
    assert ws.cell(row=3, column=red + 1).value == pytest.approx(0.02, rel=1e-5)  # a number, not text


def test_json_is_strict_and_follows_the_schema(cmp, tmp_path):
    path = tmp_path / "c.json"
    write_json(cmp, path)

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    rep = json.loads(path.read_text(), parse_constant=no_constants)
    assert (rep["schema"], rep["schema_version"]) == (SCHEMA, SCHEMA_VERSION)
    assert rep["mode"] == "tensor" and rep["thresholds"]["name"] == "default"
    s = rep["summary"]
    assert s["results"] == {"PASS": 2, "WARNING": 1, "FAIL": 2, "N/A": 1} and s["passed"] is False
    assert s["first_fail"] == 1 and s["worst"][0] in (1, 3) and s["unmatched"] == {"golden": 0, "target": 1}
    assert len(rep["pairs"]) == 6
    p = rep["pairs"][3]
    assert p["golden"]["shape"] == [4, 8] and p["target"]["dtype"] == "float32"
    assert p["metrics"]["TargetNaN"] == 1 and p["result"] == "FAIL"
    assert rep["pairs"][5]["golden"] is None and rep["pairs"][5]["status"] == "unmatched"
    assert rep["pairs"][0]["bitwise_equal"] is True


def test_json_writes_non_finite_metrics_as_null_with_sibling(cmp):
    from dataclasses import replace

    from opdiff.report.json import pair_json

    r = replace(cmp.results[0], metrics={"MaxAbsErr": float("inf"), "Cosine": float("nan"), "EucDist": -float("inf")})
    p = json.loads(json.dumps(pair_json(r), allow_nan=False))
    assert p["metrics"] == {"MaxAbsErr": None, "Cosine": None, "EucDist": None}
    assert p["metrics_nonfinite"] == {"MaxAbsErr": "inf", "Cosine": "nan", "EucDist": "-inf"}


def test_console_summary(cmp):
    con = Console(record=True, width=200)
    print_summary(cmp, con, top=3, outputs=["out/compare.csv"])
    text = con.export_text()
    assert "PASS 2  WARNING 1  FAIL 2  N/A 1" in text
    assert "first FAIL #1 h.1/Linear#0/forward/output/0" in text
    assert "worst 3 pairs" in text and "unmatched target records: 1" in text
    assert "reports: out/compare.csv" in text
    assert text.strip().splitlines()[-1] == "FAIL (2 FAIL, 1 unmatched (--allow-unmatched accepts them))"


def test_xlsx_keeps_any_text_and_every_number(cmp, tmp_path):
    """The direct SpreadsheetML writer: markup, spaces at the ends, control characters (as Excel's
    _xHHHH_), non-ASCII text, non-finite metrics as text and full-precision floats all read back; a
    read-only reader sees every row."""
    from dataclasses import replace

    odd = ' <a href="x">&amp;</a> ü 中文 \u202e\x01 '
    inf_metrics = {**cmp.results[1].metrics, M.MAX_ABS_ERR: float("inf"), M.COSINE: 0.1 + 0.2}
    rows = [replace(cmp.results[0], note=odd), replace(cmp.results[1], metrics=inf_metrics), *cmp.results[2:]]
    path = tmp_path / "odd.xlsx"
    write_xlsx(replace(cmp, results=rows), path)
    ws = openpyxl.load_workbook(path).active
    header = [c.value for c in ws[1]]
    note = ws.cell(row=2, column=header.index("Note") + 1).value
    assert note == odd.replace("\x01", "_x0001_")
    assert ws.cell(row=3, column=header.index(M.COLUMN[M.MAX_ABS_ERR]) + 1).value == "inf"
    assert ws.cell(row=3, column=header.index(M.COLUMN[M.COSINE]) + 1).value == 0.1 + 0.2
    assert openpyxl.load_workbook(path, read_only=True).active.max_row == len(rows) + 1
