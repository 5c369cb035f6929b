"""Leave the user's model as it was found: a snapshot of what opdiff's own runs could change, restored after.

Every entry point that touches a user's nn.Module (capture, export, fusion bisection, patching) runs
inside `preserved(model)`: afterwards each module's training flag, each parameter's requires_grad and
identity, each buffer's identity, the module hook dicts and the instance `forward` are what they were.
`rng=True` (entry points that run the model themselves, not the user's code) also restores the RNG
states (torch CPU and CUDA, Python's `random`, numpy's global one), so the user's next dropout mask is
the one it would have been, and the buffers' values (a BatchNorm in train mode updates its running
statistics on every run opdiff makes). The torch.onnx exporter, for one, leaves the model in train mode.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# per-module hook dicts of torch.nn.Module (each an OrderedDict id -> hook)
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
              "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
              "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
              "_load_state_dict_post_hooks")


@dataclass
class ModuleState:
    """One module's flags, hooks, tensors and instance forward."""

    module: torch.nn.Module
    training: bool
    hooks: dict[str, OrderedDict[int, Any] | None]  # None: the dict was empty
    params: dict[str, torch.nn.Parameter | None]
    requires_grad: dict[str, bool]
    buffers: dict[str, torch.Tensor | None]
    forward: Any  # the instance attribute `forward`, or MISSING


MISSING = object()


@dataclass
class ModelState:
    """What `restore` puts back: every module's state, and the RNG states when asked."""

    modules: list[ModuleState] = field(default_factory=list)
    rng: dict[str, Any] | None = None
    values: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # (buffer, its values) when asked

    @classmethod
    def snapshot(cls, model: torch.nn.Module, rng: bool = False, buffers: bool = False,
                 hooks_only: bool = False) -> ModelState:
        """What `restore` puts back; with `hooks_only`, only the hooks and instance forwards (all that
        `restore(hooks_only=True)` reads: a capture block pays for no parameter or buffer tables)."""
        take = _hooks_state if hooks_only else _module_state
        state = cls([take(m) for m in model.modules()])
        if rng:
            state.rng = _rng_state()
        if buffers:
            state.values = [(b, b.detach().clone()) for b in {id(b): b for b in model.buffers()}.values()]
        return state

    def restore(self, hooks_only: bool = False) -> None:
        """Put everything back; with `hooks_only`, only the hooks and instance forwards (what a capture
        session installs: the user's own code inside its block may change modes and flags at will)."""
        for s in self.modules:
            _restore_hooks(s)
            if not hooks_only:
                _restore_module(s)
        if self.rng is not None:
            _set_rng_state(self.rng)
        with torch.no_grad():
            for b, v in self.values or []:
                if b.shape == v.shape and not torch.equal(b, v):
                    b.copy_(v)


def _hook_dicts(m: torch.nn.Module) -> dict[str, OrderedDict[int, Any] | None]:
    """Each hook dict of `m` copied, or None for an empty one (restored by emptying: no copy to make or walk;
    most modules hold no hook of their own)."""
    out: dict[str, OrderedDict[int, Any] | None] = {}
    for name in HOOK_DICTS:
        live = getattr(m, name, None)
        if isinstance(live, dict):
            out[name] = OrderedDict(live) if live else None
    return out


def _module_state(m: torch.nn.Module) -> ModuleState:
    params = dict(m._parameters)
    return ModuleState(m, m.training, _hook_dicts(m), params,
                       {k: p.requires_grad for k, p in params.items() if p is not None}, dict(m._buffers),
                       m.__dict__.get("forward", MISSING))


def _hooks_state(m: torch.nn.Module) -> ModuleState:
    """A ModuleState holding what restore(hooks_only=True) reads: hooks and the instance forward."""
    return ModuleState(m, m.training, _hook_dicts(m), {}, {}, {}, m.__dict__.get("forward", MISSING))


def _restore_hooks(s: ModuleState) -> None:
    m = s.module
    for name, saved in s.hooks.items():
        live = getattr(m, name)
        if saved is None:
            if live:
                live.clear()  # hooks opdiff left behind on a module that had none
            continue
        for k in [k for k in live if k not in saved]:
            del live[k]  # a hook opdiff left behind
        for k, v in saved.items():
            live.setdefault(k, v)
    if s.forward is MISSING:
        m.__dict__.pop("forward", None)
    elif m.__dict__.get("forward") is not s.forward:
        m.forward = s.forward


def _restore_module(s: ModuleState) -> None:
    m = s.module
    m.training = s.training
    for k, p in s.params.items():
        if m._parameters.get(k) is not p:
            m._parameters[k] = p
        if p is not None and p.requires_grad != s.requires_grad[k]:
            p.requires_grad_(s.requires_grad[k])
    for k, b in s.buffers.items():
        if m._buffers.get(k) is not b:
            m._buffers[k] = b


def _rng_state() -> dict[str, Any]:
    out: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                           "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def _set_rng_state(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    if "cuda" in rng:
        torch.cuda.set_rng_state_all(rng["cuda"])


@contextmanager
def preserved(model: Any, rng: bool = False, buffers: bool | None = None) -> Iterator[ModelState | None]:
    """Run the block, then put `model` (an nn.Module; anything else is left alone) back as it was; the
    buffers' values too when `buffers` (by default: with `rng`, for runs opdiff makes itself)."""
    if not isinstance(model, torch.nn.Module):
        yield None
        return
    state = ModelState.snapshot(model, rng=rng, buffers=rng if buffers is None else buffers)
    try:
        yield state
    finally:
        state.restore()


@contextmanager
def rng_kept() -> Iterator[None]:
    """Run the block, then put the RNG states back (torch CPU and CUDA, Python's, numpy's): an op opdiff
    re-runs on its own (replay of a dropout, say) draws no number the user's next run would have drawn."""
    state = _rng_state()
    try:
        yield
    finally:
        _set_rng_state(state)
