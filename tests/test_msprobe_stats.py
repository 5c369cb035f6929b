"""msprobe's Max/Min/Mean/Norm become opdiff Stats the same way whether they are four finite floats (the
fast path) or anything else dump.json may hold: ints, strings, nan and inf spelled as text or as floats."""

from __future__ import annotations

import math

import pytest

from opdiff.base.record import Stats
from opdiff.store.readers.msprobe_records import stats_of


@pytest.mark.parametrize("entry, want", [
    ({"Max": 2.5, "Min": -1.0, "Mean": 0.25, "Norm": 3.0}, Stats(8, max=2.5, min=-1.0, mean=0.25, norm=3.0)),
    ({"Max": 3, "Min": 0, "Mean": 1.5, "Norm": 4.0}, Stats(8, max=3.0, min=0.0, mean=1.5, norm=4.0)),
    ({"Max": "2.5", "Min": "-1", "Mean": "0.25", "Norm": "3"}, Stats(8, max=2.5, min=-1.0, mean=0.25, norm=3.0)),
    ({"Max": "inf", "Min": "-inf", "Mean": "nan", "Norm": "inf"},
     Stats(8, max=None, min=None, mean=None, norm=None, nan=1, posinf=1, neginf=1)),
    ({"Max": math.inf, "Min": -math.inf, "Mean": math.nan, "Norm": 1.0},
     Stats(8, max=None, min=None, mean=None, norm=1.0, nan=1, posinf=1, neginf=1)),
    ({"Max": 1.0, "Min": 0.5, "Mean": None, "Norm": 2.0}, Stats(8, max=1.0, min=0.5, mean=None, norm=2.0)),
    ({"Max": 1.0, "Min": 0.5, "Mean": 0.75}, Stats(8, max=1.0, min=0.5, mean=0.75, norm=None)),
    ({"Max": True, "Min": 0.0, "Mean": 0.5, "Norm": 1.0}, Stats(8, max=1.0, min=0.0, mean=0.5, norm=1.0)),
    ({"dtype": "torch.float32"}, None),
])
def test_stats_of_every_spelling(entry, want):
    got = stats_of(entry, 8)
    assert got == want
    if got is not None:  # the floats are floats, whatever dump.json spelled
        assert all(v is None or type(v) is float for v in (got.max, got.min, got.mean, got.norm))
