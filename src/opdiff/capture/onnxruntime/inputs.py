"""Model inputs for an ONNX Runtime run: a .npz file (never unpickled) checked against the graph."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from ...base.errors import OpdiffError


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Arrays of a .npz file by name; a missing or unreadable file is a one-line OpdiffError."""
    p = Path(path)
    if not p.is_file():
        raise OpdiffError(f"{p}: inputs file not found")
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise OpdiffError(f"{p}: cannot read inputs (.npz expected): {exc}") from None


def check_feeds(feeds: dict[str, np.ndarray], graph_inputs: list[str], initializers: set[str], where: str) -> dict:
    """The feeds a session needs: every graph input that is not an initializer, nothing else."""
    needed = [n for n in graph_inputs if n not in initializers]
    missing = [n for n in needed if n not in feeds]
    extra = [n for n in feeds if n not in graph_inputs]
    if missing:
        raise OpdiffError(f"{where}: inputs lack {', '.join(missing)} (the model needs {', '.join(needed)})")
    if extra:
        raise OpdiffError(f"{where}: inputs {', '.join(extra)} are not inputs of the model (it has {', '.join(needed)})")
    return {n: np.asarray(feeds[n]) for n in graph_inputs if n in feeds}
