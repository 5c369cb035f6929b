"""The options every capture backend takes, checked in one place before anything runs (docs/capture.md).

Each backend names its levels here (LEVELS) and builds its `Options` with `Options.parse`, which raises
one OpdiffError line naming the backend and the bad value; the backend's own options stay its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base.errors import OpdiffError
from ..base.vocab import MODES, TORCH_LEVELS

# the levels of each backend, coarse to fine (torch's are also the CLI's --level choices)
LEVELS: dict[str, tuple[str, ...]] = {
    "torch": TORCH_LEVELS,
    "tensorflow": ("layer", "op"),
    "onnxruntime": ("graph", "module"),
}


def regex(who: str, what: str, pattern: str | None) -> re.Pattern[str] | None:
    """`pattern` compiled; a bad one is a one-line OpdiffError naming the option."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise OpdiffError(f"{who}: bad {what} regex {pattern!r}: {exc}") from None


def choice(who: str, what: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` when it is one of `allowed`; else a one-line OpdiffError listing them."""
    if value not in allowed:
        raise OpdiffError(f"{who}: {what} must be one of {', '.join(allowed)}, not {value!r}")
    return value


@dataclass(frozen=True)
class Options:
    """Level, mode and the include/exclude filters of one capture, checked (`who` names the caller in errors)."""

    who: str
    level: str
    mode: str
    include: re.Pattern[str] | None = None
    exclude: re.Pattern[str] | None = None
    include_text: str | None = None  # as given, for meta.json
    exclude_text: str | None = None

    @classmethod
    def parse(cls, who: str, backend: str, *, level: str, mode: str, include: str | None = None,
              exclude: str | None = None, modes: tuple[str, ...] = MODES) -> Options:
        return cls(who, choice(who, "level", level, LEVELS[backend]), choice(who, "mode", mode, modes),
                   regex(who, "include", include), regex(who, "exclude", exclude), include, exclude)

    def wanted(self, module: str, op: str) -> bool:
        """include/exclude, each searched in the module path and in the op name."""
        inc, exc = self.include, self.exclude
        return (inc is None or bool(inc.search(module) or inc.search(op))) and \
            not (exc is not None and bool(exc.search(module) or exc.search(op)))


__all__ = ["LEVELS", "Options", "choice", "regex"]
