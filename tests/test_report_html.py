"""The HTML report: one self-contained page holding every pair, the diagnosis and value samples
(the page itself is driven in a real browser by tests/test_report_browser.py)."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np

from opdiff import load
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.report import write_html
from opdiff.testing.synthetic import Tensor, write_dump


def _dump(path, bad_layer: int | None) -> None:
    """Five Tanh modules in a chain; the output of `bad_layer` (and so what follows) 1 % off."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    tensors = []
    for i in range(5):
        y = np.tanh(x) * np.float32(1.01 if i == bad_layer else 1.0)
        tensors += [Tensor(f"blocks.{i}", "Tanh", "input", "0", x), Tensor(f"blocks.{i}", "Tanh", "output", "0", y)]
        x = y
    write_dump(path, tensors)


class _Page(HTMLParser):
    """The page's external references and its embedded data document."""

    def __init__(self):
        super().__init__()
        self.external: list[str] = []
        self.data = ""
        self._in_data = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "link", "img", "iframe") and (a.get("src") or a.get("href")):
            self.external.append(a.get("src") or a.get("href"))
        self._in_data = a.get("id") == "opdiff-data"

    def handle_data(self, data):
        if self._in_data:
            self.data += data


def _doc(text: str) -> tuple[dict, list[str]]:
    page = _Page()
    page.feed(text)
    return json.loads(gzip.decompress(base64.b64decode(page.data))), page.external


def test_html_embeds_every_pair_the_diagnosis_and_samples(tmp_path):
    _dump(tmp_path / "g", None)
    _dump(tmp_path / "t", 2)
    g, t = load(tmp_path / "g"), load(tmp_path / "t")
    cmp = compare(g, t)
    diag = diagnose(g, t, comparison=cmp, replay=False)
    out = tmp_path / "report.html"
    write_html(cmp, out, diagnosis=diag)
    text = out.read_text()
    doc, external = _doc(text)
    assert external == []  # self-contained: nothing fetched at view time
    assert "Plotly" in text and "cdn.plot.ly" not in text.split("opdiff-data")[1]  # plotly.js inlined
    rec = doc["records"]
    assert len(rec["name"]) == len(cmp.results) == 10
    assert [doc["results"][k] for k in rec["res"]] == [r.result for r in cmp.results]
    assert doc["diagnosis"]["verdict"] == "fault" and doc["diagnosis"]["culprit"]["module"] == "blocks.2"
    assert rec["module"][doc["culprit"]] == "blocks.2" and rec["name"][doc["culprit"]].endswith("output/0")
    # the culprit's error in rounding units: 1 % off in float32 is ~1.7e5 u; an exact pair is 0 u
    assert rec["eu"][doc["culprit"]] > 1e4 and rec["eu"][0] == 0
    s = doc["samples"][str(doc["culprit"])]
    gv = g.tensor(cmp.results[doc["culprit"]].golden).reshape(-1)
    assert len(s["g"]) == len(s["t"]) == gv.size == 32 and abs(s["g"][5] - float(gv[5])) < 1e-5


def test_page_document_in_two_parts_joins_back(tmp_path):
    """The page's document is split in two script elements (the bulk read after the chart is drawn); joined,
    the two are the whole document, and the first holds what the chart and the table draw from."""
    from opdiff.report import html_data

    _dump(tmp_path / "g", None)
    _dump(tmp_path / "t", 3)
    cmp = compare(load(tmp_path / "g"), load(tmp_path / "t"))
    doc = html_data.build(cmp, None)
    first, more = html_data.split(doc)
    assert html_data.join(first, more) == doc
    assert set(first["metrics"]) == {"MaxAbsErr", "MaxRelativeErr"} and "msg" not in first["records"]
    assert "RelativeEuclideanDistance" in more["metrics"] and len(more["msg"]) == 10
    out = tmp_path / "r.html"
    write_html(cmp, out)
    text = out.read_text()
    parts = [json.loads(gzip.decompress(base64.b64decode(text.split(f"id='{i}'>")[1].split("<")[0])))
             for i in ("opdiff-data", "opdiff-data-more")]
    assert html_data.join(*parts)["records"]["name"] == [r.name for r in cmp.results]


def test_compare_cli_writes_html(tmp_path):
    _dump(tmp_path / "g", None)
    _dump(tmp_path / "t", None)
    p = subprocess.run([sys.executable, "-m", "opdiff", "compare", str(tmp_path / "g"), str(tmp_path / "t"),
                        "-o", str(tmp_path / "out"), "--format", "html"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    files = sorted(f.name for f in (tmp_path / "out").iterdir())
    assert any(f.endswith(".html") for f in files), files
