"""Dumps on disk: the record schema, opdiff's own format (writer and reader), and the readers of other formats.

`load(path)` recognises the format; every reader hands the pipeline a `Dump` (source.py). Nothing
here imports a deep-learning framework. The writer (`DumpWriter`, with its threads, sockets and host
facts) loads on first use: reading and comparing dumps never needs it.
"""

from typing import TYPE_CHECKING, Any

from ..base.record import Record, Stats
from .format import FORMAT_VERSION
from .readers import READERS, find_reader, list_parts, load
from .source import Dump, TensorSpan

if TYPE_CHECKING:
    from .writer import DumpWriter

__all__ = ["FORMAT_VERSION", "READERS", "Record", "Stats", "Dump", "TensorSpan", "load", "list_parts", "find_reader",
           "DumpWriter"]


def __getattr__(name: str) -> Any:
    """`opdiff.store.DumpWriter`, imported when first asked for."""
    if name == "DumpWriter":
        from .writer import DumpWriter

        return DumpWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
