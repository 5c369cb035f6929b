"""Metric keys of PairResult.metrics: the column names users know from msaccucmp / msprobe (docs/metrics.md)."""

ERR_MESSAGE = "Err_message"  # the key of a metrics dict that carries the reasons for N/A values

# real-data (tensor) mode
COSINE = "Cosine"
MAX_ABS_ERR = "MaxAbsErr"
MAX_REL_ERR = "MaxRelativeErr"
MEAN_ABS_ERR = "MeanAbsErr"
MEAN_REL_ERR = "MeanRelativeErr"
RMSE = "RootMeanSquareError"
ACC_REL_ERR = "AccumulatedRelativeError"
RED = "RelativeEuclideanDistance"
EUC_DIST = "EucDist"
KL_DIV = "KullbackLeiblerDivergence"
GOLDEN_STD = "GoldenStd"  # msaccucmp's StandardDeviation column, golden side
TARGET_STD = "TargetStd"  # ... and target side
GOLDEN_MEAN = "GoldenMean"
TARGET_MEAN = "TargetMean"
ONE_THOUSANDTH = "One Thousandth Err Ratio"
FIVE_THOUSANDTH = "Five Thousandth Err Ratio"
NORM_MAX_ABS_ERR = "NormalizedMaxAbsErr"  # MaxAbsErr / max|golden|: the error in units of the tensor's scale
GOLDEN_ABS_MAX = "GoldenAbsMax"
NUMEL = "Numel"
COMPARED = "Compared"  # elements finite on both sides: what the numbers above are computed over
DIFF_COUNT = "DiffCount"  # elements whose values differ (non-finite ones included)
GOLDEN_NAN, GOLDEN_POSINF, GOLDEN_NEGINF = "GoldenNaN", "GoldenPosInf", "GoldenNegInf"
TARGET_NAN, TARGET_POSINF, TARGET_NEGINF = "TargetNaN", "TargetPosInf", "TargetNegInf"
NONFINITE_MISMATCH = "NonFiniteMismatch"  # elements non-finite on one side, or different non-finite values
FIRST_NONFINITE_MISMATCH = "FirstNonFiniteMismatchIndex"
WORST_INDEX = "WorstIndex"  # flat index of the largest absolute error
WORST_GOLDEN = "WorstGolden"
WORST_TARGET = "WorstTarget"

# statistics mode: target minus golden, and |difference| / |golden|
MAX_DIFF, MIN_DIFF, MEAN_DIFF, NORM_DIFF = "Max diff", "Min diff", "Mean diff", "L2norm diff"
MAX_REL_DIFF, MIN_REL_DIFF = "Max RelDiff", "Min RelDiff"
MEAN_REL_DIFF, NORM_REL_DIFF = "Mean RelDiff", "L2norm RelDiff"
NORM_STATS_DIFF = "NormalizedStatsDiff"  # max(|Max diff|, |Min diff|, |Mean diff|) / max|golden|

# hash mode
HASH_EQUAL = "HashEqual"

TENSOR_METRICS = (
    COSINE, MAX_ABS_ERR, MAX_REL_ERR, MEAN_ABS_ERR, MEAN_REL_ERR, RMSE, ACC_REL_ERR, RED, EUC_DIST, KL_DIV,
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
