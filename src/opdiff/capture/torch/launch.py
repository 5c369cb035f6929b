"""Capture an unmodified PyTorch script (`opdiff run ... -- python train.py`): find the model, follow the steps.

Installed by the bootstrap (boot/sitecustomize.py) once the script has imported torch, configured by
the OPDIFF_RUN_* environment (opdiff/capture/runenv.py). It
- wraps `nn.Module.__call__` until it sees the root model: a module with parameters called while no
  other module runs (optionally whose class name matches OPDIFF_RUN_MODEL), and opens an
  `opdiff.capture` session on it just before that call;
- attaches the first optimizer that steps the model's parameters (its update is recorded) and ends
  a capture step after each of its `step()` calls, including steps a GradScaler skips;
- closes the session when the last selected step is done, at interpreter exit, or (incomplete) when
  the script dies of an exception. Ranks come from torch.distributed, as in `opdiff.capture`.
Nothing it does changes what the script computes; a failure of its own prints one line and stops capture.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from contextlib import nullcontext
from typing import Any

import torch

from ..runenv import (
    ENV_BACKWARD,
    ENV_DIR,
    ENV_EXCLUDE,
    ENV_INCLUDE,
    ENV_LEVEL,
    ENV_MODE,
    ENV_MODEL,
    ENV_STEPS,
    ENV_WHEN_LOSS_ABOVE,
    RUN,
    STAGE,
)
from .session import CaptureSession

_launcher: Launcher | None = None


def _say(msg: str) -> None:
    print(f"opdiff run: {msg}", file=sys.stderr)


def _options(env: dict[str, str]) -> dict[str, Any]:
    """capture() keyword arguments from the environment."""
    return {"level": env.get(ENV_LEVEL) or "module", "mode": env.get(ENV_MODE) or "tensor",
            "backward": env.get(ENV_BACKWARD) == "1", "steps": env.get(ENV_STEPS) or None,
            "include": env.get(ENV_INCLUDE) or None, "exclude": env.get(ENV_EXCLUDE) or None}


class Launcher:
    """The state of one process: the model found, its session, the optimizer that ends each step."""

    def __init__(self, dump: str, options: dict[str, Any], model: str | None, loss_above: float | None):
        self.path = os.path.join(dump, STAGE, RUN)
        self.options, self.loss_above = options, loss_above
        self.model_re = re.compile(model) if model else None
        self.session: CaptureSession | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.done = False  # a session ran (or failed): no more roots are looked for
        self.failed = False  # the script died of an uncaught exception
        self.local = threading.local()  # .depth: module calls running in this thread; .scaler: inside GradScaler.step
        self.last_loss: torch.Tensor | None = None
        self._restore: list[Any] = []
        self._post_hook: Any = None  # our global optimizer step post-hook (install, _post_hook_last)
        self._unwrap_call: Any = lambda: None

    # -- installing -----------------------------------------------------------------------
    def install(self) -> None:
        """Patch what is needed to find the model and follow its steps; undone on exit."""
        self._patch(torch.nn.Module, "__call__", self._wrap_call(torch.nn.Module.__call__))
        self._unwrap_call = self._restore.pop()  # put back as soon as the model is found
        self._patch(torch.amp.GradScaler, "step", self._wrap_scaler_step(torch.amp.GradScaler.step))
        if self.loss_above is not None:
            self._patch(torch.Tensor, "backward", self._wrap_backward(torch.Tensor.backward))
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._restore += [register_optimizer_step_pre_hook(self._opt_pre).remove]
        self._post_hook = register_optimizer_step_post_hook(self._opt_post)
        atexit.register(self.at_exit)
        hook = sys.excepthook

        def excepthook(*args: Any) -> None:
            self.failed = True
            hook(*args)
        sys.excepthook = excepthook
        os.register_at_fork(after_in_child=self._forked)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, value)
        self._restore.append(lambda: setattr(owner, name, original))

    def _wrap_call(self, call: Any) -> Any:
        local = self.local

        def __call__(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            if depth == 0 and not self.done:
                self._maybe_start(module)
            local.depth = depth + 1
            try:
                return call(module, *args, **kwargs)
            finally:
                local.depth = depth
        return __call__

    def _wrap_scaler_step(self, step: Any) -> Any:
        def scaler_step(scaler: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            self.local.scaler = getattr(self.local, "scaler", 0) + 1
            try:
                return step(scaler, optimizer, *args, **kwargs)
            finally:
                self.local.scaler -= 1
                self._stepped(optimizer)  # also when the scaler skipped the optimizer's step (inf gradients)
        return scaler_step

    def _wrap_backward(self, backward: Any) -> Any:
        def tensor_backward(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            s = self.session
            with s.state.own_code() if s is not None else nullcontext():  # our look at it is not an op of the run
                if t.numel() == 1:
                    self.last_loss = t
            return backward(t, *args, **kwargs)
        return tensor_backward

    # -- the model ------------------------------------------------------------------------
    def _maybe_start(self, module: torch.nn.Module) -> None:
        if next(module.parameters(), None) is None:
            return
        if self.model_re is not None and not self.model_re.search(type(module).__name__):
            return
        self.done = True
        when = self._when if self.loss_above is not None else None
        try:
            s = CaptureSession(module, self.path, when=when, **self.options)
            s.__enter__()
            assert s.writer is not None
            s.writer.update_meta(run={"launcher": "opdiff run", "argv": list(sys.argv), "pid": os.getpid()})
        except Exception as exc:
            _say(f"capture not started: {exc}")
            return
        self.session = s
        self._unwrap_call()  # the model is found: module calls need no wrapper any more
        self._post_hook_last()

    def _post_hook_last(self) -> None:
        """Our global step post-hook runs after the session's own (optim.install_phase): closing the session
        from it then removes only hooks already run, and torch's loop over the global hooks goes on unharmed."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        if self._post_hook is not None:
            self._post_hook.remove()
        self._post_hook = register_optimizer_step_post_hook(self._opt_post)

    def _when(self, step: int) -> bool:
        """--when-loss-above: capture a step when the loss of the step before was above the bound (or not finite)."""
        t = self.last_loss
        if t is None or self.session is None:
            return False
        with self.session.state.own_code():
            value = float(t.detach())
        return not value <= self.loss_above  # type: ignore[operator]

    # -- steps ----------------------------------------------------------------------------
    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        s = self.session
        return s is not None and any(id(p) in s.state.param_names for g in optimizer.param_groups for p in g["params"])

    def _attach(self, optimizer: torch.optim.Optimizer) -> bool:
        """The first optimizer stepping the model's parameters is the one whose steps count."""
        if self.optimizer is None and self._owns(optimizer):
            s = self.session
            assert s is not None
            self.optimizer = optimizer
            s.attach_optimizer(optimizer)  # runs in this very step: global pre-hooks run first
        return optimizer is self.optimizer

    def _opt_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.session is not None:
            self._guard(self._attach, optimizer)

    def _opt_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not getattr(self.local, "scaler", 0):
            self._stepped(optimizer)

    def _stepped(self, optimizer: torch.optim.Optimizer) -> None:
        if self.session is not None:
            self._guard(self._next_step, optimizer)

    def _next_step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._attach(optimizer):
            return
        s = self.session
        assert s is not None
        s.step()
        if s.steps is not None and (not s.steps or s.state.step_index > max(s.steps)):
            self.close(complete=True)  # every selected step is captured: stop here

    def _guard(self, fn: Any, *args: Any) -> None:
        """Run fn; a failure of capture stops capture (incomplete dump) and never reaches the script."""
        try:
            fn(*args)
        except Exception as exc:
            _say(f"capture stopped: {type(exc).__name__}: {exc}")
            self.close(complete=False)

    # -- the end ------------------------------------------------------------------------
    def close(self, complete: bool) -> None:
        s, self.session = self.session, None
        self.done = True
        self._unwrap_call()
        while self._restore:
            self._restore.pop()()
        if self._post_hook is not None:
            self._post_hook.remove()
        if s is None:
            return
        try:
            if complete:
                s.__exit__(None, None, None)
            else:
                err = RuntimeError("the script stopped with an exception")
                s.__exit__(type(err), err, None)
        except Exception as exc:
            _say(f"closing the capture failed: {type(exc).__name__}: {exc}")

    def at_exit(self) -> None:
        failed = self.failed or getattr(sys, "last_value", None) is not None
        self.close(complete=not failed)

    def _forked(self) -> None:
        """A forked child (DataLoader worker) must not write into the parent's dump."""
        s, self.session = self.session, None
        self.done = True
        if s is not None:
            s.abandon()


def install_from_env() -> Launcher | None:
    """Called by the bootstrap once torch is imported; does nothing without OPDIFF_RUN_DIR or twice."""
    global _launcher
    dump = os.environ.get(ENV_DIR)
    if not dump or _launcher is not None:
        return _launcher
    bound = os.environ.get(ENV_WHEN_LOSS_ABOVE)
    _launcher = Launcher(dump, _options(dict(os.environ)), os.environ.get(ENV_MODEL) or None,
                         float(bound) if bound else None)
    _launcher.install()
    return _launcher
