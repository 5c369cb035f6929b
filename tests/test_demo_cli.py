"""`opdiff demo` end to end through the real CLI: capture, compare, diagnose, reports, the reveal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
openpyxl = pytest.importorskip("openpyxl")

OPDIFF = str(Path(sys.executable).with_name("opdiff"))


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([OPDIFF, "demo", *map(str, args)], capture_output=True, text=True, timeout=600)


def test_demo_end_to_end(tmp_path):
    out = tmp_path / "demo"
    r = run("-o", out, "--seed", "7")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    text = r.stdout
    # the secret is revealed only after the diagnosis; the seed is said first, to repeat the draw
    assert text.index("verdict:") < text.index("injected:")
    assert "seed 7 (repeat this run with --seed 7)" in text
    assert "diagnosis found it" in text
    for name in ("compare.csv", "compare.xlsx", "compare.json", "diagnosis.json", "report.html"):
        assert (out / name).stat().st_size > 0
        assert str(out / name) in text
    diag = json.loads((out / "diagnosis.json").read_text())
    assert diag["verdict"].upper() in text
    cmp = json.loads((out / "compare.json").read_text())
    assert cmp
    wb = openpyxl.load_workbook(out / "compare.xlsx", read_only=True)
    assert wb.worksheets[0].max_row > 10
    assert (out / "golden" / "meta.json").exists() and (out / "target" / "meta.json").exists()

    again = run("-o", out, "--model", "resnet", "--fault", "identical")
    assert again.returncode == 2 and "exists" in again.stderr
    forced = run("-o", out, "--model", "resnet", "--fault", "identical", "--force", "--level", "module")
    assert forced.returncode == 0, forced.stdout[-2000:] + forced.stderr
    assert "PASS" in forced.stdout and json.loads((out / "diagnosis.json").read_text())["verdict"] == "pass"


def test_demo_draws_a_fault_unless_benign_is_asked():
    """Without --benign every draw is a fault (or other inputs): a first demo never shows a PASS page
    by chance; with --benign every draw is a harmless change."""
    from opdiff.demo import DEMO_BENIGN, DEMO_FAULTS, pool
    from opdiff.testing import zoo
    from opdiff.testing.faults import FAULTS

    model, _ = zoo.build("gpt2", layers=3, width=64)
    faults, benign = pool(model), pool(model, benign=True)
    assert faults and set(faults) <= set(DEMO_FAULTS) and all(FAULTS[f].kind != "benign" for f in faults)
    assert benign and set(benign) <= set(DEMO_BENIGN) and all(FAULTS[f].kind == "benign" for f in benign)


def test_demo_help_names_benign_and_seed():
    p = subprocess.run([OPDIFF, "demo", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--benign" in p.stdout and "--seed" in p.stdout
