"""The install path the README gives: `python -m build` makes an sdist and a wheel (the wheel built from
the sdist, so the sdist is proven whole), and the wheel installs in a clean venv, with its dependencies
from the machine's pip configuration, where `opdiff --help` runs and a dump is compared (numpy only)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import numpy as np
import pytest

from opdiff.testing.synthetic import Tensor, write_dump

pytest.importorskip("build")
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _sh(*args: object, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert p.returncode == 0, f"{args}: {p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def _tracked_copy(dst: Path) -> Path:
    """The repository's tracked files (what a clone has), so building leaves the checkout untouched."""
    files = _sh("git", "ls-files", "-z", cwd=ROOT).stdout.split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    return dst


def test_wheel_and_sdist_build_and_install_in_a_clean_venv(tmp_path):
    src = _tracked_copy(tmp_path / "clone")
    dist = tmp_path / "dist"
    _sh(sys.executable, "-m", "build", "--outdir", dist, src)
    wheels, sdists = sorted(dist.glob("opdiff-*.whl")), sorted(dist.glob("opdiff-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    for part in ("opdiff/report/assets/report.js", "opdiff/report/assets/report.css", "opdiff/cli/main.py"):
        assert part in names, part
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert not any(n.startswith("tests/") for n in names)

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env)  # a plain venv: nothing of this machine's site
    py = env / "bin" / "python"
    _sh(py, "-m", "pip", "install", "-q", wheels[0])  # its dependencies from the machine's pip configuration
    out = _sh(env / "bin" / "opdiff", "--help").stdout
    assert "compare" in out and "diagnose" in out
    rng = np.random.default_rng(0)
    g = [Tensor(f"h.{i}", "aten.mul.Tensor", "output", "0", rng.standard_normal(64).astype(np.float32)) for i in range(3)]
    write_dump(tmp_path / "golden", g)
    write_dump(tmp_path / "target", g)
    p = subprocess.run([env / "bin" / "opdiff", "compare", tmp_path / "golden", tmp_path / "target", "-o", tmp_path / "cmp",
                        "--no-progress"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "PASS" in p.stdout, p.stdout + p.stderr
    assert subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0  # the core needs no framework
