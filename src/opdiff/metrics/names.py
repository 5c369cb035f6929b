"""Metric field names of `Metrics` (base/pair.py) and the column names users know from msaccucmp / msprobe.

Code indexes a metrics dict with these constants (`m[M.COSINE]`); the display column names
("Cosine", "MaxAbsErr", "One Thousandth Err Ratio" ...) appear only where outputs are written
(CSV/XLSX/JSON/HTML, console and shell tables, Model Explorer overlays) through `COLUMN`, and where
a user names a metric (thresholds files, --pass-if), which accepts either spelling (`field_of`).
See docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

ERR_MESSAGE: Final = "err_message"  # the entry of a metrics dict that carries the reasons for N/A values

# real-data (tensor) mode
COSINE: Final = "cosine"
MAX_ABS_ERR: Final = "max_abs_err"
MAX_REL_ERR: Final = "max_rel_err"
MEAN_ABS_ERR: Final = "mean_abs_err"
MEAN_REL_ERR: Final = "mean_rel_err"
MAX_REL_ERROR: Final = "max_rel_error"  # msaccucmp's MaxRelativeError: elements with |golden| <= eps count as 0
MEAN_REL_ERROR: Final = "mean_rel_error"  # msaccucmp's MeanRelativeError: AccumulatedRelativeError / n
RMSE: Final = "rmse"
ACC_REL_ERR: Final = "acc_rel_err"
RED: Final = "rel_euclid_dist"
EUC_DIST: Final = "euc_dist"
KL_DIV: Final = "kl_div"
GOLDEN_STD: Final = "golden_std"  # msaccucmp's StandardDeviation column, golden side
TARGET_STD: Final = "target_std"  # ... and target side
GOLDEN_MEAN: Final = "golden_mean"
TARGET_MEAN: Final = "target_mean"
ONE_THOUSANDTH: Final = "one_thousandth_ratio"
FIVE_THOUSANDTH: Final = "five_thousandth_ratio"
NORM_MAX_ABS_ERR: Final = "norm_max_abs_err"  # max_abs_err / max|golden|: the error in units of the tensor's scale
GOLDEN_ABS_MAX: Final = "golden_abs_max"
NUMEL: Final = "numel"
COMPARED: Final = "compared"  # elements finite on both sides: what the numbers above are computed over
DIFF_COUNT: Final = "diff_count"  # elements whose values differ (non-finite ones included)
GOLDEN_NAN: Final = "golden_nan"
GOLDEN_POSINF: Final = "golden_posinf"
GOLDEN_NEGINF: Final = "golden_neginf"
TARGET_NAN: Final = "target_nan"
TARGET_POSINF: Final = "target_posinf"
TARGET_NEGINF: Final = "target_neginf"
NONFINITE_MISMATCH: Final = "nonfinite_mismatch"  # elements non-finite on one side, or different non-finite values
FIRST_NONFINITE_MISMATCH: Final = "first_nonfinite_mismatch"
WORST_INDEX: Final = "worst_index"  # flat index of the largest absolute error
WORST_GOLDEN: Final = "worst_golden"
WORST_TARGET: Final = "worst_target"

# statistics mode: target minus golden, and |difference| / |golden|
MAX_DIFF: Final = "max_diff"
MIN_DIFF: Final = "min_diff"
MEAN_DIFF: Final = "mean_diff"
NORM_DIFF: Final = "norm_diff"
MAX_REL_DIFF: Final = "max_rel_diff"
MIN_REL_DIFF: Final = "min_rel_diff"
MEAN_REL_DIFF: Final = "mean_rel_diff"
NORM_REL_DIFF: Final = "norm_rel_diff"
NORM_STATS_DIFF: Final = "norm_stats_diff"  # max(|max_diff|, |min_diff|, |mean_diff|) / max|golden|

# hash mode
HASH_EQUAL: Final = "hash_equal"

# field name -> the column name of every output (docs/metrics.md)
COLUMN: Final[dict[str, str]] = {
    ERR_MESSAGE: "Err_message",
    COSINE: "Cosine",
    MAX_ABS_ERR: "MaxAbsErr",
    MAX_REL_ERR: "MaxRelativeErr",
    MEAN_ABS_ERR: "MeanAbsErr",
    MEAN_REL_ERR: "MeanRelativeErr",
    MAX_REL_ERROR: "MaxRelativeError",
    MEAN_REL_ERROR: "MeanRelativeError",
    RMSE: "RootMeanSquareError",
    ACC_REL_ERR: "AccumulatedRelativeError",
    RED: "RelativeEuclideanDistance",
    EUC_DIST: "EucDist",
    KL_DIV: "KullbackLeiblerDivergence",
    GOLDEN_STD: "GoldenStd",
    TARGET_STD: "TargetStd",
    GOLDEN_MEAN: "GoldenMean",
    TARGET_MEAN: "TargetMean",
    ONE_THOUSANDTH: "One Thousandth Err Ratio",
    FIVE_THOUSANDTH: "Five Thousandth Err Ratio",
    NORM_MAX_ABS_ERR: "NormalizedMaxAbsErr",
    GOLDEN_ABS_MAX: "GoldenAbsMax",
    NUMEL: "Numel",
    COMPARED: "Compared",
    DIFF_COUNT: "DiffCount",
    GOLDEN_NAN: "GoldenNaN",
    GOLDEN_POSINF: "GoldenPosInf",
    GOLDEN_NEGINF: "GoldenNegInf",
    TARGET_NAN: "TargetNaN",
    TARGET_POSINF: "TargetPosInf",
    TARGET_NEGINF: "TargetNegInf",
    NONFINITE_MISMATCH: "NonFiniteMismatch",
    FIRST_NONFINITE_MISMATCH: "FirstNonFiniteMismatchIndex",
    WORST_INDEX: "WorstIndex",
    WORST_GOLDEN: "WorstGolden",
    WORST_TARGET: "WorstTarget",
    MAX_DIFF: "Max diff",
    MIN_DIFF: "Min diff",
    MEAN_DIFF: "Mean diff",
    NORM_DIFF: "L2norm diff",
    MAX_REL_DIFF: "Max RelDiff",
    MIN_REL_DIFF: "Min RelDiff",
    MEAN_REL_DIFF: "Mean RelDiff",
    NORM_REL_DIFF: "L2norm RelDiff",
    NORM_STATS_DIFF: "NormalizedStatsDiff",
    HASH_EQUAL: "HashEqual",
}
_FIELD = {name: f for f, name in COLUMN.items()} | {f: f for f in COLUMN}


def column(field: str) -> str:
    """The column name of a metric field as every output writes it (a name that is no field is kept)."""
    return COLUMN.get(field, field)


def field_of(name: str) -> str:
    """The field of a metric a user names by its column name ("MaxAbsErr") or its field name ("max_abs_err")."""
    try:
        return _FIELD[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r} (metric names: docs/metrics.md, e.g. 'Cosine', "
                         "'MaxRelativeErr', 'RelativeEuclideanDistance')") from None


def columns(metrics: Mapping[str, object]) -> dict[str, object]:
    """A metrics dict keyed by column names, in its order (what an output writes)."""
    return {COLUMN.get(k, k): v for k, v in metrics.items()}


TENSOR_METRICS = (
    COSINE, MAX_ABS_ERR, MAX_REL_ERR, MEAN_ABS_ERR, MEAN_REL_ERR, RMSE, ACC_REL_ERR, MAX_REL_ERROR, MEAN_REL_ERROR,
    RED, EUC_DIST, KL_DIV,
    GOLDEN_STD, TARGET_STD, ONE_THOUSANDTH, FIVE_THOUSANDTH, NORM_MAX_ABS_ERR,
)
COUNT_METRICS = (
    NUMEL, COMPARED, DIFF_COUNT, GOLDEN_NAN, GOLDEN_POSINF, GOLDEN_NEGINF, TARGET_NAN, TARGET_POSINF,
    TARGET_NEGINF, NONFINITE_MISMATCH,
)
WORST_METRICS = (WORST_INDEX, WORST_GOLDEN, WORST_TARGET)
STATS_METRICS = (
    MAX_DIFF, MIN_DIFF, MEAN_DIFF, NORM_DIFF, MAX_REL_DIFF, MIN_REL_DIFF, MEAN_REL_DIFF, NORM_REL_DIFF, NORM_STATS_DIFF,
)
# Metrics where a larger value means closer agreement (a threshold on them is a lower bound).
HIGHER_IS_BETTER = frozenset({COSINE, ONE_THOUSANDTH, FIVE_THOUSANDTH, HASH_EQUAL})
