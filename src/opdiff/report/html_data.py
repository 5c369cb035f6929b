"""What the HTML report's page reads: one JSON document (columns per record, the diagnosis, value
samples), gzip-compressed and base64-encoded into the page (docs/report.md, "Inside the file").

Inside this embedded document only, non-finite numbers are the strings "nan", "inf", "-inf"
(the page's script turns them back into numbers); it is not an output file of opdiff.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import math
from typing import Any

import numpy as np

from ..base import jsonsafe
from ..base.errors import DumpError
from ..base.pair import PairResult
from ..base.vocab import FAIL, NA, PASS, WARNING
from ..compare.run import Comparison
from ..diagnose.noise import pair_error
from ..diagnose.verdict import Diagnosis
from ..metrics import names as M
from ..metrics.thresholds import ROUNDING_UNIT, unit
from ..store import Dump

RESULTS = (PASS, WARNING, FAIL, NA)  # result codes 0..3 in the page
SAMPLE_VALUES = 128  # values per sampled pair (the worst element included)
SAMPLE_PAIRS = 600  # at most this many pairs get a sample (the diagnosis' tensors first, then the worst)
DIAGNOSIS_FIELDS = ("verdict", "summary", "culprit", "first_divergence", "candidates", "evidence", "advice",
                    "path_of_divergence", "warnings", "noise", "counts", "replay")


def _n(x: Any, digits: int = 5) -> Any:
    """A number for the page: rounded to `digits` significant digits; nan/inf as strings."""
    if x is None or isinstance(x, (bool, str)):
        return x
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(f):
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if isinstance(x, (int, np.integer)):
        return int(x)
    r = float(f"{f:.{digits}g}")
    return r if math.isfinite(r) else f  # near float64's limit, rounding up would give inf


def error_units(p: PairResult) -> float | None:
    """A pair's relative error in rounding units of the precision its verdict used (None: unknown)."""
    err = pair_error(p)
    if err is None:
        return None
    u = ROUNDING_UNIT.get(p.precision) or unit(p.golden.dtype if p.golden else None, p.target.dtype if p.target else None)
    if not u:
        return 0.0 if err == 0 else None
    return err / u


def plain(x: Any) -> Any:
    """A diagnosis field as plain JSON-ready data, whatever its type (dict, dataclass, object with to_json)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {k: plain(v) for k, v in dataclasses.asdict(x).items()}
    if hasattr(x, "to_json") and callable(x.to_json):
        return plain(x.to_json())
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def diagnosis_data(diagnosis: Diagnosis | None) -> dict[str, Any] | None:
    """The diagnosis' public fields as plain data (missing fields are left out: tolerant of new shapes)."""
    if diagnosis is None:
        return None
    doc = {k: plain(getattr(diagnosis, k)) for k in DIAGNOSIS_FIELDS if hasattr(diagnosis, k)}
    if hasattr(diagnosis, "confirmation"):
        doc["confirmation"] = plain(diagnosis.confirmation())  # patch | replay | statistics only
    return doc


def _records(results: list[PairResult]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {k: [] for k in ("name", "gname", "op", "module", "dir", "res", "eu", "omc", "status",
                                                   "match", "gdt", "tdt", "shape", "msg")}
    for r in results:
        rec = r.record
        cols["name"].append(r.name)
        cols["gname"].append(r.golden.name if r.golden is not None and r.golden.name != r.name else None)
        cols["op"].append(rec.op)
        cols["module"].append(rec.module)
        cols["dir"].append(rec.direction)
        cols["res"].append(RESULTS.index(r.result) if r.result in RESULTS else 3)
        cols["eu"].append(_n(error_units(r), 4))
        cos = r.metrics.get(M.COSINE)
        cols["omc"].append(_n(max(0.0, 1.0 - float(cos)), 4) if isinstance(cos, (int, float)) and math.isfinite(cos) else None)
        cols["status"].append(r.status)
        cols["match"].append(r.match)
        cols["gdt"].append(r.golden.dtype if r.golden else None)
        cols["tdt"].append(r.target.dtype if r.target else None)
        cols["shape"].append(list(rec.shape))
        cols["msg"].append(r.err_message or r.note or None)
    return cols


def _metrics(results: list[PairResult]) -> dict[str, list[Any]]:
    """Each metric's values by its column name (the page shows and reads those: "MaxAbsErr" ...)."""
    keys: dict[str, None] = {}
    for r in results:
        keys.update(dict.fromkeys(r.metrics))
    keys.pop(M.COSINE, None)  # kept exactly as 1 - cos ("omc"), which 5 digits of cos would lose
    return {M.column(k): [_n(r.metrics.get(k)) for r in results] for k in keys}


def _sample_order(cmp: Comparison, eu: list[Any], first: list[int]) -> list[int]:
    """Which pairs get a value sample: the diagnosis' tensors, then FAIL, WARNING and PASS by error."""
    def key(i: int) -> tuple[int, float]:
        e = eu[i]
        e = float(e) if isinstance(e, (int, float)) else (math.inf if e in ("inf", "nan") else -1.0)
        return ({FAIL: 0, WARNING: 1}.get(cmp.results[i].result, 2), -e)

    rest = sorted((i for i, r in enumerate(cmp.results) if r.status == "compared"), key=key)
    seen: dict[int, None] = dict.fromkeys(first)
    seen.update(dict.fromkeys(rest))
    return list(seen)[:SAMPLE_PAIRS]


def _sample(golden: Dump, target: Dump, r: PairResult) -> dict[str, list[Any]] | None:
    """Up to SAMPLE_VALUES values at the same flat positions of both sides (the worst element among them)."""
    g, t = r.golden, r.target
    if g is None or t is None or not g.has_data or not t.has_data or g.numel != t.numel or g.numel == 0:
        return None
    try:
        gv = golden.tensor(g).reshape(-1)
        tv = target.tensor(t).reshape(-1)
    except (DumpError, ValueError, OSError):
        return None
    n = gv.size
    rng = np.random.default_rng(r.index)
    idx = np.unique(rng.choice(n, size=min(n, SAMPLE_VALUES - 1), replace=False)) if n > SAMPLE_VALUES else np.arange(n)
    worst = r.metrics.get(M.WORST_INDEX)
    if isinstance(worst, (int, np.integer)) and 0 <= worst < n and worst not in idx:
        idx = np.sort(np.append(idx, worst))
    try:
        gs, ts = gv[idx].astype(np.float64), tv[idx].astype(np.float64)
    except (TypeError, ValueError):
        return None  # not a numeric dtype numpy can widen
    return {"i": idx.tolist(), "g": [_n(v, 6) for v in gs.tolist()], "t": [_n(v, 6) for v in ts.tolist()]}


def _diagnosis_names(d: dict[str, Any] | None) -> list[str]:
    """Record names the diagnosis points at: the culprit's outputs (or its record), its other
    evidence, the path of divergence. The first is the pair the page marks as the culprit."""
    if not d:
        return []
    ev: dict[str, Any] = d["evidence"] if isinstance(d.get("evidence"), dict) else {}
    cu: dict[str, Any] = d["culprit"] if isinstance(d.get("culprit"), dict) else {}
    names = [t.get("target") for t in ev.get("outputs") or [] if isinstance(t, dict)]
    names += [cu.get("target"), cu.get("golden")]
    for group in ev.values():
        if isinstance(group, list):
            names += [t.get("target") for t in group if isinstance(t, dict)]
    names += [p.get("target") for p in d.get("path_of_divergence") or [] if isinstance(p, dict)]
    return [n for n in names if isinstance(n, str)]


def build(cmp: Comparison, diagnosis: Diagnosis | None = None, title: str = "opdiff report", samples: bool = True) -> dict[str, Any]:
    """The page's document."""
    rec = _records(cmp.results)
    d = diagnosis_data(diagnosis)
    index = {n: i for i, n in enumerate(rec["name"])}
    index.update({n: i for i, n in enumerate(rec["gname"]) if n is not None and n not in index})
    marked = [index[n] for n in _diagnosis_names(d) if n in index]
    culprit = marked[0] if d and d.get("culprit") and marked else None
    sampled = {}
    if samples:
        for i in _sample_order(cmp, rec["eu"], marked):
            s = _sample(cmp.golden, cmp.target, cmp.results[i])
            if s is not None:
                sampled[str(i)] = s
    ff = cmp.first_fail()
    return {
        "title": title,
        "golden": {"path": str(cmp.golden.where), "rank": cmp.golden.rank, "step": cmp.golden.step},
        "target": {"path": str(cmp.target.where), "rank": cmp.target.rank, "step": cmp.target.step},
        "mode": cmp.mode,
        "thresholds": cmp.thresholds.name,
        "counts": cmp.counts(),
        "results": list(RESULTS),
        "first_fail": ff.index if ff is not None else None,
        "culprit": culprit,
        "path": [index[p["target"]] for p in (d or {}).get("path_of_divergence") or []
                 if isinstance(p, dict) and p.get("target") in index],
        "records": rec,
        "metrics": _metrics(cmp.results),
        "samples": sampled,
        "diagnosis": d,
    }


FIRST_METRICS = ("MaxAbsErr", "MaxRelativeErr")  # the table's metric columns: in the first document


def split(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The document in two: what the chart, the table and the diagnosis need, read before anything is drawn,
    and the rest (every other metric column, the per-pair notes: over half the bytes of a big comparison),
    read right after. The page merges them back into one (report.js); `join` does the same here."""
    metrics = doc.get("metrics") or {}
    records = dict(doc["records"])
    more = {"metrics": {k: v for k, v in metrics.items() if k not in FIRST_METRICS}, "msg": records.pop("msg", None)}
    first = {**doc, "records": records, "metrics": {k: v for k, v in metrics.items() if k in FIRST_METRICS}}
    return first, more


def join(first: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """The one document `split` made two of (as the page merges them)."""
    records = {**first["records"], "msg": more.get("msg")}
    return {**first, "records": records, "metrics": {**first.get("metrics", {}), **more.get("metrics", {})}}


def page_values(x: Any) -> Any:
    """`x` with every non-finite number, at any depth, as the page's string "nan", "inf" or "-inf"
    (numpy scalars as Python ones): whatever a diagnosis' evidence holds, the document is strict JSON."""
    if isinstance(x, dict):
        return {str(k): page_values(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [page_values(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return jsonsafe.nonfinite_text(x)
    return x


def encode(doc: dict[str, Any]) -> str:
    """The document as base64 of gzip'd JSON (what the page decompresses with DecompressionStream)."""
    raw = json.dumps(page_values(doc), separators=(",", ":"), allow_nan=False, default=str).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")
