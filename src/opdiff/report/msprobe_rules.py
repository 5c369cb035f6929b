"""msprobe's Result rules (pass / warning / error per row), judged per API or module call as msprobe 26.x does.

Rows of one call are its input rows (inputs, parameters) and output rows. Every row starts as
"pass"; each rule may raise a row to "warning" or "error" and add its message. The rules and
thresholds are msprobe's (msprobe/core/compare/indicator_analysis), re-stated here:

- nan/inf in NPU max/min while Bench has none: error (tensor, summary)
- inputs' One Thousandth Err Ratio all > 0.9 and an output's < 0.1: error on the first output (tensor)
- largest input NormRelativeErr < 0.1 and an output's > 0.5: error on that output (summary)
- Requires_grad, dtype or shape differ: error; a non-tensor argument differs: error (tensor, summary)
- inputs' Cosine all > 0.9 and the worst output's lower by > 0.1: warning on the first output (tensor)
- largest output NormRelativeErr 10x the inputs' (or > 0.1 when inputs have 0): warning (summary)
- md5: CRC-32 values differ: error; one side missing: warning
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .msprobe_rows import NA, api_key

Row = dict[str, Any]
_ORDER = {"pass": 0, "warning": 1, "error": 2}


def _set(row: Row, level: str, msg: str) -> None:
    if _ORDER[level] > _ORDER[row["Result"]]:
        row["Result"] = level
    row["Err_message"].append(f"{level}: {msg}")


def _num(v: Any) -> float | None:
    if isinstance(v, str) and v.endswith("%"):
        try:
            return float(v.strip("%")) / 100
        except ValueError:
            return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _extreme(rows: list[Row], col: str, is_min: bool) -> float:
    """msprobe's min (default 1.0) or max (default 0.0) of a column over rows, skipping what is no number."""
    out = 1.0 if is_min else 0.0
    for r in rows:
        v = _num(r.get(col))
        if v is None or math.isnan(v):
            continue
        out = min(out, v) if is_min else max(out, v)
    return out


def _bad(v: Any) -> bool:
    if isinstance(v, float):
        return math.isnan(v) or math.isinf(v)
    return isinstance(v, str) and v.strip().lower() in ("inf", "-inf", "nan")


def inf_nan(ins: list[Row], outs: list[Row]) -> None:
    for r in ins + outs:
        if _bad(r.get("Bench max")) or _bad(r.get("Bench min")):
            continue
        if _bad(r.get("NPU max")) or _bad(r.get("NPU min")):
            _set(r, "error", "There is nan/inf/-inf in the maximum or minimum value of NPU.")


def one_thousandth(ins: list[Row], outs: list[Row]) -> None:
    if outs and _extreme(ins, "One Thousandth Err Ratio", True) > 0.9 \
            and _extreme(outs, "One Thousandth Err Ratio", True) < 0.1:
        _set(outs[0], "error", "The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6.")


def relative_err(ins: list[Row], outs: list[Row]) -> None:
    if abs(_extreme(ins, "NormRelativeErr", False)) < 0.1:
        for r in outs:
            v = _num(r.get("NormRelativeErr"))
            if v is not None and abs(v) > 0.5:
                _set(r, "error", "The NormRelativeErr of output is greater than 0.5.")


def _matched(r: Row) -> bool:
    return bool(r.get("Bench Name")) and r.get("Bench Name") != NA


def consistency(ins: list[Row], outs: list[Row]) -> None:
    """Requires_grad, dtype and shape of matched rows."""
    for r in ins + outs:
        if not _matched(r):
            continue
        if NA not in (r["NPU Requires_grad"], r["Bench Requires_grad"]) \
                and r["NPU Requires_grad"] != r["Bench Requires_grad"]:
            _set(r, "error", "The Required_Grad of NPU and Bench are inconsistent")
        if r["NPU Dtype"] != r["Bench Dtype"] and not any(k in r["Bench Name"] for k in ("qkv", "gate_up")):
            _set(r, "error", "The dtype of NPU and Bench are inconsistent.")
        if r["NPU Tensor Shape"] != r["Bench Tensor Shape"]:
            _set(r, "error", "The shape of NPU and Bench are inconsistent.")


def parameters(ins: list[Row], outs: list[Row]) -> None:
    """A non-tensor argument (dtype `<class ...>`, shape []) whose value differs from golden's."""
    for r in ins:
        if not _matched(r) or "class" not in str(r["NPU Dtype"]) or "class" not in str(r["Bench Dtype"]):
            continue
        if r["NPU Tensor Shape"] == "[]" and r["NPU max"] != r["Bench max"]:
            _set(r, "error", "The scalar parameters of NPU and Bench are inconsistent.")


def cosine_warn(ins: list[Row], outs: list[Row]) -> None:
    if not outs:
        return
    cin, cout = _extreme(ins, "Cosine", True), _extreme(outs, "Cosine", True)
    if cin > 0.9 and cin - cout > 0.1:
        _set(outs[0], "warning", "The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1")


def relative_warn(ins: list[Row], outs: list[Row]) -> None:
    if not outs:
        return
    rin, rout = abs(_extreme(ins, "NormRelativeErr", False)), abs(_extreme(outs, "NormRelativeErr", False))
    if (rin == 0 and rout > 0.1) or (rin != 0 and rout / rin > 10):
        _set(outs[0], "warning", "The norm relative error of output is 10 times that of input.")


def crc32(ins: list[Row], outs: list[Row]) -> None:
    for r in ins + outs:
        a, b = r.get("NPU MD5"), r.get("BENCH MD5")
        if a != b:
            if a in (NA, "Nan", "") or b in (NA, "Nan", ""):
                _set(r, "warning", "The parameter of NPU does not match the bench.")
            else:
                _set(r, "error", "The CRC-32 value of NPU differs from that of the bench.")


RULES: dict[str, list[Callable[[list[Row], list[Row]], None]]] = {
    "tensor": [inf_nan, one_thousandth, consistency, parameters, cosine_warn],
    "stats": [inf_nan, relative_err, consistency, parameters, relative_warn],
    "hash": [crc32],
}


def judge(rows: list[Row], mode: str) -> None:
    """Result and Err_message of every row, call by call."""
    calls: dict[str, tuple[list[Row], list[Row]]] = {}
    for r in rows:
        key, is_out = api_key(str(r["NPU Name"]))
        ins, outs = calls.setdefault(key, ([], []))
        (outs if is_out else ins).append(r)
    for ins, outs in calls.values():
        for rule in RULES[mode]:
            rule(ins, outs)
