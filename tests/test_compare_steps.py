"""Multi-step dumps (issue 20): compare covers every step both dumps hold, diagnose never passes a step it
did not look at, and the two agree, whatever the fault, level or pass where it starts."""

from __future__ import annotations

import csv
import json

import pytest

torch = pytest.importorskip("torch")

from opdiff.compare import compare
from opdiff.diagnose import diagnose


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.norm, self.b = torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.tanh(self.norm(self.a(x))))


def _run(path, level: str, fault_step: int | None, train: bool, steps: int = 3) -> None:
    """`steps` steps of Net (training ones with an optimizer); from `fault_step` on, the norm's eps is wrong."""
    from opdiff.capture import capture

    torch.manual_seed(0)
    net, x = Net(), torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1) if train else None
    with capture(net, path, level=level, mode="tensor", backward=train, optimizer=opt) as cap:
        for k in range(steps):
            if fault_step is not None and k == fault_step:
                net.norm.eps = 1e-1
            out = net(x)
            if opt is not None:
                out.square().mean().backward()
                opt.step()
                opt.zero_grad()
            cap.step()


@pytest.mark.parametrize("level,train,fault_step", [("module", True, 1), ("aten", True, 2), ("module", False, 2),
                                                    ("api", False, 1)])
def test_fault_after_the_first_step_fails_compare_and_diagnose(tmp_path, level, train, fault_step):
    g, t = tmp_path / "g", tmp_path / "t"
    _run(g, level, None, train)
    _run(t, level, fault_step, train)
    cmp = compare(str(g), str(t), workers=1)
    assert cmp.failed_steps() and cmp.failed_steps()[0] == (0, fault_step)
    assert not cmp.passed()
    assert all(s >= fault_step for _, s in cmp.failed_steps())
    for handed in (cmp, compare(str(g), str(t), workers=1, all_steps=False)):  # one step handed in: the rest too
        d = diagnose(str(g), str(t), comparison=handed, replay=False, workers=1)
        assert d.verdict != "pass" and d.exit_code != 0
        assert d.culprit is not None and d.culprit.step == fault_step
        assert d.culprit.module == "norm"
    first = compare(str(g), str(t), workers=1, all_steps=False)
    assert first.passed() and not first.other_steps  # the first step alone is clean: what hid the fault


def test_cli_compare_and_diagnose_agree_on_a_later_step(tmp_path, opdiff_cli):
    g, t = tmp_path / "g", tmp_path / "t"
    _run(g, "module", None, False)
    _run(t, "module", 2, False)
    r = opdiff_cli("compare", g, t, "-o", tmp_path / "o", "--no-progress", "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "at step(s) 2" in r.stdout and "first diverges at step 2" in r.stdout
    doc = json.loads((tmp_path / "o" / "compare.json").read_text())  # the report shows every step, not the first
    assert sorted({p["step"] for p in doc["pairs"]}) == [0, 1, 2]
    assert [s["passed_thresholds"] for s in doc["summary"]["steps"]] == [True, True, False]
    assert doc["summary"]["gate"]["step"] == 2 and doc["summary"]["gate"]["culprit"] == "norm"
    rc = opdiff_cli("compare", g, t, "-o", tmp_path / "oc", "--no-progress", "--format", "csv")
    rows = list(csv.DictReader((tmp_path / "oc" / "compare.csv").open()))
    assert rc.returncode == 1 and {r["Step"] for r in rows} == {"0", "1", "2"}
    assert {r["Step"] for r in rows if r["Result"] == "FAIL"} == {"2"}
    r0 = opdiff_cli("compare", g, t, "-o", tmp_path / "o0", "--no-progress", "--format", "json", "--step", "0")
    assert r0.returncode == 0, r0.stdout + r0.stderr  # --step narrows to that step, as before
    d = opdiff_cli("diagnose", g, t, "--no-replay")
    assert d.returncode == 1 and "step 2" in d.stdout, d.stdout + d.stderr


def test_clean_multi_step_runs_pass_everywhere(tmp_path):
    g, t = tmp_path / "g", tmp_path / "t"
    _run(g, "module", None, True)
    _run(t, "module", None, True)
    cmp = compare(str(g), str(t), workers=1)
    assert len(cmp.by_step()) == 3 and cmp.passed()
    d = diagnose(str(g), str(t), comparison=cmp, replay=False, workers=1)
    assert d.verdict == "pass" and len(d.evidence.parts or []) >= 3
