"""What a capture tells its user on stderr: progress lines on long captures and a one-line summary.

Set OPDIFF_QUIET=1 to silence both (the dump is the same either way).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..base.numfmt import size

FIRST_AFTER_S = 10.0  # a capture shorter than this prints no progress
EVERY_S = 10.0


class CaptureProgress:
    """Prints "opdiff capture: N records, X MB so far -> PATH" every EVERY_S seconds after the first
    FIRST_AFTER_S, and "opdiff capture: N records, X MB of tensor data written to PATH" at the end."""

    def __init__(self, path: str | os.PathLike, stream=None):
        self.path = Path(path)
        self.stream = stream or sys.stderr
        self.quiet = os.environ.get("OPDIFF_QUIET", "") not in ("", "0")
        self.start = self.last = time.monotonic()

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(f"opdiff capture: {text}", file=self.stream, flush=True)

    def tick(self, records: int, nbytes: int) -> None:
        now = time.monotonic()
        if now - self.start >= FIRST_AFTER_S and now - self.last >= EVERY_S:
            self.last = now
            self._say(f"{records:,} records, {size(nbytes)} so far ({now - self.start:.0f} s) -> {self.path}")

    def summary(self, records: int, nbytes: int, complete: bool) -> None:
        state = "" if complete else " (incomplete: the run raised)"
        self._say(f"{records:,} records, {size(nbytes)} of tensor data written to {self.path} "
                  f"in {time.monotonic() - self.start:.1f} s{state}")
