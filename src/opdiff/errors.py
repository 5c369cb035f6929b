"""Public home of opdiff's user-facing errors (they live in the base layer: opdiff.base.errors)."""

from .base.errors import DumpError, OpdiffError

__all__ = ["DumpError", "OpdiffError"]
