"""JSON report for CI and other tools: schema "opdiff-compare", version SCHEMA_VERSION (docs/compare.md).

Non-finite numbers follow opdiff's one rule (base/jsonsafe.py): `null`, and for metrics a sibling
"metrics_nonfinite" {name: "nan"|"inf"|"-inf"} where any metric is non-finite.

The "pairs" array is streamed one pair per line, a block of pairs at a time (JsonSink, one of the sinks
report.write_many feeds in one pass with the CSV and XLSX): the lines of ordinary pairs from one template
per block (json_rows.py), any other pair through orjson alone, where orjson is installed (a dependency):
the same values as the standard encoder's text (floats round-trip exactly; non-ASCII text as UTF-8 rather
than \\u escapes). A pair encoded alone has its metrics encoded first: only a pair whose metrics hold a
null (N/A, nan, inf) goes through split_nonfinite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..base import gcpause
from ..base.jsonsafe import compact, dumps, split_nonfinite
from ..base.pair import PairResult
from ..base.record import Record
from ..base.version import __version__
from ..base.vocab import STATUS_UNMATCHED
from ..compare.run import Comparison
from ..metrics import names as M
from ..store import Dump
from . import json_rows, numtext
from .blocks import Block, blocks
from .table import ACCURACY_REACHED, parts
from .weave import weave

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
    statuses = cmp.status_counts()
    unmatched = {side: len(cmp.unmatched(side)) if statuses.get(STATUS_UNMATCHED) else 0  # none: no scan
                 for side in ("golden", "target")}
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
            "statuses": statuses,
            "passed": cmp.passed(),
            "gate": cmp.judgement.to_json() if cmp.judgement is not None else None,  # compare/gate.py
            "first_fail": ff.index if ff else None,
            "worst": [r.index for r in cmp.worst(worst)],
            "unmatched": unmatched,
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
    """Write the JSON report (strict JSON: allow_nan=False), one pair per line, streamed a block of pairs at
    a time: memory does not grow with the number of pairs."""
    sink = JsonSink(path, cmp)
    try:
        with gcpause.paused():  # the comparison's objects: no full collections over them (base/gcpause.py)
            for b in blocks(cmp, []):
                sink.add(b)
    finally:
        sink.close()


class JsonSink:
    """The JSON report written as blocks of pairs arrive (blocks.py): the head (comparison_json without the
    pairs), each block's pair lines (pair_lines), the end. One of report/tables.py's sinks: with the CSV and
    XLSX in one pass, it takes the block's columns those have formatted already."""

    def __init__(self, path: str | os.PathLike[str], cmp: Comparison) -> None:
        head = dumps(comparison_json(cmp, pairs=False), separators=(",", ":"))
        self.multi = bool(cmp.other_steps)
        self.names: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.f = open(path, "wb", buffering=1 << 20)
        self.f.write((head[:-1] + ',"pairs":[\n').encode("utf-8"))
        self.first = True

    def add(self, b: Block) -> None:
        for chunk in pair_lines(b, self.names, self.multi):
            if self.first and chunk:
                chunk, self.first = chunk[1:], False  # the array's first line has no comma before it
            self.f.write(chunk)

    def close(self) -> None:
        try:
            self.f.write(b"]}\n")
        finally:
            self.f.close()


def pair_lines(b: Block, names: dict[tuple[str, ...], tuple[str, ...]], multi: bool) -> Iterator[bytes]:
    """The block's lines of the "pairs" array, each "," + pair_json's object + newline (with "rank" and "step"
    first when `multi`). Runs of ordinary pairs come from one template (json_rows.py); a pair the template
    does not cover (a missing side, a fusion group, a non-finite or N/A metric, a text orjson refuses) is
    encoded alone (`_fast_line`), and everything by the standard encoder where orjson is not installed."""
    at = b.at if multi else None
    if numtext.orjson is None:
        for r in b.results:
            yield b"," + _std_line(r, at)
        return
    template = json_rows.template(b, at)
    for fast, start, stop in json_rows.runs(template.slow, len(b.results)):
        if fast:
            yield weave(template.pieces, template.columns, start, stop).encode("utf-8")
            continue
        for r in b.results[start:stop]:
            yield b"," + _line(r, names, at)


def _line(r: PairResult, names: dict[tuple[str, ...], tuple[str, ...]], at: tuple[int, int] | None) -> bytes:
    """One pair's line through orjson, or the standard encoder's where orjson refuses a value."""
    orjson = numtext.orjson
    try:
        return _fast_line(r, names, orjson.Fragment, orjson.dumps, at)
    except TypeError:  # what orjson refuses (an int past 64 bits, a lone surrogate): the standard encoder's line
        return _std_line(r, at)


def _std_line(r: PairResult, at: tuple[int, int] | None) -> bytes:
    """One pair's line by the standard encoder (with "rank" and "step" first when `at`)."""
    doc = pair_json(r)
    return (compact({"rank": at[0], "step": at[1], **doc} if at else doc) + "\n").encode("utf-8")


def _fast_line(r: PairResult, names: dict[tuple[str, ...], tuple[str, ...]], frag: Any, dumps_: Any,
               at: tuple[int, int] | None) -> bytes:
    """One pair's line: pair_json's object with its metrics encoded first (a Fragment when none is null)."""
    m = r.metrics
    keys = tuple(m)
    cols = names.get(keys) or names.setdefault(keys, tuple(M.column(k) for k in keys))
    metrics: Any = dict(zip(cols, m.values()))
    nonfinite: dict[str, str] = {}
    text = dumps_(metrics, default=json_rows.default)
    if b"null" in text:  # N/A or non-finite: the sibling says which
        metrics, nonfinite = split_nonfinite(metrics)
    else:
        metrics = frag(text)
    doc = _pair_doc(r, metrics, nonfinite)
    if at is not None:
        doc = {"rank": at[0], "step": at[1], **doc}
    line: bytes = dumps_(doc, default=json_rows.default)
    return line + b"\n"
