"""Training fault classes of the sweep: a few optimizer steps of a small architecture, golden or faulty.

Each class plants its fault with plain torch code (a custom autograd Function, one param group's
hyperparameters, a change from step N, a wrong loss scale) and says where a right diagnosis lands: step,
direction (forward / backward / update) and, where one module owns it, the module. The oracle replays both
runs without capture and proves the claim: everything agrees before the fault's step and direction, and the
planted quantity differs there beyond rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import faults as F
from . import archs, oracle

STEPS = 2


@dataclass
class Truth:
    step: int
    direction: str  # forward | backward | update
    culprits: tuple[str, ...]  # module paths; empty: any module (an optimizer group's update)
    description: str
    expect: tuple[str, ...] = ("fault",)


@dataclass
class Setup:
    """A training run: the model, its inputs, an optimizer, and the target's per-step fault hook."""

    model: Any
    inputs: dict[str, Any]
    optimizer: Any
    before_step: Callable[[int], None] | None = None  # called before step k's forward
    loss_scale: float = 1.0
    losses: list[float] = field(default_factory=list)  # each step's loss, as run


def _groups(model, block: str, **target: float) -> Any:
    """AdamW with the middle block's parameters in group 1 (the target changes that group's `target` settings)."""
    import torch

    inside = [p for n, p in model.named_parameters() if n.startswith(block + ".")]
    ids = {id(p) for p in inside}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups: list[dict[str, Any]] = [{"params": rest}, {"params": inside, **target}]
    return torch.optim.AdamW(groups, lr=1e-3, eps=1e-8, weight_decay=0.01)


def _wrong_backward(module) -> None:
    """Replace `module`'s forward by the same forward whose backward is 2 % off (a custom autograd Function)."""
    import torch

    forward = module.forward

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            with torch.no_grad():
                return forward(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                xx = x.detach().requires_grad_(True)
                (g,) = torch.autograd.grad(forward(xx), xx, grad)
            return g * 1.02

    module.forward = lambda x: Wrong.apply(x)


def setup(klass: str, arch: str, role: str) -> tuple[Setup, Truth]:
    """The golden or target run of training class `klass` on `arch` (ValueError: does not apply)."""
    model, inputs = archs.build(arch)
    model.train()
    for m in model.modules():  # dropout off: golden and target must be deterministic
        if type(m).__name__.startswith("Dropout"):
            m.p = 0.0
    block = F.middle_block(model)
    target = role == "target"
    if klass == "train_backward":
        path, act = F._first(model, block, lambda p, m: F._act_kind(m) is not None, "activation module")
        if target:
            _wrong_backward(act)
        return Setup(model, inputs, _groups(model, block)), Truth(0, "backward", (path,), f"{path}: custom backward 2 % off")
    if klass in ("train_lr_group", "train_eps_group", "train_wd_group"):
        key, value = {"train_lr_group": ("lr", 1.1e-3), "train_eps_group": ("eps", 1e-5),
                      "train_wd_group": ("weight_decay", 0.1)}[klass]
        opt = _groups(model, block, **({key: value} if target else {}))
        return Setup(model, inputs, opt), Truth(0, "update", (), f"optimizer group of {block}: {key} -> {value:g}")
    if klass == "train_from_step":
        path, norm = F._first(model, block, lambda p, m: F._is_norm(m), "norm")
        attr = "eps" if hasattr(norm, "eps") else "variance_epsilon"
        new = max(getattr(norm, attr) * 10, 1e-4)

        def later(k: int) -> None:
            if k == 1:
                setattr(norm, attr, new)

        return (Setup(model, inputs, _groups(model, block), later if target else None),
                Truth(1, "forward", (path,), f"{path}: {attr} -> {new:g} from step 1"))
    if klass == "train_loss_scale":
        return (Setup(model, inputs, _groups(model, block), loss_scale=1.1 if target else 1.0),
                Truth(0, "backward", ("",), "loss multiplied by 1.1 before backward, never unscaled",
                      ("fault", "inputs-differ")))  # the scaling is outside the model: the gradient it is handed differs
    raise ValueError(f"unknown training class {klass!r}")


def loss_of(out) -> Any:
    return archs.output_tensor(out).float().square().mean()


def train(s: Setup, cap: Any = None, steps: int = STEPS, watch: Callable[[int, Setup], None] | None = None) -> None:
    """`steps` optimizer steps; `cap` (an opdiff capture session) is told of each step; `watch` sees each.
    Seeded, so that layer drop and SpecAugment masks draw the same in golden and target."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(1234)
    np.random.seed(1234)  # wav2vec2's SpecAugment draws its masks with numpy
    random.seed(1234)
    for k in range(steps):
        if s.before_step is not None:
            s.before_step(k)
        loss = loss_of(s.model(**s.inputs))
        s.losses.append(float(loss.detach()))
        (loss * s.loss_scale).backward()
        if watch is not None:
            watch(k, s)
        s.optimizer.step()
        s.optimizer.zero_grad()
        if cap is not None:
            cap.step()


def _trace(s: Setup) -> list[dict[str, Any]]:
    """Per step: the loss's inputs agree? the gradients, the parameters after the step (clones)."""
    import torch

    out: list[dict[str, Any]] = []

    def watch(k: int, st: Setup) -> None:
        out.append({"grads": [p.grad.detach().clone() if p.grad is not None else torch.zeros(()) for p in st.model.parameters()]})

    params: list[list[Any]] = []
    orig_step = s.optimizer.step

    def step(*a, **kw):
        r = orig_step(*a, **kw)
        params.append([p.detach().clone() for p in s.model.parameters()])
        return r

    s.optimizer.step = step
    try:
        train(s, watch=watch)
    finally:
        s.optimizer.step = orig_step
    for rec, ps in zip(out, params):
        rec["params"] = ps
    return out


def prove(klass: str, arch: str, truth: Truth) -> oracle.Proof:
    """Replay golden and target without capture: agreement before the planted step/direction, a difference there."""
    import torch

    g, _ = setup(klass, arch, "golden")
    t, _ = setup(klass, arch, "target")
    tg, tt = _trace(g), _trace(t)
    u = oracle.unit(torch.float32)
    forward_same = truth.step + (0 if truth.direction == "forward" else 1)  # losses of these steps must agree
    if g.losses[:forward_same] != t.losses[:forward_same]:
        return oracle.Proof(False, 0.0, f"the forward pass already differs before step {truth.step}'s {truth.direction}")
    before = {"forward": -1, "backward": -1, "update": 0}[truth.direction]
    # gradients of steps before the fault's step (and of its step for an update fault) must agree bitwise
    for k in range(truth.step + (1 if truth.direction == "update" else 0)):
        if k != truth.step or before == 0:
            if oracle.rel(tg[k]["grads"], tt[k]["grads"]) != 0.0:
                return oracle.Proof(False, 0.0, f"gradients already differ at step {k}")
    where = tt[truth.step]["params"] if truth.direction == "update" else tt[truth.step]["grads"]
    ref = tg[truth.step]["params"] if truth.direction == "update" else tg[truth.step]["grads"]
    effect = oracle.rel(ref, where) / u
    return oracle.Proof(effect > oracle.FAULT_UNITS, effect,
                        f"step {truth.step} {'parameters' if truth.direction == 'update' else 'gradients'} change {effect:.3g} u")


CLASSES = ("train_backward", "train_lr_group", "train_eps_group", "train_wd_group", "train_from_step", "train_loss_scale")
