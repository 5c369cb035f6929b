"""Ascend GE dumps for the tests, written with the protobuf library from the public DumpData schema.

There is no NPU here: small models run in PyTorch (a CNN and a transformer MLP block, seeded, CPU),
every op's inputs and outputs are kept, and `write_ge_dump` writes them as the NPU's graph engine
would — one `{OpType}.{op_name}.{task}.{stream}.{timestamp}` file per executed op, tensors in device
formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ), some ops fused (conv+bn+relu, matmul+bias+gelu) — with
the graph JSON that says which original ops each fused op replaced. `write_tf_golden` writes the
golden as precision_tool writes a TensorFlow run: `{op_name}.{slot}.{timestamp}.npy`.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..store.device_formats import from_logical
from ..store.readers.ge_file import DTYPES
from ..store.readers.ge_graph import ORIGIN_INDEX, ORIGIN_NAME, ORIGINAL_NAMES
from ..store.readers.ge_proto import DATA_TYPE_NUMBER, FORMAT_NUMBER, DumpData

T0 = 1_700_000_000_000_000  # µs: timestamps of the first op
_NP_TO_DT = {np.dtype(np.float32): "DT_FLOAT", np.dtype(np.float16): "DT_FLOAT16", np.dtype(np.int32): "DT_INT32",
             np.dtype(np.int64): "DT_INT64", np.dtype(np.float64): "DT_DOUBLE"}


@dataclass
class Tensor:
    """One logical tensor and the layout the NPU keeps it in."""

    value: np.ndarray
    format: str = "ND"  # device format
    origin_format: str = "ND"


@dataclass
class Op:
    """One op of a run: an original op (golden) or an executed, maybe fused, NPU op."""

    name: str
    type: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    original: list[str] = field(default_factory=list)  # the original ops it stands for ([] = itself)
    origins: list[tuple[str, int]] = field(default_factory=list)  # per output: (original op, output index)


def fold(name: str) -> str:
    return name.replace("/", "_").replace(".", "_")


def data_type(arr: np.ndarray) -> str:
    if arr.dtype.name == "bfloat16":
        return "DT_BF16"
    return _NP_TO_DT[arr.dtype]


def _fill(msg: object, t: Tensor, dev: np.ndarray | None = None) -> bytes:
    """Fill an OpInput / OpOutput for tensor `t` (held as `dev` on the device: its whole layout by default);
    returns its device bytes."""
    dev = from_logical(t.value, t.format, t.origin_format) if dev is None else dev
    msg.data_type = DATA_TYPE_NUMBER[data_type(t.value)]  # type: ignore[attr-defined]
    msg.format = FORMAT_NUMBER[t.format]  # type: ignore[attr-defined]
    msg.shape.dim.extend(dev.shape)  # type: ignore[attr-defined]
    msg.original_shape.dim.extend(t.value.shape)  # type: ignore[attr-defined]
    data = dev.astype(dev.dtype.newbyteorder("<")).tobytes()
    msg.size = len(data)  # type: ignore[attr-defined]
    return data


def ge_file_bytes(op: Op, dump_time: int) -> bytes:
    """One GE dump file: header length, DumpData, then the inputs' and outputs' bytes."""
    d = DumpData(version="2.0", dump_time=dump_time, op_name=op.name)
    blobs = [_fill(d.input.add(), t) for t in op.inputs]
    for i, t in enumerate(op.outputs):
        o = d.output.add()
        blobs.append(_fill(o, t))
        name, idx = op.origins[i] if i < len(op.origins) else (op.name, i)
        o.original_op.name, o.original_op.output_index = name, idx
        o.original_op.data_type = o.data_type
        o.original_op.format = FORMAT_NUMBER[t.origin_format]
    head = d.SerializeToString()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def write_ffts_slices(leaf: Path, op: Op, threads: int, axis: int, *, ts: int = T0, task: int = 2,
                      keep: int | None = None) -> list[Path]:
    """`op` run as FFTS+ threads: one file per thread holding the op's inputs and its slice of every output (the
    device layout cut on `axis`), the JSON attr saying how many and where. `keep`: write only that many (a lost slice)."""
    devs = [from_logical(t.value, t.format, t.origin_format) for t in op.outputs]
    cuts = [[threads if a == axis else 1 for a in range(d.ndim)] for d in devs]
    leaf.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(threads if keep is None else keep):
        d = DumpData(version="2.0", dump_time=ts + k, op_name=op.name)
        d.attr.add(name="ffts", value=json.dumps({"threadMode": 1, "slice_instance_num": threads, "outputCutList": cuts}))
        blobs = [_fill(d.input.add(), t) for t in op.inputs]
        for t, dev in zip(op.outputs, devs):
            o = d.output.add()
            blobs.append(_fill(o, t, np.ascontiguousarray(np.array_split(dev, threads, axis=axis)[k])))
            o.original_op.name, o.original_op.format = op.name, FORMAT_NUMBER[t.origin_format]
        head = d.SerializeToString()
        path = leaf / f"{op.type}.{fold(op.name)}.{task}.1.{ts}.0.{k}.0"
        path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
        paths.append(path)
    return paths


def write_ge_dump(root: Path, ops: list[Op], *, device: int = 0, iteration: int = 0, t0: int = T0,
                  graph: bool | str = True, model: str = "ge_default") -> Path:
    """The NPU dump of one run under `root/{time}/{device}/{model}/1/{iteration}/`, and its graph in root: JSON
    (`graph=True` or "json", as Ascend's convert writes it) or GE's text-format dump (`graph="text"`)."""
    leaf = root / "20260101000000" / str(device) / model / "1" / str(iteration)
    leaf.mkdir(parents=True, exist_ok=True)
    for k, op in enumerate(ops):
        ts = t0 + 1000 * k
        (leaf / f"{op.type}.{fold(op.name)}.{k + 2}.{1}.{ts}").write_bytes(ge_file_bytes(op, ts))
    if graph == "text":
        write_graph_text(root / f"ge_proto_00000001_{model}_Build.txt", ops, model)
    elif graph:
        write_graph_json(root / f"{model}_graph.json", ops, model)
    return root


def write_graph_text(path: Path, ops: list[Op], model: str = "ge_default") -> Path:
    """The executed graph as GE's own graph dump writes it (ModelDef in protobuf text format)."""
    lines = ["graph {", f'  name: "{model}"']
    for op in ops:
        lines += ["  op {", f'    name: "{op.name}"', f'    type: "{op.type}"', "    attr {",
                  f'      key: "{ORIGINAL_NAMES}"', "      value {", "        list {",
                  *[f'          s: "{n}"' for n in (op.original or [op.name])], "        }", "      }", "    }"]
        for i in range(len(op.outputs)):
            name, idx = op.origins[i] if i < len(op.origins) else (op.name, i)
            lines += ["    output_desc {", "      attr {", f'        key: "{ORIGIN_NAME}"', "        value {",
                      f'          s: "{name}"', "        }", "      }", "      attr {", f'        key: "{ORIGIN_INDEX}"',
                      "        value {", f"          i: {idx}", "        }", "      }", "    }"]
        lines.append("  }")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_graph_json(path: Path, ops: list[Op], model: str = "ge_default") -> Path:
    """The executed graph as Ascend's convert writes it (ModelDef JSON), with the fusion attributes."""
    def op_json(op: Op) -> dict[str, object]:
        outs = []
        for i in range(len(op.outputs)):
            name, idx = op.origins[i] if i < len(op.origins) else (op.name, i)
            outs.append({"attr": [{"key": ORIGIN_NAME, "value": {"s": name}},
                                  {"key": ORIGIN_INDEX, "value": {"i": idx}}]})
        original = op.original or [op.name]
        return {"name": op.name, "type": op.type, "output_desc": outs,
                "attr": [{"key": ORIGINAL_NAMES, "value": {"list": {"s": original}}}]}

    doc = {"name": model, "graph": [{"name": model, "op": [op_json(o) for o in ops]}]}
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def write_tf_golden(root: Path, ops: list[Op], t0: int = 1_600_000_000_000_000) -> Path:
    """The golden as precision_tool writes a TensorFlow run: `{op_name}.{slot}.{timestamp}.npy`, outputs only."""
    root.mkdir(parents=True, exist_ok=True)
    for k, op in enumerate(ops):
        for slot, t in enumerate(op.outputs):
            np.save(root / f"{fold(op.name)}.{slot}.{t0 + 1000 * k}.npy", t.value, allow_pickle=False)
    return root


def fuse(ops: list[Op], groups: dict[str, str]) -> list[Op]:
    """The executed graph after fusion: each run of ops whose first op is a key of `groups` becomes one
    op of type groups[name] (named after its first op) standing for every op up to the next unfused one
    marked by the group's end; see `cnn_run` / `mlp_run` for the groups used."""
    out: list[Op] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        spec = groups.get(op.name)
        if spec is None:
            out.append(Op(op.name, op.type, op.inputs, op.outputs, [op.name], [(op.name, j) for j in range(len(op.outputs))]))
            i += 1
            continue
        fused_type, _, last = spec.partition(":")
        j = next(k for k in range(i, len(ops)) if ops[k].name == last)
        members = ops[i:j + 1]
        out.append(Op(op.name, fused_type, op.inputs, members[-1].outputs, [m.name for m in members],
                      [(members[-1].name, k) for k in range(len(members[-1].outputs))]))
        i = j + 1
    return out


# -- real runs of small PyTorch models ------------------------------------------------------------------

def cnn_run(*, bn2_eps: float = 1e-5, fold_bn: bool = False, seed: int = 0) -> list[Op]:
    """A small CNN (conv-bn-relu x2, max-pool, dense) run in PyTorch; every op's tensors, NCHW on the
    device as NC1HWC0, the conv weights as FRACTAL_Z. `bn2_eps` plants a fault in the second block;
    `fold_bn` computes each block as a fusing engine does (BN folded into the conv's weight and bias,
    relu applied to that), so the block's output differs from the unfused one by rounding only."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 8, 8, generator=g)
    w1, w2 = torch.randn(8, 3, 3, 3, generator=g) * 0.3, torch.randn(12, 8, 3, 3, generator=g) * 0.2
    bn = [(torch.randn(c, generator=g) * 0.1, torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g) * 0.1,
           torch.rand(c, generator=g) + 0.5) for c in (8, 12)]
    wd, bd = torch.randn(12 * 4 * 4, 10, generator=g) * 0.1, torch.randn(10, generator=g) * 0.1
    n = np.asarray
    act = lambda t: Tensor(n(t), "NC1HWC0", "NCHW")
    ops: list[Op] = []
    h = x
    for k, (w, (mean, var, beta, gamma)) in enumerate(zip((w1, w2), bn), start=1):
        c = F.conv2d(h, w, padding=1)
        ops.append(Op(f"cnn/conv{k}/Conv2D", "Conv2D", [act(h), Tensor(n(w), "FRACTAL_Z", "NCHW")], [act(c)]))
        b = F.batch_norm(c, mean, var, gamma, beta, training=False, eps=bn2_eps if k == 2 else 1e-5)
        ops.append(Op(f"cnn/bn{k}/FusedBatchNormV3", "BNInfer", [act(c)], [act(b)]))
        r = torch.relu(b)
        if fold_bn:
            scale = gamma / torch.sqrt(var + (bn2_eps if k == 2 else 1e-5))
            r = torch.relu(F.conv2d(h, w * scale[:, None, None, None], beta - mean * scale, padding=1))
        ops.append(Op(f"cnn/relu{k}/Relu", "Relu", [act(b)], [act(r)]))
        h = r
    p = F.max_pool2d(h, 2)
    ops.append(Op("cnn/pool/MaxPool", "MaxPool", [act(h)], [act(p)]))
    f = p.reshape(2, -1)
    ops.append(Op("cnn/flatten/Reshape", "Reshape", [act(p)], [Tensor(n(f))]))
    m = f @ wd
    ops.append(Op("cnn/dense/MatMul", "MatMul", [Tensor(n(f)), Tensor(n(wd))], [Tensor(n(m))]))
    y = m + bd
    ops.append(Op("cnn/dense/BiasAdd", "BiasAdd", [Tensor(n(m)), Tensor(n(bd))], [Tensor(n(y))]))
    return ops


def cnn_run_tf(*, bn2_eps: float = 1e-3, fold_bn: bool = False, seed: int = 0) -> list[Op]:
    """The same CNN in TensorFlow (eager, CPU), TF's way: activations NHWC (NC1HWC0 on the device), filters
    HWCN (FRACTAL_Z), op names as TF names them; `bn2_eps` and `fold_bn` as in cnn_run."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    x = f32(2, 8, 8, 3)
    filters = [f32(3, 3, 3, 8) * np.float32(0.3), f32(3, 3, 8, 12) * np.float32(0.2)]
    bn = [(f32(c) * 0.1, rng.random(c, np.float32) + 0.5, f32(c) * 0.1, rng.random(c, np.float32) + 0.5) for c in (8, 12)]
    wd, bd = f32(4 * 4 * 12, 10) * np.float32(0.1), f32(10) * np.float32(0.1)
    act = lambda t: Tensor(np.asarray(t), "NC1HWC0", "NHWC")
    ops: list[Op] = []
    h = tf.constant(x)
    for k, (w, (mean, var, beta, gamma)) in enumerate(zip(filters, bn), start=1):
        eps = bn2_eps if k == 2 else 1e-3
        c = tf.nn.conv2d(h, w, 1, "SAME")
        ops.append(Op(f"cnn/conv{k}/Conv2D", "Conv2D", [act(h), Tensor(w, "FRACTAL_Z", "HWCN")], [act(c)]))
        b = tf.nn.batch_normalization(c, mean, var, beta, gamma, eps)
        ops.append(Op(f"cnn/bn{k}/FusedBatchNormV3", "BNInfer", [act(c)], [act(b)]))
        r = tf.nn.relu(b)
        if fold_bn:
            scale = gamma / np.sqrt(var + np.float32(eps))
            r = tf.nn.relu(tf.nn.conv2d(h, w * scale, 1, "SAME") + (beta - mean * scale))
        ops.append(Op(f"cnn/relu{k}/Relu", "Relu", [act(b)], [act(r)]))
        h = r
    p = tf.nn.max_pool2d(h, 2, 2, "VALID")
    ops.append(Op("cnn/pool/MaxPool", "MaxPool", [act(h)], [act(p)]))
    f = tf.reshape(p, (2, -1))
    ops.append(Op("cnn/flatten/Reshape", "Reshape", [act(p)], [Tensor(np.asarray(f))]))
    m = tf.matmul(f, wd)
    ops.append(Op("cnn/dense/MatMul", "MatMul", [Tensor(np.asarray(f)), Tensor(wd)], [Tensor(np.asarray(m))]))
    y = tf.nn.bias_add(m, bd)
    ops.append(Op("cnn/dense/BiasAdd", "BiasAdd", [Tensor(np.asarray(m)), Tensor(bd)], [Tensor(np.asarray(y))]))
    return ops


CNN_FUSION = {"cnn/conv1/Conv2D": "Conv2D:cnn/relu1/Relu", "cnn/conv2/Conv2D": "Conv2D:cnn/relu2/Relu",
              "cnn/dense/MatMul": "MatMulV2:cnn/dense/BiasAdd"}


def mlp_run(*, tanh_gelu: bool = False, seed: int = 0) -> list[Op]:
    """A transformer block's MLP (LayerNorm, dense+bias+GELU, dense+bias, residual add) run in PyTorch;
    activations as FRACTAL_NZ on the device. `tanh_gelu` plants a fault inside the fused matmul+bias+gelu."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 8, 32, generator=g)
    lw, lb = torch.rand(32, generator=g) + 0.5, torch.randn(32, generator=g) * 0.1
    w1, b1 = torch.randn(32, 64, generator=g) * 0.2, torch.randn(64, generator=g) * 0.1
    w2, b2 = torch.randn(64, 32, generator=g) * 0.15, torch.randn(32, generator=g) * 0.1
    n = np.asarray
    nz = lambda t: Tensor(n(t), "FRACTAL_NZ", "ND")
    ops: list[Op] = []
    ln = F.layer_norm(x, (32,), lw, lb)
    ops.append(Op("block/ln/LayerNorm", "LayerNorm", [Tensor(n(x)), Tensor(n(lw)), Tensor(n(lb))], [nz(ln)]))
    m1 = ln @ w1
    ops.append(Op("block/fc1/MatMul", "BatchMatMul", [nz(ln), nz(w1)], [nz(m1)]))
    a1 = m1 + b1
    ops.append(Op("block/fc1/BiasAdd", "BiasAdd", [nz(m1), Tensor(n(b1))], [nz(a1)]))
    gl = F.gelu(a1, approximate="tanh" if tanh_gelu else "none")
    ops.append(Op("block/act/Gelu", "Gelu", [nz(a1)], [nz(gl)]))
    m2 = gl @ w2
    ops.append(Op("block/fc2/MatMul", "BatchMatMul", [nz(gl), nz(w2)], [nz(m2)]))
    a2 = m2 + b2
    ops.append(Op("block/fc2/BiasAdd", "BiasAdd", [nz(m2), Tensor(n(b2))], [nz(a2)]))
    y = x + a2
    ops.append(Op("block/residual/Add", "Add", [Tensor(n(x)), nz(a2)], [Tensor(n(y))]))
    return ops


MLP_FUSION = {"block/fc1/MatMul": "MatMulV2:block/act/Gelu", "block/fc2/MatMul": "MatMulV2:block/fc2/BiasAdd"}

__all__ = ["CNN_FUSION", "DTYPES", "MLP_FUSION", "Op", "Tensor", "cnn_run", "fuse", "ge_file_bytes", "mlp_run",
           "write_ffts_slices", "write_ge_dump", "write_graph_json", "write_graph_text", "write_tf_golden"]


# -- TorchAir: the GE dump of the NPU run and the FX graph's dump of the same model, token by token --------

MLP_GE_NAMES = {"block/ln/LayerNorm": "LayerNorm", "block/fc1/MatMul": "MatMul", "block/fc1/BiasAdd": "Add",
                "block/act/Gelu": "Gelu", "block/fc2/MatMul": "MatMul_1", "block/fc2/BiasAdd": "Add_1",
                "block/residual/Add": "Add_2"}
MLP_FX_NAMES = {"block/ln/LayerNorm": "layer_norm-aten.layer_norm.default", "block/fc1/MatMul": "mm-aten.mm.default",
                "block/fc1/BiasAdd": "add-aten.add.Tensor", "block/act/Gelu": "gelu-aten.gelu.default",
                "block/fc2/MatMul": "mm_1-aten.mm.default", "block/fc2/BiasAdd": "add_1-aten.add.Tensor",
                "block/residual/Add": "add_2-aten.add.Tensor"}


def write_torchair_fx(root: Path, tokens: list[list[Op]], fx_names: dict[str, str], *, rank_dirs: bool = False,
                      t0: int = 20_240_125_031_118_000_000) -> Path:
    """The FX graph's dump: `{token}/0/{fx}.INPUT|OUTPUT.{i}.{ts}.npy` with tokens from 1 (older releases), or
    `worldsize1_rank0/{token}/...` with tokens from 0."""
    for k, ops in enumerate(tokens):
        leaf = root / "worldsize1_rank0" / str(k) if rank_dirs else root / str(k + 1) / "0"
        leaf.mkdir(parents=True, exist_ok=True)
        for j, op in enumerate(ops):
            ts = t0 + 1_000_000 * k + 1000 * j
            for role, ts_list in (("INPUT", op.inputs), ("OUTPUT", op.outputs)):
                for i, t in enumerate(ts_list):
                    np.save(leaf / f"{fx_names[op.name]}.{role}.{i}.{ts}.npy", t.value, allow_pickle=False)
    return root


def write_torchair_ge(root: Path, tokens: list[list[Op]], ge_names: dict[str, str], fx_names: dict[str, str],
                      fusion: dict[str, str] | None = None) -> Path:
    """The NPU run as TorchAir dumps it: `{time}/0/graph_1/1/{token}/` GE files (a fused op named by concatenating
    the graph ops it stands for) and `dynamo_original_graph_*.txt`, whose ops name their FX tensors."""
    for k, ops in enumerate(tokens):
        executed = fuse(ops, fusion) if fusion else fuse(ops, {})
        renamed = [Op("".join(ge_names[n] for n in op.original), op.type, op.inputs, op.outputs, op.original,
                      [(ge_names[op.original[-1]], i) for i in range(len(op.outputs))]) for op in executed]
        write_ge_dump(root, renamed, iteration=k, t0=T0 + 10_000_000 * k, graph=False, model="graph_1")
    lines = []
    for op in tokens[0]:
        lines += ["op {", f'  name: "{ge_names[op.name]}"', f'  type: "{op.type}"']
        for i in range(len(op.outputs)):
            lines += ["  output_desc {", "    attr {", '      key: "_fx_tensor_name"', "      value {",
                      f'        s: "{fx_names[op.name]}.OUTPUT.{i}"', "      }", "    }", "  }"]
        lines.append("}")
    (root / "dynamo_original_graph_graph_1_rank_0_pid_1_ts_1700000000.txt").write_text("\n".join(lines) + "\n")
    return root
