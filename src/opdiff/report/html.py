"""HTML report: one self-contained page (nothing fetched at view time) with the verdict and the
diagnosis on top, the error-along-execution chart, the module tree, a filterable table of every
pair and a details panel with sampled values (docs/report.md).

plotly.js is inlined from the installed `plotly` package (the `report` extra); without it the
page still has the diagnosis, tree, table and details, and says how to get the charts.
"""

from __future__ import annotations

import html
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ..compare.run import Comparison
from ..diagnose.verdict import Diagnosis
from . import html_data


def plotly_js() -> str | None:
    """plotly.min.js of the installed plotly package, or None when plotly is not installed."""
    try:
        import plotly
    except ImportError:
        return None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


_BODY = """<header><h1 id="title"></h1><div id="sub" class="muted"></div><div id="counts" style="margin-top:.4em"></div></header>
<main>
<section class="card" id="diag"><p class="muted">Loading the report ...</p></section>
<section class="card"><div class="filters"><b>Error along execution</b>
<select id="f-metric"><option value="eu">error in rounding units (u)</option><option value="omc">1 − cosine</option></select>
<span class="muted">u = the rounding unit of the pair's lower precision; click a point to open its pair, drag to zoom</span></div>
<div id="chart"></div></section>
<div class="row">
<section class="card" id="treebox"><b>Model</b> <span class="muted">(worst error and verdict per module; click to filter)</span><div id="tree"></div></section>
<section class="card" id="tablebox"><div class="filters"><select id="f-res"></select><select id="f-op"></select>
<input id="f-module" placeholder="module (prefix)"><input id="f-name" placeholder="name (text or regex)"><span id="shown" class="muted"></span></div>
<div id="tbl"><div class="hdr" id="thead"></div><div id="tbody" style="position:relative"></div></div></section>
<section class="card" id="details"><p class="muted">Select a pair in the chart, the tree or the table.</p></section>
</div></main>"""


def page(doc: dict[str, Any], plotly: str | None) -> str:
    """The page's text for the document `doc` (html_data.build)."""
    # inside <script>, "</" would end the element early; plotly.min.js has none of "</script"
    js = (plotly or "").replace("</script", "<\\/script")
    return "".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(doc.get('title', 'opdiff report'))}</title>",
        f"<style>{_asset('report.css')}</style>",
        # not run as the page loads (plotly takes seconds to start): report.js runs it for the pair charts
        f"<script type='text/plain' id='opdiff-plotly'>{js}</script>" if plotly else "",
        "</head><body>", _BODY,
        *(f"<script type='application/octet-stream' id='{name}'>{html_data.encode(part)}</script>"
          for name, part in zip(("opdiff-data", "opdiff-data-more"), html_data.split(doc))),
        f"<script>{_asset('chart.js')}</script><script>{_asset('report.js')}</script></body></html>",
    ])


def write_html(cmp: Comparison, path: str | os.PathLike[str], diagnosis: Diagnosis | None = None, title: str = "opdiff report",
               samples: bool = True) -> None:
    """Write the comparison (and its diagnosis, if given) as one self-contained HTML page."""
    doc = html_data.build(cmp, diagnosis, title=title, samples=samples)
    text = page(doc, plotly_js())
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
