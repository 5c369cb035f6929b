"""What many tests repeat: running the `opdiff` command and reading its JSON strictly.

- `opdiff_cli` (fixture): run the CLI as `python -m opdiff ARGS` on this checkout's code (its src/ first on
  PYTHONPATH, whatever the working directory), capture its output, never raise on a non-zero exit.
- `strict_json` (fixture): parse JSON text or a file, refusing NaN/Infinity tokens (opdiff writes strict JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def run_opdiff(*args: object, timeout: float = 300, stdin: str | None = None, env: dict[str, str] | None = None,
               umask: int | None = None) -> subprocess.CompletedProcess[str]:
    """`opdiff ARGS` in a subprocess with this interpreter; `env` adds to (not replaces) the environment."""
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    full = {**os.environ, "PYTHONPATH": path, **(env or {})}
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True,
                          input=stdin, timeout=timeout, env=full, preexec_fn=pre)


def read_strict_json(source: str | os.PathLike[str]) -> Any:
    """JSON from text or a file; a NaN, Infinity or -Infinity token fails the test."""
    text = Path(source).read_text(encoding="utf-8") if isinstance(source, os.PathLike) else source

    def bad(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token} in {source if isinstance(source, os.PathLike) else 'text'}")
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="session")
def opdiff_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_opdiff


@pytest.fixture(scope="session")
def strict_json() -> Callable[[str | os.PathLike[str]], Any]:
    return read_strict_json
