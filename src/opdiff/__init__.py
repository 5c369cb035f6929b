"""opdiff: find where and why two runs of the same model stop agreeing.

capture -> store -> match -> metrics -> compare -> diagnose -> report. The core reads dumps
with numpy alone; framework captures (torch, onnxruntime) are imported only when used.
"""

__version__ = "0.1.0"

from .errors import DumpError, OpdiffError  # noqa: E402
from .store import Dump, Record, load  # noqa: E402
from . import capture as _capture_pkg  # noqa: E402,F401  load the subpackage first: importing it later would replace capture() below


def capture(model, path, **options):
    """Capture every module / API / aten call of `model` into a dump at `path` (a context manager).

    Dispatches on the model's framework; see opdiff.capture.torch.capture for the options.
    """
    from .capture import capture as _capture

    return _capture(model, path, **options)


__all__ = ["__version__", "capture", "load", "Dump", "Record", "OpdiffError", "DumpError"]
