"""Dumps on disk: the record schema, opdiff's own format (writer and reader), and the readers of other formats.

`load(path)` recognises the format; every reader hands the pipeline a `Dump` (source.py). Nothing
here imports a deep-learning framework.
"""

from ..base.record import Record, Stats
from .format import FORMAT_VERSION
from .readers import READERS, find_reader, list_parts, load
from .source import Dump, TensorSpan
from .writer import DumpWriter

__all__ = ["FORMAT_VERSION", "READERS", "Record", "Stats", "Dump", "TensorSpan", "load", "list_parts", "find_reader",
           "DumpWriter"]
