"""Training scenarios: a few optimizer steps of a tiny seeded transformers model, golden or with a fault.

`train(name, role, path, level=...)` runs scenario `name` as "golden" or "target" under
`opdiff.capture` (backward, the optimizer's update) and returns what diagnose should find
(`Expected`: step, direction, module, rank). Shared by tests, benches and the demo.
Two-rank scenarios run with `run_ranks` (torch.distributed, gloo on CPU).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import zoo

STEPS = 3


@dataclass
class Expected:
    """What a right diagnosis of the scenario says."""

    verdicts: tuple[str, ...]
    step: int | None = None
    direction: str | None = None
    module: str | None = None  # module path of the culprit (None: not asserted)
    rank: int | None = None
    ops: tuple[str, ...] = ()  # at aten level: a substring one of the culprit's op names contains


@dataclass
class Scenario:
    name: str
    model: str
    optimizer: str  # sgd | adamw
    description: str
    expected: Expected
    fault: Callable[[torch.nn.Module, int], None] | None = None  # (target model, step) before each step's forward
    target_optimizer: dict[str, Any] = field(default_factory=dict)  # hyperparameters the target changes
    fp16: bool = False
    init_scale: float = 2.0 ** 16
    world_size: int = 1
    fault_rank: int | None = None
    steps: int = STEPS  # how many steps the scenario needs to show its fault
    loss_scale: float = 1.0  # the target's loss is multiplied by this before backward (and never unscaled)


# -- faults ------------------------------------------------------------------------------------
def _ln_eps_from(step: int, path: str = "transformer.h.1.ln_1") -> Callable[[torch.nn.Module, int], None]:
    def apply(model: torch.nn.Module, k: int) -> None:
        if k == step:
            setattr(model.get_submodule(path), "eps", 1e-2)  # noqa: B010  (typed stubs: a Module attribute is a Tensor or Module)
    return apply


class _Gelu(torch.autograd.Function):
    """Exact GELU with a hand-written backward; `scale` != 1 makes the backward wrong (forward stays exact)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.scale = scale
        return torch.nn.functional.gelu(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
        pdf = torch.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
        return grad * ((cdf + x * pdf) * ctx.scale), None


class CustomGelu(torch.nn.Module):
    """An activation module computed by a custom autograd Function."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Gelu.apply(x, self.scale)


ACT = "transformer.h.1.mlp.act"


def _custom_act(model: torch.nn.Module, scale: float) -> None:
    model.get_submodule("transformer.h.1.mlp").act = CustomGelu(scale)


def _rotary(model: torch.nn.Module) -> None:
    with torch.no_grad():  # before capture: the fault is the model the target runs, not an op of the run
        getattr(model.get_submodule("model.rotary_emb"), "inv_freq").mul_(1.01)  # noqa: B009  (a buffer: stubs cannot know it)


def _overflow_at(step: int, path: str = "transformer.h.1.mlp.c_proj") -> Callable[[torch.nn.Module, int], None]:
    def apply(model: torch.nn.Module, k: int) -> None:
        if k == step:
            lin = model.get_submodule(path)
            forward = lin.forward
            lin.forward = lambda x: forward(x) * 1e7  # in fp16: inf
    return apply


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("late_forward", "gpt2", "sgd", "LayerNorm eps 1e-2 in block 1 from step 2 on",
             Expected(("fault",), 2, "forward", "transformer.h.1.ln_1", 0), fault=_ln_eps_from(2)),
    Scenario("next_step_forward", "gpt2", "sgd", "LayerNorm eps 1e-2 in block 1 from step 1 on",
             Expected(("fault",), 1, "forward", "transformer.h.1.ln_1", 0), fault=_ln_eps_from(1), steps=2),
    Scenario("backward_only", "gpt2", "sgd", "custom autograd GELU whose backward is 2% off (forward exact)",
             Expected(("fault",), 0, "backward", ACT, 0, ("mul",)), steps=1),
    Scenario("optimizer_lr", "gpt2", "adamw", "AdamW learning rate 1.1e-3 instead of 1e-3",
             Expected(("fault",), 0, "update", None, 0, ("addcdiv",)), target_optimizer={"lr": 1.1e-3}, steps=1),
    Scenario("rotary_shared", "llama", "sgd", "rotary frequencies x1.01: cos/sin read by every layer are wrong",
             Expected(("fault",), 0, "forward", "model.rotary_emb", 0), steps=1),
    Scenario("fp16_skip", "gpt2", "sgd", "fp16 autocast + GradScaler whose first steps overflow in both runs",
             Expected(("pass",)), fp16=True, init_scale=2.0 ** 40, steps=2),
    Scenario("fp16_overflow", "gpt2", "sgd", "fp16 autocast: block 1's c_proj output x1e7 at step 1 (inf in target only)",
             Expected(("overflow",), 1, "forward", "transformer.h.1.mlp.c_proj", 0), fault=_overflow_at(1), fp16=True,
             steps=2),
    Scenario("loss_scale", "gpt2", "sgd", "the loss multiplied by 1.1 before backward, never unscaled",
             Expected(("inputs-differ",), 0, "backward"), loss_scale=1.1, steps=1),
    Scenario("rank_fault", "gpt2", "sgd", "two-rank data parallel; LayerNorm eps 1e-2 in block 1 on rank 1 only",
             Expected(("fault",), 0, "forward", "transformer.h.1.ln_1", 1), fault=_ln_eps_from(0), world_size=2,
             fault_rank=1, steps=1),
)}

SIZES = {"gpt2": dict(layers=2, width=32, heads=2, seq=8, batch=2, vocab=64),
         "llama": dict(layers=2, width=32, heads=4, seq=8, batch=2, vocab=64)}
HYPER = {"sgd": dict(lr=0.1, momentum=0.9), "adamw": dict(lr=1e-3, weight_decay=0.01)}


def build(sc: Scenario, role: str, rank: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor], torch.optim.Optimizer]:
    """The model (the same seeded weights on every rank), this rank's batch, and the optimizer."""
    model, inputs = zoo.build(sc.model, seed=0, **SIZES[sc.model])
    if sc.name == "backward_only":
        _custom_act(model, 1.02 if role == "target" else 1.0)
    if sc.name == "rotary_shared" and role == "target":
        _rotary(model)
    if rank:
        gen = torch.Generator().manual_seed(100 + rank)
        inputs = {**inputs, "input_ids": torch.randint(0, SIZES[sc.model]["vocab"], inputs["input_ids"].shape, generator=gen)}
    inputs = {**inputs, "labels": inputs["input_ids"]}
    model.train()
    hyper = {**HYPER[sc.optimizer], **(sc.target_optimizer if role == "target" else {})}
    cls = torch.optim.SGD if sc.optimizer == "sgd" else torch.optim.AdamW
    return model, inputs, cls(model.parameters(), **hyper)


def _faulty(sc: Scenario, role: str, rank: int) -> bool:
    return role == "target" and sc.fault is not None and (sc.fault_rank is None or sc.fault_rank == rank)


def train(name: str, role: str, path: str | os.PathLike | None, *, level: str = "module", mode: str = "tensor",
          steps: int | None = None, rank: int = 0) -> Expected:
    """Run scenario `name` as golden or target for `steps` steps, captured into `path` (None: not captured)."""
    from ..capture import capture

    sc = SCENARIOS[name]
    steps = sc.steps if steps is None else steps
    model, inputs, opt = build(sc, role, rank)
    scaler = torch.amp.GradScaler("cpu", init_scale=sc.init_scale) if sc.fp16 else None
    world = torch.distributed.get_world_size() if sc.world_size > 1 else 1
    cap = capture(model, path, level=level, mode=mode, backward=True, optimizer=opt) if path is not None else None
    with cap if cap is not None else _Nothing():
        for k in range(steps):
            if _faulty(sc, role, rank):
                sc.fault(model, k)  # type: ignore[misc]
            with torch.autocast("cpu", dtype=torch.float16, enabled=sc.fp16):
                loss = model(**inputs).loss
            if role == "target" and sc.loss_scale != 1.0:
                loss = loss * sc.loss_scale
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if world > 1:
                for p in model.parameters():
                    assert p.grad is not None
                    torch.distributed.all_reduce(p.grad)
                    p.grad.div_(world)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad()
            if cap is not None:
                cap.step()  # type: ignore[attr-defined]  # a torch capture session (opdiff.capture returns it)
    return sc.expected


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _rank_main(rank: int, world: int, init: str, name: str, jobs: list[tuple[str, str, str]]) -> None:
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        for role, path, level in jobs:
            train(name, role, path, level=level, rank=rank)
    finally:
        torch.distributed.destroy_process_group()


def run_ranks(name: str, jobs: list[tuple[str, str, str]], workdir: str | os.PathLike) -> Expected:
    """Run a multi-rank scenario in `world_size` processes (gloo); each job is (role, dump path, level).

    Every rank writes its part (rank{R}/) of the same dump directory."""
    import torch.multiprocessing as mp

    sc = SCENARIOS[name]
    init = f"file://{Path(workdir).resolve() / 'dist-init'}"
    mp.spawn(_rank_main, args=(sc.world_size, init, name, jobs), nprocs=sc.world_size, join=True)
    return sc.expected


__all__ = ["SCENARIOS", "Scenario", "Expected", "train", "run_ranks", "CustomGelu"]
