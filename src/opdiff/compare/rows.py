"""PairResults as compact JSON-ready rows and back, exactly: what distributed compare tasks send and keep.

A part's plan carries its records and pair layout once; each pair's result is then a short row
(status, mode, metrics, result, bitwise, message, precision). Metric values keep their exact
float (JSON numbers round-trip through repr); non-finite values use Python's NaN/Infinity
literals, since these files are opdiff's own task results, not reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..base import outdir
from ..base.pair import PairResult
from ..base.record import Record
from ..match.align import Pair

ROWS_FORMAT = 2  # 2: metrics keyed by field name (base/pair.py Metrics); 1: by column name


def _plain(v: Any) -> Any:
    """numpy scalars as the Python numbers they equal."""
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    raise TypeError(f"cannot store a {type(v).__name__} in a result row")


def layout(pairs: list[Pair], golden: list[Record], target: list[Record]) -> dict[str, Any]:
    """Both sides' records once, and each pair as [golden index, target index, match, note, group indexes]."""
    gi = {r.name: i for i, r in enumerate(golden)}
    ti = {r.name: i for i, r in enumerate(target)}
    rows = [[None if p.golden is None else gi[p.golden.name], None if p.target is None else ti[p.target.name],
             p.match, p.note, [gi[r.name] for r in p.golden_group]] for p in pairs]
    return {"records": {"golden": [r.to_json() for r in golden], "target": [r.to_json() for r in target]},
            "pairs": rows}


def records(plan: dict[str, Any]) -> tuple[list[Record], list[Record]]:
    """The golden and target records a plan carries."""
    recs = plan["records"]
    return [Record.from_json(d) for d in recs["golden"]], [Record.from_json(d) for d in recs["target"]]


def result_row(r: PairResult) -> list[Any]:
    """What compare_pair found for one pair (its records and layout travel in the plan)."""
    return [r.status, r.mode, r.metrics, r.result, r.bitwise_equal, r.err_message, r.precision]


def unrow(pair: list[Any], row: list[Any], golden: list[Record], target: list[Record]) -> PairResult:
    """The PairResult of a pair of the layout and its result row."""
    gi, ti, match, note, group = pair
    status, mode, metrics, result, bitwise, err, precision = row
    return PairResult(index=0, golden=None if gi is None else golden[gi], target=None if ti is None else target[ti],
                      match=match, status=status, mode=mode, metrics=metrics, result=result, bitwise_equal=bitwise,
                      err_message=err, note=note, golden_group=[golden[i] for i in group], precision=precision)


def dumps(obj: Any) -> str:
    """JSON text of rows (numpy scalars as plain numbers)."""
    return json.dumps(obj, default=_plain, separators=(",", ":"))


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a unique temp file and a rename (base.outdir.write_atomic)."""
    outdir.write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
