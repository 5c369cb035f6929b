"""The capture's cheap per-record paths give exactly what the general ones give: statistics read by address in
one kernel call, Stats.to_json by hand, index lines written without a writer thread in stats mode."""

from __future__ import annotations

import dataclasses
import json
import math
import threading

import numpy as np
import pytest
import torch

import opdiff
from capture_helpers import build
from opdiff.base.record import Stats
from opdiff.capture import stats_kernel as K
from opdiff.capture.torch.tensors import host_contiguous, stats_of, transposed_matrix
from opdiff.store.format import numpy_dtype
from opdiff.store.stats import tensor_stats
from opdiff.store.writer import dumps_line

DTYPES = ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32", "int16",
          "int8", "uint8", "uint16", "uint32", "uint64", "bool"]


def _array(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.standard_normal(n) * 100
    if name == "bool":
        return a > 0
    if "int" in name:
        a = np.abs(a) if name.startswith("u") else a
    a = a.astype(numpy_dtype(name))
    if name in K._FLOAT_BITS and n > 5:
        a[1], a[4] = np.nan, -a[4]
        if name != "float8_e4m3fn":  # no inf in e4m3fn
            a[3] = np.inf
    return a


def _threaded_path(a: np.ndarray, name: str) -> tuple[float, float, float]:
    """sum, finite count, zeros by the chunked (threaded) path that large tensors take."""
    x, bits, table = a, None, None
    if name in K._FLOAT_BITS:
        bits_type, code_type = K._FLOAT_BITS[name]
        bits = a.view(bits_type)
        if code_type is not None:
            x, table = a.view(code_type), K._table(name)
    elif name == "bool":
        x = a.view(np.uint8)
    o, _, _ = K._run(x, bits, table)
    return o[0], o[2], o[6]


@pytest.mark.parametrize("name", DTYPES)
def test_stats_by_address_equal_the_chunked_path_and_the_reference(name):
    rng = np.random.default_rng(7)
    for n in (1, 6, 1000, K.CHUNK, K.CHUNK + 3, 3 * K.CHUNK + 5, K.SMALL - 1):
        a = _array(name, n, rng)
        got = K.stats_at(a.ctypes.data, n, name)
        assert got == K.array_stats(a, name)
        s1, fin, zeros = _threaded_path(a, name)
        assert (got.zeros, got.numel - got.nan - got.posinf - got.neginf) == (zeros, fin)
        if fin:
            assert got.mean == s1 / fin  # the same sums in the same order: bit for bit
        ref = tensor_stats(a)
        assert (got.min, got.max, got.nan, got.posinf, got.neginf) == (ref.min, ref.max, ref.nan, ref.posinf, ref.neginf)
        if ref.norm:
            assert got.norm == pytest.approx(ref.norm, rel=1e-12)


def _key_extremes(a: np.ndarray, name: str) -> tuple[float, float]:
    """min and max by the definition the kernel keeps: float bits ordered as integers with the magnitude bits
    of negatives flipped (so -0.0 < +0.0), over the finite elements."""
    bits = a.view(K._FLOAT_BITS[name][0]).astype(np.int64)
    width = a.dtype.itemsize * 8
    keys = np.where(bits < 0, bits ^ ((1 << (width - 1)) - 1), bits)
    finite = np.isfinite(a.astype(np.float64))
    lo, hi = np.argmin(np.where(finite, keys, np.iinfo(np.int64).max)), np.argmax(np.where(finite, keys, -1 << 62))
    return float(a[lo].astype(np.float64)), float(a[hi].astype(np.float64))


@pytest.mark.parametrize("name", [n for n in DTYPES if n in K._FLOAT_BITS])
@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zeros", "-zeros", "signed zeros", "-0 and positive"])
def test_float_extremes_are_the_key_order_whatever_the_signs(name, kind):
    """The fast pass takes min/max from three integer reductions of the bits (signed min, signed max, unsigned
    max) instead of one key per element: the same element, down to the sign of a zero, as the key order."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 1000, K.CHUNK + 3, K.SMALL + 11):
        a = rng.standard_normal(n) * 4
        a = {"positive": np.abs(a) + 0.25, "negative": -np.abs(a) - 0.25, "zeros": np.zeros(n), "-zeros": -np.zeros(n),
             "signed zeros": np.where(np.arange(n) % 2 == 0, -0.0, 0.0), "-0 and positive": np.abs(a)}.get(kind, a)
        if kind == "-0 and positive":
            a[::3] = -0.0
        a = a.astype(numpy_dtype(name))
        want = _key_extremes(a, name)
        for got in (K.array_stats(a, name), K.stats_at(a.ctypes.data, n, name) if n < K.SMALL else None):
            if got is not None:
                assert (got.min, got.max) == want
                assert (math.copysign(1, got.min), math.copysign(1, got.max)) == tuple(math.copysign(1, w) for w in want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool])
def test_a_transposed_matrix_is_made_row_major_bit_for_bit(dtype):
    """A transposed weight (what aten hands mm/addmm for a Linear) is copied by a tiled transpose: the same bits
    as torch's own strided copy, for every width, square or not, sizes not a multiple of the tile."""
    torch.manual_seed(0)
    for shape in ((700, 129), (129, 700), (300, 300), (1030, 65)):
        w = (torch.randn(shape) * 10).to(dtype)
        t = w.t()
        assert transposed_matrix(t)
        h = host_contiguous(t)
        assert h.is_contiguous() and h.shape == t.shape and h.dtype == dtype
        assert torch.equal(h.view(torch.uint8), t.contiguous().view(torch.uint8))
    assert not transposed_matrix(torch.randn(300, 300).t()[1:])  # a slice: another layout, torch's copy
    neg = torch.randn(300, 300)._neg_view().t()  # a view with its negative bit still to resolve: torch's copy
    assert not transposed_matrix(neg) and torch.equal(host_contiguous(neg), neg.contiguous())


def test_a_linear_weight_captured_at_aten_level_reads_back_transposed(tmp_path):
    """mm/addmm's transposed weight input is stored row-major in the record's own shape."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 300)
    x = torch.randn(4, 256)
    with torch.no_grad(), opdiff.capture(lin, tmp_path / "d", level="aten", mode="tensor"):
        out = lin(x)
    assert torch.equal(out, torch.nn.functional.linear(x, lin.weight, lin.bias))
    d = opdiff.load(tmp_path / "d")
    weights = [r for r in d if r.role == "input" and tuple(r.shape) == (256, 300)]
    assert weights
    for r in weights:
        assert np.array_equal(d.tensor(r), lin.weight.detach().t().numpy())


def test_torch_tensors_read_by_address_whatever_their_layout():
    base = torch.randn(96, 130)
    base[3, 5] = float("nan")
    for t in (base, base.t(), base[:, 2:50], base[::2], torch.nn.Parameter(base.clone()), base.to(torch.bfloat16).t(),
              base[5], torch.tensor(3.5)):
        ref = tensor_stats(t.detach().contiguous().float().numpy() if t.dtype == torch.bfloat16 else
                           t.detach().contiguous().numpy())
        got = stats_of(t, "bfloat16" if t.dtype == torch.bfloat16 else "float32")
        assert (got.numel, got.min, got.max, got.nan) == (ref.numel, ref.min, ref.max, ref.nan)
        assert got.norm == pytest.approx(ref.norm, rel=1e-12)


def test_stats_to_json_is_every_field():
    s = Stats(numel=5, min=-1.5, max=2.0, mean=0.25, std=1.0, norm=3.0, nan=1, posinf=2, neginf=0, zeros=1)
    assert s.to_json() == dataclasses.asdict(s)
    assert list(s.to_json()) == [f.name for f in dataclasses.fields(Stats)]


def test_a_stats_capture_writes_without_a_thread_and_a_tensor_capture_with_one(tmp_path):
    model, inputs = build("gpt2")
    seen = {}
    for mode in ("stats", "tensor"):
        with opdiff.capture(model, tmp_path / mode, level="module", mode=mode) as cap:
            model(**inputs)
            cap.writer.flush()
            seen[mode] = any(t.name == "opdiff-writer" for t in threading.enumerate())
        assert opdiff.load(tmp_path / mode).complete
    assert seen == {"stats": False, "tensor": True}
    a, b = opdiff.load(tmp_path / "stats"), opdiff.load(tmp_path / "tensor")
    assert [r.name for r in a] == [r.name for r in b] and all(x.stats == y.stats for x, y in zip(a, b))


@pytest.mark.parametrize("obj", [
    {"a": 1, "b": [1.5, -0.0, 1e-300, 3.0e300], "c": "ümlaut \" \\ \n", "d": None, "e": True},
    {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "t": (1, 2), "np": np.float64(0.1), "i": np.int64(3).item()},
    {"nested": {"x": [{"y": []}, {}], "k": "v"}},
])
def test_index_lines_are_json_dumps_text(obj):
    assert dumps_line(obj) == json.dumps(obj, separators=(",", ":"))


def test_an_unwritable_value_in_a_line_is_the_same_type_error():
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_line({"x": object()})
