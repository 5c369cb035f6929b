"""`python -m opdiff.warm`: compile every numba kernel into numba's on-disk cache now (run at install,
e.g. by `make venv`), so that a user's first compare or capture does not wait for the compiler.

Numba writes the cache next to the modules (`__pycache__`) or, where that is not writable, to its
user-wide cache directory; NUMBA_CACHE_DIR overrides both (docs/compare.md, "First run").
"""

from __future__ import annotations

import time


def warm_all() -> dict[str, float]:
    """Seconds spent warming each group of kernels (compile on a cold cache, load on a warm one)."""
    from .capture.stats_kernel import warm_up as warm_stats
    from .match.lcs import lcs
    from .metrics.tensor import warm_up as warm_metrics

    out: dict[str, float] = {}
    for name, fn in (("metrics", warm_metrics), ("alignment", lambda: lcs([1, 2, 3], [1, 3])),
                     ("statistics", warm_stats)):
        t = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - t
    return out


def main() -> None:
    times = warm_all()
    print("opdiff kernels ready: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))


if __name__ == "__main__":
    main()
