"""The columnar copy of a part's index (store/colindex.py): written by DumpWriter, read instead of the JSON
lines only when it is a sound copy of exactly them; anything else falls back to the JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import opdiff
from opdiff.base.errors import DumpError
from opdiff.base.record import Record, Stats
from opdiff.compare.run import compare
from opdiff.store import validate as V
from opdiff.store.colindex import COLS_FILE, MIN_RECORDS, TEXTS, ColumnBuilder
from opdiff.store.writer import DumpWriter
from opdiff.testing.synthetic import Tensor, make_record, write_dump, write_run

N = MIN_RECORDS + 40  # a part this long gets a copy


def _tensors(n: int = N) -> list[Tensor]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        shape = [(), (3,), (2, 3), (1, 2, 2)][i % 4]
        arr = rng.standard_normal(shape).astype(np.float32 if i % 3 else np.float16)
        if i == 5:
            arr = np.full((4,), np.nan, dtype=np.float32)  # statistics with null min/max/mean...
        extra = {"tag": i, "nested": {"x": [1, 2.5]}} if i % 5 == 0 else None
        out.append(Tensor(f"layers.{i // 4}", "aten.add.Tensor", "output" if i % 2 else "input", str(i % 2), arr,
                          call=i, extra=extra))
    return out


def _index(root: Path, part: str = "rank0/step0") -> Path:
    return root / part / "index.jsonl"


def _both(index: Path) -> tuple[tuple[list[Record], list[str], list[dict]], tuple[list[Record], list[str], list[dict]]]:
    """(columnar read, JSON-lines read) of one index; the columnar read must have been taken."""
    raw = index.read_bytes()
    fast = V._read_columns(index, raw)
    assert fast is not None, "the columnar copy was not used"
    return fast, V._read_lines(index, raw)


def test_writer_writes_a_copy_that_reads_as_the_json_lines(tmp_path: Path) -> None:
    write_dump(tmp_path / "d", _tensors(), mode="tensor")
    index = _index(tmp_path / "d")
    assert (index.parent / COLS_FILE).is_file()
    fast, slow = _both(index)
    assert fast == slow
    recs = fast[0]
    assert any(r.stats is not None and r.stats.min is None for r in recs)  # nulls survive
    assert any(r.shape == () for r in recs) and any(r.extra.get("nested") == {"x": [1, 2.5]} for r in recs)
    assert all(r.data is not None and r.data["file"].startswith("shards/") for r in recs)


@pytest.mark.parametrize("mode", ["stats", "hash"])
def test_stats_and_hash_captures(tmp_path: Path, mode: str) -> None:
    write_dump(tmp_path / "d", _tensors(), mode=mode)
    fast, slow = _both(_index(tmp_path / "d"))
    assert fast == slow and all(r.data is None for r in fast[0])


def test_call_lines_sources_and_producers(tmp_path: Path) -> None:
    """Call lines are read from the JSON lines; hash, source and src columns, a record without statistics."""
    w = DumpWriter(tmp_path / "d", {"framework": "numpy"})
    w.begin(0, 0)
    for i, t in enumerate(_tensors()):
        if i % 500 == 0:
            w.add_call({"node": f"n{i}", "op": "aten.add.Tensor", "args": [i]})
        rec = make_record(t)
        rec.source, rec.src = f"model.py:{i}", (f"src{i}" if i else None)
        if i == 3:
            rec.stats = None
        w.add(rec, None)
    w.close()
    fast, slow = _both(_index(tmp_path / "d"))
    assert fast == slow
    assert [c["node"] for c in fast[2]] == ["n0", "n500", "n1000", "n1500", "n2000"]
    assert fast[0][3].stats is None and fast[0][2].source == "model.py:2"


def test_multi_part_run_with_data_in_another_part(tmp_path: Path) -> None:
    """Format version 2: a record's data stored once per dump (`data.part`) is held by the copy too."""
    arr = np.arange(2048, dtype=np.float32)  # big enough to be remembered by content
    w = DumpWriter(tmp_path / "d", {"framework": "numpy"})
    for step in (0, 1):
        w.begin(0, step)
        rec = make_record(Tensor("lin", "Linear", "parameter", "weight", arr))
        earlier = w.stored(rec.dtype, rec.shape, rec.hash or "")
        w.add(rec, None if earlier else arr, same_data_as=earlier)
        for t in _tensors():
            w.add(make_record(t), None)
    w.close()
    fast, slow = _both(_index(tmp_path / "d", "rank0/step1"))
    assert fast == slow and fast[0][0].data is not None and fast[0][0].data.get("part") == "rank0/step0"
    d = opdiff.load(tmp_path / "d", step=1)
    assert np.array_equal(d.tensor(d.records[0]), arr)


def _damage(cols: Path, how: str) -> None:
    blob = bytearray(cols.read_bytes())
    if how == "payload":
        blob[-20] ^= 0xFF
    elif how == "cut":
        del blob[len(blob) // 2:]
    elif how == "magic":
        blob[:8] = b"NOTACOLS"
    elif how == "header":
        blob[20:40] = b"{" * 20
    elif how == "empty":
        blob = bytearray()
    cols.write_bytes(bytes(blob))


@pytest.mark.parametrize("how", ["payload", "cut", "magic", "header", "empty"])
def test_damaged_copy_falls_back_to_the_json_lines(tmp_path: Path, how: str) -> None:
    write_dump(tmp_path / "d", _tensors(), mode="tensor")
    index = _index(tmp_path / "d")
    before = opdiff.load(tmp_path / "d").records
    _damage(index.parent / COLS_FILE, how)
    assert V._read_columns(index, index.read_bytes()) is None
    assert opdiff.load(tmp_path / "d").records == before


def test_copy_of_another_index_is_not_used(tmp_path: Path) -> None:
    """An index edited after its copy was written: the copy is stale, the edited lines are read (and checked)."""
    write_dump(tmp_path / "d", _tensors(), mode="stats")
    index = _index(tmp_path / "d")
    lines = index.read_text().splitlines()
    edited = json.loads(lines[2])
    edited["op"] = "aten.mul.Tensor"
    index.write_text("\n".join([*lines[:2], json.dumps(edited), *lines[3:]]) + "\n")
    assert opdiff.load(tmp_path / "d").records[2].op == "aten.mul.Tensor"
    index.write_text("\n".join([*lines[:2], lines[4], *lines[3:]]) + "\n")  # a repeated line
    with pytest.raises(DumpError, match=r"index.jsonl:3: record index 4 where 2 was expected"):
        opdiff.load(tmp_path / "d")


def _forge(index: Path, change: str) -> None:
    """A copy that matches the index's bytes but whose columns say something the JSON lines do not."""
    b = ColumnBuilder(min_records=0)
    for line in index.read_text().splitlines():
        d = json.loads(line)
        if change == "dup" and d["index"] == 3:
            d["name"] = json.loads(index.read_text().splitlines()[1])["name"]
        if change == "control" and d["index"] == 2:
            d["op"] = "aten.\x01add"
        if change == "dtype" and d["index"] == 2:
            d["dtype"] = "complex64"
        if change == "numel" and d["index"] == 2:
            d["stats"]["numel"] += 1
        if change == "path" and d["index"] == 2:
            d["data"]["file"] = "../elsewhere.safetensors"
        b.add(d)
    b.write(index.parent / COLS_FILE, index)


@pytest.mark.parametrize("change", ["dup", "control", "dtype", "numel", "path"])
def test_a_copy_that_fails_a_check_is_not_used(tmp_path: Path, change: str) -> None:
    write_dump(tmp_path / "d", _tensors(), mode="tensor")
    index = _index(tmp_path / "d")
    good = opdiff.load(tmp_path / "d").records
    _forge(index, change)
    assert V._read_columns(index, index.read_bytes()) is None
    assert opdiff.load(tmp_path / "d").records == good


def test_older_dumps_without_a_copy_still_read(tmp_path: Path) -> None:
    """Version-1 and version-2 dumps written before the copy existed: the JSON lines, as before."""
    write_run(tmp_path / "d", {(0, 0): _tensors(), (0, 1): _tensors()})
    want = {s: opdiff.load(tmp_path / "d", step=s).records for s in (0, 1)}
    for s in (0, 1):
        (tmp_path / "d" / f"rank0/step{s}" / COLS_FILE).unlink()
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    for version in (2, 1):
        meta["format_version"] = version
        (tmp_path / "d" / "meta.json").write_text(json.dumps(meta))
        assert {s: opdiff.load(tmp_path / "d", step=s).records for s in (0, 1)} == want


def test_a_cut_off_run_reads_its_lines(tmp_path: Path) -> None:
    """A run that stopped mid-write has a last line cut off and no sound copy: read up to that line."""
    write_dump(tmp_path / "d", _tensors(), mode="stats", complete=False)
    index = _index(tmp_path / "d")
    index.write_bytes(index.read_bytes()[:-30])
    d = opdiff.load(tmp_path / "d")
    assert len(d.records) == N - 1 and any("cut off" in p for p in d.problems)


def test_a_line_the_copy_cannot_hold_writes_no_copy(tmp_path: Path) -> None:
    """A number beyond 64 bits (or another line the columns cannot hold exactly): no copy, the lines read."""
    w = DumpWriter(tmp_path / "d", {"framework": "numpy"})
    w.begin(0, 0)
    rec = make_record(Tensor("m", "Linear", "output", "0", np.ones(3, dtype=np.float32)))
    rec.stats = Stats(numel=3, min=1.0, max=1.0, mean=1.0, std=0.0, norm=1.7, zeros=2**70)
    w.add(rec, None)
    for t in _tensors():
        w.add(make_record(t), None)
    w.close()
    assert not (_index(tmp_path / "d").parent / COLS_FILE).exists()
    assert opdiff.load(tmp_path / "d").records[0].stats.zeros == 2**70  # type: ignore[union-attr]


def test_compare_is_the_same_with_and_without_the_copy(tmp_path: Path) -> None:
    """Every pair's metrics and verdict are equal whichever way the indexes were read."""
    write_dump(tmp_path / "g", _tensors(), mode="tensor")
    target = _tensors()
    target[6].array = target[6].array * 1.01
    target[1500].array = target[1500].array + 1
    write_dump(tmp_path / "t", target, mode="tensor")
    fast = compare(tmp_path / "g", tmp_path / "t", workers=1)
    for side in ("g", "t"):
        (_index(tmp_path / side).parent / COLS_FILE).unlink()
    slow = compare(tmp_path / "g", tmp_path / "t", workers=1)
    assert [(r.name, r.result, r.metrics) for r in fast.results] == [(r.name, r.result, r.metrics) for r in slow.results]
    assert fast.counts()["FAIL"] >= 1


def test_a_short_part_gets_no_copy(tmp_path: Path) -> None:
    """Fewer than MIN_RECORDS records: the writer only keeps its lines (no cost for a short capture)."""
    write_dump(tmp_path / "d", _tensors(MIN_RECORDS - 1), mode="stats")
    assert not (_index(tmp_path / "d").parent / COLS_FILE).exists()
    assert len(opdiff.load(tmp_path / "d").records) == MIN_RECORDS - 1


@pytest.mark.parametrize("shapes", [[(), (3,), (2, 3), (1, 2, 2)], [(2, 3), (3, 2), (2, 3), (700, 1)], [(5,)]])
def test_records_of_one_shape_share_one_tuple(tmp_path: Path, shapes: list[tuple[int, ...]]) -> None:
    """The columnar read gives each distinct shape one tuple (mixed ranks, one rank, one shape), equal to the
    JSON lines' shapes record by record, and the shard header's entries share theirs the same way."""
    rng = np.random.default_rng(1)
    tensors = [Tensor(f"m.{i}", "aten.mul.Tensor", "output", "0", rng.standard_normal(shapes[i % len(shapes)])
                      .astype(np.float32), call=i) for i in range(N)]
    write_dump(tmp_path / "d", tensors, mode="tensor")
    fast, slow = _both(_index(tmp_path / "d"))
    assert [r.shape for r in fast[0]] == [r.shape for r in slow[0]]
    assert all(type(r.shape) is tuple for r in fast[0])
    assert len({id(r.shape) for r in fast[0]}) == len(set(shapes))
    d = opdiff.load(tmp_path / "d")
    d.check()
    entries = [e for h in d._headers.values() for e in h.entries.values()]
    assert len(entries) == N and len({id(e[1]) for e in entries}) <= len(set(shapes)) * len(d._headers)


def test_call_lines_read_when_the_index_is_only_hashed(tmp_path: Path) -> None:
    """read_index hashes the index as it reads it (never held whole) and reads it again only for its call
    lines; bytes changed between the two reads send it to the JSON lines."""
    w = DumpWriter(tmp_path / "d", {"framework": "numpy"})
    w.begin(0, 0)
    for i, t in enumerate(_tensors()):
        if i % 700 == 0:
            w.add_call({"node": f"n{i}", "op": "aten.add.Tensor", "args": [i]})
        w.add(make_record(t), None)
    w.close()
    index = _index(tmp_path / "d")
    fast = V._read_columns(index)
    assert fast is not None and fast == V._read_lines(index, index.read_bytes())
    assert [c["node"] for c in fast[2]] == ["n0", "n700", "n1400"]
    cols = V.load_columns_of((index.parent / COLS_FILE).read_bytes(), *V._digest(index)[:2])  # type: ignore[index]
    assert cols is not None
    size, digest, last = V._digest(index)  # type: ignore[misc]
    with pytest.raises(ValueError, match="changed while it was read"):
        V._other_lines(index, None, cols, (size, "0" * 16, last))


@pytest.mark.parametrize("text", ["layers.\u00e9\u4e2d", "m\u0085x", "a\x7fb", "a\x1fb", "tab\there"])
def test_control_characters_in_the_table_send_to_the_json_lines(tmp_path: Path, text: str) -> None:
    """The table's control-character test (one translate over its bytes) refuses exactly what the JSON path
    refuses: \\x01-\\x1f and \\x7f; other text, multi-byte UTF-8 and C1 code points included, is read."""
    tensors = _tensors()
    tensors[3] = Tensor(text, "aten.add.Tensor", "output", "0", np.ones(3, dtype=np.float32))
    write_dump(tmp_path / "d", tensors, mode="stats")
    index = _index(tmp_path / "d")
    _forge(index, "")  # a copy holding the text, whatever the writer decided
    assert (index.parent / COLS_FILE).exists()
    fast = V._read_columns(index)
    bad = any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text)
    if bad:
        assert fast is None
        with pytest.raises(DumpError, match="control characters"):
            opdiff.load(tmp_path / "d")
    else:
        assert fast is not None and fast[0] == V._read_lines(index, index.read_bytes())[0]
        assert fast[0][3].module == text


def test_a_dump_refuses_a_name_that_repeats_and_finds_records_by_name(tmp_path: Path) -> None:
    """Dump's name table (built at C speed): every record found by its name; the first name that repeats named."""
    from opdiff.store.readers.opdiff_format import OpdiffDump

    write_dump(tmp_path / "d", _tensors(40), mode="stats")
    d = opdiff.load(tmp_path / "d")
    assert all(d[r.name] is r for r in d.records)
    recs = list(d.records)
    twice = [recs[0], recs[1], replace_name(recs[2], recs[1].name), replace_name(recs[3], recs[0].name)]
    with pytest.raises(DumpError, match=f"two records are named {recs[1].name!r}"):
        OpdiffDump(root=d.root, meta=d.meta, rank=0, step=0, records=twice, parts=d.parts)


def replace_name(r: Record, name: str) -> Record:
    from dataclasses import replace

    return replace(r, name=name)


@pytest.mark.parametrize("width, used", [(len(TEXTS) - 1, True), (len(TEXTS) - 2, True), (len(TEXTS) - 3, False)])
def test_a_copy_from_before_axes_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int,
                                               used: bool) -> None:
    """A copy written before `data.window` or `data.axes` joined the text columns (one or two fewer code columns;
    its writer took no line with them) reads as the JSON lines; any other width is refused and the JSON lines
    are read."""
    write_dump(tmp_path / "d", _tensors(), mode="tensor")
    index = _index(tmp_path / "d")
    arrays = ColumnBuilder._arrays
    monkeypatch.setattr(ColumnBuilder, "_arrays", lambda self: {**(a := arrays(self)), "codes": np.ascontiguousarray(
        a["codes"][:, :width])})
    _forge(index, "")
    monkeypatch.undo()
    fast = V._read_columns(index)
    assert (fast is not None) == used
    if used:
        assert fast == V._read_lines(index, index.read_bytes())
    assert opdiff.load(tmp_path / "d").records == V._read_lines(index, index.read_bytes())[0]


@pytest.mark.parametrize("rows", [[[5]], [[0], [3], [0], [1 << 40]], [[2, 3], [3, 2], [2, 3], [700, 1], [0, 0]],
                                  [[1, 128, 768], [1, 128, 3072], [1, 128, 768], [12, 64, 128]],
                                  [[1 << 31, 1 << 31], [1, 1 << 31], [1, 1 << 31]]])  # past 62 bits: None
def test_rows_found_by_one_integer_each_are_the_rows(rows: list[list[int]]) -> None:
    """colindex._rows_by_key (a uniform-rank index's shapes): each row's tuple, equal rows sharing one; None when
    the row's integer could pass 62 bits (the tuples are then made row by row)."""
    from opdiff.store.colindex import _rows_by_key

    got = _rows_by_key(np.array(rows, dtype=np.int64))
    k = len(rows[0])
    if max(map(max, rows)) + 1 >= (1 << 62) ** (1 / k):
        assert got is None
        return
    assert got == [tuple(r) for r in rows] and all(type(s) is tuple for s in got)
    assert len({id(s) for s in got}) == len({tuple(r) for r in rows})
