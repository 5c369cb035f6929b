"""The Ascend GE dump reader (store/readers/ge.py) on files written from the public DumpData schema."""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import opdiff
from opdiff.base.errors import DumpError
from opdiff.store.readers import ge_file
from opdiff.store.readers.ge_proto import DATA_TYPE_NUMBER, FORMAT_NUMBER, DumpData
from opdiff.testing.ge_dumps import Op, Tensor, ge_file_bytes, write_ge_dump

RNG = np.random.default_rng(7)


def _ops() -> list[Op]:
    """Four ops whose tensors cover the plain and device formats, float32 and float16."""
    x = RNG.standard_normal((2, 5, 4, 3)).astype(np.float32)
    w = RNG.standard_normal((6, 5, 3, 3)).astype(np.float32)
    y = RNG.standard_normal((2, 6, 4, 3)).astype(np.float32)
    m = RNG.standard_normal((3, 20, 33)).astype(np.float16)
    v = RNG.standard_normal((2, 17, 2, 3, 3)).astype(np.float32)
    return [
        Op("net/conv/Conv2D", "Conv2D", [Tensor(x, "NC1HWC0", "NCHW"), Tensor(w, "FRACTAL_Z", "NCHW")],
           [Tensor(y, "NC1HWC0", "NCHW")]),
        Op("net/relu", "Relu", [Tensor(y, "NC1HWC0", "NCHW")], [Tensor(np.maximum(y, 0), "NC1HWC0", "NCHW")]),
        Op("net/mm.0", "BatchMatMul", [Tensor(m, "FRACTAL_NZ")], [Tensor(m * np.float16(2), "ND")]),
        Op("net/conv3d", "Conv3D", [Tensor(v, "NDC1HWC0", "NCDHW")], [Tensor(v[:, :4], "NCDHW", "NCDHW")]),
    ]


def test_records_values_order_and_names(tmp_path):
    """Every input and output, in timestamp order, at its original shape with its exact values; file names fold
    '/' and '.' but the records keep the header's op name; inputs link to the output that made them."""
    ops = _ops()
    write_ge_dump(tmp_path / "d", ops, device=3, iteration=5)
    leaf = next((tmp_path / "d").rglob("Conv2D.*"))
    assert leaf.name.startswith("Conv2D.net_conv_Conv2D.2.1.") and leaf.parent.name == "5"
    d = opdiff.load(tmp_path / "d")
    assert d.format == "ge" and (d.rank, d.step) == (3, 5) and d.parts == [(3, 5)] and not d.problems
    assert [r.module for r in d.records if r.pos == "0" and r.role == "output"] == [o.name for o in ops]
    for op in ops:
        for role, ts in (("input", op.inputs), ("output", op.outputs)):
            for i, t in enumerate(ts):
                rec = d[f"{op.name}/{op.type}#0/forward/{role}/{i}"]
                assert rec.shape == t.value.shape and rec.extra["format"] == t.format
                np.testing.assert_array_equal(d.tensor(rec), t.value)
    assert d["net/relu/Relu#0/forward/input/0"].src == "net/conv/Conv2D/Conv2D#0/forward/output/0"
    assert d["net/conv/Conv2D/Conv2D#0/forward/input/1"].src is None
    assert d["net/mm.0/BatchMatMul#0/forward/input/0"].dtype == "float16"


def _one_file(path: Path, dts: list[str], fmt: str = "ND", shape=(2, 3), sizes=None) -> None:
    """One hand-made GE file with an output per data type (8 bytes per element of room)."""
    d = DumpData(op_name="x/y", dump_time=1)
    blobs = []
    for k, dt in enumerate(dts):
        o = d.output.add()
        o.data_type, o.format = DATA_TYPE_NUMBER[dt], FORMAT_NUMBER[fmt]
        o.shape.dim.extend(shape)
        dtype = ge_file.DTYPES.get(dt)
        n = int(np.prod(shape)) * (np.dtype(opdiff.store.format.numpy_dtype(dtype)).itemsize if dtype else 8)
        o.size = sizes[k] if sizes else n
        blobs.append(bytes(range(256)) * (n // 256) + bytes(range(n % 256)))
    head = d.SerializeToString()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def test_every_numpy_data_type_and_refusals(tmp_path):
    """Each schema type numpy/ml_dtypes can hold is read with its dtype; the others are refused per record with
    the reason, and the rest of the file still reads."""
    dts = [*ge_file.DTYPES, "DT_COMPLEX64", "DT_STRING", "DT_HIFLOAT8", "DT_FLOAT4_E2M1"]
    _one_file(tmp_path / "Cast.x_y.2.1.1700000000000000", dts)
    d = opdiff.load(tmp_path)
    assert len(d.records) == len(dts)
    for rec, dt in zip(d.records, dts):
        want = ge_file.DTYPES.get(dt)
        if want is None:
            assert f"data type {dt} cannot be held" in rec.extra["unreadable"]
            with pytest.raises(DumpError, match=dt):
                d.tensor(rec)
        else:
            assert rec.dtype == want and d.tensor(rec).shape == (2, 3)
    bf = next(r for r, dt in zip(d.records, dts) if dt == "DT_BF16")
    assert d.tensor(bf).dtype == ml_dtypes.bfloat16


def test_damage_flags_the_record_only(tmp_path):
    """A size that disagrees with the shape flags that output; a cut-off data section flags what it cuts; a file
    whose header length exceeds it is a one-line problem while the other files still read."""
    _one_file(tmp_path / "A.a.2.1.1700000000000000", ["DT_FLOAT", "DT_FLOAT"], sizes=[24, 20])
    good = tmp_path / "B.b.3.1.1700000000001000"
    _one_file(good, ["DT_FLOAT"])
    (tmp_path / "C.c.4.1.1700000000002000").write_bytes(struct.pack("<Q", 1 << 40) + b"junk")
    cut = tmp_path / "D.d.5.1.1700000000003000"
    _one_file(cut, ["DT_FLOAT", "DT_FLOAT"])
    cut.write_bytes(cut.read_bytes()[:-8])
    d = opdiff.load(tmp_path)
    flags = {r.name: r.extra.get("unreadable", "") for r in d.records}
    assert "needs 24" in flags["x/y/A#0/forward/output/1"] and not flags["x/y/A#0/forward/output/0"]
    assert "cut off" in flags["x/y/D#0/forward/output/1"] and not flags["x/y/D#0/forward/output/0"]
    assert any("C.c.4.1.1700000000002000: not a GE dump file" in p for p in d.problems)
    assert not d.complete
    np.testing.assert_array_equal(d.tensor("x/y/B#0/forward/output/0"),
                                  np.frombuffer(bytes(range(24)), np.float32).reshape(2, 3))


def test_unconvertible_format_is_statistics_only(tmp_path):
    """A device format opdiff cannot undo keeps its device shape, holds statistics and no data, and says so."""
    _one_file(tmp_path / "L.l.2.1.1700000000000000", ["DT_FLOAT"], fmt="FRACTAL_ZN_LSTM", shape=(1, 1, 16, 16))
    rec = opdiff.load(tmp_path).records[0]
    assert rec.data is None and rec.stats is not None and rec.stats.numel == 256 and rec.shape == (1, 1, 16, 16)
    assert "FRACTAL_ZN_LSTM not converted" in rec.extra["note"] and "statistics only" in rec.extra["note"]


def test_not_a_ge_dump_is_one_line(tmp_path):
    """Only unreadable files: opdiff.load raises one line naming the file."""
    (tmp_path / "Add.a.2.1.1700000000000000").write_bytes(struct.pack("<Q", 5) + b"\xff\xff\xff\xff\xff")
    with pytest.raises(DumpError, match=r"Add\.a\.2\.1\.1700000000000000: GE dump header does not parse") as e:
        opdiff.load(tmp_path, format="ge")
    assert "\n" not in str(e.value)


def test_parts_by_device_and_iteration(tmp_path):
    """`{time}/{device}/{model}/{model_id}/{iteration}/` is (rank, step); each part opens alone."""
    ops = _ops()[:2]
    for dev, it in ((0, 0), (0, 1), (1, 0)):
        write_ge_dump(tmp_path, ops, device=dev, iteration=it, graph=False)
    d = opdiff.load(tmp_path)
    assert d.parts == [(0, 0), (0, 1), (1, 0)] and opdiff.store.readers.list_parts(tmp_path) == d.parts
    other = d.with_part(1, 0)
    assert (other.rank, other.step) == (1, 0) and len(other.records) == len(d.records) == 5
    with pytest.raises(DumpError, match="no rank 2 step 0"):
        d.with_part(2, 0)


def test_header_only_read_on_open(tmp_path):
    """Opening reads headers: a data byte changed after opening shows up in the tensor, not at open time."""
    write_ge_dump(tmp_path, _ops()[:1], graph=False)
    d = opdiff.load(tmp_path)
    rec = d["net/conv/Conv2D/Conv2D#0/forward/output/0"]
    f = tmp_path / rec.extra["file"]
    raw = bytearray(f.read_bytes())
    raw[int(rec.extra["offset"]):int(rec.extra["offset"]) + 4] = np.float32(1234.5).tobytes()
    f.write_bytes(bytes(raw))
    assert d.tensor(rec)[0, 0, 0, 0] == np.float32(1234.5)


def test_file_bytes_follow_the_schema():
    """The writer's file is header length + DumpData + the tensors' bytes, parseable by protobuf alone."""
    op = _ops()[2]
    raw = ge_file_bytes(op, 42)
    (n,) = struct.unpack("<Q", raw[:8])
    msg = DumpData()
    msg.ParseFromString(raw[8:8 + n])
    assert msg.op_name == "net/mm.0" and msg.dump_time == 42 and len(msg.input) == len(msg.output) == 1
    assert 8 + n + msg.input[0].size + msg.output[0].size == len(raw)
    assert list(msg.input[0].shape.dim) == [3, 3, 2, 16, 16] and list(msg.input[0].original_shape.dim) == [3, 20, 33]


def test_against_its_own_converted_npy_files(tmp_path):
    """Ascend's convert (with a target format) writes `{dump file name}.{input|output}.{i}.npy`, stream id included:
    the .npy reader takes those names, and the GE dump compares with them pair for pair, bitwise."""
    from opdiff.compare import compare

    ops = _ops()
    write_ge_dump(tmp_path / "ge", ops, graph=False)
    ge = opdiff.load(tmp_path / "ge")
    (tmp_path / "npy").mkdir()
    for rec in ge.records:
        stem = Path(rec.extra["file"]).name
        np.save(tmp_path / "npy" / f"{stem}.{rec.role}.{rec.pos}.npy", ge.tensor(rec))
    npy = opdiff.load(tmp_path / "npy")
    assert npy.format == "npy" and [r.module for r in npy.records][:3] == ["net_conv_Conv2D"] * 3
    assert [r.op for r in npy.records] == [r.op for r in ge.records]
    cmp = compare(npy, ge)
    assert len(cmp.results) == len(ge.records) and all(r.bitwise_equal for r in cmp.results)


def test_logical_shape_needs_no_data():
    """Opening a dump finds each converted tensor's shape from the shapes alone: a 2^44-element NC1HWC0 tensor's is
    known at once; a shape that does not fit its format is a FormatError, not a guess."""
    from opdiff.store.device_formats import FormatError, logical_shape

    big = (1 << 20, 1 << 10, 1 << 10, 15)
    assert logical_shape("NC1HWC0", (1 << 20, 1, 1 << 10, 1 << 10, 16), big, "NHWC") == big
    assert logical_shape("FRACTAL_NZ", (4, 2, 3, 16, 16), (4, 40, 30)) == (4, 40, 30)
    with pytest.raises(FormatError, match="does not fit"):
        logical_shape("FRACTAL_NZ", (4, 2, 3, 16, 16), (4, 40, 50))
    with pytest.raises(FormatError, match="does not fit"):
        logical_shape("FRACTAL_Z", (18, 2, 16, 16), (20, 19, 3, 4))


def test_ffts_slices_joined_along_the_cut_axis(tmp_path):
    """An op run as 3 FFTS+ threads (NC1HWC0 output cut on H, uneven) reads as one op whose output is the whole
    tensor; with a slice lost, the dump says so and the two left read as slices of their own."""
    from opdiff.testing.ge_dumps import write_ffts_slices

    x = RNG.standard_normal((2, 19, 7, 3)).astype(np.float32)
    op = Op("net/conv", "Conv2D", [Tensor(x, "NC1HWC0", "NCHW")], [Tensor(x * 2, "NC1HWC0", "NCHW")])
    write_ffts_slices(tmp_path / "ok", op, 3, axis=2)
    d = opdiff.load(tmp_path / "ok")
    assert [r.name for r in d.records] == ["net/conv/Conv2D#0/forward/input/0", "net/conv/Conv2D#0/forward/output/0"]
    out = d.records[1]
    assert out.extra["cut_axis"] == 2 and len(out.extra["pieces"]) == 3 and out.shape == x.shape
    np.testing.assert_array_equal(d.tensor(out), x * 2)
    write_ffts_slices(tmp_path / "lost", op, 3, axis=2, keep=2)
    d = opdiff.load(tmp_path / "lost")
    assert any("FFTS+ op with 2 slice file(s), its header says 3: not joined" in p for p in d.problems)
    assert [r.call for r in d.records if r.role == "output"] == [0, 1] and not d.complete
