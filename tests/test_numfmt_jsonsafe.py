"""The one number formatter and the one nan/inf rule of JSON and CSV (docs/report.md)."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np

from opdiff.base import jsonsafe, numfmt
from opdiff.capture import progress


def test_cosine_keeps_three_digits_of_one_minus_cos():
    assert numfmt.cosine(0.9999999) == "0.9999999000"
    assert numfmt.cosine(1 - 1.33e-9) == "0.99999999867"
    assert float(numfmt.cosine(0.99999997)) < 1.0
    assert numfmt.cosine(1.0) == "1" and numfmt.cosine(0.5) == "0.5" and numfmt.cosine(None) == "-"


def test_numbers_nonfinite_and_relative_errors():
    assert numfmt.num(float("nan")) == "nan" and numfmt.num(-math.inf) == "-inf" and numfmt.num(np.float32(0.1)) == "0.1"
    assert numfmt.num(np.int64(7)) == "7" and numfmt.num(True) == "True" and numfmt.units(2712.3) == "2.71e+03 u"
    assert numfmt.rel_err(1e27, 0.001) == "1e+27 (abs 0.001)" and numfmt.rel_err(0.02, 0.001) == "0.02"
    assert numfmt.rel_err(math.inf, 3.0) == "inf (abs 3)" and numfmt.size(3_000_000) == "3.0 MB"


def test_json_rule_null_with_sibling():
    text = jsonsafe.dumps({"score": math.inf, "list": [math.nan, 1.0], "n": np.float32(2.5), "ok": 1})
    assert json.loads(text) == {"score": None, "score_nonfinite": "inf", "list": [None, 1.0], "n": 2.5, "ok": 1}
    metrics, which = jsonsafe.split_nonfinite({"Cosine": math.nan, "MaxAbsErr": -math.inf, "RED": 0.5})
    assert metrics == {"Cosine": None, "MaxAbsErr": None, "RED": 0.5} and which == {"Cosine": "nan", "MaxAbsErr": "-inf"}


def test_csv_cells_parse_back():
    buf = io.StringIO()
    csv.writer(buf).writerow([jsonsafe.csv_cell(v) for v in (math.nan, math.inf, -math.inf, 1e-7, True, None)])
    row = next(csv.reader(io.StringIO(buf.getvalue())))
    assert row == ["nan", "inf", "-inf", "1e-07", "True", ""]
    assert [float(x) for x in row[1:4]] == [math.inf, -math.inf, 1e-7] and math.isnan(float(row[0]))


def test_capture_progress_lines(tmp_path, monkeypatch):
    monkeypatch.delenv("OPDIFF_QUIET", raising=False)
    out = io.StringIO()
    p = progress.CaptureProgress(tmp_path / "run", stream=out)
    p.tick(10, 1000)  # a short capture says nothing until FIRST_AFTER_S
    assert out.getvalue() == ""
    p.start -= progress.FIRST_AFTER_S + 1
    p.last -= progress.EVERY_S + 1
    p.tick(12_345, 2_500_000)
    p.summary(20_000, 4_000_000, True)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("opdiff capture: 12,345 records, 2.5 MB so far") and str(tmp_path / "run") in lines[0]
    assert lines[1].startswith("opdiff capture: 20,000 records, 4.0 MB of tensor data written to")
    monkeypatch.setenv("OPDIFF_QUIET", "1")
    quiet = io.StringIO()
    progress.CaptureProgress(tmp_path, stream=quiet).summary(1, 1, True)
    assert quiet.getvalue() == ""
