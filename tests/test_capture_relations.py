"""Records that read stored bytes under another shape or order (format version 3, `data.axes`): a Linear's weight
handed to mm/addmm as `w.t()` at aten level, the heads' `view` and `transpose` at api level point at the bytes the
dump already stores, and read back exactly what a capture storing them again would hold (docs/format.md, "Data")."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import opdiff
from capture_helpers import build, outputs_equal, same_bits, to_np
from opdiff.base.errors import DumpError
from opdiff.base.record import Record
from opdiff.capture.stats_kernel import SMALL, array_stats, transposed_hash_stats
from opdiff.compare import compare
from opdiff.replay import replay
from opdiff.store.colindex import COLS_FILE, load_columns, sound
from opdiff.store.colindex import records as columnar_records
from opdiff.store.convert import convert
from opdiff.store.format import DTYPES, numpy_dtype
from opdiff.store.stats import content_hash, tensor_stats
from opdiff.store.writer import DumpWriter


def _capture(model, inputs, path, level, relations):
    with torch.no_grad(), opdiff.capture(model, path, level=level, mode="tensor") as cap:
        cap.recorder.relations = relations
        out = model(**inputs)
    return out


def _reads(d) -> list[Record]:
    return [r for r in d if r.data is not None and "axes" in r.data]


def _windows(d) -> list[Record]:
    return [r for r in d if r.data is not None and "window" in r.data]


def _shard_bytes(path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.safetensors"))


@pytest.mark.parametrize("arch, level", [("gpt2", "aten"), ("gpt2", "api"), ("llama", "aten"), ("bert", "api"),
                                         ("llama", "api")])
def test_a_dump_reading_stored_bytes_equals_one_storing_them_again(tmp_path, arch, level):
    """Every record (name, shape, dtype, hash, statistics, bytes read back) equals the capture without relations;
    the transposed Linear weights and the heads' views point at stored bytes, so fewer bytes are written."""
    model, inputs = build(arch)
    model.eval()
    outs = [_capture(model, inputs, tmp_path / str(rel), level, rel) for rel in (False, True)]
    assert outputs_equal(outs[0], outs[1])
    old, new = opdiff.load(tmp_path / "False"), opdiff.load(tmp_path / "True")
    assert not _reads(old) and not _windows(old) and [r.name for r in old] == [r.name for r in new]
    for a, b in zip(old, new):
        assert (a.shape, a.dtype, a.hash, a.stats, a.src) == (b.shape, b.dtype, b.hash, b.stats, b.src), b.name
        x, y = old.tensor(a), new.tensor(b)
        assert same_bits(x, y) and y.shape == tuple(b.shape), b.name
    reads, windows = _reads(new), _windows(new)
    assert reads and all(content_hash(new.tensor(r), r.dtype, tuple(r.shape)) == r.hash for r in reads + windows)
    assert not any(new[r.data["key"]].data.keys() & {"axes", "window"} for r in reads + windows)  # no chains
    assert _shard_bytes(tmp_path / "True") < _shard_bytes(tmp_path / "False")
    transposed = [r for r in reads if r.data["axes"] != sorted(r.data["axes"])]
    if level == "aten":  # every Linear weight (GPT-2: the tied output embedding) stored once, as the parameter
        weights = [r for r in transposed if r.op in ("aten.mm.default", "aten.addmm.default")]
        assert weights and all(r.data["key"].endswith("/forward/parameter/weight") and r.data["axes"] == [1, 0]
                               for r in weights)
    if arch == "bert":  # the heads: [b, s, h, d] -> transpose(1, 2) of the stored linear output
        assert any(r.op == "torch.Tensor.transpose" and r.data["axes"] == [0, 2, 1, 3] for r in transposed)
    if arch == "gpt2" and level == "api":  # views under a shape that is not a size-1 reshape: identity axes
        assert any(r.op == "torch.Tensor.view" and len(r.shape) == 3 and r.data["axes"] == [0, 1, 2] for r in reads)
        _q_k_v_are_windows_of_c_attn(new, windows, model.config.n_embd)
    if arch == "llama" and level == "api":  # rotary halves: x[..., :d/2] and x[..., d/2:] of stored q and k
        assert any(r.data["window"]["offset"] > 0 and r.data["window"]["strides"][-1] == 1 for r in windows)


def _q_k_v_are_windows_of_c_attn(d, windows, width) -> None:
    """GPT-2's split of c_attn's output: q, k and v (and their views and transposes) read its bytes at offsets
    0, d and 2d, with c_attn's row stride 3d; the split writes nothing."""
    c_attn = "transformer.h.0.attn.c_attn/torch.addmm#0/forward/output/0"
    split = sorted((r for r in d if r.op == "torch.Tensor.split" and r.role == "output"
                    and r.module == "transformer.h.0.attn"), key=lambda r: r.pos)
    assert [r.data.get("window", {}).get("offset") for r in split] == [0, width, 2 * width]
    assert all(r.data["key"] == c_attn and r.data["window"]["strides"][-2:] == [3 * width, 1] for r in split)
    heads = [r for r in windows if r.op == "torch.Tensor.transpose" and r.module == "transformer.h.0.attn"]
    assert heads and all(r.data["key"] == c_attn and len(r.shape) == 4 for r in heads)
    assert not any(r.data["key"] == r.name for r in split + heads)


def test_the_reading_records_on_disk_name_the_stored_key_and_the_version(tmp_path):
    model, inputs = build("gpt2")
    _capture(model.eval(), inputs, tmp_path / "d", "aten", True)
    meta = json.loads((tmp_path / "d/meta.json").read_text())
    assert meta["format_version"] == 3
    lines = _index_lines(tmp_path / "d")
    mm = next(x for x in lines if x.get("name") == "lm_head/aten.mm.default#0/forward/input/1")
    assert mm["data"] == {"file": mm["data"]["file"], "key": "transformer.wte/parameter#0/forward/parameter/weight",
                          "axes": [1, 0]}
    wte = model.transformer.wte.weight
    assert mm["shape"] == [wte.shape[1], wte.shape[0]] and mm["hash"] == content_hash(to_np(wte.t()), "float32",
                                                                                         tuple(mm["shape"]))


class _Reweighted(torch.nn.Module):
    """A Linear whose weight is changed in place through `.data` (an alias with its own version counter) inside
    the forward, after the parameters were recorded: mm's transposed weight is no longer the parameter's bytes."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(96, 80)

    def forward(self, x):
        self.lin.weight.data.mul_(-2)
        return self.lin(x)


@pytest.mark.parametrize("exclude", [None, r"mul_"])
def test_a_weight_changed_in_place_is_stored_anew(tmp_path, exclude):
    """Each step stores the parameter again (it changed). Within a step the content proof decides what addmm's
    transposed weight reads: the recorded `mul_` output holding its new bytes, or, with `mul_` not recorded,
    nothing stored: then it is stored with its own bytes. Either way it reads back what addmm was given."""
    torch.manual_seed(0)
    model, x = _Reweighted(), torch.randn(4, 96)
    seen = []
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="aten", mode="tensor", exclude=exclude) as cap:
        for _ in range(2):
            before = to_np(model.lin.weight)
            model(x)
            seen.append((before, to_np(model.lin.weight)))
            cap.step()
    for step in (0, 1):
        d = opdiff.load(tmp_path / "d", step=step)
        param = d["lin/parameter#0/forward/parameter/weight"]
        wt = next(r for r in d if r.op == "aten.addmm.default" and r.role == "input" and r.pos == "2")
        assert same_bits(d.tensor(param), seen[step][0])  # changed: stored again (or step 0's mul_ output)
        assert same_bits(d.tensor(wt), seen[step][1].T.copy())
        assert wt.hash == content_hash(seen[step][1].T, "float32", tuple(wt.shape))
        if exclude:
            assert wt.data["key"] == wt.name and "axes" not in wt.data and param.data.get("part") is None
        else:
            assert wt.data["key"] == "aten.mul_.Tensor#0/forward/output/0" and wt.data["axes"] == [1, 0]


def test_an_unchanged_weight_in_a_later_step_reads_the_first_steps_copy(tmp_path):
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(700, 900), torch.randn(3, 700)  # 630,000 elements: measured band by band
    with torch.no_grad(), opdiff.capture(lin, tmp_path / "d", level="aten", mode="tensor") as cap:
        for _ in range(2):
            lin(x)
            cap.step()
    want = to_np(lin.weight).T.copy()
    for step in (0, 1):
        d = opdiff.load(tmp_path / "d", step=step)
        wt = next(r for r in d if r.op == "aten.addmm.default" and r.pos == "2" and r.role == "input")
        assert wt.data["axes"] == [1, 0] and wt.data.get("part") == (None if step == 0 else "rank0/step0")
        assert same_bits(d.tensor(wt), want) and wt.stats == array_stats(want, "float32")


def _damage(path, key):
    """Flip the bits of one stored tensor's first element in its shard."""
    d = opdiff.load(path)
    rec = next(r for r in d if r.data and r.data["key"] == key and "axes" not in r.data)
    file, offset = d.locate(rec)
    with open(file, "r+b") as f:
        f.seek(offset)
        b = f.read(4)
        f.seek(offset)
        f.write(bytes(255 - c for c in b))


def test_damaged_stored_bytes_flag_the_records_reading_them_and_only_those(tmp_path):
    model, inputs = build("llama")
    _capture(model.eval(), inputs, tmp_path / "g", "aten", True)
    shutil.copytree(tmp_path / "g", tmp_path / "t")
    key = "model.layers.0.self_attn.q_proj/parameter#0/forward/parameter/weight"
    _damage(tmp_path / "t", key)
    t = opdiff.load(tmp_path / "t")
    readers = {r.name for r in t if r.data is not None and r.data["key"] == key}
    assert len(readers) >= 2 and any("axes" in t[n].data for n in readers)  # the parameter and mm's w.t()
    for r in t:
        if r.name in readers:
            with pytest.raises(DumpError, match="does not match its recorded hash"):
                t.tensor(r)
    cmp = compare(opdiff.load(tmp_path / "g"), t)
    bad = {p.name for p in cmp.results if p.status == "error"}
    assert bad == readers
    assert all(p.result == "PASS" for p in cmp.results if p.name not in readers)


def test_export_replay_and_inspect_read_the_records_own_values(tmp_path, opdiff_cli):
    model, inputs = build("llama")
    _capture(model.eval(), inputs, tmp_path / "d", "aten", True)
    d = opdiff.load(tmp_path / "d")
    convert(tmp_path / "d", tmp_path / "e")  # every record stored with its own bytes, as before version 3
    e = opdiff.load(tmp_path / "e")
    assert not _reads(e) and len(e) == len(d)
    for a in _reads(d):
        b = e[a.name]
        assert same_bits(e.tensor(b), d.tensor(a)) and (b.hash, b.stats) == (a.hash, a.stats)
    node = "model.layers.0.self_attn.q_proj/aten.mm.default#0"
    assert any("axes" in r.data for r in d if r.node == node and r.role == "input")
    res = replay(d, d, node)
    assert res.status == "ok", res.reason
    assert res.outputs and all(o["replay_vs_target"]["MaxAbsErr"] == 0.0 for o in res.outputs), res.outputs
    name = f"{node}/forward/input/1"
    shown = opdiff_cli("ls", str(tmp_path / "d"), "--module", r"q_proj$", "--op", "mm")
    assert shown.returncode == 0 and "input/1" in shown.stdout
    shell = opdiff_cli("shell", str(tmp_path / "d"), stdin=f"pt {name}\nquit\n")
    assert shell.returncode == 0 and "Traceback" not in shell.stdout + shell.stderr


def _one_record(path, stored: np.ndarray, shape, axes, hsh=None) -> None:
    """A dump of one stored tensor and one record reading it with `axes` (as the writer would write it)."""
    dtype = "float32"
    with DumpWriter(path, {"model": "m"}) as w:
        w.begin(0, 0)
        base = Record(index=0, name="a/op#0/forward/output/0", node="a/op#0", module="a", op="op", level="module",
                      call=0, direction="forward", role="output", pos="0", dtype=dtype, shape=stored.shape,
                      stats=tensor_stats(stored), hash=content_hash(stored, dtype, stored.shape))
        w.add(base, stored)
        mine = np.ascontiguousarray(stored.reshape([shape[list(axes).index(k)] for k in range(len(shape))])
                                    .transpose(axes))
        rec = Record(index=0, name="b/op#0/forward/input/0", node="b/op#0", module="b", op="op", level="module",
                     call=0, direction="forward", role="input", pos="0", dtype=dtype, shape=tuple(shape),
                     stats=tensor_stats(mine), hash=hsh or content_hash(mine, dtype, tuple(shape)))
        w.add(rec, None, same_data_as=base, axes=tuple(axes))


@pytest.mark.parametrize("shape, axes", [((6, 4), (1, 0)), ((2, 3, 4), (0, 2, 1)), ((3, 8), (0, 1)), ((24,), (0,)),
                                         ((4, 3, 2), (2, 0, 1))])
def test_the_reader_reorders_stored_bytes_as_axes_say(tmp_path, shape, axes):
    stored = np.arange(24, dtype=np.float32).reshape(4, 6) * 1.5
    _one_record(tmp_path / "d", stored, shape, axes)
    d = opdiff.load(tmp_path / "d")
    rec = d["b/op#0/forward/input/0"]
    got = d.tensor(rec)
    base = [shape[list(axes).index(k)] for k in range(len(shape))]
    assert same_bits(got, np.ascontiguousarray(stored.reshape(base).transpose(axes)))
    assert (d.locate(rec) is None) == (list(axes) != sorted(axes))  # a reshape reads zero-copy


def _index_lines(dump: Path) -> list[dict]:
    """The records' lines of a one-part dump's index, parsed (to damage them by hand)."""
    return [json.loads(x) for x in (dump / "rank0/step0/index.jsonl").read_text().splitlines()]


def _write_index(dump: Path, lines: list[dict]) -> None:
    (dump / "rank0/step0/index.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _refused_in_one_line(dump: Path, problem: str) -> None:
    """Opening `dump` or reading its second record fails with one line that names the dump and `problem`."""
    with pytest.raises(DumpError, match=problem) as err:
        d = opdiff.load(dump)
        d.tensor(d.records[1])
    assert "\n" not in str(err.value) and str(dump) in str(err.value)


@pytest.mark.parametrize("edit, problem", [
    ({"axes": [0, 0]}, "not an order of the record's 2 dimensions"),
    ({"axes": [1]}, "not an order of the record's 2 dimensions"),
    ({"axes": "1,0"}, "must be a list of dimensions"),
    ({"axes": [1, True]}, "must be a list of dimensions"),
    ({"shape": [5, 5], "stats": None}, r"reads it as float32\[5, 5\]"),
])
def test_a_bad_relation_is_one_line_naming_the_file(tmp_path, edit, problem):
    _one_record(tmp_path / "d", np.ones((4, 6), np.float32), (6, 4), (1, 0))
    lines = _index_lines(tmp_path / "d")
    for k, v in edit.items():
        if k == "axes":
            lines[1]["data"]["axes"] = v
        elif v is None:
            lines[1].pop(k)
        else:
            lines[1][k] = v
    _write_index(tmp_path / "d", lines)
    _refused_in_one_line(tmp_path / "d", problem)


def test_a_wrong_hash_through_axes_is_refused(tmp_path):
    _one_record(tmp_path / "d", np.ones((4, 6), np.float32), (6, 4), (1, 0), hsh="xxh3:0123456789abcdef")
    d = opdiff.load(tmp_path / "d")
    with pytest.raises(DumpError, match="does not match its recorded hash"):
        d.tensor(d.records[1])
    assert same_bits(d.tensor(d.records[0]), np.ones((4, 6), np.float32))


_LONG = np.arange(12, dtype=np.float32).reshape(3, 4)


def _long_part(path, last: np.ndarray, **how):
    """A part long enough for the columnar copy (store/colindex.py) whose last record reads _LONG's bytes as
    `how` says (axes= or window=); the copy must give the records the JSON lines give. The part, loaded."""

    def rec(i, a):
        return Record(index=0, name=f"m{i}/op#0/forward/output/0", node=f"m{i}/op#0", module=f"m{i}", op="op",
                      level="module", call=0, direction="forward", role="output", pos="0", dtype="float32",
                      shape=a.shape, stats=tensor_stats(a), hash=content_hash(a, "float32", a.shape))

    with DumpWriter(path, {"model": "m"}) as w:
        w.begin(0, 0)
        first = w.add(rec(0, _LONG), _LONG)
        for i in range(1, 2100):
            w.add(rec(i, _LONG), None, same_data_as=first)
        w.add(rec(2100, last), None, same_data_as=first, **how)
    part = path / "rank0/step0"
    cols = load_columns((part / COLS_FILE).read_bytes(), (part / "index.jsonl").read_bytes())
    assert cols is not None and sound(cols, DTYPES, re.compile(r"rank\d+/step\d+"))
    d = opdiff.load(path)
    assert columnar_records(cols) == d.records and same_bits(d.tensor(d.records[-1]), last)
    assert d.records[5].data.keys() == {"file", "key"} and same_bits(d.tensor(d.records[5]), _LONG)
    return d


def test_a_long_part_keeps_axes_whatever_index_it_is_read_from(tmp_path):
    d = _long_part(tmp_path / "d", _LONG.T.copy(), axes=(1, 0))
    assert d.records[-1].data["axes"] == [1, 0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64", "int64", "bool", "float8_e4m3fn"])
def test_a_transpose_is_hashed_and_measured_band_by_band_bit_for_bit(dtype):
    """transposed_hash_stats gives content_hash and array_stats of the row-major copy, chunk sums included."""
    rng = np.random.default_rng(1)
    for shape in ((1100, 520), (520, 1100), (9, SMALL // 9 + 5)):
        a = rng.standard_normal(shape) * 3
        a = (a > 0 if dtype == "bool" else a).astype(numpy_dtype(dtype))
        if dtype in ("float32", "bfloat16", "float16", "float64"):
            a.reshape(-1)[[17, 4000, -5]] = [np.nan, np.inf, -np.inf]
        got = transposed_hash_stats(a, dtype)
        copy = np.ascontiguousarray(a.T)
        assert got is not None
        assert got[0] == content_hash(copy, dtype, copy.shape)
        assert repr(got[1]) == repr(array_stats(copy, dtype))


# -- windows of stored bytes (`data.window`: an element offset and the record's strides) ---------------------------

def _one_window(path, stored: np.ndarray, view: np.ndarray, hsh=None) -> None:
    """A dump of one stored tensor and one record reading `view`, a numpy view of it, through a window."""
    dtype = "float32"
    size = stored.itemsize
    offset = (view.__array_interface__["data"][0] - stored.__array_interface__["data"][0]) // size
    strides = tuple(s // size for s in view.strides)
    mine = np.ascontiguousarray(view)
    with DumpWriter(path, {"model": "m"}) as w:
        w.begin(0, 0)
        base = Record(index=0, name="a/op#0/forward/output/0", node="a/op#0", module="a", op="op", level="module",
                      call=0, direction="forward", role="output", pos="0", dtype=dtype, shape=stored.shape,
                      stats=tensor_stats(stored), hash=content_hash(stored, dtype, stored.shape))
        w.add(base, stored)
        rec = Record(index=0, name="b/op#0/forward/input/0", node="b/op#0", module="b", op="op", level="module",
                     call=0, direction="forward", role="input", pos="0", dtype=dtype, shape=mine.shape,
                     stats=tensor_stats(mine), hash=hsh or content_hash(mine, dtype, mine.shape))
        w.add(rec, None, same_data_as=base, window=(offset, strides))


_STORED = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5) * 0.5 - 3
_VIEWS = {  # name -> (the view of _STORED, read zero-copy)
    "split on the last dim": (_STORED[..., 2:4], False),
    "narrow on dim 0": (_STORED[1:3], True),
    "select": (_STORED[:, 3], False),
    "select a row": (_STORED[2, 3], True),
    "transpose of a slice": (_STORED[:, 1:5].transpose(2, 0, 1), False),
    "steps": (_STORED[::2, ::3, 1:], False),
    "broadcast (stride 0)": (np.broadcast_to(_STORED[1, 2], (3, 5)), False),
    "the last element": (_STORED[3, 5, 4:], True),
}


@pytest.mark.parametrize("what", list(_VIEWS))
def test_the_reader_reads_a_window_as_numpy_strides_say(tmp_path, what):
    view, zero_copy = _VIEWS[what]
    _one_window(tmp_path / "d", _STORED, view)
    d = opdiff.load(tmp_path / "d")
    rec = d["b/op#0/forward/input/0"]
    assert same_bits(d.tensor(rec), np.ascontiguousarray(view))
    assert (d.locate(rec) is not None) == zero_copy  # a contiguous run of the stored bytes is read in place
    assert same_bits(d.tensor(d.records[0]), _STORED)


@pytest.mark.parametrize("window, problem", [
    ({"offset": 115, "strides": [5, 1]}, "data.window out of bounds"),  # 115 + 5 + 4 + 1 = 125 > 120 elements
    ({"offset": 0, "strides": [116, 1]}, "data.window out of bounds"),  # 116 + 4 + 1 = 121 > 120
    ({"offset": 0, "strides": [5]}, r"'data.window.strides' must be 2 whole numbers"),
    ({"offset": -1, "strides": [5, 1]}, "data.window"),
    ({"offset": 0, "strides": [5, -1]}, "data.window"),
    ({"offset": 0, "strides": [5, True]}, "data.window"),
    ({"offset": 0}, "data.window"),
    ([0, [5, 1]], "data.window"),
])
def test_a_window_outside_its_stored_tensor_is_one_line_naming_the_file(tmp_path, window, problem):
    _one_window(tmp_path / "d", _STORED, _STORED[0, :2])
    lines = _index_lines(tmp_path / "d")
    lines[1]["data"]["window"] = window
    _write_index(tmp_path / "d", lines)
    _refused_in_one_line(tmp_path / "d", problem)


def test_a_window_with_axes_or_another_dtype_is_refused(tmp_path):
    _one_window(tmp_path / "d", _STORED, _STORED[0, :2])
    lines = _index_lines(tmp_path / "d")
    lines[1]["data"]["axes"] = [0, 1]
    _write_index(tmp_path / "d", lines)
    with pytest.raises(DumpError, match="exclude each other"):
        opdiff.load(tmp_path / "d")
    del lines[1]["data"]["axes"]
    lines[1]["dtype"] = "int32"
    _write_index(tmp_path / "d", lines)
    d = opdiff.load(tmp_path / "d")
    with pytest.raises(DumpError, match="out of bounds"):
        d.tensor(d.records[1])
    base, rec = d.records[0], replace(d.records[1], dtype="float32")
    with DumpWriter(tmp_path / "e", {"model": "m"}) as w:  # the writer refuses what the reader would refuse
        w.begin(0, 0)
        w.add(base, _STORED)
        with pytest.raises(ValueError, match="cannot read"):
            w.add(rec, None, same_data_as=base, window=(116, (1, 1)))


def test_a_wrong_hash_through_a_window_is_refused(tmp_path):
    _one_window(tmp_path / "d", _STORED, _STORED[..., 1], hsh="xxh3:0123456789abcdef")
    d = opdiff.load(tmp_path / "d")
    with pytest.raises(DumpError, match="does not match its recorded hash"):
        d.tensor(d.records[1])


def test_damage_flags_exactly_the_windows_reading_the_damaged_bytes(tmp_path):
    """GPT-2 api: the first element of layer 0's c_attn output damaged flags that record and the records reading
    element 0 (q: the split's first output, its view and transpose), not k and v, windows of the same bytes."""
    model, inputs = build("gpt2")
    _capture(model.eval(), inputs, tmp_path / "g", "api", True)
    shutil.copytree(tmp_path / "g", tmp_path / "t")
    key = "transformer.h.0.attn.c_attn/torch.addmm#0/forward/output/0"
    _damage(tmp_path / "t", key)
    t = opdiff.load(tmp_path / "t")
    on_key = [r for r in t if r.data is not None and r.data["key"] == key]
    readers = {r.name for r in on_key if r.data.get("window", {}).get("offset", 0) == 0}
    spared = {r.name for r in on_key} - readers
    assert len(spared) >= 4 and any("window" in t[n].data for n in readers)
    cmp = compare(opdiff.load(tmp_path / "g"), t)
    bad = {p.name for p in cmp.results if p.status == "error"}
    assert bad == readers
    assert all(p.result == "PASS" for p in cmp.results if p.name not in readers)


class _Rewritten(torch.nn.Module):
    """A linear output written in place through `.data` (an alias with its own version counter) and then split:
    the splits are no longer windows of the recorded linear output's bytes."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(24, 36)
        self.seen: list[np.ndarray] = []

    def forward(self, x):
        y = self.lin(x)
        y.data.mul_(-2)
        parts = y.split(12, dim=-1)
        self.seen = [to_np(p) for p in parts]
        return torch.cat([p.transpose(0, 1) for p in parts])


@pytest.mark.parametrize("exclude", [None, r"mul_"])
def test_bytes_written_through_an_alias_are_not_read_as_a_window(tmp_path, exclude):
    torch.manual_seed(0)
    model, x = _Rewritten(), torch.randn(5, 24)
    with torch.no_grad(), opdiff.capture(model, tmp_path / "d", level="api", mode="tensor", exclude=exclude):
        model(x)
    d = opdiff.load(tmp_path / "d")
    parts = sorted((r for r in d if r.op == "torch.Tensor.split" and r.role == "output"), key=lambda r: r.pos)
    assert len(parts) == 3
    for rec, want in zip(parts, model.seen):
        assert same_bits(d.tensor(rec), want) and rec.hash == content_hash(want, "float32", want.shape)
        stored = d[rec.data["key"]]
        assert "window" not in rec.data or "linear" not in stored.op  # never the linear output's old bytes
    if not exclude:  # the recorded mul_ output holds the new bytes: the splits read windows of it
        assert all("window" in r.data and d[r.data["key"]].op.endswith("mul_") for r in parts[1:])


def test_a_long_part_keeps_windows_whatever_index_it_is_read_from(tmp_path):
    d = _long_part(tmp_path / "d", _LONG[:, 1:3].copy(), window=(1, (4, 1)))
    assert d.records[-1].data["window"] == {"offset": 1, "strides": [4, 1]}


def test_convert_and_replay_read_windows_as_their_own_values(tmp_path):
    model, inputs = build("gpt2")
    _capture(model.eval(), inputs, tmp_path / "d", "api", True)
    convert(tmp_path / "d", tmp_path / "e")  # every record stored with its own bytes
    d, e = opdiff.load(tmp_path / "d"), opdiff.load(tmp_path / "e")
    windows = _windows(d)
    assert windows and not _windows(e)
    for a in windows:
        assert same_bits(e.tensor(e[a.name]), d.tensor(a)) and (e[a.name].hash, e[a.name].stats) == (a.hash, a.stats)
    node = next(r.node for r in windows if r.op == "torch.Tensor.transpose" and r.direction == "forward")
    res = replay(d, d, node)  # a transpose whose input and output are both windows of c_attn's output
    assert res.status == "ok" and res.outputs and all(o["replay_vs_target"]["MaxAbsErr"] == 0.0 for o in res.outputs)
