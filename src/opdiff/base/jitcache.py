"""Load a module's numba kernels from numba's on-disk cache without numba's compiler set-up (~0.1 s a process).

numba's cache load (`FunctionCache.load_overload`) first refreshes its target context: that imports every lowering
module numba would need to *compile* (~60 modules: unicode, datetime, random, linalg ...), about 0.1 s of CPU once
per process, although a cache hit only links machine code. `load_lean(module)` gives each cached dispatcher of the
module a cache whose load starts numba's runtime (NRT: loaded code links against it) and loads; on a miss it
refreshes as numba does, and the dispatcher compiles as before. Compiling refreshes the contexts itself (numba's
CompilerBase), so nothing later depends on the skipped refresh; the machine code run is the same bytes.

numba is imported here only when `load_lean` is called (by the packages that hold kernels: metrics, match). It leans
on numba's private cache classes, so it applies only to the numba minor versions it was tested with (TESTED); on
any other numba, or one whose cache classes differ from what this expects, nothing is changed.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any

TESTED = ("0.68.",)  # numba versions whose FunctionCache this was read against and tested with (tests/test_startup.py)


@cache
def _lean_class() -> type | None:
    """numba's FunctionCache with a load that skips the refresh on a hit (made once, on first use); None when
    numba's internals differ."""
    try:
        import numba
        from numba.core.caching import FunctionCache
        from numba.core.runtime import nrt
    except ImportError:
        return None
    if not numba.__version__.startswith(TESTED):
        return None
    if not all(hasattr(FunctionCache, a) for a in ("load_overload", "_load_overload",
                                                    "_guard_against_spurious_io_errors")) \
            or not hasattr(nrt, "rtsys"):
        return None

    class LeanCache(FunctionCache):
        """Loads a cached kernel without refreshing the target context first (refreshes on a miss)."""

        def load_overload(self, sig: Any, target_context: Any) -> Any:
            nrt.rtsys.initialize(target_context)  # what a loaded kernel links against (numba does it in refresh)
            with self._guard_against_spurious_io_errors():
                cres = self._load_overload(sig, target_context)  # type: ignore[no-untyped-call]
                if cres is not None:
                    return cres
            target_context.refresh()  # a miss: the dispatcher compiles next, with the context numba expects
            return None

    return LeanCache


def load_lean(module: ModuleType) -> int:
    """Give every cached numba dispatcher defined in `module` the lean cache load; returns how many."""
    lean = _lean_class()
    if lean is None:
        return 0
    base = lean.__mro__[1]
    n = 0
    for obj in vars(module).values():
        cache = getattr(obj, "_cache", None)
        if type(cache) is base and getattr(obj, "py_func", None) is not None \
                and obj.py_func.__module__ == module.__name__:
            cache.__class__ = lean  # same state (index, locator), only the load differs
            n += 1
    return n
