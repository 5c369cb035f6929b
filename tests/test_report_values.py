"""Every output accepts every value class (docs/report.md, "Every value"): property-based tests push
real dumps holding nan, ±inf, huge and tiny values, -0.0, empty tensors, integers, booleans and
names with any characters through compare and diagnose, then through the console summary, the
diagnosis' console rendering, CSV, XLSX, JSON, the HTML page's embedded document and the Model
Explorer overlays; each must be written and read back strictly (no NaN tokens, no traceback)."""

from __future__ import annotations

import base64
import csv
import gzip
import io
import json
import re
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import openpyxl
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from opdiff import report
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.testing.synthetic import Tensor, write_dump

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -3e38, 1e-45, 1e-38, 65504.0, 7e4, 1.0, -1.5]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "bool"]


def _strict(text: str, what: str) -> object:
    def bad(tok: str) -> None:
        raise AssertionError(f"{what}: non-strict JSON token {tok}")
    return json.loads(text, parse_constant=bad)


@st.composite
def arrays(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """A golden and a target array of one value class each (same shape, maybe empty)."""
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.sampled_from([0, 1, 3, 17]))
    if dtype == "bool":
        g = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        t = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        return g, t
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        ints = st.integers(int(info.min), int(info.max))
        g = np.array(draw(st.lists(ints, min_size=n, max_size=n)), dtype=dtype)
        t = np.array(draw(st.lists(ints, min_size=n, max_size=n)), dtype=dtype)
        return g, t
    vals = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=True, allow_infinity=True, width=32))
    g = np.array(draw(st.lists(vals, min_size=n, max_size=n)), dtype=np.float64)
    t = g.copy() if draw(st.booleans()) else np.array(draw(st.lists(vals, min_size=n, max_size=n)), dtype=np.float64)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return g.astype(np_dtype), t.astype(np_dtype)


# any character a dump may hold in a name (the format refuses control characters, base/record.py; "/", "#"
# and "." build the names themselves): markup, quotes, angle brackets, bidi marks, CJK, emoji ...
NAME = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/#."), min_size=1, max_size=12)


@st.composite
def runs(draw: st.DrawFn) -> list[tuple[str, np.ndarray, np.ndarray]]:
    names = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
    return [(f"m.{n}", *draw(arrays())) for n in names]


def _write(root: Path, pairs: list[tuple[str, np.ndarray, np.ndarray]]) -> tuple[Path, Path]:
    for side, k in (("golden", 1), ("target", 2)):
        write_dump(root / side, [Tensor(m, "aten.mul.Tensor", "output", "0", p[k]) for m, *p in
                                 [(m, g, g, t) for m, g, t in pairs]])
    return root / "golden", root / "target"


def page_document(path: Path) -> object:
    """The HTML report's embedded document, decoded as the page's script decodes it."""
    text = path.read_text(encoding="utf-8")
    b64 = re.search(r"id='opdiff-data'>([^<]*)</script>", text).group(1)
    return _strict(gzip.decompress(base64.b64decode(b64)).decode("utf-8"), f"{path} data")


def every_output(golden: Path, target: Path, out: Path) -> None:
    """compare + diagnose, then every output of the report registry; each read back strictly."""
    cmp = compare(golden, target)
    d = diagnose(golden, target, comparison=cmp, replay=False)
    con = Console(file=io.StringIO(), width=120)
    report.render(cmp, con, allow_unmatched=True)
    report.render(d, con, golden=str(golden), target=str(target))
    assert d.verdict.upper() in con.file.getvalue()
    report.write(cmp, "csv", out / "c.csv")
    with open(out / "c.csv", newline="", encoding="utf-8") as f:
        assert len(list(csv.DictReader(f))) == len(cmp.results)
    report.write(cmp, "xlsx", out / "c.xlsx")
    assert openpyxl.load_workbook(out / "c.xlsx", read_only=True).active.max_row == len(cmp.results) + 1
    report.write(cmp, "json", out / "c.json")
    assert len(_strict((out / "c.json").read_text(encoding="utf-8"), "compare.json")["pairs"]) == len(cmp.results)
    report.write(d, "json", out / "d.json")
    assert _strict((out / "d.json").read_text(encoding="utf-8"), "diagnosis.json")["verdict"] == d.verdict
    assert _strict(report.text(d), "diagnose --json")["verdict"] == d.verdict
    report.write(cmp, "html", out / "c.html")
    assert page_document(out / "c.html")["diagnosis"] is None
    report.write(d, "html", out / "r.html", comparison=cmp)
    doc = page_document(out / "r.html")
    assert doc["diagnosis"]["verdict"] == d.verdict and len(doc["records"]["name"]) == len(cmp.results)
    report.write(cmp, "model-explorer", out / "me")
    for p in sorted((out / "me").iterdir()):
        _strict(p.read_text(encoding="utf-8"), str(p))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(runs())
@example([("m.a", np.array([1e4, 3e4], np.float32), np.array([np.inf, 3e4], np.float16))])  # an overflow
@example([("m.[bold]<b>x</b>[/]\u202e'\"&", np.array([], np.float32), np.array([], np.float32))])  # empty, markup
@example([("m.b", np.array([-0.0, 0.0], np.float32), np.array([0.0, -0.0], np.float32))])
@example([("m.c", np.array([2**62, -5], np.int64), np.array([2**62 + 1, -5], np.int64))])
@example([("m.d", np.array([3.4e38, 1e-45], np.float32), np.array([-3.4e38, np.nan], np.float32))])
def test_every_value_class_through_every_output(pairs):
    with tempfile.TemporaryDirectory(prefix="opdiff-values-") as tmp:
        root = Path(tmp)
        every_output(*_write(root, pairs), root)


def test_overflow_diagnosis_through_every_output(tmp_path):
    """A chain whose target overflows fp16 in the middle: the headline verdict, with inf in its evidence."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(np.float32)
    steps = [("l.0", x * 2), ("l.1", np.exp(x * 12)), ("l.2", np.exp(x * 12) / 10)]
    g = [Tensor(m, "aten.exp.default", "output", "0", a.astype(np.float32)) for m, a in steps]
    with np.errstate(over="ignore"):
        t = [Tensor(m, "aten.exp.default", "output", "0", a.astype(np.float16)) for m, a in steps]
    write_dump(tmp_path / "golden", g)
    write_dump(tmp_path / "target", t)
    d = diagnose(tmp_path / "golden", tmp_path / "target", replay=False)
    assert d.verdict == "overflow" and d.culprit.module == "l.1"
    every_output(tmp_path / "golden", tmp_path / "target", tmp_path)
    doc = page_document(tmp_path / "r.html")
    assert "inf" in json.dumps(doc["diagnosis"]["evidence"])  # the page gets the string, its script the number
