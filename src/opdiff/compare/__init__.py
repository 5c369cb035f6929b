"""Compare two dumps pair by pair: `compare(golden, target) -> Comparison` (docs/compare.md)."""

from ..base.pair import PairResult
from .run import Comparison, compare, compare_pair

__all__ = ["PairResult", "Comparison", "compare", "compare_pair"]
