"""Real msprobe dumps for the tests: made once per session by msprobe in its own interpreter.

msprobe wraps torch's APIs when imported, so it never runs in the test process: the dumps come from
`opdiff/testing/msprobe_dumps.py` run by the `.venv-msprobe` interpreter (`make venv-msprobe`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "src" / "opdiff" / "testing" / "msprobe_dumps.py"

# name -> msprobe_dumps.py arguments (the dump directory is prepended)
DUMPS: dict[str, list[str]] = {
    "l1_golden": ["--task", "tensor", "--level", "L1", "--backward"],
    "l1_target": ["--task", "tensor", "--level", "L1", "--backward", "--fault-layer", "1"],
    "l0_stats": ["--task", "statistics", "--level", "L0", "--backward"],
    "mix_bf16": ["--task", "tensor", "--level", "mix", "--dtype", "bfloat16", "--backward"],
    "mix_bf16_again": ["--task", "tensor", "--level", "mix", "--dtype", "bfloat16", "--backward"],
    "l1_md5": ["--task", "statistics", "--summary", "md5", "--level", "L1"],
    "l1_xor": ["--task", "statistics", "--summary", "xor", "--level", "L1"],
    "ranks": ["--task", "tensor", "--level", "L1", "--ranks", "2", "--steps", "2"],
}


def msprobe_python() -> Path | None:
    """The interpreter with mindstudio-probe: $OPDIFF_MSPROBE_PYTHON, or .venv-msprobe next to this venv or repo."""
    env = os.environ.get("OPDIFF_MSPROBE_PYTHON")
    candidates = [Path(env)] if env else []
    candidates += [Path(sys.prefix).parent / ".venv-msprobe" / "bin" / "python",
                   Path(__file__).resolve().parents[1] / ".venv-msprobe" / "bin" / "python"]
    return next((c for c in candidates if c.exists()), None)


def need_msprobe() -> Path:
    py = msprobe_python()
    if py is None:
        pytest.skip("mindstudio-probe venv not built (make venv-msprobe)")
    return py


def make_dumps(base: Path, names: list[str]) -> dict[str, Path]:
    """The dumps `names` under `base` (the session's cache), running msprobe once for those not made yet."""
    py = need_msprobe()
    todo = [n for n in names if not (base / n / ".done").exists()]
    if not todo:
        return {n: base / n for n in names}
    base.mkdir(parents=True, exist_ok=True)
    jobs = [[str(base / n), *DUMPS[n]] for n in todo]
    jobs_file = base / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    proc = subprocess.run([str(py), str(SCRIPT), "--jobs", str(jobs_file)], capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"msprobe dumps failed:\n{proc.stderr[-3000:]}")
    for n in todo:
        (base / n / ".done").touch()
    return {n: base / n for n in names}


def session_dumps(tmp_path_factory, names: list[str]) -> dict[str, Path]:
    """Dumps shared by every test module of the session (cached under the session's base temp dir)."""
    return make_dumps(tmp_path_factory.getbasetemp() / "msprobe-dumps", names)


def run_msprobe_compare(golden: Path, target: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`msprobe compare -tp target -gp golden -o out` with the msprobe venv."""
    py = need_msprobe()
    out.mkdir(parents=True, exist_ok=True)
    exe = py.parent / "msprobe"
    return subprocess.run([str(exe), "compare", "-tp", str(target), "-gp", str(golden), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=600)
