"""Record.from_json's bulk fast path accepts exactly what the field-by-field path accepts, and builds
the same record: every field of a sound index line replaced by sound and unsound values alike."""

from __future__ import annotations

import copy

import pytest

from opdiff.base.record import Record, Stats, _record_fast, _stats_fast

LINE = {
    "index": 3, "name": "layers.0/aten.mm.default#1/forward/output/0", "node": "layers.0/aten.mm.default#1",
    "module": "layers.0", "op": "aten.mm.default", "level": "aten", "call": 1, "direction": "forward",
    "role": "output", "pos": "0", "dtype": "float32", "shape": [4, 8],
    "stats": {"numel": 32, "min": -1.5, "max": 2.0, "mean": 0.1, "std": 1.0, "norm": 5.0, "nan": 0, "posinf": 0,
              "neginf": 0, "zeros": 1},
    "hash": "xxh3:0123", "source": "model.py:12", "src": "layers.0/aten.t.default#0/forward/output/0",
    "data": {"file": "shards/000000.safetensors", "key": "k"}, "extra": {"note": 1},
}
VALUES = [None, True, False, 0, -1, 7, 2 ** 49, 1.5, float("nan"), 10 ** 400, "", "x", "a\x01b", "tab\tin", [], [2, 3],
          [-1], [True], [2 ** 49], [1] * 65, {}, {"file": "f", "key": ""}, {"file": "", "key": "k"}, {"file": 1},
          {"numel": 32}, {"numel": 32, "min": None}, {"numel": True}, {"numel": 32, "nan": -1},
          {"numel": 32, "max": "1"}, {"numel": 32, "mean": 10 ** 400}, {"numel": 32, "std": 3}, {"numel": 32, "other": 1}]


def _outcome(fn, d):
    try:
        return ("ok", fn(d))
    except ValueError as exc:
        return ("error", str(exc))


def _lines():
    yield copy.deepcopy(LINE)
    for key in [*LINE, "missing"]:
        gone = copy.deepcopy(LINE)
        gone.pop(key, None)
        yield gone
        for v in VALUES:
            d = copy.deepcopy(LINE)
            d[key] = copy.deepcopy(v)
            yield d
    for key in LINE["stats"]:
        for v in VALUES:
            d = copy.deepcopy(LINE)
            d["stats"][key] = copy.deepcopy(v)
            yield d
    for v in VALUES:
        d = copy.deepcopy(LINE)
        d["pos"] = v
        yield d


def test_fast_path_agrees_with_the_checked_path():
    taken = 0
    for d in _lines():
        fast = _record_fast(d)
        checked = _outcome(Record._checked, d)
        if fast is not None:
            taken += 1
            assert checked == ("ok", fast), d  # never accepts what the checked path refuses; same record
        assert _outcome(Record.from_json, d) == checked, d
    assert taken > 50  # the sound variants really take the fast path


@pytest.mark.parametrize("stats", [s for s in VALUES if isinstance(s, dict)] + [LINE["stats"]])
def test_stats_fast_path_agrees(stats):
    fast = _stats_fast(stats)
    checked = _outcome(Stats._checked, stats)
    if fast is not None:
        assert checked == ("ok", fast)
    assert _outcome(Stats.from_json, stats) == checked
