"""HTML report: one self-contained page (no external assets) with the verdict counts, the diagnosis
when given, and the comparison table coloured by result, with a filter box and sortable columns."""

from __future__ import annotations

import html
import json
import math
import os
from typing import Any

from ..compare.run import Comparison
from .table import columns, row

_CSS = """
body{font:13px system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1em 0 .3em}
.counts span{display:inline-block;margin-right:1em;padding:.2em .6em;border-radius:4px}
.PASS{background:#d8f0d8}.WARNING{background:#fff2c4}.FAIL{background:#f8d0d0}.NA{background:#eee}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ccc;padding:2px 5px;white-space:nowrap}
th{position:sticky;top:0;background:#f4f4f4;cursor:pointer}td.num{text-align:right;font-family:monospace}
.diag{border:1px solid #bbb;border-radius:6px;padding:.6em 1em;background:#fafafa;max-width:70em}
.diag pre{white-space:pre-wrap;margin:.3em 0}#filter{margin:.5em 0;width:30em;padding:3px}
"""

_JS = """
const f=document.getElementById('filter');
f.addEventListener('input',()=>{const q=f.value.toLowerCase();
 for(const tr of document.querySelectorAll('#pairs tbody tr')){tr.style.display=tr.textContent.toLowerCase().includes(q)?'':'none';}});
document.querySelectorAll('#pairs th').forEach((th,i)=>th.addEventListener('click',()=>{
 const tb=document.querySelector('#pairs tbody');const rows=[...tb.rows];const asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
 rows.sort((a,b)=>{const x=a.cells[i].dataset.v??a.cells[i].textContent,y=b.cells[i].dataset.v??b.cells[i].textContent;
  const nx=parseFloat(x),ny=parseFloat(y);const c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
 rows.forEach(r=>tb.appendChild(r));}));
"""


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return f"<td>{v}</td>"
    if isinstance(v, (int, float)):
        text = repr(v) if isinstance(v, int) or not math.isfinite(v) else f"{v:.6g}"
        return f'<td class="num" data-v="{html.escape(repr(v))}">{text}</td>'
    return f"<td>{html.escape(str(v))}</td>"


def _diagnosis_html(diagnosis: Any) -> str:
    """The diagnosis block: verdict, culprit, advice (from the diagnosis' JSON form)."""
    from ..diagnose.report import to_json_text

    d = json.loads(to_json_text(diagnosis))
    parts = [f"<h2>Diagnosis: {html.escape(str(d.get('verdict', '')).upper())}</h2>", '<div class="diag">']
    culprit = d.get("culprit")
    if culprit:
        parts.append(f"<p><b>Culprit:</b> {html.escape(str(culprit.get('module') or '(root)'))} "
                     f"({html.escape(str(culprit.get('op')))}) — {html.escape(str(culprit.get('reason', '')))}</p>")
    for key in ("summary", "advice"):
        if d.get(key):
            text = d[key] if isinstance(d[key], str) else "\n".join(map(str, d[key]))
            parts.append(f"<p><b>{key.capitalize()}:</b></p><pre>{html.escape(text)}</pre>")
    parts.append("</div>")
    return "\n".join(parts)


def write_html(cmp: Comparison, path: str | os.PathLike, diagnosis: Any = None, title: str = "opdiff report") -> None:
    """Write the comparison (and optionally its diagnosis) as one HTML page."""
    cols = columns(cmp.results)
    counts = cmp.counts()
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f"<p>golden <code>{html.escape(str(cmp.golden.root))}</code> vs target "
           f"<code>{html.escape(str(cmp.target.root))}</code> — mode {html.escape(str(cmp.mode))}</p>",
           '<div class="counts">' + "".join(
               f'<span class="{k.replace("/", "")}">{html.escape(k)}: {v}</span>' for k, v in counts.items()) + "</div>"]
    first = cmp.first_fail()
    if first is not None:
        out.append(f"<p><b>First FAIL</b> in execution order: #{first.index} <code>{html.escape(first.name)}</code></p>")
    if diagnosis is not None:
        out.append(_diagnosis_html(diagnosis))
    out.append("<h2>Pairs</h2><input id='filter' placeholder='filter rows (name, op, module, result...)'>")
    out.append("<table id='pairs'><thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr></thead><tbody>")
    for r in cmp.results:
        values = row(r, cols)
        cls = r.result.replace("/", "")
        out.append(f'<tr class="{cls}">' + "".join(_cell(values[c]) for c in cols) + "</tr>")
    out.append(f"</tbody></table><script>{_JS}</script></body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
