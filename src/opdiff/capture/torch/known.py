"""Statistics of parameters an earlier capture (or step) of this process measured, reused while their bytes are
the same: GPT-2's 495 MB of parameters are four times the activations a module capture measures at seq 128,
and measuring them was the largest single part of what a statistics capture adds to a forward.

Per parameter object (by identity, held weakly) it keeps the dtype, shape, address, version counter, content
hash (once known) and statistics. A parameter seen again at the same version, whose content hash (xxh3, about
twice the statistics kernel's speed) is the one noted, gets the noted statistics; anything else is measured
anew. The hash, not the version counter, decides: `p.data.add_()` changes the bytes without a version bump.
A parameter whose version moved (an optimizer step) is measured without hashing. Statistics are a function of
(dtype, shape, bytes) alone, so reusing them changes no number in a dump.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...base.record import Stats
from .tensors import hash_of

MIN_NUMEL = 1 << 14  # smaller parameters cost more to hash and look up than to measure


@dataclass
class _Known:
    """What was measured for one parameter object."""

    ref: weakref.ref
    key: tuple  # dtype name, shape, address: another tensor in the same object (`p.data = x`) is measured anew
    version: int | None
    hash: str | None  # None until a capture hashed it (the second sighting at one version in a stats capture)
    stats: Stats


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter
        return None


class KnownStats:
    """Parameter statistics by identity and content (see module docstring); one per process, see KNOWN."""

    def __init__(self) -> None:
        self._by_id: dict[int, _Known] = {}

    def stats(self, t: torch.Tensor, name: str, measure: Callable[[], Stats],
              hsh: str | None = None) -> tuple[Stats, str | None]:
        """(statistics of CPU parameter `t`, its content hash when known); `measure()` measures it, `hsh` is its
        hash when the caller already took it (hash and tensor modes)."""
        version = _version(t)
        if t.numel() < MIN_NUMEL or version is None or t.device.type != "cpu":
            return measure(), hsh
        key = (name, tuple(t.shape), t.data_ptr())
        e = self._by_id.get(id(t))
        if e is not None and (e.ref() is not t or e.key != key):
            e = None
        if e is None or e.version != version:  # new, or changed in place through the autograd-visible API
            stats = measure()
            self._note(t, key, version, hsh, stats)
            return stats, hsh
        if hsh is None:
            hsh = hash_of(t, name)
        if e.hash == hsh:
            return copy.copy(e.stats), hsh
        stats = measure()  # first hash of it, or bytes changed behind the version counter
        e.hash, e.stats = hsh, stats
        return stats, hsh

    def _note(self, t: torch.Tensor, key: tuple, version: int | None, hsh: str | None, stats: Stats) -> None:
        by_id, ident = self._by_id, id(t)

        def gone(ref: weakref.ref, ident: int = ident) -> None:
            e = by_id.get(ident)
            if e is not None and e.ref is ref:
                del by_id[ident]

        by_id[ident] = _Known(weakref.ref(t, gone), key, version, hsh, copy.copy(stats))

    def clear(self) -> None:
        self._by_id.clear()


KNOWN = KnownStats()  # a memo of a pure function of the bytes: sharing it between captures changes no result

__all__ = ["KNOWN", "KnownStats", "MIN_NUMEL"]
