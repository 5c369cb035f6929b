"""What a new user meets first: `opdiff --help` whole, exact inputs shown as cosine 1, a README
without machine paths, a LICENSE matching pyproject."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from opdiff.cli.main import commands, summary
from opdiff.metrics.tensor import tensor_metrics

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("columns", ["60", "100", "200"])
def test_help_lists_every_command_whole(columns, opdiff_cli):
    p = opdiff_cli("--help", env={"COLUMNS": columns})
    assert p.returncode == 0, p.stderr
    listing = " ".join(p.stdout.split("Commands:", 1)[1].split())
    assert "..." not in listing
    for name, cmd in commands().items():
        text = summary(cmd)
        assert text.endswith((".", ")")) and text.count("(") == text.count(")"), (name, text)
        assert f"{name} {text}" in listing, (name, text)


def test_identical_values_have_cosine_exactly_one():
    rng = np.random.default_rng(3)
    for n in (1, 7, 4095, 4097, 100_003):
        x = (rng.standard_normal(n) * 10 ** rng.uniform(-30, 30)).astype(np.float32)
        y = x.copy()
        if n > 7:
            x[3] = y[3] = np.nan  # non-finite on both sides: the element-wise path
        assert tensor_metrics(x, y)["cosine"] == 1.0
    x = rng.standard_normal(100).astype(np.float32)
    y = x.copy()
    y[5] *= 1.5  # values that differ: below 1
    assert tensor_metrics(x, y)["cosine"] < 1.0


def test_readme_and_docs_name_no_machine_path():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert not re.search(r"/work/|/home/\w|/root/", doc.read_text(encoding="utf-8")), doc


def test_readme_and_docs_stay_readable_sizes():
    """A runaway edit (a replace of the empty string once wrote docs/compare.md as 91 MB) fails here, not in a
    reader's browser: every page under 1 MB, the largest today ~150 KB."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert doc.stat().st_size < 1 << 20, doc


def test_license_matches_pyproject():
    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # tomllib is 3.11+; the project takes 3.10
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert re.search(r'^license = "Apache-2.0"$', project, re.M)
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
