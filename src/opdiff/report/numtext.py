"""Whole lists of numbers as the texts `str()` gives each, at C speed: what the CSV, XLSX and JSON rows write.

`repr` of one float costs 0.3-1 us on a loaded core, ~30 floats per row per report; orjson (Ryu, when
installed) formats a whole list in one call about 14x faster. Its shortest round-trip digits are
Python's; only the layout differs in two places (exponent 1e-5..1e-4 written positionally, one-digit
negative exponents), which `_python_layout` puts back, so the texts are byte for byte `str(x)`. Without
orjson the standard library's encoder (float.__repr__ itself) does the same, slower.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

orjson: Any  # the module, or None where it is not installed (tests set None to take the standard path)
try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; the standard encoder is the same text
    orjson = None

__all__ = ["number_texts", "orjson"]

_STD = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_NUMBER_BYTES = b"0123456789.-+e,[]"  # all a JSON list of finite numbers is made of
_SHORT_EXP = re.compile(r"e-(\d)(?!\d)")  # orjson: 1e-7; Python: 1e-07
_E5 = re.compile(r"0\.0000[1-9]\d*")  # orjson: 0.0000123; Python: 1.23e-05 (a literal start: searched at C speed)


def _e5(m: re.Match[str]) -> str:
    """A number orjson wrote as 0.0000ddd in Python's d.dde-05; the same digits inside a longer number
    ("10.00001") are left as they are."""
    i = m.start()
    if i and m.string[i - 1] in _DIGIT_OR_POINT:
        return m[0]
    d = m[0][6:]
    return f"{d[0]}.{d[1:]}e-05" if len(d) > 1 else f"{d}e-05"


_DIGIT_OR_POINT = frozenset("0123456789.")


def _python_layout(text: str) -> str:
    """orjson's text of finite numbers laid out as Python's repr lays them out (same digits)."""
    if "e-" in text:
        text = _SHORT_EXP.sub(r"e-0\1", text)
    if "0.0000" in text:
        text = _E5.sub(_e5, text)
    return text


def _encode(values: Sequence[Any]) -> str | None:
    """The JSON list text of `values` when every one is a finite Python float or int (bools excluded), else None."""
    if orjson is not None:
        try:
            raw = orjson.dumps(values)
        except TypeError:  # a numpy scalar, an int beyond 64 bits: not for the fast path
            return None
        if raw.translate(None, _NUMBER_BYTES):  # null (None, nan, inf), true/false, a string ...
            return None
        return _python_layout(raw.decode("ascii"))
    try:
        text = _STD.encode(values)
    except (ValueError, TypeError):
        return None
    return None if text.translate(_NOT_NUMBER) else text


_NOT_NUMBER = dict.fromkeys(map(ord, "0123456789.-+e,[]"))


def number_texts(values: Sequence[Any]) -> list[str] | None:
    """[str(v) for v in values] when every value is a finite float or int (not a bool), else None: the
    caller formats that list one value at a time."""
    if not values:
        return []
    text = _encode(values if isinstance(values, list) else list(values))
    if text is None:
        return None
    text, n = text[1:-1], len(values)
    first = text[:text.find(",")] if n > 1 else text
    if len(text) == n * (len(first) + 1) - 1 and text == ",".join([first] * n):  # one number n times: not split
        return [first] * n
    return text.split(",")
