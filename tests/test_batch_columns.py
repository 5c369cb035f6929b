"""A batch of small pairs held as columns (metrics/batch.py Side, compare/run.py _small_items): runs cut by numpy
equal the runs cut one source at a time, packed tensors read as rows of one view equal their bytes, and compare()
with every kind of pair in one batch (no hash, a hash, another dtype per side, `extra`, bytes read through axes,
shared bytes, records without statistics) gives what it gives pair by pair."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opdiff.base.record import Record, Stats
from opdiff.compare import compare
from opdiff.compare import run as R
from opdiff.metrics import batch as B
from opdiff.metrics.tensor import TensorSource, Workspace
from opdiff.store.format import dtype_name
from opdiff.store.stats import content_hash
from opdiff.store.writer import DumpWriter
from opdiff.testing.synthetic import Tensor, make_record

RNG = np.random.default_rng(23)
FIELDS = ("index", "status", "mode", "result", "metrics", "err_message", "bitwise_equal", "precision", "match",
          "note", "golden_group")


def _layout(n: int, files: list, gap_scale: int) -> B.Side:
    """n file sources over `files`, sizes 0..600 bytes, at random offsets: neighbours, gaps around GAP, overlaps
    and repeated offsets (two records naming one stored tensor)."""
    paths = [files[int(RNG.integers(len(files)))] for _ in range(n)]
    offsets = [int(RNG.integers(0, gap_scale)) // 4 * 4 for _ in range(n)]
    offsets[1:3] = [offsets[0]] * 2  # one tensor named thrice
    shapes = [(int(RNG.integers(0, 150)),) for _ in range(n)]
    return B.Side(["float32"] * n, shapes, paths, offsets, [None] * n)


@pytest.mark.parametrize("gap_scale", [2_000, 60_000, 4_000_000])
def test_runs_cut_by_numpy_equal_runs_cut_one_source_at_a_time(gap_scale, tmp_path, monkeypatch):
    files = [tmp_path / f"f{k}" for k in range(3)]
    for _ in range(20):
        side = _layout(int(RNG.integers(1, 300)), files, gap_scale)
        sizes = [s[0] * 4 for s in side.shape]
        every = list(range(len(sizes)))
        some = every[::2]
        for chosen in (every, some):
            fast = sorted((tuple(r), lo, hi) for r, lo, hi in B._file_runs(side, chosen, sizes))
            slow = sorted((tuple(r), lo, hi) for r, lo, hi in B._python_runs(side, chosen, sizes))
            assert fast == slow
            assert sorted(k for r, _, _ in fast for k in r) == chosen  # every source in exactly one run
    monkeypatch.setattr(B, "READ_MAX", 3_000)  # runs too long for one read: the per-source way cuts them
    side = _layout(200, files, 2_000)
    sizes = [s[0] * 4 for s in side.shape]
    fast = sorted((tuple(r), lo, hi) for r, lo, hi in B._file_runs(side, list(range(200)), sizes))
    assert fast == sorted((tuple(r), lo, hi) for r, lo, hi in B._python_runs(side, list(range(200)), sizes))
    assert max(hi - lo for _, lo, hi in fast) <= 3_000 + 600


def test_packed_and_scattered_tensors_read_as_their_bytes(tmp_path):
    """Tensors of one size end to end (rows of one view), of mixed sizes, with gaps, repeated, with and without a
    hash (one not matching it), and in-memory arrays beside them: each read equals its array, a bad one is None."""
    same = [RNG.standard_normal(16).astype(np.float32) for _ in range(40)]
    mixed = [RNG.standard_normal(int(RNG.integers(1, 50))).astype(np.float32) for _ in range(30)]
    blob = bytearray()
    srcs: list[TensorSource] = []
    path = tmp_path / "s.bin"  # one path object: sources are grouped by it
    for k, a in enumerate(same + mixed):
        if k == 55:
            blob += b"\0" * 100  # a gap inside a run
        srcs.append(TensorSource("float32", a.shape, None, path, len(blob),
                                 content_hash(a, "float32", a.shape) if k % 7 == 0 else None))
        blob += a.tobytes()
    path.write_bytes(bytes(blob))
    srcs.append(TensorSource("float32", same[3].shape, None, path, srcs[3].offset))  # shared bytes
    srcs.append(TensorSource.of(mixed[0]))  # in memory
    bad = TensorSource("float32", same[5].shape, None, path, srcs[5].offset, srcs[0].hash)
    arrays = [*same, *mixed, same[3], mixed[0]]
    with Workspace() as ws:
        got = B.read_sources([*srcs, bad], ws)
        packed = B.read_sources([TensorSource(s.dtype, s.shape, None, s.path, s.offset) for s in srcs[:40]],
                                ws)  # one run of one size end to end, no hash
    for a, g in zip(arrays, got):
        assert g is not None and g.dtype == a.dtype and g.shape == a.shape and (g == a).all()
    assert got[-1] is None
    assert all((g == a).all() for g, a in zip(packed, same))
    assert packed[0].base is not None and packed[0].base.nbytes == 40 * 64  # rows of one view of the whole run
    assert all(g.base is packed[0].base for g in packed)


def _rec(name: str, arr: np.ndarray, *, hashed: bool = True, stats: bool = True, extra=None) -> Record:
    rec = make_record(Tensor(name, "Op", "output", "0", arr, extra=extra), with_hash=hashed)
    if not stats:
        rec.stats = None
    return rec


def _write(path, recs: list[tuple[Record, np.ndarray]]) -> None:
    """A dump of the records; a record given a base's module name (str) in place of an array reads the base's
    bytes transposed (data.axes), one given a base Record shares its bytes."""
    with DumpWriter(path, {"framework": "numpy", "mode": "tensor"}) as w:
        w.begin(0, 0)
        added: dict[str, Record] = {}
        for rec, arr in recs:
            if isinstance(arr, str):
                added[rec.module] = w.add(rec, None, same_data_as=added[arr], axes=(1, 0))
            elif isinstance(arr, Record):
                added[rec.module] = w.add(rec, None, same_data_as=added[arr.module])
            else:
                added[rec.module] = w.add(rec, np.ascontiguousarray(arr))


def _side(k: int, kind: str, noise: float) -> tuple[np.ndarray, np.ndarray]:
    dt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[kind]
    g = RNG.standard_normal(24).astype(dt)
    t = (g.astype(np.float64) * (1 + noise * RNG.standard_normal(24))).astype(dt)
    return g, t


def _mixed_dumps(tmp_path):
    """Golden and target dumps whose small pairs are of every kind one batch meets."""
    gold: list[tuple[Record, object]] = []
    targ: list[tuple[Record, object]] = []  # (record, its array, or the base it reads: see _write)
    for k in range(60):
        kind = ("f32", "f16", "bf16")[k % 3]
        g, t = _side(k, kind, (0.0, 1e-6, 1e-3, 0.2)[k % 4])
        name = f"m.{k}"
        hashed = k % 5 != 0  # a few pairs without a content hash: bitwise equality from the counts
        stats = k % 11 != 3  # a few without statistics: their ranges found from the data
        extra = {"note": "kept"} if k % 13 == 4 else None  # batched by _batchable, not inline
        if k % 17 == 6:
            t = t.astype(np.float32) if kind != "f32" else t.astype(np.float16)  # another dtype on the target side
        gold.append((_rec(name, g, hashed=hashed, stats=stats, extra=extra), g))
        targ.append((_rec(name, t, hashed=hashed and k % 9 != 2, stats=stats, extra=extra), t))
    for side in (gold, targ):
        side.append((_rec("shared", side[0][1], hashed=False), side[0][0]))  # shares the bytes of m.0
        m = RNG.standard_normal((4, 6)).astype(np.float32)
        side.append((_rec("stored", m), m))
        tr = np.ascontiguousarray(m.reshape(6, 4).transpose(1, 0))  # read through axes: located by span() only
        side.append((_rec("viewed", tr), "stored"))
    _write(tmp_path / "g", gold)
    _write(tmp_path / "t", targ)
    return tmp_path / "g", tmp_path / "t"


def test_compare_with_every_kind_in_one_batch_equals_pair_by_pair(tmp_path, monkeypatch):
    gp, tp = _mixed_dumps(tmp_path)
    batched = compare(gp, tp, workers=1)
    import opdiff

    g, t = opdiff.load(gp), opdiff.load(tp)
    plan = R.plan_pairs(g, t, None, "auto")
    gold, targ, where = R._small_items(g, t, plan.pairs, [i for i, _ in plan.work], "auto")
    names = {plan.pairs[i].target.name for i in where}  # type: ignore[union-attr]
    viewed = next(r for r in t.records if r.name.startswith("viewed"))
    assert t.locate(viewed) is None and viewed.name in names  # read by span() and batched all the same
    assert any(r.extra for r in t.records if r.name in names)
    assert len(where) == len(plan.work)  # every pair batched
    monkeypatch.setattr(R, "SMALL_PAIR", 0)  # nothing batched
    alone = compare(gp, tp, workers=1)
    assert [[getattr(r, f) for f in FIELDS] for r in batched.results] == \
        [[getattr(r, f) for f in FIELDS] for r in alone.results]
    assert [list(r.metrics) for r in batched.results] == [list(r.metrics) for r in alone.results]  # key order
    results = {r.result for r in batched.results} | {r.bitwise_equal for r in batched.results}
    assert {"PASS", "FAIL", True, False} <= results
    assert {r.precision for r in batched.results} >= {"float32", "float16", "bfloat16"}


def test_ranges_go_as_float_columns_only_when_each_is_a_float(tmp_path):
    """_side takes the records' statistics as three float columns when every min, max and mean is a float (what
    _range gives of each), and per record otherwise (a record without statistics, a min that is an int)."""
    arrs = [RNG.standard_normal(8).astype(np.float32) for _ in range(4)]
    recs = [_rec(f"r.{k}", a) for k, a in enumerate(arrs)]
    where = [(tmp_path, 0)] * 4
    side = R._side(recs, where)
    assert side.ranges is None and side.floats is not None
    assert [side.range(k) for k in range(4)] == [R._range(r) for r in recs]
    recs[1].stats = None
    recs[2].stats = Stats(numel=8, min=-2, max=3, mean=0.5)  # integer bounds, as a foreign index may give
    side = R._side(recs, where)
    assert side.floats is None and side.ranges == [R._range(r) for r in recs]
    assert side.dtype == [dtype_name(a.dtype) for a in arrs]


@pytest.mark.parametrize("zero", [False, True])
def test_plain_rows_normalized_error_by_numpy_equals_finalize(zero):
    """finalize_rows with every golden abs max a nonzero float (the normalized max error divided by numpy) or with
    a zero among them (the per-row line) equals finalize_full row by row, keys in order."""
    from opdiff.metrics import kernel as K
    from opdiff.metrics.tensor import finalize_full, finalize_rows

    n = 500
    acc = RNG.random((n, K.N_ACC)) * RNG.choice([1e-30, 1e-3, 1.0, 1e30], size=(n, 1))
    cnt = RNG.integers(0, 5, (n, K.N_CNT))
    numel = RNG.integers(1, 100, n).tolist()
    cnt[:, K.C_FINITE] = numel
    cnt[:, K.C_MISMATCH] = 0
    absmax = (RNG.random(n) * RNG.choice([1e-300, 1e-3, 1.0, 1e300], size=n)).tolist()
    if zero:
        absmax[7] = 0.0
    shifts = [(float(RNG.standard_normal()), float(RNG.standard_normal())) for _ in range(n)]
    got = finalize_rows(acc, cnt, numel, absmax, shifts)
    for i, m in enumerate(got):
        assert list(m.items()) == list(finalize_full(acc[i].tolist(), cnt[i].tolist(), numel[i], absmax[i],
                                                     shifts[i]).items()), i
