"""The one rule for records without counterpart (compare/unmatched.py, docs/reliability.md): always
reported; a failure of compare (exit 1, `Comparison.passed()`) and a non-pass of diagnose (verdict,
exit 1) only when such a record may carry a difference no compared pair shows. Both commands agree."""

from __future__ import annotations

import json

import numpy as np
import pytest

from opdiff.compare.run import compare
from opdiff.compare.unmatched import WHY_MODEL_OUTPUT, WHY_MOSTLY, WHY_UNOBSERVED
from opdiff.diagnose import diagnose
from opdiff.testing.synthetic import OpRun, Tensor, write_dump
from trust_helpers import run_cli

RNG = np.random.default_rng(3)
X = RNG.standard_normal((4, 8)).astype(np.float32)
H = RNG.standard_normal((4, 8)).astype(np.float32)
Y = np.tanh(H).astype(np.float32)


def _run(*, fused: bool = False, inside: list[Tensor] | None = None, after: list[Tensor] | None = None,
         outputs: int = 1) -> list[Tensor]:
    """A model with one block (a Linear then a Tanh); `fused`: the block computed by one kernel (its
    children not recorded); `inside`: extra records in the block; `after`: extra records after it."""
    ts = [Tensor("", "Model", "input", "0", X), Tensor("blk", "Block", "input", "0", X)]
    ts += inside or []
    if not fused:
        ts += [Tensor("blk.fc", "Linear", "output", "0", H), Tensor("blk.act", "Tanh", "output", "0", Y)]
    ts.append(Tensor("blk", "Block", "output", "0", Y))
    ts += after or []
    ts += [Tensor("", "Model", "output", str(i), Y * (i + 1)) for i in range(outputs)]
    return ts


CASES = {  # name: (target tensors, passes, why the failing records fail)
    "fused": (_run(fused=True), True, None),
    "decomposed": (_run(inside=[Tensor("blk.fc", "Mul", "output", "0", H * 2)]), True, None),
    "model_output": (_run(outputs=2), False, WHY_MODEL_OUTPUT),
    "unobserved": (_run(after=[Tensor("head", "Linear", "output", "0", Y * 3)]), False, WHY_UNOBSERVED),
    "mostly": (_run(inside=[Tensor("blk.fc", "Mul", "output", "0", H, call=i) for i in range(20)]), False, WHY_MOSTLY),
}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("unmatched")
    write_dump(base / "golden", _run())
    for name, (ts, _, _) in CASES.items():
        write_dump(base / name, ts)
    return base


@pytest.mark.parametrize("case", list(CASES))
def test_compare_and_diagnose_agree_on_unmatched_records(dumps, tmp_path, case):
    _, passes, why = CASES[case]
    g, t = dumps / "golden", dumps / case
    cmp = compare(g, t)
    assert cmp.unmatched("golden") or cmp.unmatched("target")
    assert cmp.counts()["FAIL"] == 0  # every compared pair agrees: only the unmatched records decide
    failing = cmp.failing_unmatched()
    assert cmp.passed() is passes and (not failing) is passes
    if why is not None:
        assert {f.why for f in failing} == {why}
    diag = diagnose(g, t, replay=False)
    assert (diag.verdict == "pass") is passes, (diag.verdict, diag.summary)
    c = run_cli("compare", g, t, "-o", tmp_path / "o", "--format", "json", "--no-progress")
    d = run_cli("diagnose", g, t, "--no-replay", "--json")
    assert c.code == d.code == (0 if passes else 1), c.text + d.text
    assert "unmatched" in c.out  # reported either way
    assert cmp.passed(allow_unmatched=True)
    if not passes:
        assert any("no counterpart" in w and why in w for w in json.loads(d.out)["warnings"])


def test_an_added_op_is_vouched_for_by_what_consumes_it(tmp_path):
    """Producer links (`src`): an op the target adds whose output a compared op consumes passes, even in a
    module of its own; the same op whose output nothing compared consumes fails."""
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    for name, consumed in (("golden", None), ("consumed", True), ("dead", False)):
        run = OpRun(tmp_path / name)
        src = run.op("a", "aten.exp.default", [(x, None)], [np.exp(x)])[0]
        if consumed is not None:
            extra = run.op("b", "aten.abs.default", [(np.exp(x), src)], [np.exp(x)])[0]
            src = extra if consumed else src
        run.op("c", "aten.tanh.default", [(np.exp(x), src)], [np.tanh(np.exp(x))])
        run.close()
    for name, passes in (("consumed", True), ("dead", False)):
        cmp = compare(tmp_path / "golden", tmp_path / name)
        assert [r.op for r in cmp.unmatched("target")] == ["aten.abs.default"] * 2
        assert cmp.passed() is passes, [(f.record.name, f.why) for f in cmp.failing_unmatched()]


def test_a_predicate_is_vouched_for_by_what_runs_after_it(tmp_path):
    """`if not torch.isfinite(x).all()`: an added check whose one-element bool only Python reads decides which
    ops run next, and those are compared: it passes. The same check with nothing compared after it, or one
    leaving a whole bool tensor nothing reads, still fails."""
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    fin = np.isfinite(x)
    for name in ("golden", "checked", "checked_last", "mask_unread"):
        run = OpRun(tmp_path / name)
        src = run.op("a", "aten.exp.default", [(x, None)], [np.exp(x)])[0]
        if name == "checked":
            ok = run.op("a", "aten.isfinite.default", [(np.exp(x), src)], [fin])[0]
            run.op("a", "aten.all.default", [(fin, ok)], [np.array(True)])
        if name == "mask_unread":
            run.op("a", "aten.isfinite.default", [(np.exp(x), src)], [fin])
        run.op("c", "aten.tanh.default", [(np.exp(x), src)], [np.tanh(np.exp(x))])
        if name == "checked_last":
            ok = run.op("c", "aten.isfinite.default", [(np.exp(x), src)], [fin])[0]
            run.op("c", "aten.all.default", [(fin, ok)], [np.array(True)])
        run.close()
    for name, passes in (("checked", True), ("checked_last", False), ("mask_unread", False)):
        cmp = compare(tmp_path / "golden", tmp_path / name)
        assert cmp.unmatched("target"), name
        assert cmp.passed() is passes, (name, [(f.record.name, f.why) for f in cmp.failing_unmatched()])
        assert (diagnose(tmp_path / "golden", tmp_path / name, replay=False).verdict == "pass") is passes, name


def test_bf16_autocast_casts_do_not_fail_compare_and_both_commands_agree(tmp_path):
    """The issue's example: an fp32 run against the same model under bf16 autocast, at aten level. The
    casts autocast inserts are reported, and neither compare nor diagnose fails on them."""
    torch = pytest.importorskip("torch")
    from opdiff.capture import capture

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    with capture(m, tmp_path / "fp32", level="aten", mode="tensor"), torch.no_grad():
        m(x)
    with capture(m, tmp_path / "bf16", level="aten", mode="tensor"), torch.no_grad(), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        m(x)
    g, t = tmp_path / "fp32", tmp_path / "bf16"
    cmp = compare(g, t)
    casts = cmp.unmatched("target")
    assert casts and {r.op for r in casts} == {"aten._to_copy.default"}
    assert cmp.failing_unmatched() == [] and cmp.passed()
    assert diagnose(g, t, replay=False).verdict == "pass"
    c = run_cli("compare", g, t, "-o", tmp_path / "o", "--format", "json", "--no-progress")
    d = run_cli("diagnose", g, t, "--no-replay")
    assert c.code == d.code == 0, c.text + d.text
    assert f"unmatched target records: {len(casts)}" in c.out



def _tail_run(path, fused: bool, norm_reads_block: bool) -> None:
    """A model ending in a block (a Linear, then a dropout whose output a residual add the capture does not
    see turns into the block's output; the block also returns its attention weights as output 1) and a final
    norm; `fused`: the target runs the block as one kernel, only its input and the norm are recorded."""
    y2 = np.tanh(Y).astype(np.float32)
    run = OpRun(path, level="module")
    blk = run.begin("blk", "Block", [X])
    if not fused:
        h = run.op("blk.fc", "Linear", [(X, None)], [H])[0]
        run.op("blk.drop", "Dropout", [(H, h)], [Y])
        node, module, op, call = blk
        out = run.tensor(node, module, op, call, "output", "0", Y, level="module")
        run.tensor(node, module, op, call, "output", "1", H, level="module")
    run.op("norm", "LayerNorm", [(Y, out if not fused and norm_reads_block else None)], [y2])
    run.close()


@pytest.mark.parametrize("norm_reads_block", [True, False])
def test_a_fused_block_tail_is_vouched_for_by_what_reads_the_block_output(tmp_path, norm_reads_block):
    """A fused last block (as ORT fuses it): its children's outputs and its own outputs have no counterpart.
    The dropout's output is vouched for by its block's output, which the compared final norm reads (`src`), and
    the block's extra output by the call's first output. With no producer link to anything compared, both fail."""
    _tail_run(tmp_path / "golden", False, norm_reads_block)
    _tail_run(tmp_path / "target", True, norm_reads_block)
    cmp = compare(tmp_path / "golden", tmp_path / "target")
    assert {r.module for r in cmp.unmatched("golden")} == {"blk", "blk.fc", "blk.drop"}
    failing = {(f.record.module, f.record.pos) for f in cmp.failing_unmatched()}
    if norm_reads_block:
        assert failing == set() and cmp.passed()
    else:
        assert {("blk.drop", "0"), ("blk", "1")} <= failing and not cmp.passed()
