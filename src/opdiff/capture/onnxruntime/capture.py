"""capture_onnx(): record every node output of the graph ONNX Runtime really runs, without changing it.

1. build the session the user asked for (optimization level, optimizers off, session config) and
   save the graph it optimized to (`optimized_model_filepath`); note which transformers fired;
2. run that session unobserved: the reference outputs;
3. expose every node output of the optimized graph as a graph output and run it with optimization
   off, so that what runs is the optimized graph itself and not a re-optimized observed one;
4. check the model outputs of the observed run are bitwise equal to the reference ones (meta says);
5. write one record per node input/output (level "graph"), with provenance: the original nodes each
   fused node stands for, and the tensor names both runs share (docs/fusion.md).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ...base.errors import OpdiffError
from ...base.record import Record
from ...base.vocab import GRAPH_VALUE, PROVENANCE_KEY
from ...store.format import NUMPY_TO_NAME, node_name, record_name
from ...store.stats import content_hash
from ...store.writer import DumpWriter
from ..options import Options
from ..stats_kernel import array_stats
from . import session as S
from .export import MODULES_KEY, WRAPPED
from .graph import GNode, is_rewritten, ordered_nodes, provenance
from .inputs import check_feeds, load_npz
from .modules import UNKNOWN_OP, boundaries, events, name_modules, read_signatures
from .params import read_parameters
from .relocate import relocate

ROOT_OP = "Graph"
OPTIMIZED_FILE = "optimized.onnx"


def load_model(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The model proto and how to name it in messages; a bad file is a one-line OpdiffError."""
    if isinstance(model, onnx.ModelProto):
        return model, "model"
    p = Path(model)
    if not p.is_file():
        raise OpdiffError(f"{p}: ONNX model not found")
    try:
        return onnx.load(str(p)), str(p)
    except Exception as exc:  # protobuf's DecodeError and onnx's own errors
        raise OpdiffError(f"{p}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None


def _observed(optimized: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The optimized graph with every node output also a graph output (nothing else changed)."""
    m = onnx.ModelProto()
    m.CopyFrom(optimized)
    have = {o.name for o in m.graph.output}
    added = []
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
                added.append(o)
    return m, added


def _run(sess: ort.InferenceSession, feeds: dict, where: str) -> dict[str, np.ndarray]:
    try:
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds)))
    except Exception as exc:  # ORT's errors for wrong input dtype/shape
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OpdiffError(f"{where}: onnxruntime could not run the model on these inputs: {first}") from None


def original_names(nodes: list[GNode]) -> dict[str, tuple[str, int]]:
    """ONNX node name -> (record node name, call) in the original (unoptimized) graph."""
    counts: dict[tuple[str, str], int] = {}
    out = {}
    for n in nodes:
        k = counts.get((n.module, n.op), 0)
        counts[(n.module, n.op)] = k + 1
        out[n.name] = (node_name(n.module, n.op, k), k)
    return out


def optimized_names(nodes: list[GNode], original: list[GNode]) -> dict[str, tuple[str, int]]:
    """ONNX node name -> (record node name, call): an unchanged original node keeps its original name,
    a fused or new node counts on after the original graph's calls of its (module, op)."""
    orig = original_names(original)
    counts: dict[tuple[str, str], int] = {}
    for n in original:
        counts[(n.module, n.op)] = counts.get((n.module, n.op), 0) + 1
    out = {}
    for n in nodes:
        if n.name in orig and not is_rewritten(n):
            out[n.name] = orig[n.name]
            continue
        k = counts.get((n.module, n.op), 0)
        counts[(n.module, n.op)] = k + 1
        out[n.name] = (node_name(n.module, n.op, k), k)
    return out


class _Writer:
    """Adds records for arrays by tensor name, reusing the first record of a tensor for later uses."""

    def __init__(self, writer: DumpWriter, mode: str):
        self.w, self.mode = writer, mode
        self.first: dict[str, Record] = {}
        self.skipped = 0

    def add(self, arr: np.ndarray, *, node: tuple[str, int], module: str, op: str, role: str, pos: int | str, tensor: str,
            key: str | None, extra: dict[str, Any] | None = None, level: str = "graph") -> Record | None:
        dtype = NUMPY_TO_NAME.get(np.dtype(arr.dtype)) if isinstance(arr, np.ndarray) else None
        if dtype is None:
            self.skipped += 1
            return None
        rec = Record(index=0, name=record_name(node[0], "forward", role, str(pos)), node=node[0], module=module, op=op,
                     level=level, call=node[1], direction="forward", role=role, pos=str(pos),
                     dtype=dtype, shape=tuple(int(s) for s in arr.shape),
                     extra={"tensor": tensor, **({GRAPH_VALUE: key} if key is not None else {}), **(extra or {})})
        prev = self.first.get(tensor)
        if prev is not None:
            rec.stats, rec.hash, rec.src = prev.stats, prev.hash, prev.name
            self.w.add(rec, None, same_data_as=prev if self.mode == "tensor" else None)
            return rec
        arr = np.ascontiguousarray(arr)
        rec.stats = array_stats(arr, dtype)
        rec.hash = content_hash(arr, dtype, rec.shape)
        self.first[tensor] = rec
        self.w.add(rec, arr.copy() if self.mode == "tensor" else None)
        return rec


def capture_onnx(model: str | os.PathLike | onnx.ModelProto, inputs: dict[str, np.ndarray] | str | os.PathLike,
                 path: str | os.PathLike, *, opt_level: str = "all", disabled_optimizers: list[str] | tuple = (),
                 session_config: dict[str, str] | None = None, providers: tuple[str, ...] = ("CPUExecutionProvider",),
                 threads: int = 0, mode: str = "tensor", level: str = "graph", overwrite: bool = False) -> dict[str, Any]:
    """Capture one ONNX Runtime run of `model` on `inputs` (dict or .npz path) into a dump at `path`.

    Returns the dump's meta. The run is the one a plain session with these settings performs: the
    outputs are checked bitwise against an unobserved session (meta["observation"]).
    level: "graph" (every node's inputs and outputs) or "module" (the inputs and outputs of each
    PyTorch module the exporter recorded, named like opdiff's torch capture: modules.py).
    """
    Options.parse("capture-onnx", "onnxruntime", level=level, mode=mode, modes=("tensor", "stats"))
    settings = S.Settings(opt_level, tuple(disabled_optimizers), dict(session_config or {}), tuple(providers), threads)
    proto, where = load_model(model)
    feeds_in = load_npz(inputs) if isinstance(inputs, (str, os.PathLike)) else dict(inputs)
    inits = {i.name for i in proto.graph.initializer}
    feeds = check_feeds(feeds_in, [i.name for i in proto.graph.input], inits, where)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="opdiff-ort-") as tmp:
        opt_path = os.path.join(tmp, OPTIMIZED_FILE)
        sess, fired = S.build(proto.SerializeToString(), settings, save_to=opt_path, log=True)
        reference = _run(sess, feeds, where)
        optimized = onnx.load(opt_path)
    del sess
    observed, added = _observed(optimized)
    obs_sess, _ = S.build(observed.SerializeToString(), settings, level="disable")
    values = _run(obs_sess, feeds, where)
    changed = [n for n, a in reference.items() if not _bitwise_equal(a, values.get(n))]
    original = ordered_nodes(proto.graph)
    nodes = ordered_nodes(optimized.graph)
    sigs = read_signatures(proto, MODULES_KEY)
    name_modules(original, sigs)
    name_modules(nodes, sigs)
    provenance(nodes, original)
    orig_names = {k: v[0] for k, v in original_names(original).items()}
    names = optimized_names(nodes, original)
    meta = {"framework": "onnxruntime", "framework_version": ort.__version__, "capture_backend": "onnxruntime",
            "source_format": "onnx", "model": where, "level": level, "mode": mode, "device": "cpu",
            "session": settings.to_json(), "transformers_fired": fired}
    relocated = _relocated(proto, settings, feeds, values, original, where) if level == "module" else {}
    with DumpWriter(path, meta, overwrite=overwrite) as w:
        writer = _Writer(w, mode)
        if level == "module":
            w.update_meta(relocated=sorted(relocated))
            values = {**values, **relocated}
            w.update_meta(modules=_write_modules(writer, proto, original, feeds, values))
        else:
            _write(writer, optimized, nodes, names, orig_names, feeds, values)
        onnx.save(optimized, str(Path(w.root) / OPTIMIZED_FILE))
        fused = {names[n.name][0]: [orig_names[o] for o in n.fused_from] for n in nodes if is_rewritten(n)}
        w.update_meta(
            observed={"nodes": len(nodes), "tensors": len(writer.first), "exposed_outputs": len(added),
                      "not_observable": _inside_subgraphs(optimized), "skipped_tensors": writer.skipped,
                      "outputs_bitwise_equal": not changed, "changed_outputs": changed,
                      "how": "optimized graph saved by the session, node outputs exposed, run with optimization off"},
            graph={"original_nodes": len(original), "optimized_nodes": len(nodes), "fused_nodes": len(fused),
                   "optimized_model": OPTIMIZED_FILE},
            provenance=fused, seconds=round(time.perf_counter() - t0, 3))
        meta = dict(w.meta)
    return meta


def _relocated(proto: onnx.ModelProto, settings: S.Settings, feeds: dict, values: dict, original: list[GNode],
               where: str) -> dict[str, np.ndarray]:
    """Original tensors the optimized run holds under another name or layout (relocate.py); one unoptimized
    run of the original graph, only when some tensor is missing."""
    inits = {i.name for i in proto.graph.initializer}
    wanted = [o for n in original if n.op != "Constant" for o in n.outputs if o and o not in values and o not in inits]
    if not wanted:
        return {}
    plain, _ = _observed(proto)
    sess, _ = S.build(plain.SerializeToString(), settings, level="disable")
    unoptimized = _run(sess, feeds, where)
    del sess
    return relocate(wanted, unoptimized, values, {t for n in original for t in n.inputs + n.outputs})


def _bitwise_equal(a: np.ndarray, b: np.ndarray | None) -> bool:
    if b is None or not isinstance(a, np.ndarray) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == object:
        return bool(np.array_equal(a, b))
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _inside_subgraphs(model: onnx.ModelProto) -> list[str]:
    """Nodes whose body is a subgraph (If, Loop, Scan): the tensors inside are not observable."""
    return [n.name or n.op_type for n in model.graph.node
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)]


def _write(writer: _Writer, optimized, nodes: list[GNode], names: dict[str, tuple[str, int]],
           orig_names: dict[str, str], feeds: dict, values: dict) -> None:
    """Records in execution order: the graph's inputs, each node's inputs and outputs, the graph's outputs."""
    root = (node_name("", ROOT_OP, 0), 0)
    inits = {i.name for i in optimized.graph.initializer}
    for k, name in enumerate(n for n in feeds):
        writer.add(feeds[name], node=root, module="", op=ROOT_OP, role="input", pos=k, tensor=name, key=name)
    for n in nodes:
        rn = names[n.name]
        module, op = n.module, n.op
        consumer = next((o for o in n.outputs if o), n.name)
        extra: dict[str, Any] = {"onnx_node": n.name}
        if n.domain:
            extra["domain"] = n.domain
        if is_rewritten(n):
            extra[PROVENANCE_KEY] = [orig_names[o] for o in n.fused_from]
            extra["fused_from_onnx"] = list(n.fused_from)
        for k, t in enumerate(n.inputs):
            if t and t not in inits and t in writer.first:
                writer.add(_value(values, feeds, t), node=rn, module=module, op=op, role="input",
                           pos=k, tensor=t, key=f"{t}|{consumer}", extra=extra)
        for k, t in enumerate(n.outputs):
            if t and t in values:
                writer.add(values[t], node=rn, module=module, op=op, role="output", pos=k, tensor=t, key=t, extra=extra)
    for k, o in enumerate(optimized.graph.output):
        if o.name in values:
            writer.add(values[o.name], node=root, module="", op=ROOT_OP, role="output", pos=k, tensor=o.name,
                       key=f"{o.name}|")


def _value(values: dict, feeds: dict, t: str) -> np.ndarray:
    return values[t] if t in values else feeds[t]


def _write_modules(writer: _Writer, proto: onnx.ModelProto, original: list[GNode], feeds: dict,
                   values: dict) -> dict[str, Any]:
    """Module records (level "module") at the module boundaries of the original graph; returns meta."""
    sigs = read_signatures(proto, MODULES_KEY)
    constants = {i.name for i in proto.graph.initializer}
    for n in original:  # made from weights and constants only (Constant, Identity of a shared weight, ...)
        if all(x in constants for x in n.inputs if x):
            constants.update(n.outputs)

    def spec_of(t: str) -> tuple[tuple[int, ...], str] | None:
        arr = values.get(t, feeds.get(t))
        if not isinstance(arr, np.ndarray) or np.dtype(arr.dtype) not in NUMPY_TO_NAME:
            return None
        return tuple(int(s) for s in arr.shape), NUMPY_TO_NAME[np.dtype(arr.dtype)]

    def print_of(t: str) -> tuple[float, float] | None:
        arr = values.get(t, feeds.get(t))
        if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f" or arr.size == 0:
            return None
        x = arr.astype(np.float64)
        return float(x.sum()), float(np.abs(x).sum())

    for module, pname, init, arr in read_parameters(proto, WRAPPED):
        writer.add(arr, node=(node_name(module, "parameter", 0), 0), module=module, op="parameter", role="parameter",
                   pos=pname, tensor=init, key=None, level="param")
    bounds, missing = boundaries(original, sigs, list(feeds), [o.name for o in proto.graph.output], constants, spec_of,
                                 print_of)
    fused_away = []
    for b, role in events(bounds):
        node = (node_name(b.path, b.op, 0), 0)
        for pos, t in b.inputs if role == "input" else b.outputs:
            if t not in values and t not in feeds:
                fused_away.append(f"{b.path or '<root>'}: {role} {pos} ({t}) fused away by the optimizer")
                continue
            writer.add(_value(values, feeds, t), node=node, module=b.path, op=b.op, role=role, pos=pos, tensor=t,
                       key=None, level="module")
    return {"signatures": sigs is not None, "modules": len(bounds), "not_observable": missing + fused_away,
            "how": "module boundaries of the exported graph (node scopes), positions from the export's signatures"
                   if sigs else "module boundaries of the exported graph (node scopes); classes unknown: op "
                   f"{UNKNOWN_OP!r}, outputs numbered in order; pair them with a mapping file"}
