"""What a comparison produces: one PairResult per aligned pair, in execution order.

This is the contract between compare (which fills it), diagnose (which reads it) and the
reports (which print it). Metric keys use the column names users know from msaccucmp/msprobe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..store.format import Record

# match kinds: how a pair was made
MATCH_NAME = "name"  # same record name on both sides
MATCH_SEQUENCE = "sequence"  # sequence alignment on (module, op, role, pos)
MATCH_MAPPING = "mapping"  # a user mapping file: exact name or regex rename
MATCH_FUSION = "fusion"  # many-to-one: one target op stands for several golden ops
UNMATCHED = "unmatched"  # one side only

# status of a pair: whether numbers could be computed at all
STATUS_COMPARED = "compared"
STATUS_SHAPE_MISMATCH = "shape-mismatch"
STATUS_DTYPE_MISMATCH = "dtype-mismatch"  # only where the compare mode cannot bridge the dtypes (hash mode)
STATUS_UNMATCHED = "unmatched"
STATUS_ERROR = "error"  # data unreadable (corrupt tensor): metrics N/A, reason in err_message

# results
PASS, WARNING, FAIL, NA = "PASS", "WARNING", "FAIL", "N/A"


@dataclass(slots=True)
class PairResult:
    """One golden/target tensor pair and what the comparison found."""

    index: int  # position in the comparison, execution order of the target (golden for unmatched golden)
    golden: Record | None
    target: Record | None
    match: str
    status: str
    mode: str  # tensor | stats | hash: what the numbers were computed from
    metrics: dict[str, Any] = field(default_factory=dict)  # e.g. "Cosine", "MaxAbsErr", ... (docs/metrics.md)
    result: str = NA  # PASS | WARNING | FAIL | N/A
    bitwise_equal: bool | None = None
    err_message: str = ""
    note: str = ""  # how the pair was made when not by equal names (mapping rule, fusion, cut-off dump)
    golden_group: list[Record] = field(default_factory=list)  # fusion: all golden records the target op stands for
    precision: str = ""  # dtype class the verdict used: the lower of both dtypes and of what ran before (docs/compare.md)

    @property
    def name(self) -> str:
        rec = self.target or self.golden
        assert rec is not None
        return rec.name
