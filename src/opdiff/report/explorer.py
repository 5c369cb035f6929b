"""Model Explorer overlays: node-data JSON files (Model Explorer's `GraphNodeData` format) per
metric, keyed by the node ids of the model's graph (docs/report.md, "Model Explorer").

One value per graph node from the pairs of its outputs (inputs when it has no compared output):
- cosine.json      the lowest cosine; coloured red <= 0.99 < amber <= 0.9999 < green
- error_units.json the largest error in rounding units; green <= 4 u < amber <= 256 u < red
- verdict.json     0 PASS, 1 WARNING, 2 FAIL, each node coloured by its worst verdict
Keys: `keys` maps opdiff node names to graph node ids (FX names of a torch.export program:
opdiff.capture.torch.export_names); without it, the dump's own node names are the keys (right
for ONNX Runtime dumps, whose nodes are the ONNX node names). Non-finite values are left out of
the numeric overlays (their node still shows in verdict.json): Model Explorer takes numbers only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..base.jsonsafe import dumps
from ..base.vocab import FAIL, PASS, WARNING
from ..compare.run import Comparison
from ..metrics import names as M
from .html_data import error_units

GREEN, AMBER, RED = "#2e9d4f", "#f2b01e", "#d62728"
RANK = {PASS: 0, WARNING: 1, FAIL: 2}
OVERLAYS = {
    "cosine": [{"value": 0.99, "bgColor": RED}, {"value": 0.9999, "bgColor": AMBER}, {"value": 1.0, "bgColor": GREEN}],
    "error_units": [{"value": 4, "bgColor": GREEN}, {"value": 256, "bgColor": AMBER}, {"value": 1e300, "bgColor": RED}],
    "verdict": [{"value": 0, "bgColor": GREEN}, {"value": 1, "bgColor": AMBER}, {"value": 2, "bgColor": RED}],
}


def node_values(cmp: Comparison) -> dict[str, dict[str, Any]]:
    """Per opdiff node: lowest cosine, largest error in units, worst verdict (outputs first)."""
    by_node: dict[str, dict[str, list[Any]]] = {}
    for r in cmp.results:
        rec = r.record
        if r.result not in RANK:
            continue
        slot = by_node.setdefault(rec.node, {"output": [], "input": []})
        slot["output" if rec.role == "output" else "input"].append(r)
    out = {}
    for node, slot in by_node.items():
        pairs = slot["output"] or slot["input"]
        cos = [float(c) for c in (p.metrics.get(M.COSINE) for p in pairs) if isinstance(c, (int, float)) and math.isfinite(c)]
        eu = [e for e in (error_units(p) for p in pairs) if e is not None and math.isfinite(e)]
        out[node] = {"cosine": min(cos) if cos else None, "error_units": max(eu) if eu else None,
                     "verdict": max(RANK[p.result] for p in pairs)}
    return out


def overlays(cmp: Comparison, keys: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """{metric: GraphNodeData as a dict} for cosine, error_units and verdict."""
    values = node_values(cmp)
    docs: dict[str, dict[str, Any]] = {}
    for metric, thresholds in OVERLAYS.items():
        results: dict[str, Any] = {}
        for node, v in values.items():
            key = node if keys is None else keys.get(node)
            if key is None or v[metric] is None:
                continue
            if key in results:  # several opdiff nodes on one graph node: keep the worst
                worse = min if metric == "cosine" else max
                v = {metric: worse(results[key]["value"], v[metric])}
            results[key] = {"value": v[metric]}
            if metric == "verdict":
                results[key]["bgColor"] = thresholds[int(v[metric])]["bgColor"]
        docs[metric] = {"name": f"opdiff {metric}", "results": results, "thresholds": thresholds}
    return docs


def write_overlays(cmp: Comparison, out: str | Path, keys: dict[str, str] | None = None) -> list[Path]:
    """Write OUT/<metric>.json for every overlay; OUT is created. Returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for metric, doc in overlays(cmp, keys).items():
        path = out / f"{metric}.json"
        path.write_text(dumps(doc, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written
