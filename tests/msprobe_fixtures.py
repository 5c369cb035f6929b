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

# name -> msprobe_dumps.py arguments (the dump directory is prepended). Every msprobe test module
# shares these, made all at once in one msprobe process (`session_dumps`): one model of 2 layers,
# width 64, 16 tokens; the configurations the issue asks for are spread over as few dumps as can carry them.
DUMPS: dict[str, list[str]] = {
    # fp32, L1, tensor, forward+backward: the peer check, the GELU fault, the clean pair (two pids)
    "l1_golden": ["--task", "tensor", "--level", "L1", "--backward"],
    "l1_target": ["--task", "tensor", "--level", "L1", "--backward", "--fault-layer", "1"],
    "l1_golden_again": ["--task", "tensor", "--level", "L1", "--backward"],
    # bf16 in tensor mode at mix (module and API records), statistics at L0 and (md5) at L1
    "mix_bf16": ["--task", "tensor", "--level", "mix", "--dtype", "bfloat16", "--backward"],
    "l0_stats_bf16": ["--task", "statistics", "--level", "L0", "--dtype", "bfloat16", "--backward"],
    "l1_md5_bf16": ["--task", "statistics", "--summary", "md5", "--level", "L1", "--dtype", "bfloat16"],
    # statistics at mix with the xor summary; two gloo ranks x two steps in statistics mode at L1
    "mix_xor": ["--task", "statistics", "--summary", "xor", "--level", "mix"],
    "ranks": ["--task", "statistics", "--level", "L1", "--ranks", "2", "--steps", "2"],
}
# made only when a test asks for them (make_dumps), not with every session's DUMPS
MORE_DUMPS: dict[str, list[str]] = {
    # tensor task with msprobe's checksums beside the data (bf16 CRC-32; fp32 xor): opdiff checks one against the other
    "l1_md5_tensor_bf16": ["--task", "tensor", "--summary", "md5", "--level", "L1", "--dtype", "bfloat16"],
    "l1_xor_tensor": ["--task", "tensor", "--summary", "xor", "--level", "L1"],
    # statistics at L1, golden and a target with the GELU fault: msprobe's summary-mode results to match
    "l1_stats": ["--task", "statistics", "--level", "L1", "--backward"],
    "l1_stats_target": ["--task", "statistics", "--level", "L1", "--backward", "--fault-layer", "1"],
    "l1_md5_target": ["--task", "statistics", "--summary", "md5", "--level", "L1", "--dtype", "bfloat16",
                      "--fault-layer", "1"],
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
    """The dumps `names` under `base`, running msprobe once for those not made yet."""
    py = need_msprobe()
    todo = [n for n in names if not (base / n / ".done").exists()]
    if not todo:
        return {n: base / n for n in names}
    base.mkdir(parents=True, exist_ok=True)
    jobs = [[str(base / n), *(DUMPS | MORE_DUMPS)[n]] for n in todo]
    jobs_file = base / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    proc = subprocess.run([str(py), str(SCRIPT), "--jobs", str(jobs_file)], capture_output=True, text=True, timeout=900,
                          env=_same_threads())
    if proc.returncode:
        raise RuntimeError(f"msprobe dumps failed:\n{proc.stderr[-3000:]}")
    for n in todo:
        (base / n / ".done").touch()
    return {n: base / n for n in names}


def _same_threads() -> dict[str, str]:
    """The environment for msprobe's process, with torch's thread count this process has: tests compare its
    dumps with runs made here, and a bf16 reduction (a parameter gradient) rounds by the thread count."""
    torch = sys.modules.get("torch")
    return {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())} if torch is not None else dict(os.environ)


def session_dumps(tmp_path_factory) -> dict[str, Path]:
    """All of DUMPS, shared by every test module of the session: made by one msprobe process the first
    time a module asks (cached under the session's base temp dir)."""
    return make_dumps(tmp_path_factory.getbasetemp() / "msprobe-dumps", list(DUMPS))


def run_msprobe_compare(golden: Path, target: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`msprobe compare -tp target -gp golden -o out` with the msprobe venv."""
    py = need_msprobe()
    out.mkdir(parents=True, exist_ok=True)
    exe = py.parent / "msprobe"
    return subprocess.run([str(exe), "compare", "-tp", str(target), "-gp", str(golden), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=600)
