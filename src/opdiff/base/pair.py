"""A pair result: one aligned golden/target pair and what the comparison found, in execution order.

This is the contract between compare (which fills it), diagnose (which reads it) and the
reports (which print it). Metric keys use the column names users know from msaccucmp/msprobe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .record import Record
from .vocab import NA

MetricValue = float | int | bool | str | None  # a number, a flag (HashEqual), a message (Err_message), or N/A
Metrics = dict[str, MetricValue]  # metric column name -> value (docs/metrics.md)


@dataclass(slots=True)
class PairResult:
    """One golden/target tensor pair and what the comparison found."""

    index: int  # position in the comparison, execution order of the target (golden for unmatched golden)
    golden: Record | None
    target: Record | None
    match: str
    status: str
    mode: str  # tensor | stats | hash: what the numbers were computed from
    metrics: Metrics = field(default_factory=dict)  # e.g. "Cosine", "MaxAbsErr", ... (docs/metrics.md)
    result: str = NA  # PASS | WARNING | FAIL | N/A
    bitwise_equal: bool | None = None
    err_message: str = ""
    note: str = ""  # how the pair was made when not by equal names (mapping rule, fusion, cut-off dump)
    golden_group: list[Record] = field(default_factory=list)  # fusion: all golden records the target op stands for
    precision: str = ""  # dtype class the verdict used: the lower of both dtypes and of what ran before (docs/compare.md)

    @property
    def record(self) -> Record:
        """The target record, or golden's for a golden record without counterpart (a pair has at least one)."""
        rec = self.target or self.golden
        assert rec is not None
        return rec

    @property
    def name(self) -> str:
        return self.record.name
