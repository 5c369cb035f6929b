"""compare, diagnose and the library agree on unmatched records (docs/reliability.md rule 9), on dumps
written from numpy: an added cast is reported but passes; an added op that computes fails both."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from opdiff.compare.run import compare
from opdiff.diagnose import diagnose
from opdiff.testing.synthetic import Tensor, write_dump
from trust_helpers import run_cli


def _chain(extra: Tensor | None = None) -> list[Tensor]:
    x = np.random.default_rng(8).standard_normal((4, 8)).astype(np.float32)
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    ts = [Tensor("", "Model", "input", "0", x), Tensor("fc", "Linear", "parameter", "weight", w)]
    h = (x @ w).astype(np.float32)
    ts += [Tensor("fc", "Linear", "input", "0", x), Tensor("fc", "Linear", "output", "0", h)]
    if extra is not None:
        ts.append(extra)
    y = np.tanh(h).astype(np.float32)
    ts += [Tensor("act", "Tanh", "input", "0", h), Tensor("act", "Tanh", "output", "0", y),
           Tensor("", "Model", "output", "0", y)]
    return ts


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("agree")
    golden = _chain()
    write_dump(base / "golden", golden)
    h = golden[3].array
    cast = Tensor("fc", "aten._to_copy.default", "output", "0", h.astype(ml_dtypes.bfloat16))
    write_dump(base / "cast", _chain(cast))
    write_dump(base / "extra", _chain(Tensor("fc", "Linear", "output", "0", h * 3, call=1)))
    return base


@pytest.mark.parametrize("which,agree", [("cast", True), ("extra", False)])
def test_compare_diagnose_and_library_agree_on_unmatched(dumps, tmp_path, which, agree):
    g, t = dumps / "golden", dumps / which
    cmp = compare(g, t)
    assert [r.op for r in cmp.unmatched("target")] == ["aten._to_copy.default" if which == "cast" else "Linear"]
    diag = diagnose(g, t, replay=False)
    assert cmp.passed() is agree and (diag.verdict == "pass") is agree, (diag.verdict, diag.summary)
    c = run_cli("compare", g, t, "-o", tmp_path / "o", "--format", "json", "--no-progress")
    d = run_cli("diagnose", g, t, "--no-replay", "--json")
    assert c.code == d.code == (0 if agree else 1), c.text + d.text
    assert "unmatched target records: 1" in c.out  # reported either way
    if not agree:
        assert any("no counterpart" in w and "Linear" in w for w in json.loads(d.out)["warnings"])
