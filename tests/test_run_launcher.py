"""`opdiff run -o DUMP -- python train.py`: unmodified training scripts (written here) captured and diagnosed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import opdiff

TRAIN = '''
import argparse, torch
from opdiff.testing import zoo
ap = argparse.ArgumentParser()
ap.add_argument("--losses", required=True)
ap.add_argument("--opt", default="sgd")
ap.add_argument("--lr-at-2", type=float, default=None)
ap.add_argument("--eps-at-2", type=float, default=None)
a = ap.parse_args()
model, inputs = zoo.build("gpt2", seed=0, layers=2, width=32, heads=2, seq=8, batch=2, vocab=64)
model.train()
inputs = {**inputs, "labels": inputs["input_ids"]}
if a.opt == "sgd":
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
else:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
out = []
for k in range(3):
    if k == 2 and a.lr_at_2 is not None:
        for g in opt.param_groups:
            g["lr"] = a.lr_at_2
    if k == 2 and a.eps_at_2 is not None:
        model.get_submodule("transformer.h.1.ln_1").eps = a.eps_at_2
    loss = model(**inputs).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    out.append(loss.item().hex())
open(a.losses, "w").write("\\n".join(out))
'''

DDP = '''
import argparse, torch, torch.distributed as dist
from opdiff.testing import zoo
ap = argparse.ArgumentParser()
ap.add_argument("--fault-rank", type=int, default=None)
a = ap.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
model, inputs = zoo.build("gpt2", seed=0, layers=2, width=32, heads=2, seq=8, batch=2, vocab=64)
model.train()
ids = torch.randint(0, 64, inputs["input_ids"].shape, generator=torch.Generator().manual_seed(100 + rank))
if a.fault_rank == rank:
    model.get_submodule("transformer.h.1.ln_1").eps = 1e-2
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for k in range(2):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad.div_(world)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
'''

SMALL = '''
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
for k in range(3):
    if k == int(sys.argv[1]):
        raise RuntimeError("the script fails at step " + sys.argv[1])
    loss = model(x).square().mean()
    if len(sys.argv) > 3 and k == int(sys.argv[3]):
        loss = loss * 1000  # a loss spike
    loss.backward()
    opt.step()
    opt.zero_grad()
sys.exit(int(sys.argv[2]))
'''


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("run")
    for name, text in (("train.py", TRAIN), ("ddp.py", DDP), ("small.py", SMALL)):
        (d / name).write_text(text)
    return d


def opdiff_cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opdiff", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def diagnose(work: Path, golden: str, target: str) -> dict:
    r = opdiff_cli(work, "diagnose", golden, target, "--json", "--no-replay")
    assert r.returncode == 1, r.stderr
    return json.loads(r.stdout)


def meta(path: Path) -> dict:
    return json.loads((path / "meta.json").read_text())


@pytest.mark.parametrize("opt,fault,expect", [
    ("sgd", "--eps-at-2=0.01", ("forward", "transformer.h.1.ln_1")),
    ("adamw", "--lr-at-2=0.0011", ("update", None)),
])
def test_golden_and_faulty_target_diagnosed_at_step_2(work, opt, fault, expect):
    py = sys.executable
    g = opdiff_cli(work, "run", "--steps", "0,2", "-o", f"g-{opt}", "--", py, "train.py", "--losses", f"g-{opt}.txt", "--opt", opt)
    assert g.returncode == 0, g.stderr
    if opt == "sgd":  # the script's own results are bitwise the same under capture
        plain = subprocess.run([py, "train.py", "--losses", "plain.txt"], cwd=work, capture_output=True)
        assert plain.returncode == 0, plain.stderr
        assert (work / "g-sgd.txt").read_text() == (work / "plain.txt").read_text()
    t = opdiff_cli(work, "run", "--steps", "0,2", "-o", f"t-{opt}", "--", py, "train.py", "--losses", f"t-{opt}.txt",
                   "--opt", opt, fault)
    assert t.returncode == 0, t.stderr
    m = meta(work / f"g-{opt}")
    assert m["complete"] is True and m["steps_captured"] == [0, 2] and m["model"] == "GPT2LMHeadModel"
    assert m["optimizer"] == ("SGD" if opt == "sgd" else "AdamW") and m["run"]["exit_code"] == 0
    assert not (work / f"g-{opt}" / ".opdiff-run").exists()
    c = diagnose(work, f"g-{opt}", f"t-{opt}")["culprit"]
    assert (c["step"], c["direction"]) == (2, expect[0])
    if expect[1] is not None:
        assert c["module"] == expect[1]
    else:
        assert c["hyperparameters"]["lr"] == {"golden": 1e-3, "target": 1.1e-3}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_rank_torchrun_one_dump_with_both_ranks(work):
    def torchrun(out: str, *extra: str) -> None:
        r = opdiff_cli(work, "run", "-o", out, "--", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                       "--master_port", str(_free_port()), "ddp.py", *extra)
        assert r.returncode == 0, r.stderr
    torchrun("dg")
    torchrun("dt", "--fault-rank", "1")
    assert opdiff.load(work / "dg").parts == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert meta(work / "dg")["world_size"] == 2
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("dg")) == ["dg"]  # nothing beside the dump
    c = diagnose(work, "dg", "dt")["culprit"]
    assert (c["step"], c["direction"], c["rank"], c["module"]) == (0, "forward", 1, "transformer.h.1.ln_1")


def test_when_loss_above_captures_the_step_after_a_spike(work):
    r = opdiff_cli(work, "run", "--when-loss-above", "5", "-o", "spike", "--", sys.executable, "small.py", "9", "0", "1")
    assert r.returncode == 0, r.stderr
    assert meta(work / "spike")["steps_captured"] == [2]
    assert opdiff.load(work / "spike").parts == [(0, 2)]


def test_exception_leaves_a_readable_incomplete_dump_and_exit_codes_pass_through(work):
    r = opdiff_cli(work, "run", "-o", "fail", "--", sys.executable, "small.py", "2", "0")
    assert r.returncode == 1 and "the script fails at step 2" in r.stderr
    m = meta(work / "fail")
    assert m["complete"] is False and m["steps_captured"] == [0, 1]
    d = opdiff.load(work / "fail", step=1)
    assert not d.complete and d.select(module="0")
    # OPDIFF_STEPS chooses the steps when --steps is not given; the script's exit code comes back
    r = opdiff_cli(work, "run", "-o", "exit3", "--", sys.executable, "small.py", "9", "3", env={"OPDIFF_STEPS": "1"})
    assert r.returncode == 3, r.stderr
    assert meta(work / "exit3")["complete"] is True and meta(work / "exit3")["steps_captured"] == [1]


def test_refuses_a_non_empty_dump_without_force(work):
    (work / "busy").mkdir()
    (work / "busy" / "notes.txt").write_text("mine")
    r = opdiff_cli(work, "run", "-o", "busy", "--", sys.executable, "small.py", "9", "0")
    assert r.returncode == 2 and "busy" in r.stderr and "--force" in r.stderr
    r = opdiff_cli(work, "run", "--force", "-o", "busy", "--", sys.executable, "small.py", "9", "0")
    assert r.returncode == 2 and "not an opdiff dump" in r.stderr
    assert (work / "busy" / "notes.txt").read_text() == "mine"
    r = opdiff_cli(work, "run", "--steps", "x", "-o", "bad", "--", sys.executable, "small.py", "9", "0")
    assert r.returncode == 2 and "--steps" in r.stderr and not (work / "bad").exists()
