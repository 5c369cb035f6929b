"""Many ranks, one dump: rank 0 writes the run directory; every other rank writes its part beside it
and moves its `rank{R}/` into the run directory when its capture ends (docs/capture.md, "Many ranks").
A rank given a path no other rank writes (per-rank paths) ends up with a whole run directory there."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

WAIT_S = 2.0  # how long a rank waits for rank 0 to have created a shared run directory


def staging_path(path: str | os.PathLike, rank: int, world_size: int) -> Path:
    """Where this rank writes: the run directory itself on rank 0 (or alone), else a sibling."""
    p = Path(path)
    return p if world_size <= 1 or rank == 0 else p.with_name(f"{p.name}.rank{rank}.partial")


def merge(path: str | os.PathLike, staging: Path, rank: int) -> None:
    """Move this rank's part into the run directory once rank 0 has created it."""
    root = Path(path)
    if staging == root:
        return
    deadline = time.monotonic() + WAIT_S
    while not (root / "meta.json").exists():
        if time.monotonic() > deadline:
            if not root.exists():  # each rank has a path of its own: this one is a whole run
                os.replace(staging, root)
            return
        time.sleep(0.05)
    src = staging / f"rank{rank}"
    if src.exists():
        dst = root / f"rank{rank}"
        if dst.exists():
            shutil.rmtree(dst)
        os.replace(src, dst)
    shutil.rmtree(staging, ignore_errors=True)
