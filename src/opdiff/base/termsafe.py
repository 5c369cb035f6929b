"""Text from a dump made safe for a terminal: no rich markup, no control characters.

Record names and meta fields come from files anyone could write; printed raw they could
restyle the terminal (ANSI escapes), hide text (NUL, carriage return) or inject rich markup.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def plain(text: object) -> str:
    """`text` with every control or bidi character shown as a visible escape (\\x1b, \\u202e)."""
    s = str(text)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), s)


# a "[" that could open a tag once pieces are joined: before a tag's first character, or last (the next piece
# may supply the rest, and the "]" may come from any later piece); the backslashes before it, doubled
_OPENS = re.compile(r"(\\*)\[(?=[a-z#/@]|\Z)")
_TRAILING = re.compile(r"\\+\Z")  # backslashes at the end would escape the next piece's own tag


def escape_markup(s: str) -> str:
    """`s` as literal text inside rich markup, also when joined to other escaped pieces and to markup: rich's
    own escape looks at one piece ("[/x" with no "]" is left, then a later "]" closes a tag across pieces)."""
    s = _OPENS.sub(lambda m: m.group(1) * 2 + "\\[", s)
    return _TRAILING.sub(lambda m: m.group() * 2, s)


def safe(text: object) -> str:
    """`text` ready to print through rich with markup on: control characters escaped, markup escaped."""
    return escape_markup(plain(text))


def safe_deep(obj: Any) -> Any:
    """A copy of a result object (dataclass, dict, list) with every string made `safe`, for printing."""
    if isinstance(obj, str):
        return safe(obj)
    if isinstance(obj, dict):
        return {k: safe_deep(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(safe_deep(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: safe_deep(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    return obj
