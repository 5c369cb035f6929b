"""The HTML report of a 100,000-record comparison in a real browser (Playwright driving Debian's chromium):
the error chart and the table's first rows appear, with the right content. How fast is bench/report_bench.py's
job (docs/report.md, "Size and speed"); this test asserts what is drawn, never a time."""

from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import ARGS, CHROMIUM, playwright
from opdiff import load
from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.report import write_html
from opdiff.testing.synthetic import Tensor, write_dump

RECORDS = 100_000  # per side: 50,000 Tanh modules, one input and one output each
FAULT = RECORDS // 2 // 3  # the module whose output the target gets 1 % wrong
PIXELS = """() => {  // painted pixels of each verdict's colour in the chart's canvas
  const c = window.opdiff.state.chart.canvas, d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const out = {green: 0, red: 0};
  for (let k = 0; k < d.length; k += 4) {
    if (d[k + 3] === 0) continue;
    if (d[k + 1] > 120 && d[k] < 120 && d[k + 2] < 120) out.green++;
    if (d[k] > 180 && d[k + 1] < 80 && d[k + 2] < 80) out.red++;
  }
  return out;
}"""


def _tensors(fault: bool):
    """A chain of Tanh modules on 8 stats-only values; from FAULT on the target is 1 % off (and stays so)."""
    x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    for k in range(RECORDS // 2):
        y = np.tanh(x).astype(np.float32)
        out = y * np.float32(1.01) if fault and k == FAULT else y
        module = f"layers.{k // 500}.block{(k // 100) % 5}.act{k % 100}"
        yield Tensor(module, "Tanh", "input", "0", x)
        yield Tensor(module, "Tanh", "output", "0", out)
        x = out if fault else y


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    write_dump(root / "golden", _tensors(False), mode="stats")
    write_dump(root / "target", _tensors(True), mode="stats")
    g, t = load(root / "golden"), load(root / "target")
    cmp = compare(g, t)
    d = diagnose(g, t, comparison=cmp, replay=False)
    assert d.verdict == "fault" and d.culprit.module == f"layers.{FAULT // 500}.block{(FAULT // 100) % 5}.act{FAULT % 100}"
    html = root / "report.html"
    write_html(cmp, html, diagnosis=d, title="100k")
    return html, cmp, d


@pytest.mark.slow
def test_100k_report_draws_its_chart_and_first_rows(report):
    html, cmp, d = report
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1100})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(html.as_uri())
        pg.wait_for_selector("body[data-chart=drawn]", timeout=120_000)
        # the chart: every pair with an error is a point; green PASS and red FAIL pixels are painted; the star
        n_points = sum(1 for r in cmp.results if r.status == "compared")
        assert pg.evaluate("window.opdiff.state.chart.count()") == n_points == RECORDS
        painted = pg.evaluate(PIXELS)
        assert painted["green"] > 1000 and painted["red"] > 1000, painted
        culprit = pg.evaluate("window.opdiff.state.doc.culprit")
        assert cmp.results[culprit].record.module == d.culprit.module
        assert pg.evaluate(f"window.opdiff.state.chart.xy({culprit})") is not None
        assert pg.locator("#verdict").inner_text() == "FAULT"
        # then the tree and the opening selection (the culprit, the table scrolled to it): the rows drawn are
        # consecutive pairs in execution order, each with its own name and verdict
        pg.wait_for_selector("body[data-ready]", state="attached", timeout=120_000)
        assert pg.locator("#d-name").inner_text() == cmp.results[culprit].name
        assert "L2norm diff" in pg.locator("#details").inner_text()  # a metric of the second document, merged in
        rows = pg.locator("#tbody .tr")
        assert 10 <= rows.count() <= 200  # drawn where visible only
        first = int(rows.first.get_attribute("data-i"))
        assert [int(i) for i in rows.evaluate_all("rs => rs.map(r => r.dataset.i)")] == list(range(first, first + rows.count()))
        for k in (0, rows.count() - 1):
            i = first + k
            assert rows.nth(k).locator(".c1").inner_text() == cmp.results[i].name
            assert rows.nth(k).locator(".c3").inner_text() == cmp.results[i].result
        assert culprit in range(first, first + rows.count())
        assert pg.locator("#shown").inner_text() == f"{RECORDS:,} of {RECORDS:,} pairs"
        assert errors == []
        browser.close()
