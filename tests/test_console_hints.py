"""What the console says to help: u explained, absolute error beside huge relative errors, warnings
on repeated or swapped inputs, and the capture's one-line summary."""

from __future__ import annotations

import numpy as np
import pytest

from opdiff.testing.synthetic import Tensor, write_dump


def _pair(root, g_dtype=np.float32, t_dtype=np.float32, near_zero=False):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(256).astype(np.float32)
    b = a.copy()
    if near_zero:
        a[0], b[0] = 1e-30, 1e-3  # golden near zero: a relative error of 1e27 from an absolute one of 1e-3
    b[1:] *= np.float32(1.01)
    write_dump(root / "g", [Tensor("layer", "Linear", "output", "0", a.astype(g_dtype))])
    write_dump(root / "t", [Tensor("layer", "Linear", "output", "0", b.astype(t_dtype))])
    return root / "g", root / "t"


def test_huge_relative_error_shows_its_absolute_error_and_u_is_explained(tmp_path, opdiff_cli):
    g, t = _pair(tmp_path, near_zero=True)
    p = opdiff_cli("compare", str(g), str(t), "-o", str(tmp_path / "out"))
    assert p.returncode == 1, p.stderr
    assert "MaxRelativeErr=1e+27 (abs 0.03106)" in p.stdout and "1e+27 (abs 0.03106)" in p.stdout.split("worst")[1]
    assert "u = the rounding unit" in p.stdout


def test_same_directory_twice_warns(tmp_path, opdiff_cli):
    g, _ = _pair(tmp_path)
    p = opdiff_cli("compare", str(g), str(g), "-o", str(tmp_path / "out"))
    assert p.returncode == 0 and "golden and target are the same directory" in p.stdout


def test_swapped_precision_warns(tmp_path, opdiff_cli):
    import ml_dtypes

    g, t = _pair(tmp_path, g_dtype=ml_dtypes.bfloat16)
    p = opdiff_cli("compare", str(g), str(t), "-o", str(tmp_path / "out"))
    assert "are GOLDEN and TARGET swapped?" in p.stdout.replace("\n", " ")


def test_capture_prints_a_one_line_summary(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import opdiff
    from opdiff.testing import zoo

    monkeypatch.delenv("OPDIFF_QUIET", raising=False)
    model, inputs = zoo.build("gpt2", layers=1)
    with opdiff.capture(model, tmp_path / "run", level="module", mode="tensor"):
        model(**inputs)
    err = capsys.readouterr().err.strip().splitlines()
    n = len(opdiff.load(tmp_path / "run"))
    assert err[-1].startswith(f"opdiff capture: {n:,} records, ") and f"written to {tmp_path / 'run'}" in err[-1]
