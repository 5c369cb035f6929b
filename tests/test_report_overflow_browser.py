"""An overflow diagnosis' HTML report in a real browser (Playwright driving Debian's chromium, as
tests/test_report_browser.py): inf in the evidence, a 1280-px window without horizontal scrolling
(the table's last column and the pair panel inside it), small charts' titles clear of plotly's toolbar.

Set OPDIFF_SCREENSHOT_DIR=DIR to keep the page's screenshots at 1280 and 1920 px.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from browser_helpers import ARGS, CHROMIUM, playwright
from opdiff.testing.synthetic import Tensor, write_dump

# long module paths, as deep models have them: the layout must wrap them, not widen the page
DEEP = "model.encoder.layers.17.self_attention_block.multi_head_attention_with_rotary_embeddings"
CULPRIT = f"{DEEP}.softmax_in_half_precision"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A chain whose target computes exp in fp16 and overflows; `opdiff diagnose --html` on it (the CLI)."""
    root = tmp_path_factory.mktemp("overflow")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096).astype(np.float32)
    steps = [(f"{DEEP}.query_projection", "aten.mul.Tensor", x * 2), (CULPRIT, "aten.exp.default", np.exp(x * 12)),
             (f"{DEEP}.output_projection", "aten.div.Tensor", np.exp(x * 12) / 10),
             ("model.lm_head", "aten.addmm.default", np.exp(x * 12) / 100)]
    write_dump(root / "golden", [Tensor(m, op, "output", "0", a.astype(np.float32)) for m, op, a in steps])
    with np.errstate(over="ignore"):
        write_dump(root / "target", [Tensor(m, op, "output", "0", a.astype(np.float16)) for m, op, a in steps])
    html = root / "report.html"
    p = subprocess.run([sys.executable, "-m", "opdiff", "diagnose", str(root / "golden"), str(root / "target"),
                        "--html", str(html), "--no-replay"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "OVERFLOW" in p.stdout
    return html


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def open_page(browser, report: Path, width: int):
    pg = browser.new_page(viewport={"width": width, "height": 900})
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("request", lambda r: pg.errors.append(f"request {r.url}") if not r.url.startswith(("file:", "data:", "blob:")) else None)
    pg.goto(report.as_uri())
    pg.wait_for_selector("body[data-chart=drawn]", timeout=60_000)
    pg.wait_for_selector("body[data-ready]", state="attached", timeout=60_000)  # tree, details, all metrics
    pg.wait_for_selector("#pp-hist .main-svg", timeout=30_000)  # the culprit's pair opened with its sample plots
    return pg


def _box(pg, selector: str) -> dict:
    return pg.locator(selector).first.bounding_box()


@pytest.mark.parametrize("width", [1280, 1920])
def test_overflow_page_fits_the_window(browser, report, width):
    pg = open_page(browser, report, width)
    try:
        assert pg.locator("#verdict").inner_text() == "OVERFLOW"
        assert CULPRIT in pg.locator("#culprit").inner_text()
        evidence = pg.locator("#diag").inner_text()
        assert "inf u" in evidence and "Settings that differ" not in evidence  # both runs have the same settings
        assert pg.errors == []
        # no horizontal scrolling of the page
        assert pg.evaluate("document.documentElement.scrollWidth") <= pg.evaluate("window.innerWidth")
        # the table shows its last column inside its box; the pair panel ends inside the window
        tbl, last = _box(pg, "#tbl"), _box(pg, "#thead .c7")
        assert last["x"] + last["width"] <= tbl["x"] + tbl["width"] + 0.5
        assert pg.evaluate("document.getElementById('tbl').scrollWidth <= document.getElementById('tbl').clientWidth")
        det = _box(pg, "#details")
        assert det["x"] + det["width"] <= width
        assert "inf" in pg.locator("#details").inner_text()
        # small charts: titles drawn, no plotly toolbar over them
        for chart in ("#pp-scatter", "#pp-hist"):
            title = _box(pg, f"{chart} .gtitle")
            assert title is not None and title["width"] > 50
            pg.hover(chart)  # plotly shows its toolbar on hover: the small charts have none to show
            assert pg.locator(f"{chart} .modebar-btn").count() == 0
        if os.environ.get("OPDIFF_SCREENSHOT_DIR"):
            shot = Path(os.environ["OPDIFF_SCREENSHOT_DIR"]) / f"overflow-{width}.png"
            pg.screenshot(path=str(shot), full_page=True)
    finally:
        pg.close()


def test_every_pair_opens_without_error(browser, report):
    """Each pair (inf, -inf and nan in values and metrics) opens in the details panel without a script error."""
    pg = open_page(browser, report, 1280)
    try:
        n = pg.evaluate("window.opdiff.state.n")
        for i in range(n):
            pg.evaluate(f"window.opdiff.select({i}, 'test')")
            assert pg.locator("#details h2").inner_text().startswith(f"Pair #{i}")
            assert pg.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert pg.errors == []
    finally:
        pg.close()


def test_report_file_is_readable_by_others(report):
    assert shutil.os.stat(report).st_mode & 0o044  # the umask's read bits, not mkstemp's 0600
