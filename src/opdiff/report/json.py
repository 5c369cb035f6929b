"""JSON report for CI and other tools: schema "opdiff-compare", version SCHEMA_VERSION (docs/compare.md).

Non-finite numbers follow opdiff's one rule (base/jsonsafe.py): `null`, and for metrics a sibling
"metrics_nonfinite" {name: "nan"|"inf"|"-inf"} where any metric is non-finite.

The "pairs" array is streamed one pair per line through orjson when it is installed (a dependency): the
same values as the standard encoder's text (floats round-trip exactly; non-ASCII text as UTF-8 rather than
\\u escapes), ~5x less CPU per pair. A pair's metrics are encoded alone first: only a pair whose metrics
hold a null (N/A, nan, inf) goes through split_nonfinite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..base.jsonsafe import compact, dumps, split_nonfinite
from ..base.pair import PairResult
from ..base.record import Record
from ..base.version import __version__
from ..compare.run import Comparison
from ..metrics import names as M
from ..store import Dump
from . import numtext
from .table import ACCURACY_REACHED, parts

SCHEMA = "opdiff-compare"
SCHEMA_VERSION = 2  # 2: non-finite metrics are null + metrics_nonfinite (1: strings "NaN", "Infinity")
_META_KEYS = ("framework", "framework_version", "device", "default_dtype", "level", "mode", "created", "host")


def _record(r: Record | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"index": r.index, "name": r.name, "node": r.node, "module": r.module, "op": r.op, "level": r.level,
            "direction": r.direction, "role": r.role, "pos": r.pos, "dtype": r.dtype, "shape": list(r.shape)}


def _dump(d: Dump) -> dict[str, Any]:
    return {"path": str(d.where), "rank": d.rank, "step": d.step, "records": len(d.records), "complete": d.complete,
            "problems": list(d.problems), "meta": {k: d.meta[k] for k in _META_KEYS if k in d.meta}}


def pair_json(r: PairResult) -> dict[str, Any]:
    """One pair of the "pairs" array."""
    metrics, nonfinite = split_nonfinite(M.columns(r.metrics))
    return _pair_doc(r, metrics, nonfinite)


def _pair_doc(r: PairResult, metrics: Any, nonfinite: dict[str, str]) -> dict[str, Any]:
    """A pair's object around its metrics (a dict, or JSON text already encoded) and their non-finite names."""
    return {
        "index": r.index,
        "golden": _record(r.golden),
        "target": _record(r.target),
        "match": r.match,
        "status": r.status,
        "mode": r.mode,
        "result": r.result,
        "accuracy_reached": ACCURACY_REACHED.get(r.result, "") or None,
        "bitwise_equal": r.bitwise_equal,
        "precision": r.precision or None,
        "metrics": metrics,
        **({"metrics_nonfinite": nonfinite} if nonfinite else {}),
        "err_message": r.err_message,
        "note": r.note,
        "golden_group": [g.name for g in r.golden_group],
    }


def comparison_json(cmp: Comparison, worst: int = 20, pairs: bool = True) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (without the "pairs" array when pairs=False)."""
    ff = cmp.first_fail()
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "opdiff_version": __version__,
        "golden": _dump(cmp.golden),
        "target": _dump(cmp.target),
        "mode": cmp.mode,
        "thresholds": cmp.thresholds.to_json(),
        "mapping": cmp.mapping.source if cmp.mapping is not None else None,
        "summary": {
            "pairs": len(cmp.results),
            "results": cmp.counts(),
            "statuses": cmp.status_counts(),
            "passed": cmp.passed(),
            "gate": cmp.judgement.to_json() if cmp.judgement is not None else None,  # compare/gate.py
            "first_fail": ff.index if ff else None,
            "worst": [r.index for r in cmp.worst(worst)],
            "unmatched": {"golden": len(cmp.unmatched("golden")), "target": len(cmp.unmatched("target"))},
            "elapsed_s": round(cmp.elapsed, 4),
            "tensor_bytes": cmp.tensor_bytes,
            "workers": cmp.workers,
            "steps": _steps(cmp),
        },
        **({"pairs": [p for _, p in _pairs(cmp)]} if pairs else {}),
    }


def _steps(cmp: Comparison) -> list[dict[str, Any]] | None:
    """Each (rank, step) part of a multi-step comparison: its counts and whether it passes the fixed rules."""
    if not cmp.other_steps:
        return None
    return [{"rank": rank, "step": step, "pairs": len(c.results), "results": c.counts(),
             "passed_thresholds": c.passed_thresholds(every_step=False)} for (rank, step), c in parts(cmp)]


def _pairs(cmp: Comparison) -> Iterator[tuple[PairResult, dict[str, Any]]]:
    """Every step's pairs as JSON, each with its rank and step when the comparison covers more than one."""
    for (rank, step), c in parts(cmp):
        for r in c.results:
            doc = pair_json(r)
            if cmp.other_steps:
                doc = {"rank": rank, "step": step, **doc}
            yield r, doc


def write_json(cmp: Comparison, path: str | os.PathLike[str]) -> None:
    """Write the JSON report (strict JSON: allow_nan=False), one pair per line, streamed: memory
    does not grow with the number of pairs."""
    head = dumps(comparison_json(cmp, pairs=False), separators=(",", ":"))
    with open(path, "wb", buffering=1 << 20) as f:
        f.write((head[:-1] + ',"pairs":[\n').encode("utf-8"))
        lines = _fast_lines(cmp) if numtext.orjson is not None else \
            ((compact(doc) + "\n").encode("utf-8") for _, doc in _pairs(cmp))
        for i, line in enumerate(lines):
            f.write(b"," + line if i else line)
        f.write(b"]}\n")


def _default(o: Any) -> Any:
    """What orjson cannot encode itself: a numpy scalar as its Python value, anything else as text."""
    if hasattr(o, "item") and not isinstance(o, (list, dict, str)):
        return o.item()
    return str(o)


def _fast_lines(cmp: Comparison) -> Iterator[bytes]:
    """Each pair's line of the "pairs" array (pair_json's object) through orjson."""
    orjson = numtext.orjson
    assert orjson is not None
    names: dict[tuple[str, ...], tuple[str, ...]] = {}  # a metrics dict's keys -> their column names
    frag, dumps_ = orjson.Fragment, orjson.dumps
    for (rank, step), c in parts(cmp):
        for r in c.results:
            try:
                yield _fast_line(r, names, frag, dumps_, (rank, step) if cmp.other_steps else None)
            except TypeError:  # what orjson refuses (an int past 64 bits): the standard encoder's line
                doc = pair_json(r)
                yield (compact({"rank": rank, "step": step, **doc} if cmp.other_steps else doc) + "\n").encode()


def _fast_line(r: PairResult, names: dict[tuple[str, ...], tuple[str, ...]], frag: Any, dumps_: Any,
               at: tuple[int, int] | None) -> bytes:
    """One pair's line: pair_json's object with its metrics encoded first (a Fragment when none is null)."""
    m = r.metrics
    keys = tuple(m)
    cols = names.get(keys) or names.setdefault(keys, tuple(M.column(k) for k in keys))
    metrics: Any = dict(zip(cols, m.values()))
    nonfinite: dict[str, str] = {}
    text = dumps_(metrics, default=_default)
    if b"null" in text:  # N/A or non-finite: the sibling says which
        metrics, nonfinite = split_nonfinite(metrics)
    else:
        metrics = frag(text)
    doc = _pair_doc(r, metrics, nonfinite)
    if at is not None:
        doc = {"rank": at[0], "step": at[1], **doc}
    line: bytes = dumps_(doc, default=_default)
    return line + b"\n"
