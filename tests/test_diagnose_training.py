"""Training runs: diagnose across steps, the backward pass, the optimizer's update and two ranks.

Each scenario of opdiff.testing.training trains a tiny seeded GPT-2 or Llama with SGD or AdamW
for a step or two, golden and target, captured with backward=True and optimizer=; diagnose must
name the right step, pass (forward | backward | update), rank and module, at module and aten level.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import subprocess
import sys

from opdiff import load
from opdiff.capture import capture
from opdiff.diagnose import diagnose
from opdiff.testing import training


def opdiff(*args) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "opdiff", *map(str, args)], capture_output=True, text=True, timeout=300)


CASES = [("next_step_forward", "module"), ("next_step_forward", "aten"), ("backward_only", "module"),
         ("backward_only", "aten"), ("backward_only", "api"), ("optimizer_lr", "module"), ("optimizer_lr", "aten"), ("rotary_shared", "module"),
         ("rotary_shared", "aten"), ("fp16_skip", "module"), ("fp16_overflow", "module"), ("fp16_overflow", "aten")]


def _check(d, exp, level: str) -> None:
    assert d.verdict in exp.verdicts, d.summary
    if exp.step is None:
        assert d.culprit is None and d.first_divergence is None, d.summary
        return
    c = d.culprit
    assert c is not None, d.summary
    assert (c.step, c.direction, c.rank) == (exp.step, exp.direction, exp.rank), d.summary
    if exp.module is not None:
        assert c.module == exp.module, d.summary
    if level == "aten" and exp.ops:
        assert any(o in c.op for o in exp.ops), c.op
    fd = d.first_divergence
    assert fd is not None and (fd["step"], fd["rank"]) == (exp.step, exp.rank), fd
    doc = json.loads(json.dumps(d.to_json(), default=str))
    assert {"step", "direction", "rank"} <= set(doc["culprit"]) and doc["culprit"]["direction"] == exp.direction


@pytest.mark.parametrize("name,level", CASES, ids=[f"{n}-{lv}" for n, lv in CASES])
def test_scenario(name, level, tmp_path):
    exp = training.train(name, "golden", tmp_path / "g", level=level)
    training.train(name, "target", tmp_path / "t", level=level)
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    _check(d, exp, level)
    if name == "optimizer_lr":
        assert d.culprit.hyperparameters == {"lr": {"golden": 1e-3, "target": 1.1e-3}}
        assert "transformer.wte.weight" in d.culprit.parameters
    if name == "fp16_skip":  # both runs skipped their updates for inf gradients: no update records at all
        assert not any(r.direction == "update" for r in load(tmp_path / "t").records)


def test_two_ranks_fault_arrives_through_all_reduce(tmp_path):
    jobs = [(role, str(tmp_path / f"{role}-{lv}"), lv) for lv in ("module", "aten") for role in ("golden", "target")]
    exp = training.run_ranks("rank_fault", jobs, tmp_path)
    for lv in ("module", "aten"):
        g, t = tmp_path / f"golden-{lv}", tmp_path / f"target-{lv}"
        assert load(t).parts == [(0, 0), (1, 0)]
        assert any(r.op == "torch.distributed.all_reduce" for r in load(t, rank=0).records)
        d = diagnose(g, t, replay=False)
        _check(d, exp, lv)
        rank0 = [p for p in d.evidence.parts if p["rank"] == 0 and p["direction"] == "backward"]
        assert rank0 and rank0[0].get("arrived_from_rank") == 1, d.evidence.parts
    res = opdiff("diagnose", tmp_path / "golden-module", tmp_path / "target-module", "--no-replay")
    assert res.returncode == 1, res.stderr
    assert "at step 0, in the forward pass, on rank 1" in res.stdout


def test_step_narrows_and_parameters_from_an_earlier_update(tmp_path):
    """Diagnosing the forward passes only, the lr fault shows as parameters that differ at step 1 after
    agreeing gradients at step 0: the update of step 0 is blamed. --step 1 alone cannot see step 0."""
    exp_g = training.train("optimizer_lr", "golden", tmp_path / "g", level="module", steps=2)
    training.train("optimizer_lr", "target", tmp_path / "t", level="module", steps=2)
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False, direction="forward")
    assert d.culprit is not None and (d.culprit.step, d.culprit.direction) == (0, "update"), d.summary
    assert d.culprit.parameters
    res = opdiff("diagnose", tmp_path / "g", tmp_path / "t", "--step", "1", "--json", "--no-replay")
    doc = json.loads(res.stdout)
    assert (doc["culprit"]["step"], doc["culprit"]["direction"]) == (1, "forward"), doc["summary"]
    assert doc["culprit"]["how"] == "parameter", "the first step diagnosed: a checkpoint/loading finding"
    assert exp_g.direction == "update"


def test_dynamic_capture_by_condition(tmp_path, monkeypatch):
    """`when=` picks steps at run time (a loss spike); OPDIFF_STEPS picks them without touching the script."""
    model, inputs, opt = training.build(training.SCENARIOS["optimizer_lr"], "golden")
    losses: list[float] = []
    spike = lambda step: bool(losses) and losses[-1] > 0
    with capture(model, tmp_path / "a", when=spike, optimizer=opt) as cap:
        for _ in range(2):
            loss = model(**inputs).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            cap.step()
    assert [s for _, s in load(tmp_path / "a").parts] == [1]
    monkeypatch.setenv("OPDIFF_STEPS", "1")
    with capture(model, tmp_path / "b") as cap:
        for _ in range(2):
            model(**inputs)
            cap.step()
    assert [s for _, s in load(tmp_path / "b").parts] == [1]


@pytest.mark.parametrize("level", ["module", "api", "aten"])
def test_loss_scale_is_the_gradient_handed_to_the_model(level, tmp_path):
    """A loss scaled outside the model (never unscaled): the backward pass starts from a gradient that differs,
    at every level the verdict says so (inputs-differ of the backward pass), not a module of the model.
    Module level used to blame the last LayerNorm, whose output gradient "no recorded op produced"."""
    training.train("loss_scale", "golden", tmp_path / "g", level=level)
    training.train("loss_scale", "target", tmp_path / "t", level=level)
    d = diagnose(tmp_path / "g", tmp_path / "t", replay=False)
    assert d.verdict == "inputs-differ", d.summary
    assert d.culprit is None
    assert "in the backward pass" in d.summary and "gradients handed to the model's outputs" in d.summary, d.summary
    assert "GPT2LMHeadModel#0/backward/output/loss" in [i["target"] for i in d.to_json()["evidence"]["inputs"]]
