"""NumPy-directory dumps of a tiny numpy model, named as msaccucmp and precision_tool name theirs.

The model (MatMul, BiasAdd, Gelu, MatMul, Softmax) runs in float32 numpy; `tanh_gelu=True` swaps the
exact GELU for the tanh form, the fault the tests expect diagnose to name. Two layouts:

- `write_msaccucmp(dir, ...)`: `{OpType}.{op_name}.{task_id}.{timestamp}.{input|output}.{index}.npy`,
  every op's inputs and outputs (what msaccucmp's convert writes for NPU dump data);
- `write_precision_tool_tf(root, ...)`: `root/precision_data/tf/dump/{op_name}.{slot}.{timestamp}.npy`,
  outputs only (what precision_tool's tfdbg step writes for the TensorFlow golden).

Files are written in a shuffled order with run-specific timestamps (`t0`), so the reader's ordering is tested.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

OpRecord = tuple[str, str, list[np.ndarray], np.ndarray]  # (OpType, op_name, inputs, output)


def _gelu(x: np.ndarray, tanh: bool) -> np.ndarray:
    x64 = x.astype(np.float64)
    if tanh:
        y = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    return y.astype(np.float32)


def run_model(seed: int = 0, tanh_gelu: bool = False) -> list[OpRecord]:
    """The ops of one forward pass in execution order: (OpType, op_name, inputs, output)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 16), dtype=np.float32)
    w1 = rng.standard_normal((16, 32), dtype=np.float32) * np.float32(0.5)
    b1 = rng.standard_normal(32, dtype=np.float32)
    w2 = rng.standard_normal((32, 8), dtype=np.float32) * np.float32(0.3)
    ops: list[OpRecord] = []
    h = x @ w1
    ops.append(("MatMul", "dense_MatMul", [x, w1], h))
    hb = h + b1
    ops.append(("BiasAdd", "dense_BiasAdd", [h, b1], hb))
    g = _gelu(hb, tanh_gelu)
    ops.append(("Gelu", "dense_Gelu", [hb], g))
    z = g @ w2
    ops.append(("MatMul", "logits_MatMul", [g, w2], z))
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    ops.append(("Softmax", "probs_Softmax", [z], (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)))
    return ops


def _write_shuffled(files: list[tuple[Path, np.ndarray]], seed: int) -> list[Path]:
    order = np.random.default_rng(seed + 100).permutation(len(files))
    for i in order:
        path, arr = files[i]
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, arr, allow_pickle=False)
    return [p for p, _ in files]


def write_msaccucmp(out: Path, ops: list[OpRecord], t0: int = 1_700_000_000_000_000, task0: int = 3) -> list[Path]:
    """Every op's inputs and outputs in msaccucmp's names under `out`."""
    files: list[tuple[Path, np.ndarray]] = []
    for k, (op_type, name, inputs, output) in enumerate(ops):
        stem = f"{op_type}.{name}.{task0 + 2 * k}.{t0 + 137 * k}"
        files += [(out / f"{stem}.input.{i}.npy", a) for i, a in enumerate(inputs)]
        files.append((out / f"{stem}.output.0.npy", output))
    return _write_shuffled(files, t0 % 97)


def write_precision_tool_tf(root: Path, ops: list[OpRecord], t0: int = 1_600_000_000_000_000) -> Path:
    """Every op's output as precision_tool's TF dump step names it; returns `root/precision_data/tf/dump`."""
    dump = root / "precision_data" / "tf" / "dump"
    _write_shuffled([(dump / f"{name}.0.{t0 + 211 * k}.npy", output) for k, (_, name, _, output) in enumerate(ops)],
                    t0 % 89)
    return dump
