"""Streaming dump writer: records go to an append-only index, tensor data to safetensors shards.

Index lines are appended only after the shard holding their data is on disk, so a run cut off
mid-way stays readable up to its last complete record. Tensor data is written on one background
thread behind a bounded queue: capture keeps running while the disk works, and memory stays bounded
by about two shards. The thread starts with the first batch holding tensor data; until then (a stats or
hash capture) the few index lines are written on the caller's thread, which saves the thread's start,
hand-offs and join (tens of milliseconds of waiting per capture block on a loaded machine).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import queue
import shutil
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..base.errors import DumpError
from ..base.outdir import claim_dir
from ..base.record import Record
from ..base.version import __version__
from .colindex import COLS_FILE, ColumnBuilder
from .format import (
    DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE,
    META_FILE,
    SHARD_DIR,
    part_dir,
    window_end,
)
from .names import call_line

DEFAULT_SHARD_BYTES = 256 << 20
# Stats-only records are flushed in batches of this many, so an interrupted run loses few.
DEFAULT_FLUSH_RECORDS = 512
# Tensors of at least this many bytes, and parameters of any size, are remembered by content (dtype, shape,
# hash): the same bytes captured again anywhere in the run point at the stored copy (`stored`); the registry
# stays small because small activations, which are many and rarely repeat, are left out.
DEDUP_MIN_BYTES = 1 << 12


def _line_encoder() -> Callable[[Any], str]:
    """`json.dumps(o, separators=(",", ":"))` with its encoder made once: json.dumps builds a JSONEncoder and a
    C encoder per call, which was a third of writing an index line (thousands per capture step). The same C
    encoder with the same settings, so the text is the same; no circular-reference check (lines are trees)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return lambda o: json.dumps(o, separators=(",", ":"))
    encode = make(None, json.JSONEncoder().default, json.encoder.encode_basestring_ascii, None, ":", ",",
                  False, False, True)
    return lambda o: "".join(encode(o, 0))


dumps_line = _line_encoder()


def prepare_run_dir(path: str | os.PathLike[str], overwrite: bool) -> Path:
    """Create an empty run directory; refuse an existing non-empty one unless `overwrite`."""
    root = Path(path)
    if claim_dir(root, overwrite, noun="directory", hint="use --force / overwrite=True", error=DumpError):
        if not (root / META_FILE).exists():
            raise DumpError(f"{root}: refusing to overwrite a directory that is not an opdiff dump")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    return root


def safetensors_bytes_header(entries: list[tuple[str, str, tuple[int, ...], int]]) -> bytes:
    """The safetensors header for (key, dtype name, shape, nbytes) entries laid out in order."""
    header: dict[str, Any] = {"__metadata__": {"format": FORMAT_NAME}}
    offset = 0
    for key, dtype, shape, nbytes in entries:
        header[key] = {"dtype": DTYPES[dtype][1], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors aligns the data start to 8 bytes
    return len(raw).to_bytes(8, "little") + raw


def write_safetensors(path: Path, items: list[tuple[str, str, np.ndarray]]) -> None:
    """Write (key, dtype name, array) items as one safetensors file, streaming each array.

    Written by hand because safetensors' numpy API cannot store bf16/fp8 arrays; the files are
    plain safetensors and load with `safetensors.safe_open` in any framework.
    """
    arrays = [np.ascontiguousarray(a) for _, _, a in items]
    entries = [(k, d, tuple(a.shape), a.nbytes) for (k, d, _), a in zip(items, arrays)]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(safetensors_bytes_header(entries))
        for a in arrays:
            if a.nbytes:
                f.write(a.reshape(-1).view(np.uint8).data)
    os.replace(tmp, path)


class Reads(NamedTuple):
    """A record's data given as stored bytes read another way (docs/format.md, "Data"): the bytes `stored`
    holds, in row-major order, read as axes_base(shape, axes) and transposed by `axes` (`data.axes`), or, with
    `window` (element offset, strides), the elements at offset + sum(i_k * strides_k) (`data.window`)."""

    stored: Record
    axes: tuple[int, ...] | None
    window: tuple[int, tuple[int, ...]] | None = None

    def data(self) -> dict[str, Any]:
        """The record's `data`: the stored record's, with how this record reads it."""
        assert self.stored.data is not None
        if self.window is not None:
            return {**self.stored.data, "window": {"offset": self.window[0], "strides": list(self.window[1])}}
        return {**self.stored.data, "axes": list(self.axes or ())}


_Entry = tuple[Record | dict[str, Any], np.ndarray | Record | Reads | None]


class _PartWriter:
    """Writes one (rank, step) part: its index and shards, on the caller's writer thread."""

    def __init__(self, root: Path, rank: int, step: int):
        self.part = part_dir(rank, step)
        self.dir = root / self.part
        (self.dir / SHARD_DIR).mkdir(parents=True, exist_ok=True)
        (self.dir / COLS_FILE).unlink(missing_ok=True)  # a copy of what the index held before, if anything
        self.index = open(self.dir / INDEX_FILE, "a", encoding="utf-8")
        # the columnar copy (store/colindex.py), for an index this writer writes from its first line
        self.columns = ColumnBuilder() if self.index.tell() == 0 else None
        self.n_shards = 0

    def flush(self, batch: list[_Entry]) -> None:
        """Write a batch: the shard of its arrays first, then its index lines in order.

        An entry's second item is the record's array, None (no data), or an earlier Record (of this part or
        an earlier one) whose data this record shares: the very same tensor, or the same bytes, captured
        again; dict entries are call lines. In memory `data` always names its part; on disk only a
        reference to another part does (`data.part`).
        """
        items = [(rec, arr) for rec, arr in batch if isinstance(arr, np.ndarray) and isinstance(rec, Record)]
        if items:
            rel = f"{SHARD_DIR}/{self.n_shards:06d}.safetensors"
            self.n_shards += 1
            for r, _ in items:
                r.data = {"file": rel, "key": r.name, "part": self.part}
            write_safetensors(self.dir / rel, [(r.name, r.dtype, arr) for r, arr in items])
        lines = []
        cols = self.columns
        for rec, arr in batch:
            if isinstance(rec, dict):
                lines.append(dumps_line(rec) + "\n")
                if cols is not None:
                    cols.skip()
                continue
            if isinstance(arr, Record) and arr.data is not None:
                rec.data = dict(arr.data)
            elif isinstance(arr, Reads) and arr.stored.data is not None:
                rec.data = arr.data()
            d = self._line(rec)
            text = dumps_line(d)
            lines.append(text + "\n")
            if cols is not None:
                cols.add(d, text)
        self.index.write("".join(lines))
        self.index.flush()

    def _line(self, rec: Record) -> dict[str, Any]:
        """The record's index line: `data.part` kept only when the data lies in another part."""
        d = rec.to_json()
        data = d.get("data")
        if data is not None and data.get("part", self.part) == self.part:
            d["data"] = {k: v for k, v in data.items() if k != "part"}
        return d

    def close(self) -> None:
        self.index.close()
        if self.columns is not None:
            try:
                self.columns.write(self.dir / COLS_FILE, self.dir / INDEX_FILE)
            except OSError:  # an optional copy: the JSON lines are the index
                (self.dir / (COLS_FILE + ".tmp")).unlink(missing_ok=True)
            self.columns = None


class DumpWriter:
    """Write a run: `meta.json`, then records per (rank, step) in execution order.

    Usage: ``w = DumpWriter(path, meta); w.begin(rank, step); w.add(record, array); ...; w.close()``.
    `array` is a numpy array (ml_dtypes for bf16/fp8) already detached from the framework, or None
    for a stats/hash-only record. The writer owns the array from then on.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        meta: dict[str, Any] | None = None,
        *,
        overwrite: bool = False,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        flush_records: int = DEFAULT_FLUSH_RECORDS,
    ):
        self.root = prepare_run_dir(path, overwrite)
        self.shard_bytes = shard_bytes
        self.flush_records = flush_records
        self.meta = base_meta() | (meta or {})
        self.meta["complete"] = False
        self.meta["parts"] = []
        self._write_meta()
        self._part: _PartWriter | None = None
        self._batch: list[_Entry] = []
        self._batch_bytes = 0
        self._next_index = 0
        self._names: set[str] = set()
        self._blobs: dict[tuple[str, tuple[int, ...], str], Record] = {}  # content -> the record storing it
        self.bytes_shared = 0  # tensor bytes not written again because the run already holds them
        self._queue: queue.Queue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None  # started by the first batch with tensor data
        self._batch_arrays = 0
        self.records_written = 0
        self.bytes_written = 0
        self.on_flush: Callable[[int, int], None] | None = None  # callback(records, bytes): capture progress
        self.before_flush: Callable[[], None] | None = None  # completes the queued records (deferred statistics)

    # -- writer thread -------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                fn, args = job
                if self._error is None:
                    fn(*args)
            except BaseException as exc:  # kept and re-raised on the capturing thread
                self._error = exc
            finally:
                self._queue.task_done()

    def _submit(self, fn: Callable[..., None], *args: Any, data: bool = False) -> None:
        """Run a writing job in order: on the writer thread once it runs (`data`: the job writes tensor
        data, which starts it), else here."""
        self._raise_pending()
        if self._thread is None and not data:
            try:
                fn(*args)
            except Exception as exc:
                raise DumpError(f"{self.root}: writing the dump failed: {exc}") from exc
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="opdiff-writer", daemon=True)
            self._thread.start()
        self._queue.put((fn, args))

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise DumpError(f"{self.root}: writing the dump failed: {err}") from err

    # -- public API ------------------------------------------------------------------------
    def begin(self, rank: int, step: int) -> None:
        """Start the part for (rank, step); ends the previous one."""
        self._end_part()
        part = {"rank": int(rank), "step": int(step), "dir": part_dir(rank, step)}
        self.meta["parts"].append(part)
        self._write_meta()
        self._part = _PartWriter(self.root, rank, step)
        self._next_index = 0
        self._names = set()

    def next_index(self) -> int:
        return self._next_index

    def add(self, record: Record, array: np.ndarray | None = None, *, same_data_as: Record | None = None,
            axes: tuple[int, ...] | None = None, window: tuple[int, tuple[int, ...]] | None = None) -> Record:
        """Queue one record (and its data) in execution order; assigns `record.index`.

        `same_data_as`: an earlier record of this run holding the very same bytes (the same tensor, or what
        `stored` found); this record then points at that record's data (`data.key` names the earlier record,
        `data.part` its part when that is another) instead of storing it twice. With `axes` the record reads
        those bytes under its own shape in that order (`data.axes`, format version 3): `same_data_as` must store
        its own elements (no `axes` of its own) and hold as many of them as this record. With `window`
        ((element offset, strides), `data.window`) it reads a strided window of those bytes, which must lie
        inside them.
        """
        if self._part is None:
            self.begin(0, 0)
        if array is None and same_data_as is not None:
            self.bytes_shared += record.numel * DTYPES[record.dtype][0].itemsize
        if record.name in self._names:
            raise ValueError(f"duplicate record name {record.name!r}")
        self._names.add(record.name)
        record.index = self._next_index
        self._next_index += 1
        if array is None and same_data_as is not None:
            self._batch.append((record, self._reads(record, same_data_as, axes, window)))
        else:
            self._batch.append((record, array))
        if array is not None:
            self._batch_arrays += 1
            self._batch_bytes += array.nbytes
            self.bytes_written += array.nbytes
            if record.hash is not None and (array.nbytes >= DEDUP_MIN_BYTES or record.role == "parameter"):
                self._blobs.setdefault((record.dtype, record.shape, record.hash), record)
        self.records_written += 1
        if self._batch_bytes >= self.shard_bytes or len(self._batch) >= self.flush_records:
            self.flush()
        return record

    @staticmethod
    def _reads(record: Record, stored: Record, axes: tuple[int, ...] | None,
               window: tuple[int, tuple[int, ...]] | None) -> Record | Reads:
        """What `add` queues for a record reading `stored`'s bytes: the record itself, or how it reads them."""
        if axes is None and window is None:
            return stored
        if (stored.data or {}).keys() & {"axes", "window"} or stored.dtype != record.dtype or (
                axes is not None and (window is not None or stored.numel != record.numel)) or (
                window is not None and window_end(record.shape, *window) > stored.numel):
            raise ValueError(f"{record.name!r} cannot read {stored.name!r}'s bytes through axes {axes} / window {window}")
        return Reads(stored, axes, window)

    def stored(self, dtype: str, shape: tuple[int, ...], hsh: str) -> Record | None:
        """The record (of any part of this run) that stores a tensor of this dtype, shape and content hash,
        for `add(..., same_data_as=)`: bytes the run already holds are written once (parameters unchanged
        from step to step, the same activation reached twice)."""
        return self._blobs.get((dtype, shape, hsh))

    def add_call(self, call: dict[str, Any]) -> None:
        """Queue one op-call description (an index line with "kind": "call"), ordered with the records."""
        if self._part is None:
            self.begin(0, 0)
        self._batch.append((call_line(call), None))

    def has_name(self, name: str) -> bool:
        """True when a record of this name was already added to the current part."""
        return name in self._names

    def flush(self) -> None:
        """Hand the pending batch to the writer thread."""
        if self.before_flush is not None:
            self.before_flush()
        if self._batch and self._part is not None:
            self._submit(self._part.flush, self._batch, data=self._batch_arrays > 0)
            self._batch, self._batch_bytes, self._batch_arrays = [], 0, 0
            if self.on_flush is not None:
                self.on_flush(self.records_written, self.bytes_written)

    def wait(self) -> None:
        """Block until everything queued is on disk."""
        self.flush()
        if self._thread is not None:
            self._queue.join()
        self._raise_pending()

    def _end_part(self) -> None:
        if self._part is not None:
            self.flush()
            self._submit(self._part.close)
            self._part = None

    def update_meta(self, **fields: Any) -> None:
        self.meta.update(fields)
        self._write_meta()

    def close(self, complete: bool = True) -> None:
        """Finish writing; `complete=False` records that the run stopped early (e.g. it raised)."""
        try:
            self._end_part()
            if self._thread is not None:
                self._queue.join()
        finally:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
        self.meta["complete"] = complete
        self.meta["finished"] = _now()
        self._write_meta()
        self._raise_pending()

    def _write_meta(self) -> None:
        tmp = self.root / (META_FILE + ".tmp")
        tmp.write_text(json.dumps(self.meta, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.root / META_FILE)

    def __enter__(self) -> DumpWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.close(complete=exc_type is None)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def base_meta() -> dict[str, Any]:
    """The fields every run's meta.json carries, whatever captured it."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "opdiff_version": __version__,
        "created": _now(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }
