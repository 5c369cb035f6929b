"""Compare two dumps pair by pair: `compare(golden, target) -> Comparison` (docs/compare.md).

`result` (the PairResult contract) imports nothing heavy; the comparison itself loads on first use.
"""

from .result import PairResult

__all__ = ["PairResult", "Comparison", "compare", "compare_pair"]


def __getattr__(name: str):
    if name in ("Comparison", "compare", "compare_pair"):
        from . import run

        return getattr(run, name)
    raise AttributeError(name)
