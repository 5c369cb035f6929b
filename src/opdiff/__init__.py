"""opdiff: find where and why two runs of the same model stop agreeing.

capture -> store -> match -> metrics -> compare -> diagnose -> report. The core reads dumps
with numpy alone; framework captures (torch, onnxruntime, ...) are imported only when used.
"""

from .base.errors import DumpError, OpdiffError
from .base.version import __version__
from .capture import capture
from .store import Dump, Record, load

__all__ = ["__version__", "capture", "load", "Dump", "Record", "OpdiffError", "DumpError"]
