"""The interactive shell, driven through the real CLI (`opdiff shell -c ...` and piped stdin)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opdiff.testing.synthetic import Tensor, write_dump

OPDIFF = [sys.executable, "-m", "opdiff"]


def _write(path: Path, scale_last: float) -> None:
    """Four Linear outputs; the last one scaled by `scale_last`."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(4)]
    arrays[3] = arrays[3] * np.float32(scale_last)
    write_dump(path, [Tensor(f"layers.{i}", "Linear", "output", "0", a) for i, a in enumerate(arrays)])


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("shell")
    _write(root / "g", 1.0)
    _write(root / "t", 1.5)
    return root / "g", root / "t"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*OPDIFF, *args], capture_output=True, text=True, input=stdin, timeout=120)


def test_ls_ni_pt_on_one_dump(dumps):
    g, _ = dumps
    p = run("shell", str(g), "-c", "ls --op Linear", "-c", "ni #2", "-c", "pt layers.1/")
    assert p.returncode == 0, p.stderr
    assert "layers.3/Linear#0/forward/output/0" in p.stdout
    assert "node" in p.stdout and "layers.2/Linear#0" in p.stdout
    # pt prints the values that are on disk
    from opdiff import load

    arr = load(g).tensor("layers.1/Linear#0/forward/output/0")
    assert "float32 [3, 5]" in p.stdout
    assert f"{float(arr[0, 0]):.6f}" in p.stdout and f"{float(arr[2, 4]):.6f}" in p.stdout


def test_cmp_compare_fails_through_stdin(dumps):
    g, t = dumps
    script = "cmp layers.0/\ncmp layers.3/\ncompare\nfails\nquit\n"
    p = run("shell", str(g), str(t), stdin=script)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # layers.0 is identical, layers.3 is scaled by 1.5: one PASS, then a FAIL with its metrics
    assert out.count("PASS") >= 1 and "FAIL" in out
    assert "Cosine" in out and "MaxAbsErr" in out
    assert "first FAIL" in out and "layers.3/Linear#0/forward/output/0" in out


def test_bad_reference_is_one_line_not_a_traceback(dumps):
    g, _ = dumps
    p = run("shell", str(g), "-c", "ni nosuchrecord", "-c", "pt #99", "-c", "cmp layers.0/")
    assert p.returncode == 0
    assert "Traceback" not in p.stdout + p.stderr
    assert "no record matches 'nosuchrecord'" in p.stdout
    assert "no record #99" in p.stdout
    assert "no target dump open" in p.stdout


def test_missing_dump_exits_2(tmp_path):
    p = run("shell", str(tmp_path / "missing"))
    assert p.returncode == 2
    assert "no such dump directory" in p.stderr and "Traceback" not in p.stderr
