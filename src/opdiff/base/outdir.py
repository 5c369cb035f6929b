"""The one rule for output directories: nothing a user made is overwritten unless they say --force."""

from __future__ import annotations

from pathlib import Path

from .errors import OpdiffError


def claim_dir(path: Path, force: bool, *, noun: str = "output directory", hint: str = "use --force",
              error: type[OpdiffError] = OpdiffError) -> bool:
    """Refuse a file at `path`, or a non-empty directory unless `force`; True when it holds something.

    The caller decides what a forced run may replace (all of it, or only its own outputs).
    """
    if not path.exists():
        return False
    if not path.is_dir():
        raise error(f"{path}: exists and is not a directory")
    if not any(path.iterdir()):
        return False
    if not force:
        raise error(f"{path}: {noun} exists and is not empty ({hint})")
    return True
