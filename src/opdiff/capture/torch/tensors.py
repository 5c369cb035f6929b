"""torch tensors -> what a record holds: dtype name, shape, statistics, content hash, numpy data.

CPU tensors are read in place through a numpy view (bf16/fp16/fp8 viewed as integers, then as
ml_dtypes); statistics come from the fused numba kernel, the hash from xxh3 over the raw bytes, so
a numpy re-hash of the stored data gives the same string. Other devices compute statistics there
in float64 and copy only what must be hashed or stored.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ...base.record import Stats
from ...store.format import FLOAT_DTYPES, numpy_dtype
from ...store.stats import content_hash
from ..stats_kernel import SMALL, array_stats, copy_with_stats, stats_at, transpose_into
from . import cuda_stats

DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        DTYPE_NAMES[getattr(torch, _name)] = _name

# dtypes numpy cannot take from torch directly: read them as same-width integers, then reinterpret
_AS_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float8_e4m3fn: torch.uint8,
           torch.float8_e5m2: torch.uint8}
for _name, _int in (("uint16", torch.int16), ("uint32", torch.int32), ("uint64", torch.int64)):
    if hasattr(torch, _name):
        _AS_INT[getattr(torch, _name)] = _int


def dtype_name(t: torch.Tensor) -> str | None:
    """The format's dtype name, or None when the dump format cannot hold this tensor (quantized dtypes are
    not in DTYPE_NAMES; the dtype is looked up first, the cheapest test, once per record)."""
    name = DTYPE_NAMES.get(t.dtype)
    if name is None or t.layout != torch.strided or t.is_nested or t.device.type == "meta":
        return None
    return name


def as_numpy(t: torch.Tensor, name: str) -> np.ndarray:
    """A numpy view (no copy) of a contiguous CPU tensor, with the dtype the format uses for `name`.

    Made through DLPack, not `Tensor.numpy()`: that marks the tensor's storage non-resizable for good,
    and FSDP2 frees its unsharded parameters by resizing their storage to 0. A subclass (an async
    collective's result) is read through dispatch, which makes its data ready."""
    t = t.detach()
    if type(t) is not torch.Tensor:
        return _numpy_of(t, name)
    as_int = _AS_INT.get(t.dtype)
    arr = np.from_dlpack(t.view(as_int) if as_int is not None else t)
    return arr.view(numpy_dtype(name)) if as_int is not None else arr


def _numpy_of(t: torch.Tensor, name: str) -> np.ndarray:
    as_int = _AS_INT.get(t.dtype)
    if as_int is not None:
        return t.view(as_int).numpy().view(numpy_dtype(name))
    return t.numpy()


TRANSPOSE_MIN = 1 << 15  # smaller transposed matrices: torch's copy is as quick as a kernel call


def transposed_matrix(t: torch.Tensor) -> bool:
    """Whether `t` is the transpose of a row-major matrix (`w.t()`: what aten passes mm/addmm for a Linear's
    weight), plain values (no conjugate or negative bit), on the CPU."""
    return (t.dim() == 2 and t.stride() == (1, t.shape[0]) and t.shape[0] > 1 and t.shape[1] > 1
            and t.numel() >= TRANSPOSE_MIN and t.device.type == "cpu" and type(t) is torch.Tensor
            and t.dtype in DTYPE_NAMES and not t.is_conj() and not t.is_neg())


def transposed_copy(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy of a transposed matrix (transposed_matrix(t)), the same bits as `t.contiguous()`, by a
    tiled transpose instead of torch's strided copy (the copy itself 44 against ~100 ms for GPT-2's transposed
    output embedding; memory from torch's allocator, as before: numpy's huge pages cost a compaction under
    memory pressure, 285-420 ms in a capture)."""
    out = torch.empty(t.shape, dtype=t.dtype)
    as_int = _WIDTH_INT[t.element_size()]
    transpose_into(np.from_dlpack(t.t().view(as_int)), np.from_dlpack(out.view(as_int)))
    return out


_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def host_contiguous(t: torch.Tensor) -> torch.Tensor:
    """The tensor on the CPU in row-major order; the same tensor when it already is."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = transposed_copy(t) if transposed_matrix(t) else t.contiguous()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def host_copy(t: torch.Tensor, name: str) -> tuple[np.ndarray, Stats]:
    """A numpy copy the writer may own (the model may later change the tensor in place), and its statistics.

    When no copy was needed to bring the tensor to the host in row-major order, the copy and the
    statistics are made in one pass over the data.
    """
    h = host_contiguous(t)
    if h.data_ptr() == t.data_ptr() or h.numel() == 0:
        return copy_with_stats(as_numpy(h, name), name)
    arr = as_numpy(h, name)
    return arr, array_stats(arr, name)


def dense_flat(t: torch.Tensor) -> torch.Tensor | None:
    """A 1-D view over the same elements in memory order when `t` is a permuted dense tensor, else None.

    Statistics do not depend on element order, so a transposed tensor needs no copy for them.
    """
    if t.is_contiguous():
        return t.reshape(-1)
    order = sorted(range(t.dim()), key=lambda i: t.stride(i), reverse=True)
    p = t.permute(order)
    return p.reshape(-1) if p.is_contiguous() else None


def flat_elements(t: torch.Tensor) -> torch.Tensor:
    """The elements of `t` as one dense 1-D tensor: a view when they already lie densely, else a copy."""
    flat = dense_flat(t)
    return flat if flat is not None else t.contiguous().reshape(-1)


def stats_of(t: torch.Tensor, name: str) -> Stats:
    """Statistics of a tensor with the semantics of opdiff.store.stats.tensor_stats."""
    n = t.numel()
    if n == 0:
        return Stats(numel=0)
    if 0 < n < SMALL and type(t) is torch.Tensor and t.is_cpu and t.is_contiguous() and not t.is_conj() \
            and not t.is_neg():  # the common case, read in place by address (no detached alias to make)
        return stats_at(t.data_ptr(), n, name)
    t = t.detach()
    if t.is_cpu and not t.is_conj() and not t.is_neg():
        flat = t if t.is_contiguous() else flat_elements(t)
        if n < SMALL and type(flat) is torch.Tensor:  # read in place by address: no numpy view to make
            return stats_at(flat.data_ptr(), n, name)  # `flat` holds the elements alive meanwhile
        return array_stats(as_numpy(flat, name), name)
    return device_stats(t, name)


def device_stats(t: torch.Tensor, name: str) -> Stats:
    """Statistics computed on the tensor's own device in float64 (one sync), for a tensor numpy cannot
    view (another device, a conjugate or negative view)."""
    if t.numel() == 0:
        return Stats(numel=0)
    return stats_from_values(t.numel(), device_stats_values(t, name).tolist())


def device_stats_values(t: torch.Tensor, name: str) -> torch.Tensor:
    """min, max, sum, sum of squares, nan, +inf, -inf, zeros, finite count of a non-empty tensor:
    nine float64 values left on its device (no sync), read by stats_from_values."""
    n = t.numel()
    x = t.detach().reshape(-1)
    if name == "bool":
        x = x.to(torch.uint8)
    x = x.to(torch.float64)
    if name in FLOAT_DTYPES:
        finite = torch.isfinite(x)
        counts = torch.stack([torch.isnan(x).sum(), (x == math.inf).sum(), (x == -math.inf).sum(), (x == 0).sum(),
                              finite.sum()])
        mn = torch.where(finite, x, math.inf).min()
        mx = torch.where(finite, x, -math.inf).max()
        x = torch.where(finite, x, 0.0)
    else:
        counts = torch.stack([torch.zeros((), dtype=torch.int64, device=x.device)] * 3 + [(x == 0).sum(),
                              torch.tensor(n, device=x.device)])
        mn, mx = x.min(), x.max()
    s1, s2 = x.sum(), torch.dot(x, x)
    return torch.stack([mn, mx, s1, s2, *counts.to(torch.float64)])


def stats_from_values(n: int, vals: list[float], into: Stats | None = None) -> Stats:
    """The Stats of a tensor of `n` elements from device_stats_values' nine numbers (filled into `into`)."""
    mn, mx, s1, s2, nan, pinf, ninf, zeros, fin = vals
    stats = into if into is not None else Stats(numel=n)
    stats.numel, stats.nan, stats.posinf, stats.neginf, stats.zeros = n, int(nan), int(pinf), int(ninf), int(zeros)
    if int(fin):
        mean = s1 / int(fin)
        stats.min, stats.max, stats.mean = mn, mx, mean
        stats.std, stats.norm = math.sqrt(max(s2 / int(fin) - mean * mean, 0.0)), math.sqrt(s2)
    return stats


class DeferredStats:
    """Statistics of device tensors without a sync per tensor.

    Each tensor's numbers are computed on its device when it is recorded (queued in stream order,
    so a later in-place change cannot reach them) and left there: on CUDA by two fused Triton
    kernels into a slot of one buffer per device (cuda_stats), elsewhere by torch ops. `resolve`
    copies what is pending to the host at once and fills the Stats objects handed out, before the
    writer serialises their records: one sync per batch of records instead of one per tensor.
    """

    CAPACITY = 4096  # slots per device buffer; a full buffer is read back early

    def __init__(self) -> None:
        self._pending: list[tuple[Stats, torch.Tensor]] = []  # torch-op path: nine numbers per tensor
        self._slots: dict[torch.device, tuple[torch.Tensor, torch.Tensor, list[Stats]]] = {}  # buffer, scratch, owners
        self._unfused: set[torch.dtype] = set()  # dtypes the fused kernels failed on (torch ops then)

    def add(self, t: torch.Tensor, name: str) -> Stats:
        """A Stats for `t`, filled by the next resolve()."""
        stats = Stats(numel=t.numel())
        if not stats.numel:
            return stats
        if cuda_stats.available(t) and t.dtype not in self._unfused:
            self._add_fused(t, name, stats)
        else:
            self._pending.append((stats, device_stats_values(t, name)))
        return stats

    def _add_fused(self, t: torch.Tensor, name: str, stats: Stats) -> None:
        t = t.detach()
        if t.is_neg():
            t = t.resolve_neg()
        flat = flat_elements(t)
        entry = self._slots.get(t.device)
        if entry is None:
            entry = (torch.empty((self.CAPACITY, cuda_stats.SLOT), dtype=torch.float64, device=t.device),
                     torch.empty(cuda_stats.MAX_PROGRAMS * cuda_stats.SLOT, dtype=torch.float64, device=t.device), [])
            self._slots[t.device] = entry
        buf, scratch, owners = entry
        if len(owners) == self.CAPACITY:
            self.resolve()
        try:
            cuda_stats.stats_into(t, flat, buf[len(owners)], scratch)
        except Exception as e:  # a Triton that cannot build the kernels: the torch ops give the same numbers
            self._unfused.add(t.dtype)
            warnings.warn(f"opdiff: fused CUDA statistics unavailable for {t.dtype} ({type(e).__name__}: {e}); "
                          "using torch ops", RuntimeWarning, stacklevel=2)
            self._pending.append((stats, device_stats_values(t, name)))
            return
        owners.append(stats)

    def resolve(self) -> None:
        """Fill every pending Stats (one device-to-host copy per device and path)."""
        pending, self._pending = self._pending, []
        by_device: dict[torch.device, list[tuple[Stats, torch.Tensor]]] = {}
        for item in pending:
            by_device.setdefault(item[1].device, []).append(item)
        for items in by_device.values():
            rows = torch.stack([v for _, v in items]).cpu().tolist()
            for (stats, _), vals in zip(items, rows, strict=True):
                stats_from_values(stats.numel, vals, into=stats)
        for buf, _, owners in self._slots.values():
            if owners:
                rows = buf[:len(owners)].cpu().tolist()
                for stats, (mn, mx, s1, s2, nan, pinf, ninf, zeros) in zip(owners, rows, strict=True):
                    fin = stats.numel - nan - pinf - ninf
                    stats_from_values(stats.numel, [mn, mx, s1, s2, nan, pinf, ninf, zeros, fin], into=stats)
                owners.clear()


def hash_of(t: torch.Tensor, name: str) -> str:
    """xxh3 content hash of dtype, shape and raw bytes (equal to opdiff.store.stats.content_hash of the data)."""
    h = host_contiguous(t)
    return content_hash(as_numpy(h, name), name, tuple(h.shape))
