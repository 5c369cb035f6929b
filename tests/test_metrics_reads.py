"""Tensor data read from files: small tensors by one pread, big ones through a bounded set of maps;
both give the metrics of the arrays themselves, and a cut-off file makes its pair N/A with one line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opdiff.metrics import tensor as T
from opdiff.metrics.tensor import TensorDataError, TensorSource, Workspace, pair_metrics, tensor_metrics


def _write(path, arr: np.ndarray, pad: int = 64) -> TensorSource:
    """The array's bytes at byte `pad` of a file, as a file source."""
    path.write_bytes(b"\0" * pad + arr.tobytes() + b"\0" * 16)
    return TensorSource(dtype=str(arr.dtype), shape=arr.shape, path=path, offset=pad, label=path.name)


def _pairs(tmp_path, dtype, n: int = 5):
    rng = np.random.default_rng(1)
    for i in range(n):
        g = (100 * rng.standard_normal(1000 + 37 * i)).astype(dtype)
        t = (g.astype(np.float64) * (1 + 1e-3 * rng.standard_normal(g.size))).astype(dtype)
        if i % 2 and np.issubdtype(dtype, np.floating):
            t[i] = np.nan
        yield g, t, _write(tmp_path / f"g{i}", g), _write(tmp_path / f"t{i}", t)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32])
def test_small_reads_and_maps_give_the_arrays_metrics(tmp_path, monkeypatch, dtype):
    pairs = list(_pairs(tmp_path, dtype))
    with Workspace() as ws:
        small = [pair_metrics(gs, ts, ws) for _, _, gs, ts in pairs]
        assert not ws._maps  # every tensor here is small: nothing mapped
    monkeypatch.setattr(T, "SMALL_READ", 0)
    with Workspace() as ws:
        mapped = [pair_metrics(gs, ts, ws) for _, _, gs, ts in pairs]
        assert len(ws._maps) == 2 * len(pairs)
    for (g, t, _, _), a, b in zip(pairs, small, mapped):
        assert a == b == tensor_metrics(g, t)


def test_maps_are_bounded(tmp_path, monkeypatch):
    """A workspace keeps at most OPEN_MAPS files mapped (a process may hold only so many maps)."""
    monkeypatch.setattr(T, "SMALL_READ", 0)
    monkeypatch.setattr(T, "OPEN_MAPS", 3)
    pairs = list(_pairs(tmp_path, np.float32, n=6))
    with Workspace() as ws:
        for g, t, gs, ts in pairs:
            assert pair_metrics(gs, ts, ws) == tensor_metrics(g, t)
            assert len(ws._maps) <= 3


@pytest.mark.parametrize("small", [True, False])
def test_cut_off_file_is_one_line_error(tmp_path, monkeypatch, small):
    if not small:
        monkeypatch.setattr(T, "SMALL_READ", 0)
    g = np.arange(500, dtype=np.float32)
    gs, ts = _write(tmp_path / "g", g), _write(tmp_path / "t", g)
    (tmp_path / "t").write_bytes((tmp_path / "t").read_bytes()[:1000])
    with pytest.raises(TensorDataError, match="truncated") as exc:
        pair_metrics(gs, ts)
    assert "\n" not in str(exc.value) and str(tmp_path / "t") in str(exc.value)
    (tmp_path / "t").unlink()
    with pytest.raises(TensorDataError) as exc:
        pair_metrics(gs, ts)
    assert "\n" not in str(exc.value) and str(tmp_path / "t") in str(exc.value)


def test_half_to_float_is_bit_exact_on_every_half():
    """All 65,536 float16 bit patterns (subnormals, inf, nan payloads, -0) convert as numpy converts them."""
    from opdiff.metrics import kernel as K

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(bits.size, dtype=np.float32)
    K.half_to_float(bits, out)
    assert np.array_equal(out.view(np.uint32), bits.view(np.float16).astype(np.float32).view(np.uint32))


def test_float16_pairs_equal_their_float32_upcast(tmp_path):
    """fp16 pairs through the kernel's own half conversion give the metrics of the fp32 arrays."""
    rng = np.random.default_rng(5)
    g = (rng.standard_normal(5000) * 1e-5).astype(np.float16)  # many subnormals
    t = (g.astype(np.float32) * np.float32(1.01)).astype(np.float16)
    t[7], g[9] = np.inf, np.nan
    gs, ts = _write(tmp_path / "g", g), _write(tmp_path / "t", t)
    assert pair_metrics(gs, ts) == tensor_metrics(g, t) == tensor_metrics(g.astype(np.float32), t.astype(np.float32))
