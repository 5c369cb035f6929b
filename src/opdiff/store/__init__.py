"""The dump format on disk: records in an append-only index, tensors in safetensors shards.

See docs/format.md. Nothing here imports a deep-learning framework.
"""

from .format import FORMAT_VERSION, Record, Stats
from .reader import Dump, load, list_parts
from .writer import DumpWriter

__all__ = ["FORMAT_VERSION", "Record", "Stats", "Dump", "load", "list_parts", "DumpWriter"]
