"""Op-level TensorFlow capture through tfdbg: dump the block's ops, then write them as an opdiff dump.

TensorFlow's debugger instruments graphs when they are traced, so a tf.function traced before the
capture started runs without instrumentation: only its call (inputs and outputs) is seen. The raw
tfdbg files go to a fresh directory inside the output directory, removed afterwards or, with
`keep_raw`, renamed `<path>/tfdbg`. Fresh, because TensorFlow keeps one event writer per dump root
for the life of the process, and dumping to a root again crashes it (a segfault, even after the
directory was deleted: a second capture to the same path with overwrite=True). They are read back with opdiff's own tfdbg reader, so `opdiff import tfdbg` gives the
same records.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from ...base.errors import OpdiffError
from ...store.export import copy_records
from ...store.readers import tfdbg as tfdbg_reader

if TYPE_CHECKING:
    from .session import TfCaptureSession

DEBUG_MODES = ("FULL_TENSOR", "FULL_HEALTH", "SHAPE")
RAW_DIR = "tfdbg"


def tracing_count(fn: Any) -> int | None:
    """How often a tf.function was traced so far (None for other callables)."""
    get = getattr(fn, "experimental_get_tracing_count", None)
    return get() if callable(get) else None


class OpCapture:
    """Turns tfdbg dumping on for the block and converts its dump when the block ends."""

    def __init__(self, s: TfCaptureSession):
        if s.debug_mode not in DEBUG_MODES:
            raise OpdiffError(f"opdiff.tf.capture: debug_mode must be one of {', '.join(DEBUG_MODES)}, not {s.debug_mode!r}")
        if s.mode == "tensor" and s.debug_mode != "FULL_TENSOR":
            raise OpdiffError(f"opdiff.tf.capture: mode='tensor' needs debug_mode='FULL_TENSOR', not {s.debug_mode!r}")
        self.s = s
        self.raw = Path(s.writer.root) / f".{RAW_DIR}-{uuid.uuid4().hex}"  # never a root TF dumped to before
        self.traced_before = tracing_count(s.model)
        self.fn: Callable[..., Any] | None = None  # the capture's own tf.function of the model (see TfCaptureSession.__call__)
        self.calls = 0

    def run(self, *args, **kwargs):
        if self.fn is None:
            self.fn = tf.function(getattr(self.s.model, "python_function", self.s.model))
        self.calls += 1
        return self.fn(*args, **kwargs)

    def start(self) -> None:
        tf.debugging.experimental.enable_dump_debug_info(str(self.raw), tensor_debug_mode=self.s.debug_mode,
                                                         circular_buffer_size=-1)

    def finish(self, write: bool) -> dict[str, Any]:
        """Stop dumping; write the records (when the block ran through); say what was observed."""
        tf.debugging.experimental.disable_dump_debug_info()
        self.fn = None  # its graph is instrumented: it must not run again
        observed: dict[str, Any] = {"tensor_debug_mode": self.s.debug_mode, "raw_dir": RAW_DIR if self.s.keep_raw else None,
                                    "note": "tfdbg instrumentation keeps grappler from fusing ops: rounding may "
                                            "differ from an uninstrumented tf.function"}
        if self.traced_before and not self.calls:
            observed["warning"] = ("the tf.function was traced before the capture: its graph is not instrumented, "
                                   "only its calls are seen")
        try:
            if write:
                dump = tfdbg_reader.open_dump(self.raw)
                observed.update(self._write(dump))
        finally:
            if self.s.keep_raw and self.raw.is_dir():
                self.raw.rename(self.raw.with_name(RAW_DIR))
            else:
                shutil.rmtree(self.raw, ignore_errors=True)
        return observed

    def _write(self, dump) -> dict[str, Any]:
        s = self.s
        copy_records(dump, s.writer, mode=s.mode, rank=s.rank, keep=lambda r: s.wanted(r.module, r.op))
        s._begun = True
        return {"graphs": dump.meta.get("graphs", []), "ops": len({r.node for r in dump.records}),
                "eager_ops": len({r.node for r in dump.records if r.level == "api"}),
                "skipped_tensors": dump.meta.get("skipped_tensors", 0)}
