"""Issue 20: `opdiff compare` and `opdiff diagnose` share one pass/fail gate (compare/gate.py, diagnose/gate.py).

Real captures: an attention mask in two encodings (compare judges a mask by what it lets through, as diagnose
does), and sweep cases on real transformers models: a benign SDPA target in bf16 whose pairs exceed compare's
fixed per-pair thresholds, a small planted fault that stays under them. On each, the two commands give the same
pass/fail; `--gate thresholds` keeps msprobe's per-pair semantics.
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from opdiff.compare import compare
from opdiff.diagnose import diagnose
from opdiff.diagnose.gate import judge

FILL = torch.finfo(torch.float32).min


class Attention(torch.nn.Module):
    """One attention: eager (additive float mask) or SDPA (boolean mask), as transformers switches them."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self.proj(x)
        if mask.dtype == torch.bool:
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        scores = q @ q.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask
        return torch.softmax(scores, dim=-1) @ q


def _attention_run(path, mask: torch.Tensor) -> None:
    from opdiff.capture import capture

    torch.manual_seed(0)
    net, x = Attention(), torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), capture(net, path, level="module", mode="tensor"):
        net(x, mask)


def _keep(extra: bool = False) -> torch.Tensor:
    keep = torch.tril(torch.ones(6, 6, dtype=torch.bool)).expand(2, 6, 6).clone()
    if extra:
        keep[:, 1, 3] = True  # one more element let through: another mask
    return keep


def _mask_row(cmp):
    return next(r for r in cmp.results if r.target is not None and r.target.role == "input" and r.target.pos == "1")


def test_a_mask_in_two_encodings_passes_compare_and_diagnose(tmp_path):
    g, t = tmp_path / "eager", tmp_path / "sdpa"
    keep = _keep()
    _attention_run(g, torch.zeros(2, 6, 6).masked_fill(~keep, FILL))
    _attention_run(t, keep)
    cmp = compare(str(g), str(t), workers=1)
    row = _mask_row(cmp)
    assert (row.golden.dtype, row.target.dtype, row.result) == ("float32", "bool", "PASS"), row.err_message
    assert "same mask in another encoding" in row.err_message
    j = judge(cmp)
    d = diagnose(str(g), str(t), replay=False, workers=1)
    assert j.passed and cmp.passed() and d.verdict == "pass", (j, d.summary)


def test_a_mask_letting_another_element_through_fails_both(tmp_path):
    g, t = tmp_path / "eager", tmp_path / "sdpa"
    _attention_run(g, torch.zeros(2, 6, 6).masked_fill(~_keep(), FILL))
    _attention_run(t, _keep(extra=True))
    cmp = compare(str(g), str(t), workers=1)
    assert _mask_row(cmp).result == "FAIL"
    j = judge(cmp)
    d = diagnose(str(g), str(t), replay=False, workers=1)
    assert not j.passed and not cmp.passed() and d.exit_code == 1 and j.verdict == d.verdict


def test_neg_inf_fill_is_the_same_mask_as_finfo_min(tmp_path):
    g, t = tmp_path / "min", tmp_path / "inf"
    keep = _keep()
    _attention_run(g, torch.zeros(2, 6, 6).masked_fill(~keep, FILL))
    _attention_run(t, torch.zeros(2, 6, 6).masked_fill(~keep, -math.inf))
    cmp = compare(str(g), str(t), workers=1)
    row = _mask_row(cmp)
    assert row.result == "PASS" and "lets through" in row.err_message, row.err_message
    assert cmp.passed_thresholds() and judge(cmp).passed


def _cli(opdiff_cli, *args):
    r = opdiff_cli(*[str(a) for a in args])
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r


# (arch, class, level, precision, passes): cases where compare's fixed thresholds and diagnose disagreed before the
# one gate: a benign SDPA target in bf16 over the thresholds, and an activation fault under them
CASES = [("llama", "sdpa", "api", "bf16", True), ("bert", "activation", "aten", "fp32", False)]


@pytest.mark.slow
@pytest.mark.parametrize("arch,klass,level,precision,ok", CASES, ids=[c[1] for c in CASES])
def test_benign_target_and_small_fault_agree_in_both_commands(tmp_path, opdiff_cli, arch, klass, level, precision, ok):
    pytest.importorskip("transformers")
    from opdiff.testing.sweep.case import Case, run

    rec = run(Case(arch, klass, level, precision), tmp_path / "case")  # real model, planted and proved by the oracle
    assert rec["oracle"]["valid"] and rec["compare_passed"] == rec["diagnose_passed"] == ok, rec
    g, target = tmp_path / "case" / "golden", tmp_path / "case" / "target"
    cmp = compare(str(g), str(target), workers=1)
    over = sum(r.result == "FAIL" for r in cmp.results)
    assert cmp.passed_thresholds() != ok, "the fixed thresholds must disagree with the noise rule here (else no test)"
    out = tmp_path / "out"
    c = _cli(opdiff_cli, "compare", g, target, "-o", out, "--format", "json,csv", "--no-progress")
    d = _cli(opdiff_cli, "diagnose", g, target, "--no-replay", "--json")
    assert (c.returncode == 0) == (d.returncode == 0) == ok, c.stdout + d.stdout
    doc = json.loads((out / "compare.json").read_text())
    gate = doc["summary"]["gate"]
    assert gate["rule"] == "noise" and gate["verdict"] == json.loads(d.stdout)["verdict"] and doc["summary"]["passed"] is ok
    said = " ".join(c.stdout.split())
    assert f"gate noise: {over} pair(s) exceed" in said if over else "gate noise: no pair exceeds" in said
    fixed = _cli(opdiff_cli, "compare", g, target, "-o", out, "--force", "--format", "json", "--no-progress",
                 "--gate", "thresholds")
    assert fixed.returncode == (0 if cmp.passed_thresholds() else 1), fixed.stdout  # msprobe's semantics, on request
    assert json.loads((out / "compare.json").read_text())["summary"]["gate"]["rule"] == "thresholds"


class Head(torch.nn.Module):
    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.lin, self.cut = torch.nn.Linear(8, 4), cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y[:, :3] if self.cut else y  # the target drops a column of the model's output


def test_a_model_output_of_another_shape_is_never_a_pass(tmp_path):
    from opdiff.capture import capture

    for name, cut in (("g", False), ("t", True)):
        torch.manual_seed(0)
        net = Head(cut)
        with torch.no_grad(), capture(net, tmp_path / name, level="module", mode="tensor"):
            net(torch.ones(2, 8))
    cmp = compare(str(tmp_path / "g"), str(tmp_path / "t"), workers=1)
    assert any(r.status == "shape-mismatch" for r in cmp.results)
    d = diagnose(str(tmp_path / "g"), str(tmp_path / "t"), replay=False, workers=1)
    j = judge(cmp, allow_unmatched=True)
    assert d.verdict == "inconclusive" and not j.passed and not j.passes(allow_unmatched=True), d.summary
