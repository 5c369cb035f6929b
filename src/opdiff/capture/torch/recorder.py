"""Turn captured tensors into records: statistics, hash and data per mode, names, producer links.

One Recorder per capture. It remembers, per step and by tensor identity (weak references, so no
tensor is kept alive), what it already recorded: the very same tensor seen again (unchanged, by
its version counter) reuses its statistics and stored data, and its `src` names the output record
that produced it.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from ...base.record import Record, Stats
from ...store.format import row_major_strides, window_end
from ...store.names import node_name, record_name
from ...store.stats import content_hash
from ...store.validate import same_layout
from ...store.writer import DumpWriter
from ..stats_kernel import array_stats, copy_with_stats, transposed_hash_stats
from .layout import unwrap
from .naming import Counters
from .tensors import DeferredStats, as_numpy, dense_flat, dtype_name, hash_of, host_contiguous, stats_of

_PRODUCING = ("output", "parameter")  # roles whose record becomes the src of later uses of the tensor
BLOCK_CACHE_MIN = 1 << 14  # smaller tensors are cheaper to measure than to look up


@dataclass
class _Seen:
    """What was recorded for one live tensor object at one version."""

    ref: weakref.ref
    version: int | None
    record: Record | None  # first record holding it (its data is shared by later ones); None: link only
    stats: Stats | None
    hash: str | None
    producer: str | None  # first *output* record holding it


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor types whose storage windows are looked for in


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter: never treated as "the same"
        return None


class Recorder:
    """Writes records in execution order for one capture (see module docstring)."""

    def __init__(self, writer: DumpWriter, mode: str, rank: int):
        self.writer = writer
        self.mode = mode
        self.rank = rank
        self.counters = Counters()
        self.step: int | None = None  # the part being written, begun lazily on its first record
        self.pending_step = 0
        self._seen: dict[int, _Seen] = {}
        self._blocks: dict[tuple, tuple[weakref.ref, int, Stats]] = {}
        self._stored_at: dict[tuple[int, int, str], Record] = {}  # (address, bytes, dtype) -> record storing them
        # storage address -> records storing bytes in it, this step: what a window reads (`data.window`)
        self._in_storage: dict[int, list[tuple[int, int, Record]]] = {}  # (address, bytes, record)
        # (dtype, stored hash, stored shape, record shape, axes) -> the reordered record's (hash, statistics), of this
        # step and the one before (what an unchanged weight needs; older entries are dropped)
        self._reordered: dict[tuple[str, str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], tuple[str, Stats]] = {}
        self._reordered_before: dict[tuple[str, str, tuple[int, ...], tuple[int, ...], tuple[int, ...]],
                                     tuple[str, Stats]] = {}
        self.relations = True  # tensor mode: point at stored bytes under another shape or order (`data.axes`)
        self.pipeline: dict[str, int] | None = None  # {"stage", "stages"} of a pipeline-parallel rank
        self.skipped = 0  # tensors the format cannot hold (complex, sparse, quantized, ...)
        self._deferred = DeferredStats()  # device tensors' statistics, read back once per written batch
        self._live = False  # tensors handed to the writer without a copy are waiting to be written (settle)
        writer.before_flush = self._deferred.resolve

    # -- step lifecycle -------------------------------------------------------------------
    def start_step(self, step: int) -> None:
        """Forget the previous step's tensors and counters; the part is begun on its first record."""
        self.pending_step = step
        self.counters.clear()
        self._seen.clear()
        self._blocks.clear()
        self._stored_at.clear()
        self._in_storage.clear()
        self._reordered_before, self._reordered = self._reordered, {}

    def _ensure_part(self) -> None:
        if self.step != self.pending_step:
            self.writer.begin(self.rank, self.pending_step)
            self.step = self.pending_step

    def node(self, module: str, op: str) -> tuple[str, int]:
        """The next node name of `op` in `module` this step, and its call number."""
        call = self.counters.next(module, op)
        return node_name(module, op, call), call

    # -- records ------------------------------------------------------------------------------
    def lookup(self, t: torch.Tensor) -> _Seen | None:
        """What was recorded for this very tensor at its current version, if anything."""
        e = self._seen.get(id(t))
        if e is not None and e.ref() is t and e.version == _version(t):
            return e
        return None

    def forget(self, t: torch.Tensor) -> None:
        """Drop what was recorded for `t` (its data changed in place): the next record measures it anew."""
        e = self._seen.get(id(t))
        if e is not None and e.ref() is t:
            del self._seen[id(t)]
        if t.numel() >= BLOCK_CACHE_MIN and dense_flat(t) is not None:
            self._blocks.pop((t.data_ptr(), t.numel(), t.dtype, t.device), None)

    def expect_bump(self, t: torch.Tensor) -> None:
        """`t` was just recorded inside an in-place op whose version bump comes after: match the bumped version."""
        e = self._seen.get(id(t))
        if e is not None and e.ref() is t and e.version is not None:
            e.version += 1

    def link_view(self, views: Any, base: torch.Tensor) -> None:
        """Views made by a skipped op (one tensor, or a list from split/unbind): their producer is their base's."""
        e = self.lookup(base)
        if e is not None and e.producer is not None:
            for view in views if isinstance(views, (list, tuple)) else (views,):
                if isinstance(view, torch.Tensor):
                    self._remember(view, None, None, None, e.producer)

    def _remember(self, t: torch.Tensor, rec: Record | None, stats: Stats | None, hsh: str | None,
                  producer: str | None) -> None:
        version = _version(t)
        if version is None:  # no version counter (inference mode): link to the producer, reuse nothing
            rec = stats = hsh = None
        key = id(t)
        seen = self._seen

        def forget(_ref, key=key):
            e = seen.get(key)
            if e is not None and e.ref is _ref:
                del seen[key]

        try:
            ref = weakref.ref(t, forget)
        except TypeError:
            return
        seen[key] = _Seen(ref, version, rec, stats, hsh, producer)

    def record(self, t: torch.Tensor, *, node: str, module: str, op: str, level: str, call: int, direction: str,
               role: str, pos: str, source: str | None = None, extra: dict[str, Any] | None = None,
               live: bool = False) -> Record | None:
        """Record one tensor (stats, hash, data per mode); None when the format cannot hold it.

        `live`: in tensor mode, hand the writer the tensor's own memory instead of a copy; the caller then
        calls `settle()` before anything can change the tensor (the parameters, before the step's forward).

        A DTensor is recorded as the shard this rank holds, with its layout (capture/torch/layout.py); it is
        remembered by the DTensor itself, whose version counter (not its local tensor's) counts in-place changes."""
        ident = t
        t, layout = unwrap(t)
        if layout is not None:
            extra = {**(extra or {}), "layout": layout}
        if self.pipeline is not None and module == "" and level == "module":  # a stage's own inputs and outputs
            extra = {**(extra or {}), "pipeline": self.pipeline}
        name = dtype_name(t)
        if name is None:
            self.skipped += 1
            return None
        rname = record_name(node, direction, role, pos)
        self._ensure_part()
        if self.writer.has_name(rname):  # e.g. a second backward through the same graph
            return None
        rec = Record(index=0, name=rname, node=node, module=module, op=op, level=level, call=call,
                     direction=direction, role=role, pos=pos, dtype=name, shape=tuple(t.shape),
                     source=source, extra=extra or {})
        seen = self.lookup(ident)
        if seen is not None and seen.record is None:  # a view of a recorded tensor: link only
            rec.src = seen.producer
            seen = None
        if seen is not None:
            rec.stats, rec.hash, rec.src = seen.stats, seen.hash, seen.producer
            self.writer.add(rec, None, same_data_as=seen.record if self.mode == "tensor" else None)
            if role in _PRODUCING and seen.producer is None:
                seen.producer = rname
            return rec
        array = None
        if self.mode == "tensor":
            array, rec.stats, rec.hash, stored, axes, window = self._data(t, name, rec.shape, live)
            if window is None and t.device.type == "cpu" and t.is_contiguous():  # where these bytes lie
                self._note_stored(t, name, stored or rec)
            if stored is not None:  # the run already holds these bytes: point at them
                self._remember(ident, rec, rec.stats, rec.hash, rname if role in _PRODUCING else rec.src)
                self.writer.add(rec, None, same_data_as=stored, axes=axes, window=window)
                return rec
        else:
            rec.stats = self._stats(t, name)
            if self.mode == "hash":
                rec.hash = hash_of(t, name)
        self._remember(ident, rec, rec.stats, rec.hash, rname if role in _PRODUCING else rec.src)
        self.writer.add(rec, array)
        return rec

    def _note_stored(self, t: torch.Tensor, name: str, rec: Record) -> None:
        """Remember that `rec` stores the bytes of the contiguous CPU tensor `t`: a reshaped view of them, or a
        window inside them, recorded later this step reads them instead of storing them again."""
        addr, nbytes = t.data_ptr(), rec.numel * t.element_size()
        self._stored_at[(addr, nbytes, name)] = rec
        # bytes these replace (memory reused, written in place) are no candidates; a tensor subclass (a
        # sequence-parallel shard's collective wrapper) has no storage of its own to find windows in
        if self.relations and nbytes and type(t) in _PLAIN:
            key, end = t.untyped_storage().data_ptr(), addr + nbytes
            kept = [(a, n, r) for a, n, r in self._in_storage.get(key, ()) if a >= end or a + n <= addr]
            kept.append((addr, nbytes, rec))
            self._in_storage[key] = kept

    def _data(self, t: torch.Tensor, name: str, shape: tuple[int, ...], live: bool = False
              ) -> tuple[Any, Stats, str, Record | None, tuple[int, ...] | None, tuple[int, tuple[int, ...]] | None]:
        """Tensor mode: (array to store, statistics, content hash, None, None, None), or (None, its statistics,
        hash, the record already storing the same bytes, how this record reads them: `data.axes`, `data.window`
        or neither when they lie as they are) when the run holds them (docs/format.md, "Data").

        The hash is taken from the tensor in place, so bytes already stored (a parameter unchanged since the
        last step) are neither copied nor measured again; new bytes are copied (the model may change the
        tensor later) with their statistics in the same pass."""
        if self.relations and not t.is_contiguous():
            found = self._permuted(t, name, shape)
            if found is not None:
                return None, *found, None
            windowed = self._window(t, name, shape)
            if windowed is not None:
                return None, *windowed
        h = host_contiguous(t)
        view = as_numpy(h, name)
        hsh = content_hash(view, name, shape)
        stored, axes = self.writer.stored(name, shape, hsh), None
        if stored is None and h.data_ptr() == t.data_ptr():
            stored, axes = self._reshaped(view, name, shape)
        if stored is not None and stored.stats is not None:
            return None, stored.stats, hsh, stored, axes, None
        if self.relations and h.data_ptr() == t.data_ptr():  # a contiguous run inside stored bytes (split on dim 0)
            windowed = self._window(t, name, shape, (hsh, view))
            if windowed is not None:
                return None, *windowed
        if live and h.data_ptr() == t.data_ptr():  # written from its own memory before it can change (settle)
            self._live = True
            return view, array_stats(view, name), hsh, None, None, None
        if h.data_ptr() == t.data_ptr() or h.numel() == 0:
            array, stats = copy_with_stats(view, name)
        else:  # already a copy of ours (another device, a strided tensor made contiguous)
            array, stats = view, array_stats(view, name)
        return array, stats, hsh, None, None, None

    def _reshaped(self, view: Any, name: str, shape: tuple[int, ...]) -> tuple[Record | None, tuple[int, ...] | None]:
        """The record storing these very bytes under another shape, and None when readers take them as they lie
        (a shape that differs only in size-1 dimensions: `x.view(-1, d)` of a [1, n, d] tensor) or identity axes
        (any other shape of as many elements, declared: the heads' `view` of a [1, n, d] activation as
        [1, n, h, d / h]); (None, None) when there is none.

        Found by address (the same memory, length and dtype recorded this step), and proved by content: the
        bytes are hashed again with the stored record's shape and must give its hash. A memory block freed and
        reused, or written through an alias whose version counter is its own, never passes for the old bytes."""
        cand = self._stored_at.get((view.ctypes.data, view.nbytes, name))
        if cand is None or cand.shape == shape:
            return None, None
        axes = None if same_layout(cand.shape, shape) else tuple(range(len(shape)))
        if (axes is not None and not self.relations) or content_hash(view, name, cand.shape) != cand.hash:
            return None, None
        return cand, axes

    def _permuted(self, t: torch.Tensor, name: str, shape: tuple[int, ...]
                  ) -> tuple[Stats, str, Record, tuple[int, ...] | None] | None:
        """(statistics, hash, stored record, axes) of a CPU tensor whose elements lie densely in another order at
        the address of bytes stored this step (`w.t()`, what aten hands mm/addmm for a Linear's weight; a
        transposed activation at api level), proved as _reshaped proves it; None otherwise.

        The record keeps its own hash and statistics, those of its elements in its own row-major order (equal to
        a capture that stores them), taken without a row-major copy for a 2-D transpose and kept per content,
        so an unchanged weight seen again in a later step costs only the proof."""
        if t.device.type != "cpu" or type(t) is not torch.Tensor or t.is_conj() or t.is_neg() or t.numel() == 0:
            return None
        order = sorted(range(t.dim()), key=lambda i: t.stride(i), reverse=True)
        mem = t.detach().permute(order)
        if not mem.is_contiguous():
            return None
        cand = self._stored_at.get((t.data_ptr(), t.numel() * t.element_size(), name))
        if cand is None or cand.hash is None:
            return None
        raw = as_numpy(mem, name)
        if content_hash(raw, name, cand.shape) != cand.hash:
            return None
        axes = tuple(sorted(range(len(order)), key=order.__getitem__))  # the inverse of `order`
        key = (name, cand.hash, cand.shape, shape, axes)
        known = self._reordered.get(key) or self._reordered_before.get(key)
        if known is None:
            known = self._measure_reordered(t, raw, name, shape, axes)
        self._reordered[key] = known
        hsh, stats = known
        same = self.writer.stored(name, shape, hsh)  # these elements already stored in this order: read as they lie
        return (stats, hsh, same, None) if same is not None else (stats, hsh, cand, axes)

    def _window(self, t: torch.Tensor, name: str, shape: tuple[int, ...], mine: tuple[str, Any] | None = None
                ) -> tuple[Stats, str, Record, tuple[int, ...] | None, tuple[int, tuple[int, ...]] | None] | None:
        """(statistics, hash, stored record, axes, window: (element offset, strides)) of a CPU tensor whose elements all lie
        inside bytes stored this step (q, k and v: `split`, `view`, `transpose` of one projection's output),
        proved as _reshaped proves it (the stored record's memory, hashed again, gives its hash); None otherwise.
        `mine`: the tensor's own (hash, contiguous numpy view) when it is contiguous.

        The record keeps its own hash and statistics (its elements in its own row-major order); when the run
        already stores exactly those elements, it reads them as they lie instead (the window is None)."""
        if t.device.type != "cpu" or type(t) is not torch.Tensor or t.is_conj() or t.is_neg() or t.numel() == 0:
            return None
        storage = t.untyped_storage()
        cands = self._in_storage.get(storage.data_ptr())
        if not cands:
            return None
        size, base_ptr, addr = t.element_size(), storage.data_ptr(), t.data_ptr()
        strides = tuple(t.stride())
        for start, _, cand in reversed(cands):  # the latest first: bytes written last
            delta = addr - start
            if cand.dtype != name or cand.hash is None or delta < 0 or delta % size or min(strides, default=0) < 0 \
                    or window_end(shape, delta // size, strides) > cand.numel \
                    or (start - base_ptr) % size or start - base_ptr + cand.numel * size > storage.nbytes():
                continue
            whole = t.detach().as_strided((cand.numel,), (1,), (start - base_ptr) // size)
            if content_hash(as_numpy(whole, name), name, cand.shape) != cand.hash:
                continue
            if mine is None:
                view = as_numpy(host_contiguous(t), name)
                hsh = content_hash(view, name, shape)
            else:
                hsh, view = mine
            same = self.writer.stored(name, shape, hsh)
            if same is not None and same.stats is not None:  # these elements already stored as they lie
                return same.stats, hsh, same, None, None
            return (array_stats(view, name), hsh, cand, *self._plainest(cand, shape, delta // size, strides))
        return None

    @staticmethod
    def _plainest(cand: Record, shape: tuple[int, ...], offset: int, strides: tuple[int, ...]
                  ) -> tuple[tuple[int, ...] | None, tuple[int, tuple[int, ...]] | None]:
        """(axes, window) of a record reading all of `cand`'s elements as they lie: nothing (the same layout) or a
        reshape (identity axes), as format version 3's earlier forms say it; any other window as it is."""
        whole = offset == 0 and math.prod(shape) == cand.numel and all(
            n == 1 or s == d for n, s, d in zip(shape, strides, row_major_strides(shape)))
        if not whole:
            return None, (offset, strides)
        return (None if same_layout(cand.shape, shape) else tuple(range(len(shape)))), None

    @staticmethod
    def _measure_reordered(t: torch.Tensor, raw: Any, name: str, shape: tuple[int, ...],
                           axes: tuple[int, ...]) -> tuple[str, Stats]:
        """(hash, statistics) of `t`'s elements in its own row-major order; `raw` its memory as it lies."""
        if axes == (1, 0):
            found = transposed_hash_stats(raw, name)
            if found is not None:
                return found
        h = host_contiguous(t)
        view = as_numpy(h, name)
        return content_hash(view, name, shape), array_stats(view, name)

    def settle(self) -> None:
        """Return once the tensors recorded `live` are on disk (the writer no longer reads their memory).

        Parameters are most of a forward's bytes in tensor mode; copying them first (fresh memory, page
        faults, then the writer's own copy into the page cache) cost more than the forward at seq 128."""
        if self._live:
            self._live = False
            self.writer.wait()

    def _stats(self, t: torch.Tensor, name: str) -> Stats:
        """Statistics, reused for a view or reshape of a tensor already measured (same elements in memory).

        Two dense tensors starting at the same address with the same size and dtype hold the same
        elements in some order, and statistics do not depend on the order.
        """
        key = version = None
        if t.numel() >= BLOCK_CACHE_MIN and (t.is_contiguous() or dense_flat(t) is not None):
            key, version = (t.data_ptr(), t.numel(), t.dtype, t.device), _version(t)
            e = self._blocks.get(key)
            if e is not None and version is not None and e[1] == version:
                base = e[0]()
                if base is not None and base.data_ptr() == key[0]:
                    return e[2]
        if t.device.type in ("cpu", "meta"):
            stats = stats_of(t, name)
        else:
            stats = self._deferred.add(t, name)
        if key is not None and version is not None:
            self._blocks[key] = (weakref.ref(t), version, stats)
        return stats

    def call(self, line: dict[str, Any]) -> None:
        """Write an op-call description line right after the op's input records."""
        self._ensure_part()
        self.writer.add_call(line)


__all__ = ["Recorder"]
