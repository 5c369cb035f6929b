"""Small pairs compared in batches (metrics/batch.py): the same metrics as one pair at a time, for every dtype
and edge case mixed in one batch; bad data in a batch leaves that pair to say why and touches no other."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opdiff
from opdiff.compare import compare
from opdiff.compare import run as R
from opdiff.metrics.batch import PairItem, batch_metrics
from opdiff.metrics.tensor import TensorSource, Workspace, pair_metrics
from opdiff.store.format import dtype_name
from opdiff.store.stats import content_hash
from opdiff.testing.synthetic import Tensor, write_dump
from test_metrics_tensor import assert_matches, reference

RNG = np.random.default_rng(7)


def _mixed() -> list[tuple[np.ndarray, np.ndarray]]:
    """Golden/target arrays of every kind a batch meets: float dtypes, ints, bool, nan/inf on one or both
    sides, an empty tensor, all zeros, a scalar, identical values."""
    out = []
    for dt in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.int64, np.uint8):
        g = (50 * RNG.standard_normal(37)).astype(dt)
        t = (g.astype(np.float64) + RNG.standard_normal(37)).astype(dt)
        out.append((g, t))
    g = RNG.standard_normal(300).astype(np.float32)
    t = g.copy()
    g[[3, 9]], t[[3, 20]] = np.nan, np.inf  # nan on both sides at 3 (inf beats it), one side elsewhere
    t[50] = -np.inf
    out += [(g, t), (np.zeros(5, np.float32), np.zeros(5, np.float32)), (np.zeros(0, np.float32),) * 2,
            (np.array(2.5, np.float32), np.array(2.25, np.float32)), (g[100:], g[100:].copy()),
            (RNG.random(40) > 0.5, RNG.random(40) > 0.5), (np.full(9, np.nan, np.float32), np.ones(9, np.float32))]
    return out


def _file(path, arr: np.ndarray, offset: int) -> TensorSource:
    dt = dtype_name(arr.dtype)
    return TensorSource(dtype=dt, shape=arr.shape, path=path, offset=offset, hash=content_hash(arr, dt, arr.shape),
                        label=str(offset))


def _pack(path, arrays: list[np.ndarray]) -> list[TensorSource]:
    """The arrays' bytes one after the other in one file (with gaps), as file sources."""
    blob, srcs = bytearray(b"\0" * 24), []
    for k, a in enumerate(arrays):
        srcs.append(_file(path, a, len(blob)))
        blob += np.ascontiguousarray(a).tobytes() + b"\0" * (8 if k % 3 else 5000)  # one gap wider than a read spans
    path.write_bytes(bytes(blob))
    return srcs


def test_batch_equals_one_pair_at_a_time_on_a_mixed_batch(tmp_path):
    pairs = _mixed()
    gs, ts = _pack(tmp_path / "g.bin", [g for g, _ in pairs]), _pack(tmp_path / "t.bin", [t for _, t in pairs])
    items = [PairItem(g, t) for g, t in zip(gs, ts)] + [PairItem(TensorSource.of(g), TensorSource.of(t))
                                                        for g, t in pairs]  # arrays in memory too
    with Workspace() as ws:
        got = batch_metrics(items, ws)
        one = [pair_metrics(it.golden, it.target, ws) for it in items]
    assert got == one  # exactly: each pair is folded as it is alone
    for (g, t), m in zip(pairs, got):
        assert m is not None
        if g.size and np.isfinite(g.astype(np.float64)).all() and np.isfinite(t.astype(np.float64)).all() \
                and np.abs(g.astype(np.float64)).max() > 0:
            assert_matches(m, reference(g, t))  # and the float64 reference, within its tolerances


def test_bad_data_in_a_batch_is_left_to_its_pair_alone(tmp_path):
    pairs = _mixed()[:6]
    gs, ts = _pack(tmp_path / "g.bin", [g for g, _ in pairs]), _pack(tmp_path / "t.bin", [t for _, t in pairs])
    raw = bytearray((tmp_path / "t.bin").read_bytes())
    raw[ts[2].offset] ^= 0xFF  # one tensor no longer matches its hash
    (tmp_path / "t.bin").write_bytes(bytes(raw))
    ts[4] = TensorSource(ts[4].dtype, ts[4].shape, path=tmp_path / "missing.bin", offset=0)  # one file missing
    short = tmp_path / "short.bin"
    short.write_bytes((tmp_path / "g.bin").read_bytes()[:gs[5].offset + 4])  # one cut off mid-tensor
    gs[5] = TensorSource(gs[5].dtype, gs[5].shape, path=short, offset=gs[5].offset, hash=gs[5].hash)
    with Workspace() as ws:
        got = batch_metrics([PairItem(g, t) for g, t in zip(gs, ts)], ws)
        for k in (2, 4, 5):
            assert got[k] is None
            with pytest.raises(opdiff.errors.DumpError, match="hash|cannot open|truncated"):
                pair_metrics(gs[k], ts[k], ws)  # alone, the pair names its problem
        for k in (0, 1, 3):
            assert got[k] == pair_metrics(gs[k], ts[k], ws)


def _dumps(tmp_path, n: int = 120):
    g, t = [], []
    for i, (a, b) in enumerate(_mixed() * (n // len(_mixed()) + 1)):
        if i >= n:
            break
        g.append(Tensor(f"m.{i}", "Op", "output", "0", a))
        t.append(Tensor(f"m.{i}", "Op", "output", "0", b))
    write_dump(tmp_path / "g", g)
    write_dump(tmp_path / "t", t)
    return tmp_path / "g", tmp_path / "t"


def test_compare_in_batches_equals_compare_pair_by_pair(tmp_path, monkeypatch):
    gp, tp = _dumps(tmp_path)
    d = opdiff.load(tp)
    rec = d.records[17]
    start = d.header(rec.data["file"]).entries[rec.data["key"]][2]
    path = d.dir / rec.data["file"]
    raw = bytearray(path.read_bytes())
    raw[start] ^= 0xFF  # a damaged tensor in the middle of a batch
    path.write_bytes(bytes(raw))
    batched = compare(gp, tp, workers=1)
    monkeypatch.setattr(R, "SMALL_PAIR", 0)  # nothing batched
    alone = compare(gp, tp, workers=1)
    fields = ("status", "mode", "result", "metrics", "err_message", "bitwise_equal", "precision", "match", "note")
    assert [[getattr(r, f) for f in fields] for r in batched.results] == \
        [[getattr(r, f) for f in fields] for r in alone.results]
    bad = [r for r in batched.results if r.status == "error"]
    assert len(bad) == 1 and bad[0].index == 17 and "does not match its recorded hash" in bad[0].err_message
    assert all(r.status == "compared" for r in batched.results if r.index != 17)


def test_rows_written_column_wise_equal_the_cell_by_cell_writers(tmp_path):
    """CSV and JSON rows made with the columns resolved once equal what the per-cell code wrote, for pairs
    with nan/inf metrics, N/A metrics, unmatched records, an error and numpy scalars."""
    import csv
    import io
    import json

    from opdiff.base.jsonsafe import clean, compact, csv_cell
    from opdiff.report.json import pair_json
    from opdiff.report.table import columns, row, rows

    gp, tp = _dumps(tmp_path, n=40)
    write_dump(tmp_path / "t2", [Tensor(f"m.{i}", "Op", "output", "0", a) for i, (_, a) in enumerate(_mixed())]
               + [Tensor("extra", "Op", "output", "0", np.ones(3, np.float32))])
    cmp = compare(gp, tmp_path / "t2", workers=1)
    cmp.results = cmp.results + compare(gp, tp, workers=1).results
    results = cmp.results
    results[0].metrics["cosine"] = np.float32(0.5)  # a numpy scalar, as a foreign caller might leave
    results[1].metrics["max_abs_err"] = np.float64("inf")
    assert {r.status for r in results} >= {"compared", "unmatched"}
    cols = columns(results)
    new, old = io.StringIO(), io.StringIO()
    csv.writer(new).writerows(rows(results, cols))
    csv.writer(old).writerows([csv_cell(row(r, cols)[c]) for c in cols] for r in results)
    assert new.getvalue() == old.getvalue()
    enc = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str)
    assert [compact(pair_json(r)) for r in results] == [enc.encode(clean(pair_json(r))) for r in results]
    # the XLSX rows, now written a block at a time, are checked against the same table in test_report_rows.py


def test_header_entries_checked_in_bulk_agree_with_the_field_by_field_check():
    """validate._entry's fast path accepts exactly what the field-by-field check accepts, with the same entry."""
    from opdiff.store import validate as V

    sound = {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}
    cases = [sound, {**sound, "shape": []}, {**sound, "shape": [0], "data_offsets": [8, 8]},
             {**sound, "dtype": "BF16", "data_offsets": [8, 20]}, {**sound, "shape": [2, True]},
             {**sound, "shape": [2, -3]}, {**sound, "shape": [2, 3.0]}, {**sound, "data_offsets": [8, 31]},
             {**sound, "data_offsets": [32, 8]}, {**sound, "data_offsets": [8, 32, 40]}, {**sound, "dtype": "F31"},
             {**sound, "data_offsets": [-4, 20]}, {**sound, "data_offsets": [8, 1000]}, {**sound, "dtype": None},
             {**sound, "data_offsets": [False, 24]}, {k: v for k, v in sound.items() if k != "shape"}, [1], None]
    for info in cases:
        fast = V._entry_fast(info, 100, 200)
        try:
            checked = V._entry_checked(info, 100, 200)
        except ValueError:
            assert fast is None, info
        else:
            assert fast == checked, info
    assert V._entry_fast(sound, 100, 200) == ("float32", (2, 3), 108, 132)


def test_rows_of_every_step_lead_with_rank_and_step(tmp_path):
    """A multi-step comparison's table rows (Rank, Step, then the pair's columns) equal the per-cell rows."""
    from opdiff.report.table import table_columns, table_rows, table_value_rows
    from opdiff.testing.synthetic import write_run

    pairs = _mixed()[:5]
    for side, k in (("g", 0), ("t", 1)):
        write_run(tmp_path / side, {(0, s): [Tensor(f"m.{i}", "Op", "output", "0", p[k] * (s + 1))
                                             for i, p in enumerate(pairs) if p[k].size] for s in (0, 1)})
    cmp = compare(tmp_path / "g", tmp_path / "t", workers=1)
    assert cmp.other_steps
    cols = table_columns(cmp)
    assert cols[:2] == ["Rank", "Step"]
    got = [(r.index, v) for r, v in table_value_rows(cmp, cols)]
    assert got == [(r.index, [d[c] for c in cols]) for r, d in table_rows(cmp, cols)] and len(got) == 2 * len(pairs)


def test_kernel_parameters_as_columns_equal_the_per_pair_lines():
    """_params' column path (all ranges finite floats) gives bit for bit the rows and golden absolute maxima of
    the per-pair lines, on random ranges and edge cases (empty and reversed ranges, a range overflowing
    to inf, -0.0); ranges with None, nan or ints take the per-pair lines themselves."""
    from opdiff.metrics.batch import _params
    from opdiff.metrics.tensor import _kl_norm

    rng = np.random.default_rng(3)
    lo = rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300)
    hi = lo + np.abs(rng.standard_normal(300)) * 10.0 ** rng.integers(-30, 30, 300)
    ranges = [(float(a), float(b), float(a / 2)) for a, b in zip(lo, hi)]
    ranges += [(1.0, 1.0, 0.0), (2.0, -1.0, 0.5), (-1.7e308, 1.7e308, 0.0), (-0.0, 0.0, -0.0), (0.0, -0.0, 0.0)]
    shuffled = ranges[::-1]

    def lines(g_rngs, t_rngs):
        rows = [(*_kl_norm(g[0], g[1]), *_kl_norm(t[0], t[1]), g[2], t[2]) for g, t in zip(g_rngs, t_rngs)]
        absmax = [None if g[0] is None or g[1] is None else max(abs(g[0]), abs(g[1])) for g in g_rngs]
        return np.array(rows, dtype=np.float64), absmax

    for g_rngs, t_rngs in ((ranges, shuffled), (ranges[:1], shuffled[:1]),
                           (ranges + [(None, None, 0.0)], shuffled + [(1.0, 2.0, 0.0)]),
                           (ranges + [(float("nan"), 1.0, 0.0)], shuffled + [(1.0, 2.0, 0.0)]),
                           (ranges + [(1, 3, 0.0)], shuffled + [(1.0, 2.0, 0.0)])):
        params, absmax = _params(g_rngs, t_rngs)
        want_params, want_absmax = lines(g_rngs, t_rngs)
        assert params.tobytes() == want_params.tobytes()
        assert [None if x is None else float(x).hex() for x in absmax] == \
            [None if x is None else float(x).hex() for x in want_absmax]
        assert all(type(x) in (float, int, type(None)) for x in absmax)
