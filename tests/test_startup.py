"""What `opdiff compare` loads: only the modules its path needs (docs/compare.md "Sixth pass (session 8): start-up").

A command pays for every module it imports, once per process (0.1-0.2 s of a 2 s compare of thousands of small
files). These tests run the real command in a fresh interpreter and read the modules it ended with, so an eager
import of another command, another output format, the writer or a framework shows up as a failure.
"""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import click
import numpy as np
import pytest

import opdiff.cli
from opdiff.base.jitcache import _lean_class
from opdiff.cli.main import COMMANDS, commands
from opdiff.report.registry import WRITERS, Deferred
from opdiff.testing.synthetic import Tensor, write_dump

SRC = Path(__file__).resolve().parents[1] / "src"

# what compare of numpy-only dumps must not import (by prefix): other commands and their helpers, writers of
# outputs not asked for, the dump writer, frameworks and heavy optional packages
MUST_NOT = (
    "opdiff.capture.torch", "opdiff.capture.tensorflow.session", "opdiff.capture.onnxruntime.capture",
    "opdiff.testing", "opdiff.hunting", "opdiff.fusion", "opdiff.replay.run", "opdiff.shell", "opdiff.demo",
    "opdiff.store.writer", "opdiff.store.export", "opdiff.store.convert",
    "opdiff.report.html", "opdiff.report.explorer", "opdiff.report.msprobe", "opdiff.report.diagnosis",
    "opdiff.report.hunt", "opdiff.report.fusion", "opdiff.report.replay",
    *(f"opdiff.cli.{m}" for m in set(COMMANDS.values()) - {"compare_cmd"}),
    "torch", "tensorflow", "onnx", "onnxruntime", "dask", "distributed", "matplotlib", "google.protobuf",
    "xlsxwriter", "openpyxl", "pandas", "IPython", "subprocess",
)

# runs the CLI as `python -m opdiff` does, then writes the names of the loaded modules (at exit: after the
# command has finished and main() has called sys.exit)
_PROBE = """
import atexit, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
sys.argv = ["opdiff", *sys.argv[2:]]
runpy.run_module("opdiff", run_name="__main__")
"""


def loaded_by(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The finished command and the modules its process had loaded (`env` adds to the environment)."""
    listing = tmp / "modules.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p),
           **(env or {})}
    p = subprocess.run([sys.executable, "-c", _PROBE, str(listing), *args], capture_output=True, text=True,
                       timeout=300, env=env)
    return p, set(listing.read_text().split()) if listing.exists() else set()


def offenders(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == bad or m.startswith(bad + ".") for bad in MUST_NOT))


def _tensors(seed: int, nudge: float) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(6):
        x = rng.standard_normal(64).astype(np.float32)
        out.append(Tensor(f"m{i}", "linear", "output", "0", x * (1 + nudge * (i == 3))))
    return out


def test_compare_of_opdiff_dumps_loads_only_its_path(tmp_path):
    write_dump(tmp_path / "g", _tensors(0, 0.0))
    write_dump(tmp_path / "t", _tensors(0, 1e-2))
    p, mods = loaded_by(tmp_path, "compare", str(tmp_path / "g"), str(tmp_path / "t"), "-o", str(tmp_path / "out"),
                        "--no-progress")
    assert p.returncode == 1, p.stderr  # the nudged tensor fails: the command ran to the end
    assert {"opdiff.compare.run", "opdiff.report.xlsx", "opdiff.diagnose.gate"} <= mods  # the probe sees the run
    assert offenders(mods) == []
    assert (tmp_path / "out" / "compare.xlsx").stat().st_size > 0


def test_compare_of_npy_dirs_and_a_deferred_format(tmp_path):
    """A numpy-file dump, and --format html: the HTML writer loads because it was asked for, nothing else."""
    for side, nudge in (("g", 0.0), ("t", 1e-2)):
        (tmp_path / side).mkdir()
        for t in _tensors(1, nudge):
            np.save(tmp_path / side / f"{t.module}.{t.op}.{t.role}.{t.pos}.npy", t.array)
    p, mods = loaded_by(tmp_path, "compare", str(tmp_path / "g"), str(tmp_path / "t"), "-o", str(tmp_path / "out"),
                        "--no-progress", "--format", "csv,html")
    assert p.returncode in (0, 1), p.stderr
    assert "opdiff.report.html" in mods and (tmp_path / "out" / "compare.html").stat().st_size > 0
    assert offenders(mods - {"opdiff.report.html", "opdiff.report.html_data"}) == []


def test_command_table_names_every_command_of_every_module():
    """COMMANDS (the lazy registration) lists exactly what each command module registers: no command skipped."""
    here = [str(Path(opdiff.cli.__file__).parent)]
    modules = sorted(m.name for m in pkgutil.iter_modules(here) if m.name.endswith("_cmd") or m.name == "inspect_cmds")
    found: dict[str, str] = {}
    for name in modules:
        group = click.Group()
        import_module(f"opdiff.cli.{name}").register(group)
        assert group.commands, name
        found.update(dict.fromkeys(group.commands, name))
    assert found == COMMANDS
    assert sorted(commands()) == sorted(COMMANDS)


@pytest.mark.parametrize("key", [k for k, w in WRITERS.items() if isinstance(w, Deferred)])
def test_every_deferred_writer_resolves(key):
    w = WRITERS[key]
    assert isinstance(w, Deferred) and callable(w.load()) and not isinstance(w.load(), Deferred)


# a lowering module of numba's: imported by numba's target refresh (compiling), never by a cache load of ours
COMPILER_ONLY = "numba.cpython.unicode"


def test_cached_kernels_load_without_the_compiler_and_give_the_same_results(tmp_path):
    """A cold numba cache compiles (numba's refresh, its lowering modules); the next process loads the same kernels
    lean (base/jitcache.py: no refresh) and writes the same report byte for byte."""
    if _lean_class() is None:
        pytest.skip("numba version not in base/jitcache.TESTED: kernels load the way numba loads them")
    write_dump(tmp_path / "g", _tensors(2, 0.0))
    write_dump(tmp_path / "t", _tensors(2, 1e-3))
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}  # empty: the first run compiles into it
    csv = []
    for run in ("cold", "warm"):
        p, mods = loaded_by(tmp_path, "compare", str(tmp_path / "g"), str(tmp_path / "t"), "-o", str(tmp_path / run),
                            "--no-progress", "--format", "csv", env=env)
        assert p.returncode in (0, 1), p.stderr
        assert (COMPILER_ONLY in mods) == (run == "cold"), run
        csv.append((tmp_path / run / "compare.csv").read_bytes())
    assert csv[0] == csv[1] and csv[0].count(b"\n") == 7
