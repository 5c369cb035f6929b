"""report.write / report.render: one registry keyed by (result type, format), every file written atomically."""

from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pytest
from rich.console import Console

from opdiff import report
from opdiff.base.errors import OpdiffError
from opdiff.compare import compare
from opdiff.compare.run import Comparison
from opdiff.diagnose import diagnose
from opdiff.replay import ReplayResult, confirm
from opdiff.report.registry import WRITERS
from opdiff.testing.synthetic import Tensor, write_dump

RNG = np.random.default_rng(1)
G = [Tensor(f"layers.{i}", "Linear", "output", "0", RNG.standard_normal((4, 8)).astype(np.float32)) for i in range(6)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("reg")
    t = [Tensor(x.module, x.op, x.role, x.pos, x.array.copy()) for x in G]
    for x in t[3:]:
        x.array = x.array * 1.05  # layers.3 goes wrong and what follows inherits it
    write_dump(root / "g", G)
    write_dump(root / "t", t)
    cmp = compare(root / "g", root / "t")
    return cmp, diagnose(root / "g", root / "t", comparison=cmp)


def test_every_key_names_a_real_class():
    """Keys are class paths (so report need not import hunting or fusion): each must resolve to a class."""
    for kind, _fmt in WRITERS:
        module, _, name = kind.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), name), type), kind


def test_every_comparison_format_written_in_place(runs, tmp_path):
    cmp, _ = runs
    fmts = [f for f in report.formats(cmp) if f != report.CONSOLE]
    assert set(fmts) == {"csv", "xlsx", "json", "html", "model-explorer", "msprobe-csv", "msprobe-xlsx"}
    for f in fmts:
        path = report.write(cmp, f, report.output_path(tmp_path, f, "compare"))
        assert path.is_dir() if f in report.FOLDERS else path.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert len(doc["pairs"]) == len(cmp.results) == 6


def test_diagnosis_json_and_html_through_the_registry(runs, tmp_path):
    cmp, d = runs
    assert d.verdict == "fault" and d.culprit is not None and d.culprit.module == "layers.3"
    report.write(d, "json", tmp_path / "d.json")
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["verdict"] == "fault" and doc["culprit"]["module"] == "layers.3"
    assert doc == json.loads(report.text(d))
    report.write(d, "html", tmp_path / "r.html", comparison=cmp, title="t <x>")
    assert "t &lt;x&gt;" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_subclass_is_written_as_its_base(runs):
    cmp, _ = runs

    class Mine(Comparison):
        pass

    assert report.writer(Mine.__new__(Mine), "csv") is report.writer(cmp, "csv")


def test_unknown_format_is_one_line_naming_the_offer(runs, tmp_path):
    cmp, d = runs
    with pytest.raises(OpdiffError) as err:
        report.write(d, "xlsx", tmp_path / "d.xlsx")
    assert "Diagnosis" in str(err.value) and "json" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(OpdiffError):
        report.write(object(), "json", tmp_path / "o.json")
    with pytest.raises(OpdiffError):
        report.write(cmp, report.CONSOLE, tmp_path / "c.txt")
    assert not list(tmp_path.iterdir())


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(runs, tmp_path):
    """Atomic: the earlier report stays whole when writing a new one fails half-way."""
    _, d = runs
    path = tmp_path / "r.html"
    path.write_text("old\n")
    with pytest.raises(TypeError):  # the HTML page of a diagnosis needs its comparison: the writer raises
        report.write(d, "html", path)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["r.html"]


def test_console_renders_every_result(runs, tmp_path):
    cmp, d = runs
    con = Console(record=True, width=200)
    report.render(cmp, con, top=2)
    report.render(d, con)
    skipped = ReplayResult.skipped("no culprit to replay")
    report.render(ReplayResult("unsupported", "n#0", reason="why [b]not[/b]"), con)
    out = con.export_text()
    assert "FAIL" in out and "verdict: FAIL" not in out and "layers.3" in out and "why [b]not[/b]" in out
    assert skipped.to_json() == {"status": "skipped", "reason": "no culprit to replay"}


def test_confirm_returns_the_replay_result_diagnose_keeps(runs, tmp_path):
    """confirm takes the typed Diagnosis and answers with replay's own ReplayResult (stats-free synthetic dumps
    have no call lines: skipped, with why)."""
    cmp, d = runs
    res = confirm(cmp.golden, cmp.target, d)
    assert isinstance(res, ReplayResult) and res.status == "skipped" and res.reason
    assert set(res.to_json()) >= {"status", "reason"}


def test_fusion_and_hunt_results_render_without_report_importing_them(tmp_path):
    """Both live above report: their console writers are found by class path, and fed a real result."""
    from opdiff.fusion.bisect import Bisection
    from opdiff.fusion.ort import FusionResult
    from opdiff.hunting import HuntResult, PassInfo

    b = Bisection(["GeluFusion", "AttentionFusion"], ["GeluFusion"], [(["GeluFusion"], True, 0.5)])
    fr = FusionResult("onnxruntime", False, tmp_path, first_fail="n\x1b[31m#0", bisection=b, culprits=["GeluFusion"],
                      fused_nodes={"Gelu_1": ["Mul_0", "Erf_0"]}, restored=True, counts={"PASS": 3, "FAIL": 1},
                      extra={"observed": {"nodes": 3}})  # ORT's observed: no compiled regions
    hr = HuntResult(tmp_path, "pass", None, None, None, passes=[PassInfo("pass1-golden", "stats", "module", None, 4, 0, 64, 9)])
    con = Console(record=True, width=200)
    report.render(fr, con)
    report.render(hr, con)
    out = con.export_text()
    assert "pass at fault: GeluFusion (turning it off restores agreement)" in out
    assert "made Gelu_1 from Mul_0, Erf_0" in out and "bisection: 2 switches, 1 runs" in out
    assert "diverges first at n\\x1b[31m#0" in out  # a name from the model cannot drive the terminal
    assert "pass1-golden" in out and "verdict: pass" in out
    report.write(fr, "json", tmp_path / "fusion.json")
    assert json.loads((tmp_path / "fusion.json").read_text())["culprits"] == ["GeluFusion"]
