"""Shared by the TensorFlow tests: the real CLI in a subprocess, and quiet TensorFlow logs."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_opdiff(*args: object) -> subprocess.CompletedProcess[str]:
    """Run the real command line, `python -m opdiff ARGS`, in a subprocess (this interpreter, this PYTHONPATH)."""
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, timeout=300)
