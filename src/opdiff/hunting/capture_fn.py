"""The `capture` a hunted function receives: `with capture(model, **opts): ...`, configured by hunt."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..base.errors import OpdiffError

# options hunt sets itself; the function may pass any other capture option (backward=True, steps=...)
RESERVED = ("path", "mode", "level", "include", "overwrite")


class CaptureBlock:
    """Called once by the user's function as ``capture(model, **options)``; returns opdiff's capture
    context manager writing to the pass's directory, in the pass's mode, level and region."""

    def __init__(self, path: Path, *, mode: str, level: str, include: str | None, who: str):
        self.path, self.mode, self.level, self.include, self.who = path, mode, level, include, who
        self.calls = 0
        self.options: dict[str, Any] = {}

    def __call__(self, model: object, **options: Any) -> AbstractContextManager[Any]:
        from .. import capture

        bad = sorted(set(options) & set(RESERVED))
        if bad:
            raise OpdiffError(f"{self.who}: capture({', '.join(bad)}=...) is set by hunt; pass only other options")
        self.calls += 1
        if self.calls > 1:
            raise OpdiffError(f"{self.who}: called capture() more than once (hunt needs one capture block per run)")
        self.options = options
        return capture(model, self.path, level=self.level, mode=self.mode, include=self.include, overwrite=True,
                       **options)


def run_with_capture(fn: Callable[[CaptureBlock], Any], block: CaptureBlock) -> None:
    """Run the user's function with its capture block; it must have used it."""
    fn(block)
    if block.calls == 0:
        raise OpdiffError(f"{block.who}: never called capture(model) — wrap the model's run in `with capture(model):`")
