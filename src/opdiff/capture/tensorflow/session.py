"""The TensorFlow capture context manager: Keras layers (level "layer") or tfdbg op dumps (level "op")."""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from ...base.errors import OpdiffError
from ...base.record import Record
from ...store.format import node_name, record_name
from ...store.writer import DumpWriter
from ..options import Options
from ..session import Session
from . import layers as keras_layers
from .tensors import dtype_name, is_eager, measure

if TYPE_CHECKING:
    from .ops import OpCapture

MAX_DEPTH = 8


@dataclass
class Call:
    """One recorded layer call."""

    node: str
    module: str
    op: str
    call: int


def flatten(obj: Any, prefix: str, out: list, depth: int = 0) -> list:
    """(pos, tensor) of every eager tensor inside nested tuples, lists and dicts ("0", "1.0", "kwargs.mask")."""
    if isinstance(obj, (tf.Tensor, tf.Variable)):
        if is_eager(obj):
            out.append((prefix or "0", obj))
        return out
    if depth >= MAX_DEPTH:
        return out
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}.{i}" if prefix else str(i), out, depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    return out


class TfCaptureSession(Session):
    """`with opdiff.tf.capture(model, path) as cap: model(x)`; `cap.step()` between steps (layer level)."""

    who = "opdiff.tf.capture"

    def __init__(self, model: Any, path: str | os.PathLike, *, level: str = "layer", mode: str = "tensor",
                 include: str | None = None, exclude: str | None = None, overwrite: bool = False, rank: int = 0,
                 debug_mode: str | None = None, keep_raw: bool = False):
        self.options = Options.parse("opdiff.tf.capture", "tensorflow", level=level, mode=mode, include=include,
                                     exclude=exclude)
        if level == "layer" and not hasattr(model, "call"):
            raise OpdiffError(f"opdiff.tf.capture: level='layer' needs a Keras model or layer, not {type(model).__name__}")
        self.model, self.path, self.level, self.mode, self.rank = model, path, level, mode, int(rank)
        self.overwrite, self.keep_raw = overwrite, keep_raw
        self.debug_mode = debug_mode or "FULL_TENSOR"
        self.include_text, self.exclude_text = include, exclude
        self._entered = False
        self.recording = False
        self.internal = 0
        self.symbolic_calls = 0
        self.step_index = 0
        self.steps_captured: list[int] = []
        self._undo: list[tuple[Any, bool, Any]] = []
        self._ops: OpCapture | None = None
        self._observed: dict[str, Any] = {}
        self._reset_step()

    def _reset_step(self) -> None:
        self.counters: dict[tuple[str, str], int] = {}
        self.seen: dict[int, tuple[weakref.ref, Record, str | None]] = {}  # id(tensor) -> (ref, first record, producer)
        self._params_done = False
        self._begun = False

    def wanted(self, module: str, op: str) -> bool:
        return self.options.wanted(module, op)

    def meta(self) -> dict[str, Any]:
        import keras

        return {
            "framework": "tensorflow",
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "capture_backend": "keras-layers" if self.level == "layer" else "tfdbg",
            "device": "cpu" if not tf.config.list_logical_devices("GPU") else "gpu",
            "model": getattr(self.model, "name", None) or type(self.model).__name__,
            "model_class": type(self.model).__name__,
            "level": self.level,
            "mode": self.mode,
            "include": self.include_text,
            "exclude": self.exclude_text,
            "rank": self.rank,
            "world_size": 1,
        }

    # -- lifecycle --------------------------------------------------------------------------
    # the skeleton (capture/session.py) runs these: open, install, finish, uninstall, close
    def _open(self) -> DumpWriter:
        return DumpWriter(self.path, self.meta(), overwrite=self.overwrite)

    def _install(self) -> None:
        if self.level == "layer":
            self._undo = keras_layers.install(self)
        else:
            from .ops import OpCapture

            self._ops = OpCapture(self)
            self._ops.start()
        self.recording = True

    def _uninstall(self) -> None:
        self.recording = False
        keras_layers.uninstall(self._undo)  # layer level (idempotent: restores each layer's own call)

    def _finish(self, ok: bool) -> None:
        self.recording = False
        if self._ops is not None:
            self._observed = self._ops.finish(write=ok)
        else:
            self._observed = {"layers": len(self._undo), "symbolic_calls_not_recorded": self.symbolic_calls}
        if self._begun:
            self.steps_captured.append(self.step_index)

    def _final_meta(self) -> dict[str, Any]:
        return {"observed": self._observed, "steps_captured": self.steps_captured,
                "records": self.writer.records_written}

    def __call__(self, *args, **kwargs):
        """Run the captured model or function. At level "op" it runs as a tf.function of the capture's own,
        traced (and so instrumented) here and dropped at the end: TensorFlow crashes when a graph
        instrumented by tfdbg runs after dumping stopped, so no function of the caller's is left so."""
        if self._ops is None:
            return self.model(*args, **kwargs)
        return self._ops.run(*args, **kwargs)

    def _next_step(self) -> None:
        """End the current step and start the next (`step()`, layer level)."""
        if self.level == "op":
            raise OpdiffError("opdiff.tf.capture: level='op' captures one step per capture (tfdbg dumps one run)")
        if self._begun:
            self.steps_captured.append(self.step_index)
        self.writer.flush()
        self.step_index += 1
        self._reset_step()

    # -- layer level ------------------------------------------------------------------------
    def _ensure_part(self) -> None:
        if not self._begun:
            self.writer.begin(self.rank, self.step_index)
            self._begun = True

    def node(self, module: str, op: str) -> tuple[str, int]:
        call = self.counters.get((module, op), 0)
        self.counters[(module, op)] = call + 1
        return node_name(module, op, call), call

    def begin_call(self, path: str, op: str, is_root: bool, args: tuple, kwargs: dict) -> Call | None:
        """Record a layer call's inputs (parameters first, at the root's first call of the step)."""
        self.internal += 1
        try:
            self._ensure_part()
            if is_root and not self._params_done:
                self._params_done = True
                self.record_parameters()
            if not (is_root or self.wanted(path, op)):
                return None
            node, n = self.node(path, op)
            c = Call(node, path, op, n)
            items = flatten(list(args), "", [])
            items += flatten(kwargs, "kwargs", [])
            for pos, t in items:
                self.record(t, c, "input", pos)
            return c
        finally:
            self.internal -= 1

    def end_call(self, c: Call | None, out: Any) -> None:
        if c is None:
            return
        self.internal += 1
        try:
            for pos, t in flatten(out, "", []):
                self.record(t, c, "output", pos)
        finally:
            self.internal -= 1

    def record_parameters(self) -> None:
        for path, layer in keras_layers.named_layers(self.model):
            weights = keras_layers.own_weights(layer)
            if not weights or not self.wanted(path, "parameter"):
                continue
            node, n = self.node(path, "parameter")
            c = Call(node, path, "parameter", n)
            for w in weights:
                pos = w.name.split("/")[-1].split(":")[0]
                self.record(tf.convert_to_tensor(w), c, "parameter", pos, level="param")

    def record(self, t, c: Call, role: str, pos: str, level: str = "module") -> Record | None:
        """One tensor; the very same tensor object seen again shares its first record's data and links to it."""
        name = dtype_name(t)
        if name is None:
            return None
        rname = record_name(c.node, "forward", role, pos)
        if self.writer.has_name(rname):
            return None
        rec = Record(index=0, name=rname, node=c.node, module=c.module, op=c.op, level=level, call=c.call,
                     direction="forward", role=role, pos=pos, dtype=name, shape=tuple(int(s) for s in t.shape))
        e = self.seen.get(id(t))
        if e is not None and e[0]() is t:
            first, producer = e[1], e[2]
            rec.stats, rec.hash, rec.src = first.stats, first.hash, producer
            self.writer.add(rec, None, same_data_as=first if self.mode == "tensor" else None)
            if role in ("output", "parameter") and producer is None:
                self.seen[id(t)] = (e[0], first, rname)
            return rec
        array, rec.stats, rec.hash = measure(t, name, self.mode)
        self._remember(t, rec, rname if role in ("output", "parameter") else None)
        self.writer.add(rec, array)
        return rec

    def _remember(self, t, rec: Record, producer: str | None) -> None:
        key, seen = id(t), self.seen

        def forget(ref, key=key):
            e = seen.get(key)
            if e is not None and e[0] is ref:
                del seen[key]

        try:
            seen[key] = (weakref.ref(t, forget), rec, producer)
        except TypeError:
            pass


def capture(model: Any, path: str | os.PathLike, *, level: str = "layer", mode: str = "tensor",
            include: str | None = None, exclude: str | None = None, overwrite: bool = False, rank: int = 0,
            debug_mode: str | None = None, keep_raw: bool = False) -> TfCaptureSession:
    """Capture a TensorFlow run into an opdiff dump at `path`: ``with capture(model, path) as cap: model(x)``.

    level "layer": every Keras layer call's inputs and outputs (eager calls), and the weights;
    level "op": every op TensorFlow runs in the block, eager or inside a tf.function traced in it,
    through tfdbg (`debug_mode` FULL_TENSOR by default; FULL_HEALTH or SHAPE for TensorFlow's own
    summaries). mode: "tensor" (data + statistics + hash), "stats", "hash". See docs/tensorflow.md.
    """
    return TfCaptureSession(model, path, level=level, mode=mode, include=include, exclude=exclude,
                            overwrite=overwrite, rank=rank, debug_mode=debug_mode, keep_raw=keep_raw)
