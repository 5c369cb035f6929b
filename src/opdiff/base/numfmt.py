"""The one number formatter of opdiff: console, shell, HTML and CSV show numbers the same way.

- `num(x)`: short text of any value ("-" for None, "nan", "inf", 4 significant digits).
- `cosine(c)`: enough digits to tell 0.9999997 from 0.99999999 (a FAIL from a PASS near 1).
- `units(e)`: an error in rounding units ("12.3 u"); `UNIT_NOTE` explains u where first shown.
- `rel_err(rel, abs_err)`: a relative error, with its absolute error when the relative one is huge
  (golden near zero makes any difference look enormous).
- `size(n)`: a byte count ("1.2 MB").
"""

from __future__ import annotations

import math
from typing import Any

UNIT_NOTE = ("u = the rounding unit of the pair's lower precision (2^-24 for float32, 2^-11 float16, 2^-8 bfloat16): "
             "an error of 1 u is what one rounding makes")
HUGE_REL = 1e3  # a relative error above this is shown with its absolute error


def _float(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def num(x: Any, digits: int = 4, na: str = "-") -> str:
    """Short text of a value: numbers to `digits` significant digits, non-finite as nan/inf/-inf."""
    if x is None:
        return na
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return str(bool(x))
    if isinstance(x, int) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in "iu"):
        return str(int(x))
    f = _float(x)
    if f is None:
        return str(x)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f"{f:.{digits}g}"


def cosine(c: Any, na: str = "-") -> str:
    """A cosine similarity with enough digits that 1 - cos keeps 3 significant digits."""
    f = _float(c)
    if f is None:
        return na
    if not math.isfinite(f):
        return num(f)
    gap = 1.0 - f
    if f == 1.0 or gap <= 0 or gap >= 1e-3:
        return f"{f:.6g}" if gap != 0 else "1"
    digits = min(16, int(math.floor(-math.log10(gap))) + 3)
    return f"{f:.{digits}f}"


def one_minus_cos(c: Any) -> float | None:
    """1 - cosine (what a log scale can show), None when unknown."""
    f = _float(c)
    return None if f is None or math.isnan(f) else max(0.0, 1.0 - f)


def units(e: Any, na: str = "-") -> str:
    """An error in rounding units: "0 u", "3.2 u", "1.2e+05 u"."""
    f = _float(e)
    if f is None:
        return na
    return f"{num(f, 3)} u"


def rel_err(rel: Any, abs_err: Any = None, na: str = "-") -> str:
    """A relative error; when huge (golden near zero), followed by the absolute error that explains it."""
    f = _float(rel)
    if f is None:
        return na
    text = num(f)
    a = _float(abs_err)
    if a is not None and (math.isinf(f) or f > HUGE_REL):
        text += f" (abs {num(a)})"
    return text


def size(n: Any) -> str:
    """A byte count in B, kB, MB, GB (powers of 1000)."""
    f = _float(n) or 0.0
    for unit in ("B", "kB", "MB", "GB"):
        if abs(f) < 1000 or unit == "GB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1000
    return f"{f:.1f} TB"
