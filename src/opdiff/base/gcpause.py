"""Python's cyclic garbage collector held off while a pass builds many small objects beside a big heap.

A comparison of 100,000 records keeps about a million objects alive. Every full collection, which
allocations alone trigger, walks all of them (about a second each on a loaded 2-core machine), although
the objects a diagnosis or a report builds hold no reference cycles: reference counting frees them.
Pausing the collector for such a pass removed about 40 % of diagnose's time (docs/diagnose.md, "Speed").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block; the collector's state before it comes back after.

    Nests; cycles made inside are collected by the first collection after the block.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def keep_until_exit(*objs: object) -> None:
    """Let the process end without freeing `objs`: a comparison's records and results (about ten objects
    per record and per pair) cost ~2 µs per record to free one by one, seconds at a million records, for
    memory the operating system takes back at exit anyway. They are put in a cycle and every live object
    is frozen out of the cyclic collector (gc.freeze), so neither reference counting nor the collector's
    pass at shutdown frees them. Only for a process whose last step this is, its outputs written and
    closed (atexit handlers still run): in a process that goes on, they would never be freed."""
    holder: list[object] = [*objs]
    holder.append(holder)
    gc.freeze()
