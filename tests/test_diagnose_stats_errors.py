"""noise.stats_errors (the statistics rule over numpy columns, a stats-mode dump's every pair) gives stats_error's
floats exactly: on random statistics and on the rows its branches single out (None fields, nan and inf, an
all-zero golden, no elements, ints beyond 2**53, numpy scalars that compute in their own precision)."""

from __future__ import annotations

import math

import numpy as np

from opdiff.base.record import Stats
from opdiff.diagnose.noise import stats_error, stats_errors


def _same(a: float | None, b: float | None) -> bool:
    """The same value and type, nan equal to nan."""
    if a is None or b is None:
        return a is b
    return type(a) is type(b) and (a == b or math.isnan(a) and math.isnan(b))


def _stats(rng: np.random.Generator, numel: int = 64) -> Stats:
    x = rng.standard_normal(4) * 10.0 ** rng.integers(-30, 30)
    return Stats(numel=numel, min=float(min(x[0], x[1])), max=float(max(x[0], x[1])), mean=float(x[2]),
                 norm=float(abs(x[3])))


def _check(gs: list[Stats], ts: list[Stats]) -> None:
    got = stats_errors(gs, ts)
    want = [stats_error(g, t) for g, t in zip(gs, ts)]
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(got, want)) if not _same(a, b)]
    assert not bad, bad[:5]


def test_random_statistics_give_the_rules_floats():
    rng = np.random.default_rng(7)
    gs = [_stats(rng) for _ in range(3000)]
    ts = [_stats(rng) for _ in range(1000)]
    near = [Stats(numel=g.numel, min=g.min * (1 + 1e-7), max=g.max, mean=g.mean + 1e-9, norm=g.norm * (1 - 3e-8))
            for g in gs[:1000]]
    same = [Stats(numel=g.numel, min=g.min, max=g.max, mean=g.mean, norm=g.norm) for g in gs[1000:2000]]
    _check(gs, ts + near + same)
    assert sum(e == 0.0 for e in stats_errors(gs[1000:2000], same)) == 1000


def test_rows_the_rules_branches_single_out():
    inf, nan = math.inf, math.nan
    base = Stats(numel=64, min=-2.0, max=3.0, mean=0.25, norm=8.0)
    rows = [
        (base, Stats(numel=64, min=None, max=3.0, mean=0.25, norm=8.5)),  # a None field (as 0.0 in the rule)
        (base, Stats(numel=64, min=-2.0, max=3.0, mean=None, norm=8.5)),  # no mean: no mean term
        (base, Stats(numel=64, norm=None)),  # no norm: nothing to say
        (Stats(numel=64, norm=None), base),
        (base, Stats(numel=64, min=-2.0, max=nan, mean=0.25, norm=8.0)),  # nan ordering in max
        (Stats(numel=64, min=nan, max=3.0, mean=0.25, norm=8.0), base),
        (base, Stats(numel=64, min=-inf, max=inf, mean=0.25, norm=inf)),
        (Stats(numel=64, min=0.0, max=0.0, mean=0.0, norm=0.0), Stats(numel=64, min=0.0, max=0.0, mean=0.0, norm=0.0)),
        (Stats(numel=64, min=0.0, max=0.0, mean=0.0, norm=0.0), Stats(numel=64, min=0.0, max=1.0, mean=0.1, norm=1.0)),
        (Stats(numel=0, min=1.0, max=2.0, mean=1.5, norm=3.0), Stats(numel=0, min=1.0, max=2.5, mean=1.5, norm=3.0)),
        (Stats(numel=64, min=-(2 ** 60), max=2 ** 60 + 1, mean=3, norm=2 ** 61), Stats(numel=64, min=-(2 ** 60),
                                                                                    max=2 ** 60 + 3, mean=3, norm=2 ** 61)),
        (Stats(numel=64, min=-2, max=3, mean=1, norm=8), Stats(numel=64, min=-1, max=3, mean=1, norm=9)),  # ints
        (Stats(numel=64, min=-1e300, max=1e300, mean=0.0, norm=1e-300), Stats(numel=64, min=1e300, max=-1e300,
                                                                            mean=1e300, norm=1e300)),  # overflow: inf
        (Stats(numel=64, min=5e-324, max=5e-324, mean=5e-324, norm=5e-324), base),  # subnormal: rms 0
    ]
    _check([g for g, _ in rows], [t for _, t in rows])
    _check([g for g, _ in rows] * 3, [t for _, t in rows] * 3)  # the same rows among many


def test_numpy_scalars_compute_as_the_rule_does():
    """np.float32 fields round in float32 inside stats_error: the columns must not silently widen them."""
    g = Stats(numel=64, min=np.float32(-2.1), max=np.float32(3.3), mean=np.float32(0.2), norm=np.float32(8.1))
    t = Stats(numel=64, min=np.float32(-2.0), max=np.float32(3.3), mean=np.float32(0.2), norm=np.float32(8.2))
    plain = Stats(numel=64, min=-2.0, max=3.0, mean=0.25, norm=8.0)
    _check([g, plain], [t, plain])
    _check([g, plain], [plain, plain])
    assert stats_errors([], []) == []
