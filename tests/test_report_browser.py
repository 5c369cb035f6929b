"""The HTML report in a real browser (Playwright driving Debian's chromium, .ci/install-browser):
a real diagnosis of a zoo GPT-2 whose target runs a tanh-approximated GELU in block 2.

Set OPDIFF_SCREENSHOT=docs/img/report.png to refresh the README's screenshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from browser_helpers import ARGS, CHROMIUM, playwright

CULPRIT = "transformer.h.2.mlp.act"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """Demo dumps of a GPT-2 with a fault, then `opdiff diagnose --html` on them (the CLI path)."""
    from rich.console import Console

    from opdiff.demo import run_demo

    out = tmp_path_factory.mktemp("browser") / "demo"
    res = run_demo(out, model="gpt2", level="aten", fault="activation", seed=1, console=Console(file=open(os.devnull, "w")))
    assert res.found and res.culprit_module == CULPRIT
    html = out.parent / "report.html"
    p = subprocess.run([sys.executable, "-m", "opdiff", "diagnose", str(out / "golden"), str(out / "target"),
                        "--html", str(html), "--no-replay"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr  # fault found
    assert f"written: {html}" in p.stdout
    return html


@pytest.fixture(scope="module")
def page(report):
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1250})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.on("request", lambda r: errors.append(f"request {r.url}") if not r.url.startswith(("file:", "data:", "blob:")) else None)
        pg.goto(report.as_uri())
        pg.wait_for_selector("body[data-chart=drawn]", timeout=60_000)
        pg.wait_for_selector("body[data-ready]", state="attached", timeout=60_000)  # tree, details, all metrics
        pg.errors = errors
        yield pg
        browser.close()


# where the culprit's star is on the screen, from the chart's own scales (report/assets/chart.js)
_STAR_XY = "() => window.opdiff.state.chart.xy(window.opdiff.state.doc.culprit)"


def _details_name(pg) -> str:
    return pg.locator("#d-name").inner_text()


def test_verdict_and_diagnosis_on_top(page):
    assert page.locator("#verdict").inner_text() == "FAULT"
    assert CULPRIT in page.locator("#culprit").inner_text()
    assert "Path of divergence" in page.locator("#diag").inner_text()
    assert page.errors == []  # no script error, nothing fetched from the network


def test_filter_to_fail(page):
    page.select_option("#f-res", label="FAIL")
    n_fail = page.evaluate("window.opdiff.state.doc.counts.FAIL")
    assert n_fail >= 1
    assert page.locator("#shown").inner_text().startswith(f"{n_fail} of ")
    results = page.locator("#tbody .tr .c3").all_inner_texts()
    assert results and set(results) == {"FAIL"}
    page.select_option("#f-res", label="all results")


def test_sort_by_error(page):
    page.locator("#thead .c4").click()  # error column: largest first
    first = int(page.locator("#tbody .tr").first.get_attribute("data-i"))
    eu = page.evaluate("window.opdiff.state.doc.records.eu.map(Number).filter(Number.isFinite)")
    assert page.evaluate(f"Number(window.opdiff.state.doc.records.eu[{first}])") == max(eu)
    page.locator("#thead .c0").click()  # back to execution order
    assert page.locator("#tbody .tr").first.get_attribute("data-i") == "0"


def test_click_culprit_in_chart(page):
    page.locator("#tbody .tr").first.click()  # select something else first
    culprit = page.evaluate("window.opdiff.state.doc.culprit")
    assert page.evaluate("window.opdiff.state.sel") != culprit
    # the chart drew points of every verdict and the culprit's star
    assert page.evaluate("window.opdiff.state.chart.count()") > 100
    page.locator("#chart").scroll_into_view_if_needed()
    x, y = page.evaluate(_STAR_XY)
    page.mouse.click(x, y)
    page.wait_for_function(f"window.opdiff.state.sel === {culprit}")
    name = _details_name(page)
    assert name.startswith(CULPRIT + "/")
    details = page.locator("#details").inner_text()
    assert "MaxAbsErr" in details and "RelativeEuclideanDistance" in details and " u" in details
    assert page.locator("#pp-scatter .scatterlayer path.point").count() > 10  # the sampled values drew


def test_click_culprit_in_tree(page):
    page.locator("#tbody .tr").first.click()
    parts = CULPRIT.split(".")
    for k in range(1, len(parts)):  # expand the tree down to the culprit's module
        li = page.locator(f"#tree .tn[data-module='{'.'.join(parts[:k])}']").locator("xpath=..")
        if li.locator("ul").count() == 0:
            li.locator(".tog").first.click()
    page.locator(f"#tree .tn[data-module='{CULPRIT}']").click()
    assert page.locator("#f-module").input_value() == CULPRIT
    assert _details_name(page).startswith(CULPRIT + "/")
    assert page.evaluate("window.opdiff.state.sel") == page.evaluate("window.opdiff.state.doc.culprit")
    modules = page.evaluate("window.opdiff.state.view.map(i => window.opdiff.state.doc.records.module[i])")
    assert modules and set(modules) == {CULPRIT}
    assert "Cosine" in page.locator("#details").inner_text()


def test_screenshot(page, tmp_path):
    page.fill("#f-module", "")
    page.dispatch_event("#f-module", "input")
    page.evaluate("window.opdiff.select(window.opdiff.state.doc.culprit, 'test'); window.scrollTo(0, 0)")
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 50_000
    if os.environ.get("OPDIFF_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["OPDIFF_SCREENSHOT"])
