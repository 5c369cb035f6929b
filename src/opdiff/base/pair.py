"""A pair result: one aligned golden/target pair and what the comparison found, in execution order.

This is the contract between compare (which fills it), diagnose (which reads it) and the
reports (which print it). Metrics are named fields (`Metrics`); the column names users know from
msaccucmp/msprobe ("Cosine", "MaxAbsErr" ...) are given to them only where outputs are written
(opdiff.metrics.names.COLUMN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from .record import Record
from .vocab import NA, PairStatus, PairVerdict

MetricValue = float | int | bool | str | None  # a number, a flag (hash_equal), a message (err_message), or N/A


class Metrics(TypedDict, total=False):
    """What compare found for one pair (docs/metrics.md): each mode fills its own fields; None is N/A.

    A plain dict at run time (cheap to build for 100k pairs and to ship to Dask workers). Index it
    with the constants of opdiff.metrics.names (`m[M.COSINE]`); outputs write each field under its
    column name (names.COLUMN: cosine -> "Cosine", max_abs_err -> "MaxAbsErr", ...).
    """

    err_message: str  # why metrics are N/A (taken out into PairResult.err_message by compare)
    # real-data (tensor) mode
    cosine: float | None
    max_abs_err: float | None
    max_rel_err: float | None
    mean_abs_err: float | None
    mean_rel_err: float | None
    rmse: float | None
    acc_rel_err: float | None
    max_rel_error: float | None  # msaccucmp's MaxRelativeError (|golden| <= eps skipped)
    mean_rel_error: float | None  # msaccucmp's MeanRelativeError
    rel_euclid_dist: float | None
    euc_dist: float | None
    kl_div: float | None
    golden_std: float | None
    target_std: float | None
    golden_mean: float | None
    target_mean: float | None
    one_thousandth_ratio: float | None
    five_thousandth_ratio: float | None
    norm_max_abs_err: float | None
    golden_abs_max: float | None
    numel: int
    compared: int
    diff_count: int
    golden_nan: int
    golden_posinf: int
    golden_neginf: int
    target_nan: int
    target_posinf: int
    target_neginf: int
    nonfinite_mismatch: int
    first_nonfinite_mismatch: int
    worst_index: int
    worst_golden: float
    worst_target: float
    # statistics mode
    max_diff: float | None
    min_diff: float | None
    mean_diff: float | None
    norm_diff: float | None
    max_rel_diff: float | None
    min_rel_diff: float | None
    mean_rel_diff: float | None
    norm_rel_diff: float | None
    norm_stats_diff: float | None
    # hash mode
    hash_equal: bool | None


@dataclass(slots=True)
class PairResult:
    """One golden/target tensor pair and what the comparison found."""

    index: int  # position in the comparison, execution order of the target (golden for unmatched golden)
    golden: Record | None
    target: Record | None
    match: str
    status: PairStatus
    mode: str  # tensor | stats | hash: what the numbers were computed from
    metrics: Metrics = field(default_factory=Metrics)  # named fields (docs/metrics.md)
    result: PairVerdict = NA
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
