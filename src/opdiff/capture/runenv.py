"""`opdiff run`'s plumbing that needs no framework: the OPDIFF_RUN_* environment, and assembling the dump.

The `opdiff run` process sets the environment and puts the bootstrap directory on PYTHONPATH; every
Python process of the user's command then captures into DUMP/.opdiff-run/ (rank 0 writes `run/`,
other ranks stage beside it and move their part in, docs/capture.md "Many ranks"). When the command
has exited, `assemble` moves the run up into DUMP itself, so nothing is ever written outside DUMP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from ..base.errors import OpdiffError
from ..base.outdir import claim_dir

# The environment `opdiff run` sets for the user's command (docs/capture.md, "Capturing an unmodified script").
ENV_DIR = "OPDIFF_RUN_DIR"  # the dump directory (-o); its presence turns the bootstrap on
ENV_LEVEL = "OPDIFF_RUN_LEVEL"
ENV_MODE = "OPDIFF_RUN_MODE"
ENV_STEPS = "OPDIFF_RUN_STEPS"
ENV_BACKWARD = "OPDIFF_RUN_BACKWARD"  # "1" or "0"
ENV_INCLUDE = "OPDIFF_RUN_INCLUDE"
ENV_EXCLUDE = "OPDIFF_RUN_EXCLUDE"
ENV_MODEL = "OPDIFF_RUN_MODEL"  # regex on the class name of the root module to capture
ENV_WHEN_LOSS_ABOVE = "OPDIFF_RUN_WHEN_LOSS_ABOVE"
ENV_NAMES = (ENV_DIR, ENV_LEVEL, ENV_MODE, ENV_STEPS, ENV_BACKWARD, ENV_INCLUDE, ENV_EXCLUDE, ENV_MODEL,
             ENV_WHEN_LOSS_ABOVE)

STAGE = ".opdiff-run"  # inside DUMP: where the processes of the command write
RUN = "run"  # the run directory inside STAGE (rank 0's, and every rank's part once merged)
META = "meta.json"
BOOT_DIR = Path(__file__).parent / "torch" / "boot"  # holds the sitecustomize bootstrap

_STEPS_RE = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*,?\s*$")


def check_regex(value: str | None, what: str) -> None:
    """One-line error for a bad regex option."""
    if value is None:
        return
    try:
        re.compile(value)
    except re.error as exc:
        raise OpdiffError(f"bad {what} regex {value!r}: {exc}") from None


def check_steps(value: str | None) -> None:
    """One-line error for a steps option that is not e.g. "0,2" or "0-3,8"."""
    if value is not None and not _STEPS_RE.match(value):
        raise OpdiffError(f"bad --steps {value!r} (expected e.g. \"0,2\" or \"0-3,8\")")


def prepare_dump(dump: Path, force: bool) -> None:
    """Refuse a non-empty DUMP unless --force (and then only an opdiff dump, which is removed); create it."""
    if claim_dir(dump, force, noun="dump directory"):
        if not (dump / META).exists() and not (dump / STAGE).exists():
            raise OpdiffError(f"{dump}: refusing to overwrite a directory that is not an opdiff dump")
        shutil.rmtree(dump)
    dump.mkdir(parents=True, exist_ok=True)


def child_env(dump: Path, options: dict[str, str | None], base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the caller's, the OPDIFF_RUN_* settings, and the bootstrap on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    for name in ENV_NAMES:
        env.pop(name, None)
    env[ENV_DIR] = str(dump.resolve())
    env.update({k: v for k, v in options.items() if v is not None})
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(BOOT_DIR) + (os.pathsep + old if old else "")
    return env


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _move_children(src: Path, dst: Path) -> None:
    for item in src.iterdir():
        target = dst / item.name
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        os.replace(item, target)


def assemble(dump: Path, command: list[str], exit_code: int) -> dict[str, Any] | None:
    """Move what the command's processes wrote into DUMP; returns the final meta (None: nothing captured).

    A rank that could not merge its part (its process raised, or rank 0 captured nothing) left it in a
    staging directory: its `rank{R}/` is moved in too, and the run is marked incomplete."""
    stage = dump / STAGE
    if not stage.is_dir():
        return None
    incomplete: list[int] = []
    run = stage / RUN
    if (run / META).exists():
        _move_children(run, dump)
    for partial in sorted(stage.glob(f"{RUN}.rank*.partial")):
        meta = _read_meta(partial)
        if meta is not None and meta.get("complete") is not True:
            incomplete.append(int(meta.get("rank", -1)))
        if not (dump / META).exists() and meta is not None:
            os.replace(partial / META, dump / META)
        for part in partial.glob("rank*"):
            if part.is_dir():
                if (dump / part.name).exists():
                    shutil.rmtree(dump / part.name)
                os.replace(part, dump / part.name)
    shutil.rmtree(stage, ignore_errors=True)
    meta = _read_meta(dump)
    if meta is None:
        return None
    meta["complete"] = meta.get("complete") is True and not incomplete
    meta["run"] = {**meta.get("run", {}), "command": command, "exit_code": exit_code, "incomplete_ranks": incomplete}
    tmp = dump / (META + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, dump / META)
    return meta
