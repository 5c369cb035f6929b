"""The one rule for non-finite numbers in every JSON and CSV output of opdiff (docs/format.md).

JSON: NaN, +inf and -inf are written as `null` (strict JSON has no such numbers); where the
difference matters (a metric that is inf, not unknown), the object gets a sibling field
`<name>_nonfinite` (or `nonfinite` for a dict of metrics) holding "nan", "inf" or "-inf".
CSV: the cells read `nan`, `inf`, `-inf` (what Python, numpy and pandas parse back).
"""

from __future__ import annotations

import json
import math
from typing import Any


def nonfinite_text(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def number(x: Any) -> Any:
    """A JSON-ready scalar: non-finite floats become None, numpy scalars become Python ones."""
    if hasattr(x, "item") and not isinstance(x, (list, dict, str)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            return x
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def clean(x: Any) -> Any:
    """`x` with every non-finite float (at any depth) replaced by None; a dict member that was
    non-finite also gets its sibling `<key>_nonfinite` ("nan", "inf", "-inf")."""
    if isinstance(x, dict):
        out: dict[Any, Any] = {}
        for k, v in x.items():
            out[k] = clean(v)
            if isinstance(v, float) and not math.isfinite(v):
                out[f"{k}_nonfinite"] = nonfinite_text(v)
        return out
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return number(x)


def split_nonfinite(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A dict of numbers -> (the dict with nan/inf as None, {key: "nan"|"inf"|"-inf"} for those keys)."""
    out: dict[str, Any] = {}
    which: dict[str, str] = {}
    for k, v in values.items():
        kind = type(v)
        if (kind is float and v - v == 0.0) or kind is int or kind is str or v is None:  # most values: as they are
            out[k] = v
            continue
        v = number(v) if not isinstance(v, float) else v
        if isinstance(v, float) and not math.isfinite(v):
            which[k] = nonfinite_text(v)
            out[k] = None
        else:
            out[k] = v
    return out, which


def _plain(o: Any) -> Any:
    """What `clean` makes of a value json cannot encode (a numpy scalar: its Python value), for an encoder's
    `default`: anything else is text, as `dumps` writes it."""
    if hasattr(o, "item") and not isinstance(o, (list, dict, str)):
        return o.item()
    return str(o)


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_plain)


def compact(obj: Any) -> str:
    """dumps(obj, separators=(",", ":")) without walking `obj` first where nothing in it is non-finite (the
    encoder refuses nan/inf; only then is it cleaned): the same text, a fraction of the work per object."""
    try:
        return _ENCODER.encode(obj)
    except ValueError:
        return dumps(obj, separators=(",", ":"))


def dumps(obj: Any, **kw: Any) -> str:
    """json.dumps after `clean`, strict (allow_nan=False); objects it does not know become str."""
    kw.setdefault("default", str)
    return json.dumps(clean(obj), allow_nan=False, **kw)


def csv_cell(v: Any) -> str:
    """A CSV cell: bools True/False, floats in their shortest round-trip text, nan/inf/-inf as such."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return nonfinite_text(v) if not math.isfinite(v) else repr(v)
    if v is None:
        return ""
    return str(v)
