"""The capture-backend interface: what a framework backend provides (docs/architecture.md).

A backend recognises its models without importing its framework, and returns a context manager
that runs the model under observation and hands the store's DumpWriter its records, tensors,
call lines and meta. Backends live in capture/<framework>/ and are imported only when used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


class CaptureBackend(Protocol):
    """One framework's capture: `handles(model)` is a cheap type check, `capture` does the work."""

    @property
    def framework(self) -> str: ...

    def handles(self, model: object) -> bool: ...

    def capture(self, model: Any, path: str | os.PathLike[str], **options: Any) -> AbstractContextManager[Any]: ...


def defined_in(model: object, *packages: str) -> bool:
    """True when `model`'s class or one of its bases comes from one of `packages` (no import needed)."""
    for cls in type(model).__mro__:
        mod = cls.__module__ or ""
        if any(mod == p or mod.startswith(p + ".") for p in packages):
            return True
    return False


def lazy(module: str, name: str, package: str | None = None) -> Any:
    """`name` from `module`, imported now (the one way capture code defers a framework import)."""
    from importlib import import_module

    return getattr(import_module(module, package), name)


@dataclass(frozen=True)
class LazyBackend:
    """A backend named by the module that implements it, imported on first use."""

    framework: str
    module: str  # e.g. "opdiff.capture.torch": exposes capture(model, path, **options)
    packages: tuple[str, ...] = ()  # top-level packages whose classes this backend captures
    accepts: Callable[[object], bool] | None = None  # a finer check than the class's package, if needed

    def handles(self, model: object) -> bool:
        if self.accepts is not None:
            return self.accepts(model)
        return defined_in(model, *self.packages)

    def capture(self, model: Any, path: str | os.PathLike[str], **options: Any) -> AbstractContextManager[Any]:
        impl: Callable[..., AbstractContextManager[Any]] = lazy(self.module, "capture")
        return impl(model, path, **options)
