"""opdiff's shards are safetensors files: every dtype the format stores opens with safetensors.safe_open."""

from __future__ import annotations

import numpy as np
import pytest

from opdiff.store.format import DTYPES, numpy_dtype
from opdiff.store.writer import write_safetensors

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")

_TORCH = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int64": torch.int64,
          "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint64": torch.uint64,
          "uint32": torch.uint32, "uint16": torch.uint16, "uint8": torch.uint8, "bool": torch.bool}


def _sample(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(len(dtype))
    values = rng.standard_normal(shape) * 8
    if dtype == "bool":
        return values > 0
    return values.astype(numpy_dtype(dtype))


def test_every_dtype_round_trips_through_safe_open(tmp_path):
    assert set(_TORCH) == set(DTYPES), "a dtype of the format has no round-trip check"
    items = [(f"t.{name}", name, _sample(name, (3, 5))) for name in DTYPES] + [("scalar", "float32", _sample("float32", ()))]
    path = tmp_path / "shard.safetensors"
    write_safetensors(path, items)
    with safetensors.safe_open(str(path), framework="pt") as f:
        assert sorted(f.keys()) == sorted(k for k, _, _ in items)
        for key, name, arr in items:
            t = f.get_tensor(key)
            assert t.dtype == _TORCH[name] and tuple(t.shape) == (arr.shape or (1,)), key  # a scalar is stored as [1]
            got = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
            assert got == np.ascontiguousarray(arr).tobytes(), key
