"""Console rendering of a Diagnosis (rich), its JSON text (schema in docs/diagnose.md) and its HTML page."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..base import numfmt
from ..base.termsafe import safe, safe_deep
from ..compare.run import Comparison
from ..diagnose.verdict import Diagnosis
from .html import write_html

STYLE = {"pass": "bold green", "drift": "bold yellow", "fault": "bold red", "overflow": "bold red",
         "inputs-differ": "bold magenta"}


def fmt(x: object, digits: int = 4) -> str:
    """Short rendering of a number for the tables (the one formatter, base/numfmt.py)."""
    return numfmt.num(x, digits)


def _cos(x: object) -> str:
    return numfmt.cosine(x)


def _short(name: str | None, node: str | None) -> str:
    """A record name without its node prefix when it belongs to `node` ("forward/output/0")."""
    if name and node and name.startswith(node + "/"):
        return name[len(node) + 1:]
    return name or "-"


def _tensor_table(title: str, rows: list[tuple[str, dict[str, Any]]], node: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False, pad_edge=False)
    for col in ("", "target record", "dtype g/t", "shape", "err (units)", "cosine", "max abs err"):
        table.add_column(col, overflow="fold")
    for kind, t in rows:
        dt = t.get("dtype") or {}
        name = _short(t.get("target"), node) if t.get("target") else f"(golden) {t.get('golden')}"
        table.add_row(kind, name, f"{dt.get('golden')}/{dt.get('target')}",
                      "x".join(map(str, t.get("shape") or [])) or "()",
                      "differs" if t.get("error_units") is None and t.get("error") else fmt(t.get("error_units")), _cos(t.get("cosine")),
                      fmt(t.get("max_abs_err")))
    return table


def render(d: Diagnosis, console: Console | None = None, *, golden: str = "", target: str = "") -> None:
    """The readable report: verdict, culprit and its tensors, path of divergence, replay, advice, warnings.

    Every string of `d` (record and module names come from files anyone could write) is made safe for
    the terminal here, once, whoever calls: no rich markup, no control characters."""
    c = console or Console()
    d, golden, target = safe_deep(d), safe(golden), safe(target)
    if golden or target:
        c.print(f"[dim]golden[/] {golden}   [dim]target[/] {target}")
    counts = d.counts
    if counts:
        c.print(f"[dim]{counts.get('pairs', 0)} pairs ({counts.get('compared', 0)} compared, "
                f"{counts.get('unmatched_golden', 0)} golden-only, {counts.get('unmatched_target', 0)} target-only), "
                f"levels {', '.join(counts.get('levels', []))}; noise floor {fmt(d.noise.get('floor_units'), 3)} units, "
                f"target precision {d.noise.get('run_dtype')}[/]")
        c.print(f"[dim]{numfmt.UNIT_NOTE}[/]")
    c.print(Text.assemble(("verdict: ", "bold"), (d.verdict.upper(), STYLE.get(d.verdict, "bold")), "  ", d.summary))
    cu = d.culprit
    if cu:
        c.print(Text.assemble(("culprit: ", "bold"), (cu.module or "<root>", "bold cyan"), f"  op {cu.op}  ",
                              ("node ", "dim"), cu.node or ""))
        c.print(f"  golden record: {cu.golden}\n  target record: {cu.target}")
        ev = d.evidence
        rows = [("input", t) for t in ev.inputs] + [("param", t) for t in ev.parameters] + \
               [("output", t) for t in ev.outputs] + [("diverging", t) for t in ev.diverging]
        if rows:
            c.print(_tensor_table("culprit's tensors", rows, cu.node))
    elif d.verdict == "inputs-differ":
        c.print(_tensor_table("model inputs that differ", [("input", t) for t in d.evidence.inputs]))
    if d.first_divergence and d.verdict not in ("pass",):
        f = d.first_divergence
        size = "differs" if f.get("error_units") is None else f"{fmt(f.get('error_units'))} units"
        c.print(f"[bold]first divergence:[/] {f.get('target') or f.get('golden')} ({size})")
    if d.path_of_divergence:
        table = Table(title="path of divergence (culprit -> model output)", title_justify="left", pad_edge=False)
        for col in ("module", "op", "err (units)", "cosine"):
            table.add_column(col, overflow="fold")
        for p in d.path_of_divergence:
            table.add_row(p.get("module") or "<root>", p.get("op"), fmt(p.get("error_units")), _cos(p.get("cosine")))
        c.print(table)
    if d.candidates and d.verdict in ("fault", "overflow", "drift"):
        table = Table(title="candidates (ranked)", title_justify="left", pad_edge=False)
        for col in ("#", "module", "op", "score", "why"):
            table.add_column(col, overflow="fold")
        for cand in d.candidates[:6]:
            table.add_row(str(cand.rank), cand.module or "<root>", cand.op, fmt(cand.score, 3), cand.reason or "")
        c.print(table)
    if d.replay:
        r = d.replay
        if r.status == "ok":
            c.print(f"[bold]replay:[/] {r.conclusion}")
        else:
            c.print(f"[dim]replay skipped: {r.reason}[/]")
    for line in confirmation_lines(d):
        c.print(line)
    settings = d.evidence.settings
    if settings:
        c.print("[bold]settings that differ:[/] " + "; ".join(f"{k}: {v['golden']} vs {v['target']}" for k, v in settings.items()))
    c.print(f"[bold]advice:[/] {d.advice}")
    for w in d.warnings:
        c.print(f"[yellow]warning:[/] {w}")


def confirmation_lines(d: Diagnosis) -> list[str]:
    """How the verdict was confirmed, for the console: patch (with the model-output error before and after
    and every culprit, down to its op), replay, or the dumps' statistics only."""
    doc = d.confirmation()
    method = doc.get("method")
    if method == "statistics":
        why = doc.get("patch", {}).get("reason")
        return ["[bold]confirmed by:[/] statistics only (the runs were not re-executed"
                + (f"; patching could not run: {safe(str(why))}" if why else "") + ")"]
    if method == "replay":
        return [f"[bold]confirmed by:[/] replay of the culprit op ({doc.get('status')})"]
    lines = [f"[bold]confirmed by:[/] patch — {doc.get('status')}: model-output error {fmt(doc.get('error_before'), 3)}"
             f" -> {fmt(doc.get('error_after'), 3)} (tolerance {fmt(doc.get('tolerance'), 3)}, {doc.get('runs')} re-runs)"]
    for cu in doc.get("culprits", []):
        op = f" op {cu['op']}" if cu.get("op") else ""
        if not op and cu.get("inserted_ops"):
            op = f" (its own code runs {', '.join(cu['inserted_ops'])}, which golden's does not)"
        lines.append(f"  needed: {safe(cu.get('module') or '<root>')}{safe(op)} — error without it "
                     f"{fmt(cu.get('error_without'), 3)}, golden given its output {fmt(cu.get('error_golden_broken'), 3)}")
    if not doc.get("culprits") and doc.get("reason"):
        lines.append(f"  {safe(str(doc['reason']))}")
    return lines


def write_html_page(d: Diagnosis, path: str | os.PathLike[str], *, comparison: Comparison,
                    title: str = "opdiff report") -> None:
    """The HTML report of a diagnosis: every pair of `comparison`, the diagnosis on top (report/html.py)."""
    write_html(comparison, path, diagnosis=d, title=title)
